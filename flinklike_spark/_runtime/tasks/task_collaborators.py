"""What a stream task runs with: its restore, and the Protocols of its inputs and its checkpoint coordinator.

The task loop calls these and nothing else of them, so a test may hand it
doubles, and the coordinator (built by a :class:`CheckpointsFactory` from the
task's own timers and buffer in progress) needs no wiring after construction.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import pyarrow as pa

from flinklike_spark._runtime.io.barrier_collaborators import RegisterAlignmentTimer
from flinklike_spark._runtime.io.channel_state import InputChannelInfo
from flinklike_spark._runtime.network.events import (
    BufferOrEvent,
    CancelCheckpointMarker,
    CheckpointBarrier,
    EventAnnouncement,
)
from flinklike_spark._runtime.operators.stream_operator import RestoredState

__all__ = ["CheckpointsFactory", "TaskCheckpoints", "TaskInputGate", "TaskRestore", "UnprocessedInput"]

#: ``(gate, channel, rows not yet processed)`` of the buffer a task is working through.
UnprocessedInput = tuple[int, int, pa.RecordBatch]


@dataclasses.dataclass(frozen=True, kw_only=True)
class TaskRestore:
    """What a task starts from, read from a completed checkpoint.

    Attributes:
        state: operator uid -> its restored state.
        input: restored input channel state, processed before any new input.
        output: restored output channel state, ``(partition index, batch)``, emitted first.
        finished: FLIP-147: the vertex had finished in the restored checkpoint, so the
            task opens no operator and only waits for its inputs to end.
    """

    state: Mapping[str, RestoredState] = dataclasses.field(default_factory=dict)
    input: Sequence[pa.RecordBatch] = ()
    output: Sequence[tuple[int, pa.RecordBatch]] = ()
    finished: bool = False


class TaskInputGate(Protocol):
    """An input gate as the task loop uses it (:class:`~flinklike_spark._runtime.network.input_gate.InputGate`)."""

    @property
    def num_channels(self) -> int: ...

    def set_data_listener(self, listener: Callable[[], None] | None) -> None: ...

    def start(self) -> None: ...

    def poll_next(self) -> tuple[int, BufferOrEvent] | None: ...

    def poll_priority(self) -> tuple[int, BufferOrEvent] | None: ...

    def close(self) -> None: ...


class TaskCheckpoints(Protocol):
    """The subtask's checkpoint coordinator as its task uses it (all on the task thread but ``close``)."""

    #: FLIP-147: the task ends only after a checkpoint taken once its operators finished completed.
    final_checkpoint: bool
    #: that final checkpoint completed.
    final_checkpoint_completed: bool

    @property
    def recording(self) -> Mapping[InputChannelInfo, int]:
        """Channels whose polled buffers are recorded as channel state (empty: no recording)."""
        ...

    def on_buffer(self, gate_index: int, channel_index: int, batch: pa.RecordBatch) -> None: ...

    def on_barrier(self, gate_index: int, channel_index: int, element: BufferOrEvent) -> None: ...

    def on_announcement(self, gate_index: int, channel_index: int, announcement: EventAnnouncement) -> None: ...

    def on_cancel_marker(self, gate_index: int, channel_index: int, marker: CancelCheckpointMarker) -> None: ...

    def on_end_of_partition(self, gate_index: int, channel_index: int) -> None: ...

    def trigger_source_checkpoint(self, barrier: CheckpointBarrier) -> None: ...

    def decline_finished(self, checkpoint_id: int) -> None: ...

    def end_of_data(self) -> None: ...

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None: ...

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None: ...

    def close(self) -> None: ...


class CheckpointsFactory(Protocol):
    """Builds a task's checkpoint coordinator from what only the task has.

    Args:
        register_timer: runs a callback on the task thread (as a mail) after a delay.
        unprocessed_input: the task's buffer in progress, if any.
    """

    def __call__(
        self,
        *,
        register_timer: RegisterAlignmentTimer,
        unprocessed_input: Callable[[], UnprocessedInput | None],
    ) -> TaskCheckpoints: ...
