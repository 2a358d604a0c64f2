"""Failover decisions: which tasks restart, whether the job may restart, and the exception history.

Pure decisions over the topology (no I/O, no threads), following Flink:

* :class:`RestartPipelinedRegionFailoverStrategy` (``jobmanager.execution.failover-strategy:
  region``, the default): the failed task's pipelined region plus every region
  that consumes a result produced in it, transitively (Flink's
  ``RestartPipelinedRegionFailoverStrategy``). In a streaming job every edge is
  pipelined, so the regions are the connected components of the job's
  subtasks: forward edges keep one region per subtask index, an all-to-all
  edge (``key_by``, ``rebalance``, ``broadcast``) merges.
* :class:`RestartAllFailoverStrategy` (``full``): every task.
* :class:`ExecutionFailureHandler` classifies a failure (Flink's
  ``ExecutionFailureHandler.getFailureHandlingResult``): an unrecoverable
  failure (a type marked non-recoverable, a checkpoint that cannot be
  restored, no slot within ``slot.request.timeout``) fails the job at once;
  otherwise the :class:`RestartBackoffTimeStrategy` decides. Every failure
  becomes an :class:`ExceptionHistoryEntry`.

Thread rule: used on the JobMaster's main thread only.
"""

from __future__ import annotations

import abc
import dataclasses
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from flinklike_spark._runtime.graph.execution_graph import ExecutionGraph, ExecutionVertexID
from flinklike_spark._runtime.graph.regions import PipelinedRegion, PipelinedRegionTopology, compute_pipelined_regions
from flinklike_spark._runtime.jobmaster.restart_strategy import RestartBackoffTimeStrategy
from flinklike_spark.config import FailoverStrategyType
from flinklike_spark.errors import is_non_recoverable

__all__ = [
    "ExceptionHistoryEntry",
    "ExecutionFailureHandler",
    "FailoverStrategy",
    "FailureHandlingResult",
    "RestartAllFailoverStrategy",
    "RestartPipelinedRegionFailoverStrategy",
    "create_failover_strategy",
]


class FailoverStrategy(abc.ABC):
    """Chooses the execution vertices to restart after a task failure."""

    @abc.abstractmethod
    def get_tasks_needing_restart(
        self, failed: ExecutionVertexID, cause: BaseException
    ) -> frozenset[ExecutionVertexID]:
        """The vertices to restart when ``failed`` failed with ``cause`` (always contains ``failed``)."""


class RestartAllFailoverStrategy(FailoverStrategy):
    """``full``: every vertex of the job restarts."""

    def __init__(self, graph: ExecutionGraph) -> None:
        self._all = frozenset(graph.vertex_ids())

    def get_tasks_needing_restart(
        self, failed: ExecutionVertexID, cause: BaseException
    ) -> frozenset[ExecutionVertexID]:
        if failed not in self._all:
            raise KeyError(f"execution vertex {failed} is not part of this job")
        return self._all


class RestartPipelinedRegionFailoverStrategy(FailoverStrategy):
    """``region``: the failed task's region and, transitively, the regions consuming its results."""

    def __init__(self, topology: PipelinedRegionTopology) -> None:
        self._topology = topology

    def get_tasks_needing_restart(
        self, failed: ExecutionVertexID, cause: BaseException
    ) -> frozenset[ExecutionVertexID]:
        start = self._topology.region_of(failed)
        seen: dict[int, PipelinedRegion] = {start.id: start}
        stack = [start]
        while stack:
            for consumer in self._topology.consumer_regions(stack.pop()):
                if consumer.id not in seen:
                    seen[consumer.id] = consumer
                    stack.append(consumer)
        return frozenset(v for region in seen.values() for v in region.vertices)


def create_failover_strategy(kind: FailoverStrategyType | str, graph: ExecutionGraph) -> FailoverStrategy:
    """The strategy named by ``jobmanager.execution.failover-strategy`` (or its value) for ``graph``."""
    kind = FailoverStrategyType(kind)
    if kind is FailoverStrategyType.FULL:
        return RestartAllFailoverStrategy(graph)
    return RestartPipelinedRegionFailoverStrategy(compute_pipelined_regions(graph))


