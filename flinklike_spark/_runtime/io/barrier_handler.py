"""Checkpoint barrier handling of one task: aligned, unaligned and aligned-with-timeout.

A :class:`SingleCheckpointBarrierHandler` sits behind the task's input gates
(the CheckpointedInputGate of Flink) and sees every checkpoint event in the
order the task polls them. It tracks one checkpoint at a time and decides
*when* the task snapshots its operators and *what* the inputs do meanwhile:

ALIGNED
    A channel that delivered barrier *n* is blocked; when the last open
    channel delivered it the snapshot is triggered and every channel resumes.
UNALIGNED
    The first barrier triggers the snapshot at once; the inputs record the
    in-flight buffers of every channel whose barrier has not arrived yet
    (``checkpoint_started``) until the last barrier (``checkpoint_stopped``).
ALTERNATING (aligned with timeout; what a task uses when unaligned
    checkpoints are enabled)
    Barriers with UNALIGNED options are processed unaligned. Timeoutable
    aligned barriers start aligned; when the time since the barrier's
    timestamp exceeds ``aligned_checkpoint_timeout`` (timer, or a barrier that
    arrives already late) the handler switches: it prioritizes the announced
    barriers, starts the inputs' recording, snapshots and continues unaligned.
    Savepoints and forced-aligned barriers never time out.

Common rules (Flink's ``SingleCheckpointBarrierHandler``):

* A barrier or announcement of a newer checkpoint while one is pending aborts
  the pending one (``CheckpointDeclineReason.SUBSUMED``).
* Barriers of old or already finished checkpoints are ignored.
* A ``CancelCheckpointMarker`` aborts the pending (or a future) checkpoint
  (``ON_CANCELLATION_BARRIER``) and resumes every blocked channel.
* ``EndOfPartition`` on a channel counts as that channel's barrier for the
  pending checkpoint (checkpoints after tasks finished) and removes the
  channel from later checkpoints.
* At most one snapshot is triggered per checkpoint id; after a checkpoint
  completes or aborts no channel stays blocked and no input keeps recording.

The handler's position is a :class:`BarrierHandlerState`; allowed moves are
:data:`BARRIER_HANDLER_TRANSITIONS` and any other raises
:class:`~flinklike_spark.errors.IllegalStateTransition`. Staying in the same
state (e.g. a single-channel checkpoint completing in WAITING) takes no edge.

The declarations (modes, states, transitions, results) live in
:mod:`~flinklike_spark._runtime.io.barrier_handler_states`, the
collaborator protocols in :mod:`~flinklike_spark._runtime.io.barrier_collaborators`;
this module re-exports them.

Thread rules: not thread-safe. Every method is called by the task thread,
including :meth:`SingleCheckpointBarrierHandler.on_alignment_timeout`, which
the timer service must deliver through the task's mailbox.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from datetime import timedelta

from checkpointing.schemas import SnapshotAlignment
from flinklike_spark._runtime.io.barrier_collaborators import (
    Cancellable,
    CheckpointableInput,
    CheckpointController,
    RegisterAlignmentTimer,
)
from flinklike_spark._runtime.io.barrier_handler_states import (
    ALIGNED_STATES,
    BARRIER_HANDLER_TRANSITIONS,
    WAITING_STATE_OF_MODE,
    BarrierHandlerMode,
    BarrierHandlerState,
    CheckpointBarrierResult,
    CheckpointStatus,
)
from flinklike_spark._runtime.io.channel_state import InputChannelInfo
from flinklike_spark._runtime.network.events import (
    AlignmentType,
    CancelCheckpointMarker,
    CheckpointBarrier,
    CheckpointKind,
    EventAnnouncement,
)
from flinklike_spark._runtime.state_machine import StateMachine
from flinklike_spark.errors import CheckpointDeclinedError, CheckpointDeclineReason, IllegalStateTransition

__all__ = [
    "BARRIER_HANDLER_TRANSITIONS",
    "BarrierHandlerMode",
    "BarrierHandlerState",
    "Cancellable",
    "CheckpointBarrierResult",
    "CheckpointController",
    "CheckpointStatus",
    "CheckpointableInput",
    "RegisterAlignmentTimer",
    "SingleCheckpointBarrierHandler",
]

_log = logging.getLogger(__name__)

_B = BarrierHandlerState


# -- the handler ---------------------------------------------------------------


class SingleCheckpointBarrierHandler:
    """Tracks one checkpoint at a time across all input channels of a task.

    Args:
        task_name: used in messages and logs.
        mode: the state family, see :class:`BarrierHandlerMode`.
        inputs: one :class:`CheckpointableInput` per input gate, indexed by gate index.
        controller: snapshots, initializes channel state and declines checkpoints.
        clock: wall-clock seconds since the epoch (compared with
            ``CheckpointBarrier.timestamp_ms`` for the aligned timeout, and used
            for alignment durations). Injectable in tests.
        register_alignment_timer: required for ALTERNATING; registers the
            alignment timer, whose callback calls :meth:`on_alignment_timeout`.
        result_history: how many per-checkpoint results :meth:`get_checkpoint_result` keeps.

    Raises:
        ValueError: empty inputs, mismatching gate indices, or ALTERNATING
            without ``register_alignment_timer``.
    """

    def __init__(
        self,
        *,
        task_name: str,
        mode: BarrierHandlerMode,
        inputs: Sequence[CheckpointableInput],
        controller: CheckpointController,
        clock: Callable[[], float] = time.time,
        register_alignment_timer: RegisterAlignmentTimer | None = None,
        result_history: int = 64,
    ) -> None:
        if not isinstance(mode, BarrierHandlerMode):
            raise ValueError(f"mode must be one of {[m.name for m in BarrierHandlerMode]}, got {mode!r}")
        if mode is BarrierHandlerMode.ALTERNATING and register_alignment_timer is None:
            raise ValueError("an ALTERNATING barrier handler needs register_alignment_timer")
        if result_history < 1:
            raise ValueError(f"result_history must be >= 1, got {result_history}")
        self._inputs = list(inputs)
        channels: list[InputChannelInfo] = []
        for index, gate in enumerate(self._inputs):
            for info in gate.channel_infos:
                if info.gate_index != index:
                    raise ValueError(f"input {index} reports channel {info} of gate {info.gate_index}")
                channels.append(info)
        if not channels:
            raise ValueError("a barrier handler needs at least one input channel")
        self._task_name = task_name
        self._mode = mode
        self._controller = controller
        self._clock = clock
        self._register_timer = register_alignment_timer
        self._result_history = result_history
        self._all_channels = frozenset(channels)
        self._machine: StateMachine[BarrierHandlerState] = StateMachine(
            f"barrier handler of {task_name}", WAITING_STATE_OF_MODE[mode], BARRIER_HANDLER_TRANSITIONS, clock=clock
        )

        self._finished_channels: set[InputChannelInfo] = set()
        self._num_open_channels = len(channels)
        self._current_checkpoint_id = -1
        self._last_cancelled_or_completed_id = -1
        self._pending_barrier: CheckpointBarrier | None = None
        self._aligned_channels: set[InputChannelInfo] = set()
        self._target_channel_count = 0
        self._blocked_channels: set[InputChannelInfo] = set()
        self._announcements: dict[InputChannelInfo, int] = {}
        self._recording_checkpoint_id: int | None = None
        self._alignment_timer: Cancellable | None = None
        self._switched = False
        self._triggered_alignment: SnapshotAlignment | None = None
        self._alignment_start: float | None = None
        self._last_alignment_duration = timedelta(0)
        self._all_barriers_future: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._all_barriers_future.set_result(None)
        self._results: OrderedDict[int, CheckpointBarrierResult] = OrderedDict()

    def __repr__(self) -> str:
        return (
            f"SingleCheckpointBarrierHandler({self._task_name!r}, {self.state.name}, "
            f"checkpoint={self._current_checkpoint_id}, aligned={len(self._aligned_channels)}"
            f"/{self._target_channel_count}, open={self._num_open_channels})"
        )

    # -- introspection -------------------------------------------------------------

    @property
    def mode(self) -> BarrierHandlerMode:
        """The state family chosen at construction."""
        return self._mode

    @property
    def state(self) -> BarrierHandlerState:
        """The current state."""
        return self._machine.state

    @property
    def state_history(self) -> list[tuple[float, BarrierHandlerState]]:
        """(clock time, state) pairs in the order they were entered."""
        return self._machine.history

    @property
    def latest_checkpoint_id(self) -> int:
        """Highest checkpoint id seen (barrier, announcement or cancellation); -1 before any."""
        return self._current_checkpoint_id

    @property
    def num_open_channels(self) -> int:
        """Channels that have not delivered end of partition."""
        return self._num_open_channels

    @property
    def alignment_duration(self) -> timedelta:
        """Time since the first barrier of the checkpoint being aligned, else of the last alignment."""
        if self._alignment_start is not None and self.is_checkpoint_pending():
            return self._duration_since(self._alignment_start)
        return self._last_alignment_duration

    def is_checkpoint_pending(self) -> bool:
        """True between the first barrier/announcement of a checkpoint and its completion or abort."""
        return self._current_checkpoint_id >= 0 and self._current_checkpoint_id != self._last_cancelled_or_completed_id

    def get_checkpoint_result(self, checkpoint_id: int) -> CheckpointBarrierResult | None:
        """What happened to ``checkpoint_id`` here, or None if unknown (or evicted from the history)."""
        return self._results.get(checkpoint_id)

    def all_barriers_received_future(self, checkpoint_id: int) -> concurrent.futures.Future[None]:
        """Future resolved when every open channel delivered barrier ``checkpoint_id``.

        Fails with the :class:`CheckpointDeclinedError` if the checkpoint is
        aborted. For an older checkpoint an already resolved future is returned
        (as in Flink). The coordinator uses it to call
        ``ChannelStateWriter.finish_input``.

        Raises:
            LookupError: ``checkpoint_id`` has not been seen yet.
        """
        if checkpoint_id < self._current_checkpoint_id:
            done: concurrent.futures.Future[None] = concurrent.futures.Future()
            done.set_result(None)
            return done
        if checkpoint_id > self._current_checkpoint_id:
            raise LookupError(
                f"{self._task_name}: checkpoint {checkpoint_id} has not started "
                f"(latest is {self._current_checkpoint_id})"
            )
        return self._all_barriers_future

    # -- events ---------------------------------------------------------------------

    def process_barrier(self, barrier: CheckpointBarrier, channel_info: InputChannelInfo) -> None:
        """Handle barrier ``barrier`` polled from ``channel_info``.

        Raises:
            ValueError: unknown or finished channel, or a barrier this mode
                cannot process (see :class:`BarrierHandlerMode`).
            IllegalStateTransition: the handler is closed.
        """
        self._check_channel(channel_info)
        barrier_id = barrier.checkpoint_id
        if self._current_checkpoint_id > barrier_id or (
            self._current_checkpoint_id == barrier_id and not self.is_checkpoint_pending()
        ):
            _log.debug("%s: ignoring obsolete barrier %d from %s", self._task_name, barrier_id, channel_info)
            return
        self._check_barrier_mode(barrier)
        self._check_new_checkpoint(barrier)
        if channel_info in self._aligned_channels:
            _log.debug("%s: duplicate barrier %d from %s", self._task_name, barrier_id, channel_info)
            return
        self._mark_aligned_and_transform(channel_info, lambda: self._barrier_received(channel_info, barrier))

    def process_barrier_announcement(
        self,
        announcement: EventAnnouncement,
        channel_info: InputChannelInfo,
        sequence_number: int | None = None,
    ) -> None:
        """Handle an announcement that a barrier is queued at ``sequence_number`` on ``channel_info``.

        ``sequence_number`` defaults to ``announcement.sequence_number``. An
        announcement of a newer checkpoint starts it (and subsumes a pending
        one) and arms its alignment timer, like a barrier would.
        """
        self._check_channel(channel_info)
        barrier = announcement.announced_event
        if sequence_number is None:
            sequence_number = announcement.sequence_number
        if barrier.checkpoint_id > self._current_checkpoint_id:
            self._check_barrier_mode(barrier)
        self._check_new_checkpoint(barrier)
        if self._current_checkpoint_id > barrier.checkpoint_id or not self.is_checkpoint_pending():
            return  # obsolete announcement
        if channel_info in self._aligned_channels:
            return  # its barrier was already processed
        state = self.state
        if state in (_B.WAITING_FOR_FIRST_BARRIER, _B.COLLECTING_BARRIERS):
            return  # aligned-only handlers never overtake data
        if state in (_B.ALTERNATING_WAITING_FOR_FIRST_BARRIER, _B.ALTERNATING_COLLECTING_BARRIERS):
            self._announcements[channel_info] = sequence_number  # prioritized only if the alignment times out
            return
        self._inputs[channel_info.gate_index].convert_to_priority_event(channel_info, sequence_number)

    def process_cancellation_barrier(self, marker: CancelCheckpointMarker, channel_info: InputChannelInfo) -> None:
        """Handle a cancel marker: abort the pending checkpoint if it is the one cancelled.

        A marker for a newer checkpoint first aborts the pending one as
        SUBSUMED, then declines the cancelled id (so its barriers are ignored).
        """
        self._check_channel(channel_info)
        cancelled_id = marker.checkpoint_id
        cause = CheckpointDeclinedError(
            f"{self._task_name}: checkpoint {cancelled_id} was cancelled upstream (channel {channel_info})",
            checkpoint_id=cancelled_id,
            reason=CheckpointDeclineReason.ON_CANCELLATION_BARRIER,
        )
        if cancelled_id > self._current_checkpoint_id:
            if self.is_checkpoint_pending():
                self._cancel_subsumed_checkpoint(cancelled_id)
            self._abort_internal(cancelled_id, cause)
        elif cancelled_id == self._current_checkpoint_id and self.is_checkpoint_pending():
            self._abort_internal(cancelled_id, cause)

    def process_end_of_partition(self, channel_info: InputChannelInfo) -> None:
        """Handle the end of ``channel_info``: it counts as its barrier for the pending checkpoint.

        Raises:
            ValueError: unknown channel, or it already ended.
        """
        self._check_channel(channel_info)
        self._finished_channels.add(channel_info)
        self._num_open_channels -= 1
        self._announcements.pop(channel_info, None)
        if not self.is_checkpoint_pending() or channel_info in self._aligned_channels:
            return
        self._mark_aligned_and_transform(channel_info, lambda: self._end_of_partition_received(channel_info))

    def on_alignment_timeout(self, checkpoint_id: int) -> None:
        """Timer callback: switch ``checkpoint_id`` to unaligned if it is still aligning.

        Stale timers (another checkpoint, or this one already finished) are ignored.

        Raises:
            IllegalStateTransition: the handler is not ALTERNATING.
        """
        if self.state is _B.CLOSED:
            return
        if checkpoint_id != self._current_checkpoint_id or not self.is_checkpoint_pending():
            return
        self._alignment_timer = None
        if self._mode is not BarrierHandlerMode.ALTERNATING:
            raise IllegalStateTransition(
                f"{self._task_name}: alignment timeout for checkpoint {checkpoint_id} in {self._mode.name} mode; "
                "only ALTERNATING handlers switch to unaligned",
                source=self.state,
            )
        barrier = self._pending_barrier
        assert barrier is not None
        try:
            self._alignment_timeout(barrier)
        except CheckpointDeclinedError as e:
            self._abort_internal(checkpoint_id, e)

    def close(self) -> None:
        """Stop handling: cancel the timer, stop recording, fail the pending future. Idempotent.

        Does not resume blocked channels or notify the controller: the task is going away.
        """
        if self.state is _B.CLOSED:
            return
        self._cancel_alignment_timer()
        self._stop_recording()
        if not self._all_barriers_future.done():
            self._all_barriers_future.cancel()
        self._machine.transition(_B.CLOSED)

    # -- bookkeeping (Flink's SingleCheckpointBarrierHandler) -------------------------

    def _check_channel(self, channel_info: InputChannelInfo) -> None:
        if self.state is _B.CLOSED:
            raise IllegalStateTransition(f"{self._task_name}: the barrier handler is closed", source=_B.CLOSED)
        if channel_info not in self._all_channels:
            raise ValueError(f"{self._task_name}: unknown input channel {channel_info}")
        if channel_info in self._finished_channels:
            raise ValueError(f"{self._task_name}: channel {channel_info} already ended (end of partition)")

    def _check_barrier_mode(self, barrier: CheckpointBarrier) -> None:
        options = barrier.options
        if self._mode is BarrierHandlerMode.ALIGNED and options.is_unaligned:
            raise ValueError(
                f"{self._task_name}: barrier {barrier.checkpoint_id} is UNALIGNED but the handler is ALIGNED-only; "
                "enable unaligned checkpoints for the task (ALTERNATING handler)"
            )
        if self._mode is BarrierHandlerMode.UNALIGNED and (
            options.checkpoint_type is CheckpointKind.SAVEPOINT or options.alignment is AlignmentType.FORCED_ALIGNED
        ):
            raise ValueError(
                f"{self._task_name}: barrier {barrier.checkpoint_id} ({options.checkpoint_type.name}, "
                f"{options.alignment.name}) must be aligned but the handler is UNALIGNED-only; use ALTERNATING"
            )

    def _check_new_checkpoint(self, barrier: CheckpointBarrier) -> None:
        barrier_id = barrier.checkpoint_id
        if self._current_checkpoint_id >= barrier_id:
            return
        if self.is_checkpoint_pending():
            self._cancel_subsumed_checkpoint(barrier_id)
        self._current_checkpoint_id = barrier_id
        self._pending_barrier = barrier
        self._aligned_channels.clear()
        self._target_channel_count = self._num_open_channels
        self._switched = False
        self._triggered_alignment = None
        self._alignment_start = None
        self._all_barriers_future = concurrent.futures.Future()
        self._record(barrier_id, CheckpointStatus.PENDING)
        if self._mode is BarrierHandlerMode.ALTERNATING and barrier.options.is_timeoutable:
            self._register_alignment_timer(barrier)

    def _register_alignment_timer(self, barrier: CheckpointBarrier) -> None:
        timeout = barrier.options.aligned_checkpoint_timeout
        assert timeout is not None and self._register_timer is not None
        delay = max(timeout - self._since_trigger(barrier), timedelta(0))
        self._cancel_alignment_timer()
        self._alignment_timer = self._register_timer(
            delay, functools.partial(self.on_alignment_timeout, barrier.checkpoint_id)
        )

    def _cancel_alignment_timer(self) -> None:
        if self._alignment_timer is not None:
            self._alignment_timer.cancel()
            self._alignment_timer = None

    def _mark_aligned_and_transform(self, channel_info: InputChannelInfo, transform: Callable[[], None]) -> None:
        self._aligned_channels.add(channel_info)
        now = self._clock()
        if len(self._aligned_channels) == 1:
            self._alignment_start = now
        if len(self._aligned_channels) == self._target_channel_count:
            assert self._alignment_start is not None
            self._last_alignment_duration = self._duration_since(self._alignment_start)
        try:
            transform()
        except CheckpointDeclinedError as e:
            self._abort_internal(self._current_checkpoint_id, e)
            return
        if len(self._aligned_channels) == self._target_channel_count:
            checkpoint_id = self._current_checkpoint_id
            self._aligned_channels.clear()
            self._last_cancelled_or_completed_id = checkpoint_id
            self._pending_barrier = None
            self._alignment_start = None
            self._cancel_alignment_timer()
            self._record(checkpoint_id, CheckpointStatus.COMPLETED, duration=self._last_alignment_duration)
            if not self._all_barriers_future.done():
                self._all_barriers_future.set_result(None)

    def _cancel_subsumed_checkpoint(self, new_id: int) -> None:
        old_id = self._current_checkpoint_id
        self._abort_internal(
            old_id,
            CheckpointDeclinedError(
                f"{self._task_name}: checkpoint {old_id} subsumed by checkpoint {new_id} before it completed",
                checkpoint_id=old_id,
                reason=CheckpointDeclineReason.SUBSUMED,
            ),
        )

    def _abort_internal(self, cancelled_id: int, cause: CheckpointDeclinedError) -> None:
        _log.debug("%s: aborting checkpoint %d: %s", self._task_name, cancelled_id, cause)
        if cancelled_id > self._current_checkpoint_id:
            # never started here: give it its own (failed) future and result entry
            self._all_barriers_future = concurrent.futures.Future()
            self._triggered_alignment = None
        self._current_checkpoint_id = max(cancelled_id, self._current_checkpoint_id)
        self._last_cancelled_or_completed_id = max(self._last_cancelled_or_completed_id, cancelled_id)
        self._pending_barrier = None
        self._aligned_channels.clear()
        self._target_channel_count = 0
        self._alignment_start = None
        self._cancel_alignment_timer()
        self._state_abort()
        self._record(cancelled_id, CheckpointStatus.ABORTED, reason=cause.reason)
        if not self._all_barriers_future.done():
            self._all_barriers_future.set_exception(cause)
        self._controller.abort_checkpoint_on_barrier(cancelled_id, cause)

    def _record(
        self,
        checkpoint_id: int,
        status: CheckpointStatus,
        *,
        duration: timedelta | None = None,
        reason: CheckpointDeclineReason | None = None,
    ) -> None:
        self._results[checkpoint_id] = CheckpointBarrierResult(
            checkpoint_id=checkpoint_id,
            status=status,
            alignment=self._triggered_alignment,
            alignment_duration=duration,
            decline_reason=reason,
        )
        self._results.move_to_end(checkpoint_id)
        while len(self._results) > self._result_history:
            self._results.popitem(last=False)

    def _since_trigger(self, barrier: CheckpointBarrier) -> timedelta:
        return timedelta(milliseconds=self._clock() * 1000.0 - barrier.timestamp_ms)

    def _duration_since(self, start: float) -> timedelta:
        return max(timedelta(seconds=self._clock() - start), timedelta(0))

    def _all_barriers_received(self) -> bool:
        return len(self._aligned_channels) == self._target_channel_count

    def _is_timed_out(self, barrier: CheckpointBarrier) -> bool:
        timeout = barrier.options.aligned_checkpoint_timeout
        return (
            barrier.options.is_timeoutable
            and timeout is not None
            and barrier.checkpoint_id <= self._current_checkpoint_id
            and timeout < self._since_trigger(barrier)
        )

    # -- effects on inputs and controller ----------------------------------------------

    def _transition(self, target: BarrierHandlerState) -> None:
        if target is not self.state:
            self._machine.transition(target)

    def _block(self, channel_info: InputChannelInfo) -> None:
        self._inputs[channel_info.gate_index].block_consumption(channel_info)
        self._blocked_channels.add(channel_info)

    def _unblock_all(self) -> None:
        blocked, self._blocked_channels = sorted(self._blocked_channels), set()
        for channel_info in blocked:
            if channel_info not in self._finished_channels:
                self._inputs[channel_info.gate_index].resume_consumption(channel_info)

    def _prioritize_all_announcements(self) -> None:
        announcements, self._announcements = self._announcements, {}
        for channel_info, sequence_number in sorted(announcements.items()):
            self._inputs[channel_info.gate_index].convert_to_priority_event(channel_info, sequence_number)

    def _trigger(self, barrier: CheckpointBarrier) -> None:
        if self._triggered_alignment is not None:
            raise IllegalStateTransition(
                f"{self._task_name}: checkpoint {barrier.checkpoint_id} was already triggered", source=self.state
            )
        if not barrier.is_unaligned:
            self._triggered_alignment = SnapshotAlignment.ALIGNED
        elif self._switched:
            self._triggered_alignment = SnapshotAlignment.SWITCHED
        else:
            self._triggered_alignment = SnapshotAlignment.UNALIGNED
        self._record(barrier.checkpoint_id, CheckpointStatus.PENDING)
        self._controller.trigger_global_checkpoint(barrier)

    def _start_unaligned(self, barrier: CheckpointBarrier) -> None:
        """Snapshot unaligned: channel state first, then the inputs' recording, then the operators."""
        unaligned = barrier.as_unaligned()
        self._controller.init_inputs_checkpoint(unaligned)
        self._recording_checkpoint_id = unaligned.checkpoint_id
        for gate in self._inputs:
            gate.checkpoint_started(unaligned)
        self._trigger(unaligned)

    def _stop_recording(self) -> None:
        checkpoint_id, self._recording_checkpoint_id = self._recording_checkpoint_id, None
        if checkpoint_id is not None:
            for gate in self._inputs:
                gate.checkpoint_stopped(checkpoint_id)

    def _finish(self) -> None:
        """Back to waiting after completion or abort: nothing blocked, nothing recording."""
        self._stop_recording()
        self._unblock_all()
        self._announcements.clear()
        self._transition(WAITING_STATE_OF_MODE[self._mode])

    def _state_abort(self) -> None:
        if self.state is not _B.CLOSED:
            self._finish()

    # -- per-state behaviour (Flink's BarrierHandlerState implementations) --------------

    def _barrier_received(self, channel_info: InputChannelInfo, barrier: CheckpointBarrier) -> None:
        state = self.state
        if state in (_B.WAITING_FOR_FIRST_BARRIER, _B.COLLECTING_BARRIERS):
            self._block(channel_info)
            if self._all_barriers_received():
                self._trigger(barrier)
                self._finish()
            else:
                self._transition(_B.COLLECTING_BARRIERS)
        elif state in (_B.ALTERNATING_WAITING_FOR_FIRST_BARRIER, _B.ALTERNATING_COLLECTING_BARRIERS):
            if barrier.is_unaligned:
                # an unaligned barrier is processed unaligned from the start (a switch only if we were collecting)
                self._switch_to_unaligned(barrier, timed_out=state is _B.ALTERNATING_COLLECTING_BARRIERS)
                self._barrier_received(channel_info, barrier)
                return
            self._announcements.pop(channel_info, None)
            self._block(channel_info)
            if self._all_barriers_received():
                self._trigger(barrier)
                self._finish()
            elif self._is_timed_out(barrier):
                self._switch_to_unaligned(barrier, timed_out=True)
                self._barrier_received(channel_info, barrier.as_unaligned())
            else:
                self._transition(_B.ALTERNATING_COLLECTING_BARRIERS)
        elif state in (_B.WAITING_FOR_FIRST_BARRIER_UNALIGNED, _B.ALTERNATING_WAITING_FOR_FIRST_BARRIER_UNALIGNED):
            # Unlike Flink's credit-based network, our gates never block a channel by
            # themselves, so an aligned barrier needs no resume/block bookkeeping here.
            self._start_unaligned(barrier)
            if self._all_barriers_received():
                self._finish()
            elif state is _B.WAITING_FOR_FIRST_BARRIER_UNALIGNED:
                self._transition(_B.COLLECTING_BARRIERS_UNALIGNED)
            else:
                self._transition(_B.ALTERNATING_COLLECTING_BARRIERS_UNALIGNED)
        elif state in (_B.COLLECTING_BARRIERS_UNALIGNED, _B.ALTERNATING_COLLECTING_BARRIERS_UNALIGNED):
            if self._all_barriers_received():
                self._finish()
        else:  # pragma: no cover - CLOSED is rejected by _check_channel
            raise IllegalStateTransition(f"{self._task_name}: barrier in state {state.name}", source=state)

    def _end_of_partition_received(self, channel_info: InputChannelInfo) -> None:
        state = self.state
        barrier = self._pending_barrier
        assert barrier is not None
        if channel_info in self._blocked_channels:  # cannot normally happen: blocked channels deliver nothing
            self._blocked_channels.discard(channel_info)
        if not self._all_barriers_received():
            if state is _B.ALTERNATING_COLLECTING_BARRIERS and self._is_timed_out(barrier):
                self._switch_to_unaligned(barrier, timed_out=True)
            return
        if self._triggered_alignment is None:
            # Every remaining channel ended before (or instead of) its barrier: the
            # task's state is final, so take the snapshot the way this state would.
            if state in ALIGNED_STATES and not barrier.is_unaligned:
                self._trigger(barrier)
            else:
                self._start_unaligned(barrier)
        self._finish()

    def _alignment_timeout(self, barrier: CheckpointBarrier) -> None:
        state = self.state
        if state in (_B.ALTERNATING_WAITING_FOR_FIRST_BARRIER, _B.ALTERNATING_COLLECTING_BARRIERS):
            self._switch_to_unaligned(barrier, timed_out=True)
        # already unaligned: nothing to switch

    def _switch_to_unaligned(self, barrier: CheckpointBarrier, *, timed_out: bool) -> None:
        """Flink's ``AlternatingWaitingForFirstBarrier/AlternatingCollectingBarriers.alignmentTimeout``."""
        state = self.state
        self._switched = self._switched or timed_out
        self._prioritize_all_announcements()
        if state is _B.ALTERNATING_WAITING_FOR_FIRST_BARRIER:
            self._transition(_B.ALTERNATING_WAITING_FOR_FIRST_BARRIER_UNALIGNED)
            return
        assert state is _B.ALTERNATING_COLLECTING_BARRIERS, state
        # Channels that already delivered their aligned barrier stay blocked until the
        # checkpoint completes, as in Flink; everything else is recorded from now on.
        self._start_unaligned(barrier)
        self._transition(_B.ALTERNATING_COLLECTING_BARRIERS_UNALIGNED)
