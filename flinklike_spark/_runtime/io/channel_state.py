"""In-flight data of unaligned checkpoints: the ChannelStateWriter.

An unaligned checkpoint snapshots a task at the *first* barrier; the buffers
that were still in flight at that moment belong to the checkpoint too:

* *input* channel state: buffers that precede barrier *n* on an input channel
  but had not been processed when the snapshot started (the input gate records
  them from ``checkpoint_started`` until that channel's barrier arrives);
* *output* channel state: buffers the task had produced but not yet sent when
  its own barrier overtook them.

:class:`ChannelStateWriter` collects both, per checkpoint and per channel, in
the order they were added. Persisting them (to Delta) is the storage layer's
job: pass a ``sink`` callable and it receives each completed
:class:`ChannelStateWriteResult` exactly once.

Lifecycle of one checkpoint (see :data:`CHANNEL_STATE_TRANSITIONS`)::

    start(id) -> add_input_data / add_output_data ... ->
    finish_input(id) and finish_output(id) (either order) -> COMPLETED
    abort(id, cause) at any point before COMPLETED -> ABORTED

Thread rules: every method takes an internal lock, so input gates may record
from their own threads while the task thread finishes or aborts. The sink is
called outside the lock, on the thread whose ``finish_*`` call completed the
checkpoint.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import types
from collections.abc import Callable, Iterable, Mapping
from enum import Enum
from typing import Any

from flinklike_spark._runtime.state_machine import StateMachine
from flinklike_spark.errors import CheckpointDeclinedError, CheckpointDeclineReason, IllegalStateTransition

__all__ = [
    "CHANNEL_STATE_TRANSITIONS",
    "SEQUENCE_NUMBER_UNKNOWN",
    "ChannelStateWriteResult",
    "ChannelStateWriter",
    "ChannelStateWriterStatus",
    "InputChannelInfo",
    "RecordedBuffer",
    "ResultSubpartitionInfo",
]

SEQUENCE_NUMBER_UNKNOWN = -1
"""Sequence number to pass when the producer's position of a buffer is not known."""


@dataclasses.dataclass(frozen=True, order=True)
class InputChannelInfo:
    """Identifies one input channel of a task: gate (input) index and channel index in that gate."""

    gate_index: int
    channel_index: int

    def __post_init__(self) -> None:
        if self.gate_index < 0 or self.channel_index < 0:
            raise ValueError(f"channel indices must be >= 0, got {self.gate_index}/{self.channel_index}")

    def __str__(self) -> str:
        return f"{self.gate_index}:{self.channel_index}"


@dataclasses.dataclass(frozen=True, order=True)
class ResultSubpartitionInfo:
    """Identifies one output subpartition of a task: partition index and subpartition index."""

    partition_index: int
    subpartition_index: int

    def __post_init__(self) -> None:
        if self.partition_index < 0 or self.subpartition_index < 0:
            raise ValueError(f"subpartition indices must be >= 0, got {self.partition_index}/{self.subpartition_index}")

    def __str__(self) -> str:
        return f"{self.partition_index}:{self.subpartition_index}"


@dataclasses.dataclass(frozen=True)
class RecordedBuffer:
    """One in-flight buffer: its producer sequence number (or ``SEQUENCE_NUMBER_UNKNOWN``) and data.

    ``batch`` is normally a ``pyarrow.RecordBatch``; the writer never looks inside it.
    """

    sequence_number: int
    batch: Any


@dataclasses.dataclass(frozen=True)
class ChannelStateWriteResult:
    """Everything recorded for one checkpoint, per channel, in the order it was added.

    Channels for which nothing was added are absent from the mappings.
    """

    checkpoint_id: int
    input_buffers: Mapping[InputChannelInfo, tuple[RecordedBuffer, ...]]
    output_buffers: Mapping[ResultSubpartitionInfo, tuple[RecordedBuffer, ...]]

    def input_batches(self, channel: InputChannelInfo) -> list[Any]:
        """The batches recorded for input ``channel`` (empty list if none)."""
        return [b.batch for b in self.input_buffers.get(channel, ())]

    def output_batches(self, subpartition: ResultSubpartitionInfo) -> list[Any]:
        """The batches recorded for output ``subpartition`` (empty list if none)."""
        return [b.batch for b in self.output_buffers.get(subpartition, ())]

    @property
    def is_empty(self) -> bool:
        """True when no buffer at all was recorded."""
        return not self.input_buffers and not self.output_buffers


class ChannelStateWriterStatus(Enum):
    """Where the channel state of one checkpoint is in its lifecycle."""

    RECORDING = "recording"
    INPUT_FINISHED = "input_finished"
    OUTPUT_FINISHED = "output_finished"
    COMPLETED = "completed"
    ABORTED = "aborted"


_S = ChannelStateWriterStatus