@dataclasses.dataclass(frozen=True, kw_only=True)
class FailureHandlingResult:
    """What to do about one failure (Flink's ``FailureHandlingResult``).

    Attributes:
        can_restart: restart ``vertices_to_restart`` after ``restart_delay``; if
            False, fail the job with ``error``.
        vertices_to_restart: empty when the job cannot restart.
        restart_delay: the backoff.
        error: the root cause (the job's failure cause when it cannot restart).
        reason: why the job cannot restart (the failure is not recoverable, or
            the strategy that suppressed recovery and every failure so far);
            empty when it can.
        global_failure: the failure was not of one task (e.g. restoring failed).
    """

    can_restart: bool
    vertices_to_restart: frozenset[ExecutionVertexID]
    restart_delay: timedelta
    error: BaseException
    reason: str = ""
    global_failure: bool


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExceptionHistoryEntry:
    """One failure of the job, as :meth:`JobClient.get_exception_history` reports it.

    Attributes:
        timestamp: when the JobMaster handled it (UTC).
        root_cause: the failure (a RemoteTaskError carries the task's traceback).
        task: the failed task as ``"<name> (<subtask+1>/<parallelism>)#<attempt>"``,
            or None for a global failure.
        restarted: the subtasks restarted because of it (``"<vertex>-<subtask>"``), empty if none.
        will_restart: whether the job restarted (False: this failure failed the job).
    """

    timestamp: datetime
    root_cause: BaseException
    task: str | None
    restarted: frozenset[str]
    will_restart: bool


class ExecutionFailureHandler:
    """Turns failures into :class:`FailureHandlingResult` and keeps the exception history.

    Args:
        graph: the job's execution graph (for task names and the global restart set).
        failover_strategy: picks the vertices to restart.
        restart_strategy: decides whether and when.
        wall_clock: seconds since the epoch, for history timestamps.
    """

    def __init__(
        self,
        graph: ExecutionGraph,
        failover_strategy: FailoverStrategy,
        restart_strategy: RestartBackoffTimeStrategy,
        *,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._graph = graph
        self._failover = failover_strategy
        self._restart = restart_strategy
        self._wall_clock = wall_clock
        self._history: list[ExceptionHistoryEntry] = []
        self.number_of_restarts = 0  # restart attempts (see RestartBackoffTimeStrategy.notify_failure)

    @property
    def exception_history(self) -> tuple[ExceptionHistoryEntry, ...]:
        """Every failure handled so far, oldest first."""
        return tuple(self._history)

    def get_failure_handling_result(self, failed: ExecutionVertexID, cause: BaseException) -> FailureHandlingResult:
        """A task failure: restart its failover set, or fail the job."""
        vertex = self._graph.get_vertex(failed)
        task = f"{vertex.name}#{vertex.current_execution.attempt_number}"
        return self._handle(cause, lambda: self._failover.get_tasks_needing_restart(failed, cause), task, False)

    def get_global_failure_handling_result(self, cause: BaseException) -> FailureHandlingResult:
        """A failure not of one task (restoring state failed, say): restart everything, or fail."""
        return self._handle(cause, lambda: frozenset(self._graph.vertex_ids()), None, True)

    def _handle(self, cause: BaseException, restart_set: Callable[[], frozenset[ExecutionVertexID]],
                task: str | None, global_failure: bool) -> FailureHandlingResult:  # fmt: skip
        if is_non_recoverable(cause):
            return self._record(cause, task, global_failure, reason="the failure is not recoverable")
        new_attempt = self._restart.notify_failure(cause)
        if not self._restart.can_restart():
            result = self._record(cause, task, global_failure, reason="")
            reason = f"recovery is suppressed by {self._restart!r}; failures so far:\n{self.history_summary()}"
            return dataclasses.replace(result, reason=reason)
        if new_attempt:  # Flink's numRestarts: failures merged into a pending attempt do not count
            self.number_of_restarts += 1
        vertices = restart_set()
        return self._record(cause, task, global_failure, vertices=vertices, delay=self._restart.backoff_time)

    def _record(self, cause: BaseException, task: str | None, global_failure: bool, *,
                vertices: frozenset[ExecutionVertexID] = frozenset(), delay: timedelta = timedelta(0),
                reason: str | None = None) -> FailureHandlingResult:  # fmt: skip
        """``reason`` None: the job restarts; a string (possibly filled in later): it fails."""
        self._history.append(
            ExceptionHistoryEntry(
                timestamp=datetime.fromtimestamp(self._wall_clock(), tz=UTC),
                root_cause=cause,
                task=task,
                restarted=frozenset(str(v) for v in vertices),
                will_restart=reason is None,
            )
        )
        return FailureHandlingResult(
            can_restart=reason is None,
            vertices_to_restart=vertices,
            restart_delay=delay,
            error=cause,
            reason=reason or "",
            global_failure=global_failure,
        )

    def history_summary(self) -> str:
        """The causes of every failure so far, one per line (for the job's final error)."""
        return "\n".join(
            f"  {e.timestamp:%H:%M:%S} {e.task or 'global'}: {type(e.root_cause).__name__}: "
            f"{str(e.root_cause).splitlines()[0] if str(e.root_cause) else ''}"
            for e in self._history
        )
