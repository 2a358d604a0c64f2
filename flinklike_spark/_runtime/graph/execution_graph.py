"""The ExecutionGraph: the JobGraph expanded to one vertex per subtask and one Execution per attempt.

* :class:`ExecutionJobVertex` — one per :class:`JobVertex`, holding
  ``parallelism`` :class:`ExecutionVertex` objects.
* :class:`ExecutionVertex` — one subtask; it owns its *current*
  :class:`Execution` and the prior (terminal) ones. Restarting a subtask means
  :meth:`ExecutionVertex.reset_for_new_execution`, which creates attempt n+1.
* :class:`Execution` — one attempt, identified by an :class:`ExecutionAttemptID`
  and driven through :class:`ExecutionState` by a
  :class:`~flinklike_spark._runtime.state_machine.StateMachine`.

The graph also computes the data wiring: for every producer subtask its result
partitions (one per output edge) and for every consumer subtask its input gates
(one per input edge, in ``input_index`` order) listing the channels it reads:

* POINTWISE (forward): consumer ``i`` reads subpartition 0 of producer ``i``'s
  single-subpartition partition.
* ALL_TO_ALL: each producer partition has one subpartition per consumer
  subtask; consumer ``j`` reads subpartition ``j`` of every producer.

Thread rule: the graph is owned by the JobMaster's main thread. Nothing here
locks (the StateMachine of an Execution does, but sequences of changes are only
consistent when made on the main thread).
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from flinklike_spark._runtime.graph.execution_state import (
    ExecutionState,
    JobStatus,
    job_status_transition_table,
    transition_table,
)
from flinklike_spark._runtime.graph.job_graph import (
    DistributionPattern,
    JobEdge,
    JobGraph,
    JobVertex,
    PartitionerSpec,
)
from flinklike_spark._runtime.state_machine import StateMachine
from flinklike_spark.errors import IllegalStateTransition

__all__ = [
    "Execution",
    "ExecutionAttemptID",
    "ExecutionGraph",
    "ExecutionJobVertex",
    "ExecutionVertex",
    "ExecutionVertexID",
    "InputChannelSpec",
    "InputGateSpec",
    "IntermediateResultPartitionID",
    "ResultPartitionSpec",
]


@dataclasses.dataclass(frozen=True, kw_only=True, order=True)
class ExecutionVertexID:
    """Identifies one subtask: ``subtask_index`` (0-based) of job vertex ``job_vertex_id``."""

    job_vertex_id: str
    subtask_index: int

    def __post_init__(self) -> None:
        if self.subtask_index < 0:
            raise ValueError(f"subtask_index must be >= 0, got {self.subtask_index}")

    def __str__(self) -> str:
        return f"{self.job_vertex_id}-{self.subtask_index}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExecutionAttemptID:
    """Identifies one execution attempt of one subtask; unique even across restarts of the JobMaster.

    ``str()`` is short and readable (``"map-1#2/ab12"``: subtask 1 of ``map``,
    attempt 2, first four token characters); :attr:`full_id` carries the
    whole token and is what crosses process boundaries.
    """

    job_vertex_id: str
    subtask_index: int
    attempt_number: int
    token: str = dataclasses.field(default_factory=lambda: uuid.uuid4().hex)

    def __post_init__(self) -> None:
        if self.subtask_index < 0:
            raise ValueError(f"subtask_index must be >= 0, got {self.subtask_index}")
        if self.attempt_number < 0:
            raise ValueError(f"attempt_number must be >= 0, got {self.attempt_number}")
        if not self.token:
            raise ValueError("token must be a non-empty string")

    @classmethod
    def from_full_id(cls, full_id: str) -> ExecutionAttemptID:
        """Parse :attr:`full_id` back (the inverse of ``attempt.full_id``).

        Raises:
            ValueError: ``full_id`` is not of the form ``"<vertex>-<subtask>#<attempt>/<token>"``.
        """
        try:
            rest, token = full_id.rsplit("/", 1)
            rest, attempt = rest.rsplit("#", 1)
            vertex, subtask = rest.rsplit("-", 1)
            return cls(job_vertex_id=vertex, subtask_index=int(subtask), attempt_number=int(attempt), token=token)
        except ValueError:
            raise ValueError(
                f"not an execution attempt id: {full_id!r}; expected '<vertex>-<subtask>#<attempt>/<token>'"
            ) from None

    @property
    def execution_vertex_id(self) -> ExecutionVertexID:
        return ExecutionVertexID(job_vertex_id=self.job_vertex_id, subtask_index=self.subtask_index)

    @property
    def full_id(self) -> str:
        """``"<vertex>-<subtask>#<attempt>/<full token>"``: unique, for descriptors and RPC."""
        return f"{self.job_vertex_id}-{self.subtask_index}#{self.attempt_number}/{self.token}"

    def __str__(self) -> str:
        return f"{self.job_vertex_id}-{self.subtask_index}#{self.attempt_number}/{self.token[:4]}"


@dataclasses.dataclass(frozen=True, kw_only=True, order=True)
class IntermediateResultPartitionID:
    """The partition ``producer`` writes for its output edge number ``output_index``."""

    producer: ExecutionVertexID
    output_index: int

    def __str__(self) -> str:
        return f"{self.producer}/out{self.output_index}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class InputChannelSpec:
    """One input channel: read subpartition ``subpartition_index`` of ``partition_id``."""

    producer: ExecutionVertexID
    partition_id: IntermediateResultPartitionID
    subpartition_index: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class InputGateSpec:
    """The channels of input number ``input_index`` of a consumer subtask, in producer subtask order."""

    input_index: int
    producer_job_vertex_id: str
    distribution_pattern: DistributionPattern
    channels: tuple[InputChannelSpec, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ResultPartitionSpec:
    """A producer subtask's partition for one output edge.

    Attributes:
        partition_id: producer subtask plus output edge index.
        consumer_job_vertex_id: the job vertex reading this partition.
        partitioner: how records are routed to subpartitions.
        num_subpartitions: 1 for POINTWISE, the consumer's parallelism for ALL_TO_ALL.
        consumers: the consumer subtasks, indexed by subpartition.
    """

    partition_id: IntermediateResultPartitionID
    consumer_job_vertex_id: str
    partitioner: PartitionerSpec
    num_subpartitions: int
    consumers: tuple[ExecutionVertexID, ...]


class Execution:
    """One attempt to run one subtask.

    Thread rule: mutated only on the JobMaster's main thread (through the
    scheduler); :attr:`state` may be read from anywhere.

    Args:
        attempt_id: this attempt's id.
        clock: seconds source for the state timestamps.
    """

    def __init__(self, attempt_id: ExecutionAttemptID, *, clock: Callable[[], float] = time.time) -> None:
        self._attempt_id = attempt_id
        self._machine: StateMachine[ExecutionState] = StateMachine(
            f"execution {attempt_id}", ExecutionState.CREATED, transition_table(), clock=clock
        )
        self._slot: Any = None
        self._last_slot: Any = None  # kept after the slot is released: where the attempt ran
        self._failure_cause: BaseException | None = None

    @property
    def attempt_id(self) -> ExecutionAttemptID:
        return self._attempt_id

    @property
    def vertex_id(self) -> ExecutionVertexID:
        return self._attempt_id.execution_vertex_id

    @property
    def attempt_number(self) -> int:
        return self._attempt_id.attempt_number

    @property
    def state(self) -> ExecutionState:
        return self._machine.state

    @property
    def is_terminal(self) -> bool:
        return self._machine.is_terminal()

    @property
    def history(self) -> list[tuple[float, ExecutionState]]:
        """(timestamp, state) pairs, CREATED first."""
        return self._machine.history

    @property
    def state_timestamps(self) -> dict[ExecutionState, float]:
        """When each state was (last) entered; states never entered are absent."""
        return {state: ts for ts, state in self._machine.history}

    @property
    def assigned_slot(self) -> Any:
        """The slot this attempt was deployed into (opaque), or None."""
        return self._slot

    @property
    def last_slot(self) -> Any:
        """The slot this attempt was deployed into, also after it was released (None if never)."""
        return self._last_slot

    @property
    def failure_cause(self) -> BaseException | None:
        return self._failure_cause

    def transition(
        self, target: ExecutionState, *, expected: ExecutionState | frozenset[ExecutionState] | None = None
    ) -> ExecutionState:
        """Take the edge to ``target``; return the previous state.

        Raises:
            IllegalStateTransition: the edge is not in the ExecutionState table.
        """
        return self._machine.transition(target, expected=expected)

    def can_transition(self, target: ExecutionState) -> bool:
        return self._machine.can_transition(target)

    def assign_slot(self, slot: Any) -> None:
        """Remember the slot; allowed once, before DEPLOYING.

        Raises:
            IllegalStateTransition: a slot is already assigned or the state is not SCHEDULED.
        """
        if self._slot is not None:
            raise IllegalStateTransition(f"execution {self._attempt_id} already has slot {self._slot!r}")
        if self.state is not ExecutionState.SCHEDULED:
            raise IllegalStateTransition(
                f"execution {self._attempt_id}: a slot can only be assigned in SCHEDULED, it is {self.state.name}",
                source=self.state,
            )
        self._slot = self._last_slot = slot

    def take_slot(self) -> Any:
        """Return the assigned slot (or None) and forget it, so it is released only once."""
        slot, self._slot = self._slot, None
        return slot

    def mark_failed(self, cause: BaseException) -> bool:
        """Move to FAILED with ``cause``; False (and no change) if already terminal."""
        if self.is_terminal:
            return False
        self._machine.transition(ExecutionState.FAILED)
        self._failure_cause = cause
        return True

    def __repr__(self) -> str:
        return f"Execution({self._attempt_id}, {self.state.name})"


class ExecutionVertex:
    """One subtask of a job vertex, across all its attempts.

    Thread rule: main thread only.
    """

    def __init__(self, job_vertex: JobVertex, subtask_index: int, *, clock: Callable[[], float] = time.time) -> None:
        if not 0 <= subtask_index < job_vertex.parallelism:
            raise ValueError(
                f"subtask_index {subtask_index} out of range for vertex {job_vertex.id!r} "
                f"with parallelism {job_vertex.parallelism}"
            )
        self._job_vertex = job_vertex
        self._id = ExecutionVertexID(job_vertex_id=job_vertex.id, subtask_index=subtask_index)
        self._clock = clock
        self._prior: list[Execution] = []
        self._current = self._new_execution(0)

    def _new_execution(self, attempt_number: int) -> Execution:
        attempt = ExecutionAttemptID(
            job_vertex_id=self._id.job_vertex_id, subtask_index=self._id.subtask_index, attempt_number=attempt_number
        )
        return Execution(attempt, clock=self._clock)

    @property
    def id(self) -> ExecutionVertexID:
        return self._id

    @property
    def job_vertex(self) -> JobVertex:
        return self._job_vertex

    @property
    def subtask_index(self) -> int:
        return self._id.subtask_index

    @property
    def name(self) -> str:
        """``"<vertex name> (<subtask+1>/<parallelism>)"``, as in Flink's task names."""
        return f"{self._job_vertex.name} ({self.subtask_index + 1}/{self._job_vertex.parallelism})"

    @property
    def current_execution(self) -> Execution:
        return self._current

    @property
    def prior_executions(self) -> tuple[Execution, ...]:
        """Earlier attempts, oldest first."""
        return tuple(self._prior)

    @property
    def execution_state(self) -> ExecutionState:
        return self._current.state

    def reset_for_new_execution(self) -> Execution:
        """Archive the current attempt and create attempt ``n + 1`` in CREATED.

        Raises:
            IllegalStateTransition: the current attempt is not terminal yet (cancel
                it and wait for CANCELED/FAILED first).
        """
        current = self._current
        if not current.is_terminal:
            raise IllegalStateTransition(
                f"cannot reset {self._id} for a new execution: attempt {current.attempt_id} is "
                f"{current.state.name}, expected one of FINISHED, CANCELED, FAILED",
                source=current.state,
                target=ExecutionState.CREATED,
            )
        self._prior.append(current)
        self._current = self._new_execution(current.attempt_number + 1)
        return self._current

    def __repr__(self) -> str:
        return f"ExecutionVertex({self._id}, {self._current.state.name})"