CHANNEL_STATE_TRANSITIONS: Mapping[ChannelStateWriterStatus, frozenset[ChannelStateWriterStatus]] = (
    types.MappingProxyType(
        {
            _S.RECORDING: frozenset(
                {
                    # finish_input: all barriers of the task's inputs arrived; output may still record.
                    _S.INPUT_FINISHED,
                    # finish_output: the task's barrier was broadcast; input may still record.
                    _S.OUTPUT_FINISHED,
                    # abort: the checkpoint was declined, subsumed or cancelled.
                    _S.ABORTED,
                }
            ),
            _S.INPUT_FINISHED: frozenset(
                {
                    # finish_output after finish_input: the result is complete and handed to the sink.
                    _S.COMPLETED,
                    # abort before the output side finished.
                    _S.ABORTED,
                }
            ),
            _S.OUTPUT_FINISHED: frozenset(
                {
                    # finish_input after finish_output: the result is complete and handed to the sink.
                    _S.COMPLETED,
                    # abort before the input side finished.
                    _S.ABORTED,
                }
            ),
            # Terminal: the result is final (released with ChannelStateWriter.release).
            _S.COMPLETED: frozenset(),
            # Terminal: recorded data was dropped; late adds are ignored.
            _S.ABORTED: frozenset(),
        }
    )
)


class _Pending:
    """Mutable recording of one checkpoint (guarded by the writer's lock)."""

    def __init__(self, checkpoint_id: int, clock: Callable[[], float]) -> None:
        self.machine: StateMachine[ChannelStateWriterStatus] = StateMachine(
            f"channel state of checkpoint {checkpoint_id}",
            _S.RECORDING,
            CHANNEL_STATE_TRANSITIONS,
            clock=clock,
        )
        self.inputs: dict[InputChannelInfo, list[RecordedBuffer]] = {}
        self.outputs: dict[ResultSubpartitionInfo, list[RecordedBuffer]] = {}
        self.cause: BaseException | None = None
        self.result: ChannelStateWriteResult | None = None
        self.handing_off = False


