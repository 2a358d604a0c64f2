"""The task side of checkpoints (Flink's ``SubtaskCheckpointCoordinatorImpl`` + ``AsyncCheckpointRunnable``).

Everything here runs on the task thread except :class:`AsyncCheckpointRunnable`,
which writes a snapshot on the TaskExecutor's I/O pool.

Sources are triggered by the JobMaster (a mail); other tasks by the
:class:`SingleCheckpointBarrierHandler` behind their input gates. Taking
checkpoint *n* (:meth:`SubtaskCheckpointCoordinator.perform_checkpoint`):

1. flush pending output into the result partitions, then emit the barrier:
   aligned, behind the queued data (plus a priority :class:`EventAnnouncement`
   when the barrier may time out and switch); unaligned, as a priority event
   at the head of every subpartition, recording the buffers it overtook as
   *output* channel state;
2. copy every operator's state (synchronous part);
3. hand the copies to an :class:`AsyncCheckpointRunnable`, which waits for
   the *input* channel state (unaligned: buffers recorded until the last
   barrier), writes everything with a :class:`~checkpointing.SnapshotWriter`
   and acknowledges with the state handles. It ends exactly once, COMPLETED
   or DISCARDED (a newer checkpoint subsumed it, it was declined, or the task
   stopped).

Input channel state of an unaligned checkpoint, per channel whose barrier had
not arrived when the snapshot started: every buffer the task polls from it
until its barrier, plus the buffers a priority barrier jumped on arrival in a
remote channel's receive queue (they arrived before it);
for an announced barrier converted to priority (aligned-with-timeout switch),
the buffers it jumped, in the receive queue or the local producer's queue. Buffers a producer's
priority barrier overtook are the producer's output state, never recorded twice.
"""

from __future__ import annotations

import concurrent.futures
import enum
import functools
import logging
import threading
from collections.abc import Callable, Sequence
from datetime import timedelta

import pyarrow as pa

from checkpointing import CheckpointLayout, SnapshotWriter, StateHandle, discard_handles
from checkpointing.schemas import CheckpointKind, SnapshotAlignment
from checkpointing.state_snapshots import write_state_snapshots
from flinklike_spark._runtime.checkpoint_messages import CheckpointAck, CheckpointDecline, CheckpointResponder
from flinklike_spark._runtime.io.barrier_collaborators import RegisterAlignmentTimer
from flinklike_spark._runtime.io.barrier_handler import SingleCheckpointBarrierHandler
from flinklike_spark._runtime.io.channel_state import (
    SEQUENCE_NUMBER_UNKNOWN,
    ChannelStateWriter,
    ChannelStateWriteResult,
    InputChannelInfo,
    ResultSubpartitionInfo,
)
from flinklike_spark._runtime.network.events import (
    BufferOrEvent,
    CancelCheckpointMarker,
    CheckpointBarrier,
    EventAnnouncement,
)
from flinklike_spark._runtime.operators.stream_operator import OperatorSnapshot
from flinklike_spark._runtime.state.incremental_snapshot import notify_incremental, prepare_savepoint
from flinklike_spark._runtime.state_machine import StateMachine
from flinklike_spark._runtime.tasks.checkpoint_collaborators import (
    CheckpointedChain,
    CheckpointedGate,
    LocalSnapshotStore,
    SubtaskCheckpointSettings,
)
from flinklike_spark._runtime.tasks.task_collaborators import UnprocessedInput
from flinklike_spark.errors import CheckpointDeclinedError, CheckpointDeclineReason

__all__ = ["AsyncCheckpointRunnable", "SubtaskCheckpointCoordinator"]

log = logging.getLogger(__name__)


class AsyncCheckpointState(enum.Enum):
    RUNNING = "running"
    COMPLETED = "completed"
    DISCARDED = "discarded"


_ASYNC_TRANSITIONS = {
    AsyncCheckpointState.RUNNING: frozenset({AsyncCheckpointState.COMPLETED, AsyncCheckpointState.DISCARDED}),
    AsyncCheckpointState.COMPLETED: frozenset(),
    AsyncCheckpointState.DISCARDED: frozenset(),
}