class ExecutionJobVertex:
    """All subtasks of one job vertex."""

    def __init__(self, job_vertex: JobVertex, *, clock: Callable[[], float] = time.time) -> None:
        self._job_vertex = job_vertex
        self._task_vertices = tuple(ExecutionVertex(job_vertex, i, clock=clock) for i in range(job_vertex.parallelism))

    @property
    def id(self) -> str:
        return self._job_vertex.id

    @property
    def job_vertex(self) -> JobVertex:
        return self._job_vertex

    @property
    def parallelism(self) -> int:
        return self._job_vertex.parallelism

    @property
    def task_vertices(self) -> tuple[ExecutionVertex, ...]:
        """Subtasks in subtask-index order."""
        return self._task_vertices

    def __repr__(self) -> str:
        return f"ExecutionJobVertex({self.id!r}, parallelism={self.parallelism})"


class ExecutionGraph:
    """Execution vertices of a job, their wiring, and the job status.

    Build with :meth:`from_job_graph`. The job status starts in CREATED.
    Thread rule: main thread only.
    """

    def __init__(self, job_graph: JobGraph, *, clock: Callable[[], float] = time.time) -> None:
        self._job_graph = job_graph
        self._job_vertices = {jv.id: ExecutionJobVertex(jv, clock=clock) for jv in job_graph}
        self._status: StateMachine[JobStatus] = StateMachine(
            f"job {job_graph.name!r} ({job_graph.job_id})",
            JobStatus.CREATED,
            job_status_transition_table(),
            clock=clock,
        )
        self._input_gates: dict[ExecutionVertexID, tuple[InputGateSpec, ...]] = {}
        self._result_partitions: dict[ExecutionVertexID, tuple[ResultPartitionSpec, ...]] = {}
        self._wire()

    @classmethod
    def from_job_graph(cls, job_graph: JobGraph, *, clock: Callable[[], float] = time.time) -> ExecutionGraph:
        """Expand ``job_graph`` (vertices in topological order) into an ExecutionGraph."""
        return cls(job_graph, clock=clock)

    # -- wiring -------------------------------------------------------------------------------

    def _wire(self) -> None:
        for ejv in self._job_vertices.values():
            jv = ejv.job_vertex
            for vertex in ejv.task_vertices:
                self._result_partitions[vertex.id] = tuple(
                    self._partition_spec(vertex.id, index, edge) for index, edge in enumerate(jv.outputs)
                )
        for ejv in self._job_vertices.values():
            jv = ejv.job_vertex
            inputs = sorted(jv.inputs, key=lambda e: e.input_index)
            for vertex in ejv.task_vertices:
                self._input_gates[vertex.id] = tuple(self._gate_spec(vertex.id, edge) for edge in inputs)

    def _partition_spec(self, producer: ExecutionVertexID, index: int, edge: JobEdge) -> ResultPartitionSpec:
        consumer_parallelism = self._job_vertex(edge.target_id).parallelism
        if edge.distribution_pattern is DistributionPattern.POINTWISE:
            consumers = (ExecutionVertexID(job_vertex_id=edge.target_id, subtask_index=producer.subtask_index),)
        else:
            consumers = tuple(
                ExecutionVertexID(job_vertex_id=edge.target_id, subtask_index=j) for j in range(consumer_parallelism)
            )
        return ResultPartitionSpec(
            partition_id=IntermediateResultPartitionID(producer=producer, output_index=index),
            consumer_job_vertex_id=edge.target_id,
            partitioner=edge.partitioner,
            num_subpartitions=len(consumers),
            consumers=consumers,
        )

    def _gate_spec(self, consumer: ExecutionVertexID, edge: JobEdge) -> InputGateSpec:
        source = self._job_vertex(edge.source_id).job_vertex
        output_index = next(i for i, e in enumerate(source.outputs) if e is edge)
        if edge.distribution_pattern is DistributionPattern.POINTWISE:
            producers = [ExecutionVertexID(job_vertex_id=source.id, subtask_index=consumer.subtask_index)]
            subpartition = 0
        else:
            producers = [ExecutionVertexID(job_vertex_id=source.id, subtask_index=i) for i in range(source.parallelism)]
            subpartition = consumer.subtask_index
        channels = tuple(
            InputChannelSpec(
                producer=p,
                partition_id=IntermediateResultPartitionID(producer=p, output_index=output_index),
                subpartition_index=subpartition,
            )
            for p in producers
        )
        return InputGateSpec(
            input_index=edge.input_index,
            producer_job_vertex_id=source.id,
            distribution_pattern=edge.distribution_pattern,
            channels=channels,
        )

    # -- lookups ------------------------------------------------------------------------------

    def _job_vertex(self, job_vertex_id: str) -> ExecutionJobVertex:
        try:
            return self._job_vertices[job_vertex_id]
        except KeyError:
            raise KeyError(f"unknown job vertex {job_vertex_id!r}; known: {sorted(self._job_vertices)}") from None

    @property
    def job_graph(self) -> JobGraph:
        return self._job_graph

    @property
    def job_id(self) -> str:
        return self._job_graph.job_id

    @property
    def job_name(self) -> str:
        return self._job_graph.name

    @property
    def job_vertices(self) -> dict[str, ExecutionJobVertex]:
        """``job vertex id -> ExecutionJobVertex`` in topological order (a copy)."""
        return dict(self._job_vertices)

    def get_job_vertex(self, job_vertex_id: str) -> ExecutionJobVertex:
        """Raises KeyError naming the known ids."""
        return self._job_vertex(job_vertex_id)

    def get_vertex(self, vertex_id: ExecutionVertexID) -> ExecutionVertex:
        """Raises KeyError naming the bad id."""
        task_vertices = self._job_vertex(vertex_id.job_vertex_id).task_vertices
        if not 0 <= vertex_id.subtask_index < len(task_vertices):
            raise KeyError(
                f"unknown execution vertex {vertex_id}: {vertex_id.job_vertex_id!r} has subtasks "
                f"0..{len(task_vertices) - 1}"
            )
        return task_vertices[vertex_id.subtask_index]

    def vertices(self) -> Iterator[ExecutionVertex]:
        """All execution vertices, job vertices in topological order, subtasks ascending."""
        for ejv in self._job_vertices.values():
            yield from ejv.task_vertices

    def every_task_running(self) -> bool:
        """True if every subtask's current execution is RUNNING or FINISHED (a checkpoint can be triggered)."""
        return all(
            v.current_execution.state in (ExecutionState.RUNNING, ExecutionState.FINISHED) for v in self.vertices()
        )

    def vertex_ids(self) -> list[ExecutionVertexID]:
        return [v.id for v in self.vertices()]

    def find_current_execution(self, attempt_id: ExecutionAttemptID) -> Execution | None:
        """The execution with ``attempt_id`` if it is its vertex's *current* attempt, else None.

        Stale attempts (superseded by a restart) and unknown vertices give None.
        """
        try:
            vertex = self.get_vertex(attempt_id.execution_vertex_id)
        except KeyError:
            return None
        current = vertex.current_execution
        return current if current.attempt_id == attempt_id else None

    def input_gates(self, vertex_id: ExecutionVertexID) -> tuple[InputGateSpec, ...]:
        """Input gates of a consumer subtask, one per input edge, in ``input_index`` order."""
        self.get_vertex(vertex_id)
        return self._input_gates[vertex_id]

    def result_partitions(self, vertex_id: ExecutionVertexID) -> tuple[ResultPartitionSpec, ...]:
        """Result partitions of a producer subtask, one per output edge, in output order."""
        self.get_vertex(vertex_id)
        return self._result_partitions[vertex_id]

    def get_consumers(self, vertex_id: ExecutionVertexID) -> list[ExecutionVertexID]:
        """Subtasks that read any partition of ``vertex_id`` (sorted, no duplicates)."""
        return sorted({c for p in self.result_partitions(vertex_id) for c in p.consumers})

    def get_producers(self, vertex_id: ExecutionVertexID) -> list[ExecutionVertexID]:
        """Subtasks whose partitions ``vertex_id`` reads (sorted, no duplicates)."""
        return sorted({ch.producer for g in self.input_gates(vertex_id) for ch in g.channels})

    # -- job status ---------------------------------------------------------------------------

    @property
    def job_status(self) -> JobStatus:
        return self._status.state

    @property
    def job_status_history(self) -> list[tuple[float, JobStatus]]:
        return self._status.history

    def transition_job_status(self, target: JobStatus, *, expected: JobStatus | frozenset | None = None) -> JobStatus:
        """Move the job to ``target``; return the previous status.

        Raises:
            IllegalStateTransition: the edge is not in the JobStatus table.
        """
        return self._status.transition(target, expected=expected)

    def __repr__(self) -> str:
        return f"ExecutionGraph({self.job_name!r}, {self.job_status.name}, vertices={list(self._job_vertices)})"
