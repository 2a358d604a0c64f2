"""FailoverCoordinator: carries out the failover decisions on the JobMaster's main thread.

Flink's ``DefaultScheduler.handleTaskFailure`` -> ``maybeRestartTasks`` ->
``restartTasksWithDelay`` -> ``restartTasks``:

1. the :class:`ExecutionFailureHandler` classifies the failure and picks the
   restart set (region or full) and the backoff;
2. a failure that cannot restart stops checkpointing and fails the job; the
   job's error names why (not recoverable, or the exhausted strategy with
   every failure so far);
3. otherwise pending checkpoints are aborted (not counted as checkpoint
   failures: they can no longer complete) and
   :meth:`DefaultScheduler.restart_vertices` cancels the restart set (tasks
   waiting for slots included), waits for the backoff *and* for every
   cancellation, creates new attempts and calls :meth:`_restore_state`;
4. ``_restore_state`` asks the :class:`CheckpointCoordinator` for the newest
   completed checkpoint *at that moment* and assigns it to the restarted
   vertices only (operator and channel state); without one they start from
   the job's initial restore point (``execution.state-recovery.path``) or
   from scratch; then the scheduler deploys them. Regions outside the set
   keep running.

A restart superseded by a newer one (the versioner) does nothing; a restart
whose restore step fails is a *global* failure (everything restarts, if the
strategy allows).

Thread rule: main thread only.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections.abc import Callable
from datetime import timedelta

from flinklike_spark._runtime.deployment import RestoreDeployment
from flinklike_spark._runtime.graph.execution_graph import Execution, ExecutionGraph, ExecutionVertexID
from flinklike_spark._runtime.jobmaster.failover import ExecutionFailureHandler, FailureHandlingResult
from flinklike_spark.errors import StaleDeploymentError

__all__ = ["FailoverCoordinator", "RestartRecord"]

log = logging.getLogger(__name__)

# How long choosing a restore point may wait for a checkpoint commit already under way.
_COMMIT_WAIT = timedelta(seconds=60)


class RestartRecord:
    """Timing of one restart, for metrics and the recovery benchmark.

    Attributes:
        vertices: the restarted vertices.
        failed_at: monotonic time the failure was handled.
        deployed_at: monotonic time the new attempts were scheduled (after the
            backoff and the cancellations), or None while pending.
    """

    def __init__(self, vertices: frozenset[ExecutionVertexID], failed_at: float) -> None:
        self.vertices = vertices
        self.failed_at = failed_at
        self.deployed_at: float | None = None


class FailoverCoordinator:
    """Reacts to task and global failures of one job.

    Args:
        graph: the job's execution graph.
        scheduler: the job's :class:`DefaultScheduler`.
        handler: the failure classification and exception history.
        checkpoints: the job's checkpoint coordinator, or None without checkpointing.
        set_restore: ``set_restore(vertex_ids, restore)`` tells the deployer what restarted vertices restore.
        initial_restore: the job's restore point from ``execution.state-recovery.path``, if any.
        clock: monotonic seconds (restart timing).
    """

    def __init__(
        self,
        *,
        graph: ExecutionGraph,
        scheduler,
        handler: ExecutionFailureHandler,
        checkpoints,
        set_restore: Callable[[list[ExecutionVertexID], RestoreDeployment | None], None],
        initial_restore: RestoreDeployment | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._graph = graph
        self._scheduler = scheduler
        self._handler = handler
        self._checkpoints = checkpoints
        self._set_restore = set_restore
        self._initial_restore = initial_restore
        self._clock = clock
        self.failure_reason = ""
        self.restarts: list[RestartRecord] = []

    @property
    def handler(self) -> ExecutionFailureHandler:
        return self._handler

    def on_task_failure(self, execution: Execution, cause: BaseException) -> None:
        """A running job's task failed (the scheduler's TaskFailureListener)."""
        self._maybe_restart(
            self._handler.get_failure_handling_result(execution.vertex_id, cause), str(execution.attempt_id)
        )

    def handle_global_failure(self, cause: BaseException) -> None:
        """A failure of the job as a whole: restart every task, or fail."""
        self._maybe_restart(self._handler.get_global_failure_handling_result(cause), "global failure")

    def _maybe_restart(self, result: FailureHandlingResult, what: str) -> None:
        if not result.can_restart:
            log.error("job %s: %s failed and the job cannot restart: %s", self._graph.job_id, what, result.reason)
            self.failure_reason = result.reason
            if self._checkpoints is not None:
                self._checkpoints.stop(f"{what} failed")
            self._scheduler.fail_job(result.error)
            return
        vertices = result.vertices_to_restart
        log.warning(
            "job %s: %s failed (%s: %s); restarting %d tasks in %.3f s (restart %d)",
            self._graph.job_id, what, type(result.error).__name__, str(result.error).splitlines()[0] if str(result.error) else "",
            len(vertices), result.restart_delay.total_seconds(), self._handler.number_of_restarts,
        )  # fmt: skip
        if self._checkpoints is not None:
            self._checkpoints.abort_pending(f"{what} failed; tasks restart")
        record = RestartRecord(vertices, self._clock())
        self.restarts.append(record)

        def restore(vertex_ids: list[ExecutionVertexID]) -> None:
            self._restore_state(vertex_ids)
            record.deployed_at = self._clock()

        done = self._scheduler.restart_vertices(vertices, delay=result.restart_delay, restore=restore)
        done.add_done_callback(self._on_restart_done)

    def _on_restart_done(self, done: concurrent.futures.Future[None]) -> None:
        # Completed on the main thread (inside restart_vertices' callback).
        error = done.exception()
        if error is None or isinstance(error, StaleDeploymentError):
            return
        log.error("job %s: restarting tasks failed: %r", self._graph.job_id, error)
        self.handle_global_failure(error)

    def _restore_state(self, vertex_ids: list[ExecutionVertexID]) -> None:
        """Flink's ``restoreState``: the restarted vertices start from the newest completed checkpoint."""
        restore = self._initial_restore
        if self._checkpoints is not None:
            checkpoint_id = self._checkpoints.latest_restore_point(wait=_COMMIT_WAIT)
            if checkpoint_id is not None:
                restore = RestoreDeployment(
                    storage=self._checkpoints.storage,
                    job_id=self._graph.job_id,
                    checkpoint_id=checkpoint_id,
                    parallelism={jv.id: jv.parallelism for jv in self._graph.job_graph},
                    gates=(),
                    finished_vertices=self._checkpoints.finished_vertices(checkpoint_id),
                )
        self._set_restore(vertex_ids, restore)
        if restore is not None and self._checkpoints is not None:
            self._checkpoints.restore_started(restore)
        log.info(
            "job %s: %d restarted tasks restore %s", self._graph.job_id, len(vertex_ids),
            "nothing" if restore is None else f"checkpoint {restore.checkpoint_id} of job {restore.job_id}",
        )  # fmt: skip