class ChannelStateWriter:
    """Collects the in-flight buffers of unaligned checkpoints, in memory, per channel.

    Contract:

    * ``start(id)`` must precede every other call for ``id``; starting an id
      twice raises.
    * ``add_input_data`` / ``add_output_data`` append in call order; the
      recorded order per channel is exactly the call order (sequence numbers
      are stored, not used for sorting). Adding to an *aborted* checkpoint is
      silently ignored (gates may still be recording when the task aborts);
      adding after the matching ``finish_*`` raises.
    * When both ``finish_input`` and ``finish_output`` were called,
      ``sink(result)`` runs once and the checkpoint becomes COMPLETED. If the
      sink raises, the checkpoint becomes ABORTED and the error propagates
      from the ``finish_*`` call; an ``abort`` while the sink runs wins.
    * ``abort(id, cause)`` of an unknown or already finished id is a no-op, so
      the coordinator can abort every declined checkpoint, aligned or not.
    * Results stay available through :meth:`get_result` until :meth:`release`.

    Args:
        sink: called with each completed result (e.g. the Delta writer).
        clock: seconds source for the lifecycle history (injectable in tests).
    """

    def __init__(
        self,
        *,
        sink: Callable[[ChannelStateWriteResult], None] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._sink = sink
        self._clock = clock or time.time
        self._lock = threading.Lock()
        self._checkpoints: dict[int, _Pending] = {}

    # -- lifecycle --------------------------------------------------------------

    def start(self, checkpoint_id: int) -> None:
        """Begin recording checkpoint ``checkpoint_id``.

        Raises:
            ValueError: the id was already started (and not released).
        """
        with self._lock:
            if checkpoint_id in self._checkpoints:
                state = self._checkpoints[checkpoint_id].machine.state
                raise ValueError(f"channel state of checkpoint {checkpoint_id} already started ({state.name})")
            self._checkpoints[checkpoint_id] = _Pending(checkpoint_id, self._clock)

    def add_input_data(
        self,
        checkpoint_id: int,
        channel_info: InputChannelInfo,
        sequence: int,
        batches: Iterable[Any],
    ) -> None:
        """Record ``batches`` as in-flight input of ``channel_info`` (after earlier calls).

        Raises:
            LookupError: the checkpoint was never started.
            IllegalStateTransition: ``finish_input`` was already called.
        """
        self._add(checkpoint_id, "input", channel_info, sequence, batches)

    def add_output_data(
        self,
        checkpoint_id: int,
        channel_info: ResultSubpartitionInfo,
        sequence: int,
        batches: Iterable[Any],
    ) -> None:
        """Record ``batches`` as in-flight output of subpartition ``channel_info``.

        Raises:
            LookupError: the checkpoint was never started.
            IllegalStateTransition: ``finish_output`` was already called.
        """
        self._add(checkpoint_id, "output", channel_info, sequence, batches)

    def finish_input(self, checkpoint_id: int) -> None:
        """No more input data will be added (all input barriers arrived).

        Idempotent; a no-op for an aborted checkpoint.

        Raises:
            LookupError: the checkpoint was never started.
        """
        self._finish(checkpoint_id, _S.INPUT_FINISHED, _S.OUTPUT_FINISHED)

    def finish_output(self, checkpoint_id: int) -> None:
        """No more output data will be added (the task's barrier was broadcast).

        Idempotent; a no-op for an aborted checkpoint.

        Raises:
            LookupError: the checkpoint was never started.
        """
        self._finish(checkpoint_id, _S.OUTPUT_FINISHED, _S.INPUT_FINISHED)

    def abort(self, checkpoint_id: int, cause: BaseException) -> None:
        """Drop what was recorded for ``checkpoint_id``; later adds are ignored.

        A no-op for an unknown, completed or already aborted checkpoint.
        """
        with self._lock:
            pending = self._checkpoints.get(checkpoint_id)
            if pending is None or pending.machine.is_terminal():
                return
            pending.machine.transition(_S.ABORTED)
            pending.cause = cause
            pending.inputs.clear()
            pending.outputs.clear()

    def status(self, checkpoint_id: int) -> ChannelStateWriterStatus | None:
        """Lifecycle status of ``checkpoint_id``, or None if unknown (never started or released)."""
        with self._lock:
            pending = self._checkpoints.get(checkpoint_id)
            return None if pending is None else pending.machine.state

    def get_result(self, checkpoint_id: int) -> ChannelStateWriteResult:
        """The recorded buffers of a COMPLETED checkpoint, per channel in order.

        Raises:
            LookupError: unknown id, or not yet completed (the message says which).
            CheckpointDeclinedError: the checkpoint was aborted; ``__cause__`` is the abort cause.
        """
        with self._lock:
            pending = self._checkpoints.get(checkpoint_id)
            if pending is None:
                known = sorted(self._checkpoints)
                raise LookupError(f"no channel state for checkpoint {checkpoint_id}; known checkpoints: {known}")
            state = pending.machine.state
            if state is _S.ABORTED:
                cause = pending.cause
                reason = (
                    cause.reason if isinstance(cause, CheckpointDeclinedError) else CheckpointDeclineReason.IO_FAILURE
                )
                raise CheckpointDeclinedError(
                    f"channel state of checkpoint {checkpoint_id} was aborted: {cause}",
                    checkpoint_id=checkpoint_id,
                    reason=reason,
                ) from cause
            if pending.result is None:
                raise LookupError(
                    f"channel state of checkpoint {checkpoint_id} is not complete yet ({state.name}); "
                    "both finish_input and finish_output must be called"
                )
            return pending.result

    def release(self, checkpoint_id: int) -> None:
        """Forget ``checkpoint_id`` (its result or abort); a no-op if unknown."""
        with self._lock:
            self._checkpoints.pop(checkpoint_id, None)

    # -- internals --------------------------------------------------------------

    def _lookup(self, checkpoint_id: int) -> _Pending:
        pending = self._checkpoints.get(checkpoint_id)
        if pending is None:
            raise LookupError(
                f"channel state of checkpoint {checkpoint_id} was not started; call start({checkpoint_id}) first"
            )
        return pending

    def _add(self, checkpoint_id: int, side: str, channel: Any, sequence: int, batches: Iterable[Any]) -> None:
        with self._lock:
            pending = self._lookup(checkpoint_id)
            state = pending.machine.state
            if state is _S.ABORTED:
                return  # late write racing with abort: dropped on purpose
            finished = _S.INPUT_FINISHED if side == "input" else _S.OUTPUT_FINISHED
            if state in (finished, _S.COMPLETED) or pending.handing_off:
                raise IllegalStateTransition(
                    f"cannot add {side} data to checkpoint {checkpoint_id}: finish_{side} was already called "
                    f"(state {state.name})"
                )
            target = pending.inputs if side == "input" else pending.outputs
            buffers = target.setdefault(channel, [])
            buffers.extend(RecordedBuffer(sequence, batch) for batch in batches)
            if not buffers:
                del target[channel]

    def _finish(self, checkpoint_id: int, own: ChannelStateWriterStatus, other: ChannelStateWriterStatus) -> None:
        with self._lock:
            pending = self._lookup(checkpoint_id)
            state = pending.machine.state
            if state in (own, _S.COMPLETED, _S.ABORTED) or pending.handing_off:
                return
            if state is _S.RECORDING:
                pending.machine.transition(own)
                return
            result = ChannelStateWriteResult(
                checkpoint_id=checkpoint_id,
                input_buffers=types.MappingProxyType({c: tuple(b) for c, b in sorted(pending.inputs.items())}),
                output_buffers=types.MappingProxyType({c: tuple(b) for c, b in sorted(pending.outputs.items())}),
            )
            pending.handing_off = True
        # The sink (a storage write) runs without the lock so gates recording other
        # checkpoints are not stalled; the checkpoint stays in `other` until it returns.
        try:
            if self._sink is not None:
                self._sink(result)
        except BaseException as e:
            with self._lock:
                pending.handing_off = False
                if not pending.machine.is_terminal():
                    pending.machine.transition(_S.ABORTED)
                    pending.cause = e
                    pending.inputs.clear()
                    pending.outputs.clear()
            raise
        with self._lock:
            pending.handing_off = False
            if pending.machine.is_terminal():
                return  # aborted while the sink ran; the abort wins
            pending.machine.transition(_S.COMPLETED)
            pending.result = result
            pending.inputs.clear()
            pending.outputs.clear()
