"""What a subtask's checkpoint coordinator is built with: its settings and the Protocols of its collaborators.

The coordinator reads these and nothing else of the task: the operator
chain's operators and network outputs, the input gates' channel controls, and
the TaskExecutor's local copies of snapshots.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import Protocol

from checkpointing import CheckpointLayout
from flinklike_spark._runtime.io.barrier_handler_states import BarrierHandlerMode
from flinklike_spark._runtime.network.input_gate import InputChannel
from flinklike_spark._runtime.operators.stream_operator import OperatorSnapshot, StreamOperator
from flinklike_spark._runtime.tasks.record_writer import RecordWriterOutput
from flinklike_spark.errors import ConfigurationError

__all__ = ["CheckpointedChain", "CheckpointedGate", "LocalSnapshotStore", "SubtaskCheckpointSettings"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class SubtaskCheckpointSettings:
    """Which subtask checkpoints, where to, and how.

    Attributes:
        task_name: for messages.
        job_id / execution_id: identify acknowledgements.
        subtask_index: the subtask (rows of the snapshot carry it).
        channel_state_uid: operator uid under which channel state is stored (the head's).
        storage: the checkpoint directory (``execution.checkpointing.dir``) with its storage settings.
        mode: how barriers are handled (see :class:`BarrierHandlerMode`).
        channel_state_timeout: how long the asynchronous part waits for the last barrier.
        at_least_once: never block channels while barriers align (records after a
            channel's barrier may be processed before the snapshot, so a restore
            may replay them: at-least-once).
        final_checkpoint: FLIP-147: once the task's operators finished, the first
            checkpoint it takes is its final one, and the task ends only after it completed.
    """

    task_name: str
    job_id: str
    execution_id: str
    subtask_index: int
    channel_state_uid: str
    storage: str | CheckpointLayout
    mode: BarrierHandlerMode
    channel_state_timeout: timedelta = timedelta(minutes=10)
    at_least_once: bool = False
    final_checkpoint: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.mode, BarrierHandlerMode):
            raise ConfigurationError(f"mode must be one of {[m.name for m in BarrierHandlerMode]}, got {self.mode!r}")
        if self.channel_state_timeout <= timedelta(0):
            raise ConfigurationError(f"channel_state_timeout must be positive, got {self.channel_state_timeout}")


class CheckpointedChain(Protocol):
    """The operator chain as the coordinator uses it (:class:`~.operator_chain.OperatorChain`)."""

    @property
    def operators(self) -> Sequence[StreamOperator]: ...

    @property
    def network_outputs(self) -> Sequence[RecordWriterOutput]: ...


class CheckpointedGate(Protocol):
    """An input gate as the coordinator uses it (:class:`~flinklike_spark._runtime.network.input_gate.InputGate`)."""

    @property
    def num_channels(self) -> int: ...

    @property
    def channels(self) -> Sequence[InputChannel]: ...

    def block_channel(self, channel_index: int) -> None: ...

    def resume_channel(self, channel_index: int) -> None: ...

    def is_channel_finished(self, channel_index: int) -> bool: ...


class LocalSnapshotStore(Protocol):
    """Task-local recovery: keeps a local copy of each snapshot written (a ``SubtaskLocalState``)."""

    def store(self, checkpoint_id: int, snapshots: Iterable[tuple[str, OperatorSnapshot | None]]) -> None:
        """Keep a copy of ``snapshots``; never raises (Delta holds the checkpoint)."""
        ...

    def confirm(self, checkpoint_id: int) -> None:
        """``checkpoint_id`` completed: older copies may go."""
        ...