class AsyncCheckpointRunnable:
    """Writes one subtask's snapshot on the I/O pool; ends exactly once, COMPLETED or DISCARDED.

    ``discard`` may be called from any thread at any time; a discard that wins
    the race deletes what was written and nothing is acknowledged.
    """

    def __init__(
        self,
        *,
        checkpoint_id: int,
        write: Callable[[Callable[[], bool]], tuple[StateHandle, ...]],
        on_completed: Callable[[tuple[StateHandle, ...]], None],
        on_failed: Callable[[BaseException], None],
        storage: str | CheckpointLayout,
    ) -> None:
        self.checkpoint_id = checkpoint_id
        self._storage = storage
        self._write = write
        self._on_completed = on_completed
        self._on_failed = on_failed
        self._lock = threading.Lock()
        self._state: StateMachine[AsyncCheckpointState] = StateMachine(
            f"async part of checkpoint {checkpoint_id}", AsyncCheckpointState.RUNNING, _ASYNC_TRANSITIONS
        )

    @property
    def state(self) -> AsyncCheckpointState:
        return self._state.state

    def _discarded(self) -> bool:
        return self._state.state is AsyncCheckpointState.DISCARDED

    def run(self) -> None:
        try:
            handles = self._write(self._discarded)
        except BaseException as exc:  # noqa: BLE001 - reported as a decline
            if self._finish(AsyncCheckpointState.DISCARDED):
                self._on_failed(exc)
            return
        if self._finish(AsyncCheckpointState.COMPLETED):
            self._on_completed(handles)
        else:
            discard_handles(self._storage, handles)

    def discard(self) -> bool:
        """Stop this runnable; True if it was still running (nothing will be acknowledged)."""
        return self._finish(AsyncCheckpointState.DISCARDED)

    def _finish(self, target: AsyncCheckpointState) -> bool:
        with self._lock:
            if self._state.state is not AsyncCheckpointState.RUNNING:
                return False
            self._state.transition(target)
            return True


class _GateInput:
    """One input gate as the barrier handler's :class:`CheckpointableInput`."""

    def __init__(self, coordinator: SubtaskCheckpointCoordinator, gate_index: int, gate: CheckpointedGate) -> None:
        self._coordinator = coordinator
        self._gate_index = gate_index
        self._gate = gate
        self._infos = [InputChannelInfo(gate_index, i) for i in range(gate.num_channels)]

    @property
    def channel_infos(self) -> Sequence[InputChannelInfo]:
        return self._infos

    @property
    def num_channels(self) -> int:
        return len(self._infos)

    def block_consumption(self, channel_info: InputChannelInfo) -> None:
        if not self._coordinator.at_least_once:  # at-least-once only tracks barriers
            self._gate.block_channel(channel_info.channel_index)

    def resume_consumption(self, channel_info: InputChannelInfo) -> None:
        self._gate.resume_channel(channel_info.channel_index)

    def checkpoint_started(self, barrier: CheckpointBarrier) -> None:
        self._coordinator.start_recording(self._gate_index, self._infos, barrier.checkpoint_id)

    def checkpoint_stopped(self, checkpoint_id: int) -> None:
        self._coordinator.stop_recording(self._gate_index, checkpoint_id)

    def convert_to_priority_event(self, channel_info: InputChannelInfo, sequence_number: int) -> None:
        # The channel keeps what the barrier jumped; recorded when the barrier is polled.
        self._gate.channels[channel_info.channel_index].convert_to_priority_event(sequence_number)


