"""What the JobMaster sends a TaskExecutor to run one subtask (Flink's TaskDeploymentDescriptor)."""

from __future__ import annotations

import dataclasses

from checkpointing import CheckpointLayout
from flinklike_spark._runtime.graph.execution_state import ExecutionState
from flinklike_spark._runtime.graph.job_graph import PartitionerSpec
from flinklike_spark._runtime.io.barrier_handler_states import BarrierHandlerMode
from flinklike_spark._runtime.operators.operator_spec import OperatorSpec
from flinklike_spark.config import Configuration
from flinklike_spark.connector_api import SourceSplit

__all__ = [
    "CheckpointDeployment",
    "InputChannelDeployment",
    "InputGateDeployment",
    "RestoreDeployment",
    "RestoreGate",
    "ResultPartitionDeployment",
    "TaskDeploymentDescriptor",
    "TaskExecutionState",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class InputChannelDeployment:
    """One input channel: read ``subpartition`` of ``partition_id`` at ``address``.

    ``address`` is the producer TaskExecutor's Flight address; ``local`` is True
    when the producer runs in the same TaskExecutor (in-memory channel).
    """

    partition_id: str
    subpartition: int
    address: str
    local: bool


@dataclasses.dataclass(frozen=True, kw_only=True)
class InputGateDeployment:
    channels: tuple[InputChannelDeployment, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ResultPartitionDeployment:
    partition_id: str
    num_subpartitions: int
    partitioner: PartitionerSpec


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointDeployment:
    """Checkpointing of a task: where snapshots go and how barriers are handled.

    ``mode``: how the task's barrier handler aligns barriers; ``timeout``: seconds
    the asynchronous part of a snapshot waits for the input channel state.
    ``at_least_once`` (``execution.checkpointing.mode: at-least-once``): barriers
    are only tracked, channels are never blocked (Flink's barrier tracker).
    """

    storage: CheckpointLayout
    mode: BarrierHandlerMode
    timeout: float
    at_least_once: bool = False
    #: FLIP-147 (periodic checkpoints and ``checkpoints-after-tasks-finish``): at the end of its
    #: input the task finishes its operators, sends EndOfData and ends only after a checkpoint
    #: taken after that completed (its two-phase-commit sinks commit in that notification).
    final_checkpoint: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class RestoreGate:
    """Input gate ``i`` of a restored task reads output ``output_index`` of vertex ``producer_vertex_id``.

    ``partitioner`` routes that edge's records: it decides which of the old
    subtasks' in-flight records the restored task replays.
    """

    producer_vertex_id: str
    output_index: int
    partitioner: PartitionerSpec


@dataclasses.dataclass(frozen=True, kw_only=True)
class RestoreDeployment:
    """The completed checkpoint a task starts from.

    Attributes:
        storage: the checkpoint directory (its URL and the job's storage settings).
        job_id: the job that wrote the checkpoint (not the restoring job).
        checkpoint_id: the checkpoint.
        parallelism: vertex id -> parallelism at checkpoint time (for rescaling).
        gates: per input gate of this task, where its in-flight data came from.
        finished_vertices: vertices whose every subtask had finished when the checkpoint was
            taken (Flink's fully finished operators): their tasks are deployed FINISHED_ON_RESTORE.
    """

    storage: CheckpointLayout
    job_id: str
    checkpoint_id: int
    parallelism: dict[str, int]
    gates: tuple[RestoreGate, ...]
    finished_vertices: frozenset[str] = frozenset()


@dataclasses.dataclass(frozen=True, kw_only=True)
class TaskDeploymentDescriptor:
    job_id: str
    job_name: str
    execution_id: str
    vertex_id: str
    task_name: str
    subtask_index: int
    parallelism: int
    max_parallelism: int
    attempt_number: int
    allocation_id: str
    operators: list[OperatorSpec]
    input_gates: tuple[InputGateDeployment, ...]
    result_partitions: tuple[ResultPartitionDeployment, ...]
    splits: tuple[SourceSplit, ...]
    config: Configuration
    checkpointing: CheckpointDeployment | None = None
    restore: RestoreDeployment | None = None
    #: id of the first job of the restore lineage (this job's id unless restored);
    #: sinks derive their transactional ids from it.
    lineage_id: str = ""

    @property
    def display_name(self) -> str:
        return f"{self.task_name} ({self.subtask_index + 1}/{self.parallelism})#{self.attempt_number}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class TaskExecutionState:
    """A task's state change, sent Task -> TaskExecutor -> JobMaster."""

    job_id: str
    execution_id: str
    state: ExecutionState
    error: BaseException | None = None
    accumulators: dict[str, object] = dataclasses.field(default_factory=dict)
    committables: dict[str, list[object]] = dataclasses.field(default_factory=dict)  # sink uid -> final committables
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)  # a terminal task's last raw metrics