class SubtaskCheckpointCoordinator:
    """Takes a subtask's checkpoints.

    Args:
        settings: which subtask, where its snapshots go, how barriers are handled.
        chain: the task's operator chain.
        gates: the task's input gates (none for a source task).
        register_timer: ``(delay, callback)`` running ``callback`` on the task thread later.
        responder: where acknowledgements and declines go (the JobMaster; called from any thread).
        executor: the pool of asynchronous snapshot parts.
        unprocessed_input: the task's buffer in progress, ``(gate, channel, rows left)``;
            its rows precede every later buffer of that channel, so a recording
            channel records them first.
        local_state: task-local recovery: keeps a copy of each written snapshot (None: disabled).

    With ``settings.final_checkpoint`` (FLIP-147), once the task's operators
    finished (:meth:`end_of_data`) the first checkpoint it takes is its final
    one; :attr:`final_checkpoint_completed` turns True when the coordinator
    reports that (or a newer) checkpoint completed.
    """

    def __init__(
        self,
        settings: SubtaskCheckpointSettings,
        *,
        chain: CheckpointedChain,
        gates: Sequence[CheckpointedGate],
        register_timer: RegisterAlignmentTimer,
        responder: CheckpointResponder,
        executor: concurrent.futures.Executor,
        unprocessed_input: Callable[[], UnprocessedInput | None] = lambda: None,
        local_state: LocalSnapshotStore | None = None,
    ) -> None:
        task_name = settings.task_name
        self.at_least_once = settings.at_least_once
        self._local_state = local_state
        self.final_checkpoint = settings.final_checkpoint
        self._data_ended = False
        self._final_checkpoint_id: int | None = None  # Flink's finalCheckpointMinId
        self.final_checkpoint_completed = False
        self._task_name = task_name
        self._job_id = settings.job_id
        self._execution_id = settings.execution_id
        self._subtask = settings.subtask_index
        self._channel_state_uid = settings.channel_state_uid
        self._chain = chain
        self._gates = list(gates)
        self._storage = settings.storage
        self._responder = responder
        self._executor = executor
        self._channel_state_timeout = settings.channel_state_timeout.total_seconds()
        self._unprocessed_input = unprocessed_input
        self._channel_done: dict[int, concurrent.futures.Future[ChannelStateWriteResult]] = {}
        self.channel_state = ChannelStateWriter(sink=self._channel_state_complete)
        self.recording: dict[InputChannelInfo, int] = {}  # channel -> checkpoint id being recorded
        self._received: dict[int, set[InputChannelInfo]] = {}  # barriers seen per pending checkpoint
        self._input_pending: set[int] = set()  # unaligned checkpoints whose input state is still open
        self._stopped: set[int] = set()
        self._running: dict[int, AsyncCheckpointRunnable] = {}
        self._last_triggered = -1
        self._closed = False
        self.handler = (
            SingleCheckpointBarrierHandler(
                task_name=task_name,
                mode=settings.mode,
                inputs=[_GateInput(self, i, gate) for i, gate in enumerate(self._gates)],
                controller=self,
                register_alignment_timer=register_timer,
            )
            if self._gates
            else None
        )

    # -- events from the inputs (task thread) ------------------------------------------------

    def on_barrier(self, gate_index: int, channel_index: int, element: BufferOrEvent) -> None:
        """A barrier was polled from a channel (``element``: its BufferOrEvent)."""
        barrier = element.event
        assert isinstance(barrier, CheckpointBarrier)
        info = InputChannelInfo(gate_index, channel_index)
        checkpoint_id = barrier.checkpoint_id
        self._received.setdefault(checkpoint_id, set()).add(info)
        was_recording = self.recording.pop(info, None) == checkpoint_id
        self.handler.process_barrier(barrier, info)
        if element.is_priority:
            # It overtook the rest of the buffer in progress on its channel (unless that
            # was recorded already) and what it jumped in a receive queue: all of that
            # arrived before it.
            jumped = self._gates[gate_index].channels[channel_index].take_jumped_buffers(element.sequence_number)
            unprocessed = self._unprocessed_input()
            if not was_recording and unprocessed is not None and unprocessed[:2] == (gate_index, channel_index):
                jumped = [unprocessed[2], *jumped]
            if jumped and checkpoint_id in self._input_pending:
                self.channel_state.add_input_data(checkpoint_id, info, SEQUENCE_NUMBER_UNKNOWN, jumped)
        self._maybe_finish_input(checkpoint_id)

    def on_announcement(self, gate_index: int, channel_index: int, announcement: EventAnnouncement) -> None:
        self.handler.process_barrier_announcement(announcement, InputChannelInfo(gate_index, channel_index))

    def on_cancel_marker(self, gate_index: int, channel_index: int, marker: CancelCheckpointMarker) -> None:
        self.handler.process_cancellation_barrier(marker, InputChannelInfo(gate_index, channel_index))
        self._maybe_finish_input(marker.checkpoint_id)

    def on_end_of_partition(self, gate_index: int, channel_index: int) -> None:
        info = InputChannelInfo(gate_index, channel_index)
        self.recording.pop(info, None)
        self.handler.process_end_of_partition(info)
        for checkpoint_id in list(self._input_pending):
            self._maybe_finish_input(checkpoint_id)

    def on_buffer(self, gate_index: int, channel_index: int, batch: pa.RecordBatch) -> None:
        """Called for every polled buffer while :attr:`recording` is not empty."""
        info = InputChannelInfo(gate_index, channel_index)
        checkpoint_id = self.recording.get(info)
        if checkpoint_id is not None:
            self.channel_state.add_input_data(checkpoint_id, info, SEQUENCE_NUMBER_UNKNOWN, [batch])

    # -- CheckpointableInput callbacks ---------------------------------------------------------

    def start_recording(self, gate_index: int, infos: Sequence[InputChannelInfo], checkpoint_id: int) -> None:
        received = self._received.get(checkpoint_id, set())
        gate = self._gates[gate_index]
        for info in infos:
            if info not in received and not gate.is_channel_finished(info.channel_index):
                self.recording[info] = checkpoint_id
        unprocessed = self._unprocessed_input()
        if unprocessed is not None and unprocessed[0] == gate_index:
            info = InputChannelInfo(gate_index, unprocessed[1])
            if self.recording.get(info) == checkpoint_id:
                self.channel_state.add_input_data(checkpoint_id, info, SEQUENCE_NUMBER_UNKNOWN, [unprocessed[2]])

    def stop_recording(self, gate_index: int, checkpoint_id: int) -> None:
        for info in [i for i, c in self.recording.items() if i.gate_index == gate_index and c == checkpoint_id]:
            del self.recording[info]
        self._stopped.add(checkpoint_id)

    def _maybe_finish_input(self, checkpoint_id: int) -> None:
        if checkpoint_id in self._input_pending and checkpoint_id in self._stopped:
            self._input_pending.discard(checkpoint_id)
            self.channel_state.finish_input(checkpoint_id)
        if checkpoint_id in self._stopped:
            self._received.pop(checkpoint_id, None)
            self._stopped.discard(checkpoint_id)

    # -- CheckpointController (called by the barrier handler) -----------------------------------

    def init_inputs_checkpoint(self, barrier: CheckpointBarrier) -> None:
        self._start_channel_state(barrier.checkpoint_id)
        self._input_pending.add(barrier.checkpoint_id)

    def trigger_global_checkpoint(self, barrier: CheckpointBarrier) -> None:
        result = self.handler.get_checkpoint_result(barrier.checkpoint_id)
        taken = result.alignment if result is not None else None
        mode = taken or (SnapshotAlignment.UNALIGNED if barrier.is_unaligned else SnapshotAlignment.ALIGNED)
        self.perform_checkpoint(barrier, mode=mode, alignment=self.handler.alignment_duration)

    def abort_checkpoint_on_barrier(self, checkpoint_id: int, cause: CheckpointDeclinedError) -> None:
        self.channel_state.abort(checkpoint_id, cause)
        self._input_pending.discard(checkpoint_id)
        for output in self._chain.network_outputs:
            if not output.partition.is_finished:
                output.flush()
                output.partition.broadcast_event(CancelCheckpointMarker(checkpoint_id))
        self._discard(checkpoint_id)
        self._decline(checkpoint_id, cause.reason, str(cause))

    # -- triggering ------------------------------------------------------------------------------

    def trigger_source_checkpoint(self, barrier: CheckpointBarrier) -> None:
        """The JobMaster triggered ``barrier`` at this task (task thread): a source, or (FLIP-147)
        a task whose inputs all ended and whose operators finished, so no barrier reaches it."""
        mode = SnapshotAlignment.UNALIGNED if barrier.is_unaligned else SnapshotAlignment.ALIGNED
        self.perform_checkpoint(barrier, mode=mode, alignment=timedelta(0))

    def end_of_data(self) -> None:
        """The task's operators finished (task thread): its next checkpoint is its final one."""
        self._data_ended = True

    def decline_finished(self, checkpoint_id: int) -> None:
        """A source whose input already ended cannot start a checkpoint."""
        self._decline(checkpoint_id, CheckpointDeclineReason.INPUT_END_OF_STREAM, "the source's input has ended")

    def perform_checkpoint(self, barrier: CheckpointBarrier, *, mode: SnapshotAlignment, alignment: timedelta) -> None:
        checkpoint_id = barrier.checkpoint_id
        if self._closed or checkpoint_id <= self._last_triggered:
            return
        self._last_triggered = checkpoint_id
        for older in [c for c in self._running if c < checkpoint_id]:
            self._discard(older)  # subsumed: its acknowledgement would be useless
        unaligned = barrier.is_unaligned
        try:
            if unaligned and self.channel_state.status(checkpoint_id) is None:
                self._start_channel_state(checkpoint_id)  # a source: no input state
                self.channel_state.finish_input(checkpoint_id)
            self._emit_barrier(barrier)
            if unaligned:
                self.channel_state.finish_output(checkpoint_id)
            if barrier.options.checkpoint_type is CheckpointKind.SAVEPOINT:
                prepare_savepoint(self._chain.operators)  # savepoints are self-contained
            snapshots = [(op.uid, op.snapshot_state(checkpoint_id)) for op in self._chain.operators]
        except CheckpointDeclinedError as exc:
            self._decline(checkpoint_id, exc.reason, str(exc))
            return
        if self._data_ended and self._final_checkpoint_id is None:
            self._final_checkpoint_id = checkpoint_id
        done = self._channel_done.get(checkpoint_id) if unaligned else None

        def write(discarded: Callable[[], bool]) -> tuple[StateHandle, ...]:
            channel_state = done.result(self._channel_state_timeout) if done is not None else None
            return self._write(checkpoint_id, snapshots, channel_state, discarded)

        runnable = AsyncCheckpointRunnable(
            checkpoint_id=checkpoint_id,
            write=write,
            on_completed=lambda handles: self._acknowledge(checkpoint_id, handles, mode, alignment),
            on_failed=lambda exc: self._decline(
                checkpoint_id, CheckpointDeclineReason.IO_FAILURE, f"{type(exc).__name__}: {exc}"
            ),
            storage=self._storage,
        )
        self._running[checkpoint_id] = runnable
        self._executor.submit(runnable.run)

    def _emit_barrier(self, barrier: CheckpointBarrier) -> None:
        checkpoint_id = barrier.checkpoint_id
        for partition_index, output in enumerate(self._chain.network_outputs):
            output.flush()
            partition = output.partition
            for subpartition in range(partition.num_subpartitions):
                if barrier.is_unaligned:
                    overtaken = partition.add_priority_event(subpartition, barrier)
                    if overtaken:
                        self.channel_state.add_output_data(
                            checkpoint_id,
                            ResultSubpartitionInfo(partition_index, subpartition),
                            SEQUENCE_NUMBER_UNKNOWN,
                            overtaken,
                        )
                else:
                    sequence_number = partition.emit_event(subpartition, barrier)
                    if barrier.options.is_timeoutable:
                        partition.add_priority_event(subpartition, EventAnnouncement(barrier, sequence_number))

    def _start_channel_state(self, checkpoint_id: int) -> None:
        self._channel_done[checkpoint_id] = concurrent.futures.Future()
        self.channel_state.start(checkpoint_id)

    def _channel_state_complete(self, result: ChannelStateWriteResult) -> None:
        future = self._channel_done.get(result.checkpoint_id)
        if future is not None and not future.done():
            future.set_result(result)

    # -- the asynchronous part (I/O pool) ----------------------------------------------------------

    def _write(
        self,
        checkpoint_id: int,
        snapshots: list[tuple[str, OperatorSnapshot | None]],
        channel_state: ChannelStateWriteResult | None,
        discarded: Callable[[], bool],
    ) -> tuple[StateHandle, ...]:
        writers: dict[str, SnapshotWriter] = {}
        chains: dict[str, tuple[int, ...]] = {}
        finished: list[StateHandle] = []

        def writer(uid: str) -> SnapshotWriter:
            if uid not in writers:
                writers[uid] = SnapshotWriter(self._storage, self._job_id, checkpoint_id, uid, self._subtask)
            return writers[uid]

        try:
            for uid, snapshot in snapshots:
                if snapshot is None:
                    continue
                parts = [*snapshot.keyed, *snapshot.keyed_changes, *snapshot.operator]
                if parts:
                    write_state_snapshots(writer(uid), parts)
                if snapshot.chain is not None:
                    writer(uid)  # the handle carries the chain even when nothing changed
                    chains[uid] = snapshot.chain
                if discarded():
                    break
            if channel_state is not None and not channel_state.is_empty and not discarded():
                target = writer(self._channel_state_uid)
                for info, buffers in channel_state.input_buffers.items():
                    for sequence, buffer in enumerate(buffers):
                        target.add_channel_state("input", info.gate_index, info.channel_index, sequence, buffer.batch)
                for info, buffers in channel_state.output_buffers.items():
                    for sequence, buffer in enumerate(buffers):
                        target.add_channel_state(
                            "output", info.partition_index, info.subpartition_index, sequence, buffer.batch
                        )
            if discarded():
                raise CheckpointDeclinedError(
                    f"checkpoint {checkpoint_id} was discarded", checkpoint_id=checkpoint_id,
                    reason=CheckpointDeclineReason.SUBSUMED,
                )  # fmt: skip
            for uid, w in writers.items():
                finished.append(w.finish(chain=chains.get(uid)))
            if self._local_state is not None and not discarded():
                self._local_state.store(checkpoint_id, snapshots)  # never raises: Delta holds the checkpoint
            return tuple(finished)
        except BaseException:
            # Report the original error: a writer that already finished hands its files to
            # its handle, so only unfinished writers are discarded, and the finished
            # handles' files are removed here (best effort, never masking the cause).
            cleanups = [w.discard for w in writers.values() if w.is_open]
            if finished:
                cleanups.append(functools.partial(discard_handles, self._storage, finished))
            for cleanup in cleanups:
                try:
                    cleanup()
                except Exception:  # noqa: BLE001 - cleanup must not replace the error being raised
                    log.warning("could not remove the files of failed checkpoint %d", checkpoint_id, exc_info=True)
            raise
        finally:
            self.channel_state.release(checkpoint_id)
            self._channel_done.pop(checkpoint_id, None)

    # -- results -----------------------------------------------------------------------------------

    def _acknowledge(
        self, checkpoint_id: int, handles: tuple[StateHandle, ...], mode: SnapshotAlignment, alignment
    ) -> None:
        self._running.pop(checkpoint_id, None)
        self._responder.acknowledge_checkpoint(
            CheckpointAck(
                job_id=self._job_id,
                execution_id=self._execution_id,
                checkpoint_id=checkpoint_id,
                handles=handles,
                mode=mode,
                alignment=alignment,
            )
        )

    def _decline(self, checkpoint_id: int, reason: CheckpointDeclineReason, message: str) -> None:
        self._running.pop(checkpoint_id, None)
        log.info("%s declines checkpoint %d (%s): %s", self._task_name, checkpoint_id, reason.name, message)
        self._responder.decline_checkpoint(
            CheckpointDecline(
                job_id=self._job_id,
                execution_id=self._execution_id,
                checkpoint_id=checkpoint_id,
                reason=reason,
                message=message,
            )
        )

    def _discard(self, checkpoint_id: int) -> None:
        """Stop the asynchronous part of ``checkpoint_id`` (task thread): nothing is acknowledged.

        Its writer may be waiting on the I/O pool for the channel state, which
        an aborted checkpoint never completes: that wait ends now, so the pool
        thread (shared by every task of the TaskExecutor) is free for the next
        checkpoint instead of being held until ``channel_state_timeout``.
        """
        runnable = self._running.pop(checkpoint_id, None)
        if runnable is not None:
            runnable.discard()
        channel_state = self._channel_done.get(checkpoint_id)
        if channel_state is not None and not channel_state.done():
            channel_state.set_exception(
                CheckpointDeclinedError(
                    f"checkpoint {checkpoint_id} was discarded",
                    checkpoint_id=checkpoint_id,
                    reason=CheckpointDeclineReason.CHECKPOINT_ABORTED,
                )  # fmt: skip
            )

    # -- notifications and shutdown (task thread) -----------------------------------------------

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        notify_incremental(self._chain.operators, checkpoint_id, completed=True)
        if self._local_state is not None:
            self._local_state.confirm(checkpoint_id)
        for operator in self._chain.operators:
            operator.notify_checkpoint_complete(checkpoint_id)
        # After the operators: the sinks committed the final checkpoint's output before the task may end.
        final = self._final_checkpoint_id
        if final is not None and checkpoint_id >= final:
            self.final_checkpoint_completed = True

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        self._discard(checkpoint_id)
        self.channel_state.abort(
            checkpoint_id,
            CheckpointDeclinedError(
                f"checkpoint {checkpoint_id} was aborted by the coordinator",
                checkpoint_id=checkpoint_id,
                reason=CheckpointDeclineReason.CHECKPOINT_ABORTED,
            ),
        )
        notify_incremental(self._chain.operators, checkpoint_id, completed=False)
        for operator in self._chain.operators:
            operator.notify_checkpoint_aborted(checkpoint_id)

    def close(self) -> None:
        """The task ends: discard every running asynchronous part."""
        self._closed = True
        for checkpoint_id in list(self._running):
            self._discard(checkpoint_id)
        for future in self._channel_done.values():
            if not future.done():
                future.cancel()
        if self.handler is not None:
            self.handler.close()
