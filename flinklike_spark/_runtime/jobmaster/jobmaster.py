"""JobMaster: runs one job on the cluster's TaskExecutors.

It owns the job's :class:`ExecutionGraph` and :class:`DefaultScheduler` and
plugs into the scheduler:

* a slot-sharing :class:`SharedSlotAllocator` (``slot_sharing.py``) (Flink's default slot sharing
  group: subtask *i* of every vertex shares logical slot *i*, so a job needs
  as many slots as its highest parallelism);
* a :class:`RpcTaskDeployer` (``task_deployer.py``) that turns an execution into a
  :class:`TaskDeploymentDescriptor` (partition ids, producer addresses,
  source splits) and submits it over RPC;
* the failure listener: every task failure goes to the
  :class:`FailoverCoordinator` (``failover_coordinator.py``), which restarts
  the failed region (or everything) after the restart strategy's backoff, or
  fails the job.

Root cause: when a TaskExecutor dies, a consumer on another one may report
its broken connection before the death is detected. A failed job whose cause
is such a channel error reports the TaskExecutor's loss instead (asking the
ResourceManager's liveness probe first), e.g. "TaskExecutor process 123
exited with code -9".

Thread rule: every state change happens on the main thread; RPC callbacks
(task state updates, lost TaskExecutors) are posted there.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from checkpointing.schemas import CheckpointKind
from flinklike_spark._runtime.checkpoint_messages import CheckpointAck, CheckpointDecline
from flinklike_spark._runtime.collect_results import CollectResults
from flinklike_spark._runtime.deployment import CheckpointDeployment, TaskExecutionState
from flinklike_spark._runtime.gateways import TaskExecutorGateway
from flinklike_spark._runtime.graph.execution_graph import Execution, ExecutionAttemptID, ExecutionGraph
from flinklike_spark._runtime.graph.execution_state import ExecutionState, JobStatus
from flinklike_spark._runtime.graph.job_graph import JobGraph
from flinklike_spark._runtime.io.barrier_handler_states import BarrierHandlerMode
from flinklike_spark._runtime.jobmaster.checkpoint_coordinator import CheckpointCoordinator, CompletedCheckpointInfo
from flinklike_spark._runtime.jobmaster.checkpoint_storage import (
    SAVEPOINT_NEEDS_DIRECTORY,
    JobCheckpointStorage,
    resolve_checkpoint_storage,
)
from flinklike_spark._runtime.jobmaster.failover import ExecutionFailureHandler, create_failover_strategy
from flinklike_spark._runtime.jobmaster.failover_coordinator import FailoverCoordinator
from flinklike_spark._runtime.jobmaster.final_commit import commit_final_output
from flinklike_spark._runtime.jobmaster.main_thread import ComponentMainThreadExecutor
from flinklike_spark._runtime.jobmaster.recovery import plan_restore
from flinklike_spark._runtime.jobmaster.resource_manager import ResourceManager
from flinklike_spark._runtime.jobmaster.restart_strategy import create_restart_strategy, restart_strategy_config
from flinklike_spark._runtime.jobmaster.scheduler import DefaultScheduler
from flinklike_spark._runtime.jobmaster.slot_sharing import LogicalSlot, SharedSlotAllocator
from flinklike_spark._runtime.jobmaster.task_deployer import RpcTaskDeployer
from flinklike_spark._runtime.jobmaster.versioner import ExecutionVertexVersioner
from flinklike_spark._runtime.watermark_alignment import WatermarkAlignmentCoordinator
from flinklike_spark.config import CheckpointingMode, Configuration
from flinklike_spark.errors import (
    ConfigurationError,
    JobCancelledError,
    JobExecutionError,
    TaskExecutorLostError,
    is_channel_error,
)
from flinklike_spark.job_client import JobExecutionResult

__all__ = ["JobMaster"]

#: How long a task failure with a broken channel waits for a TaskExecutor's death to become
#: visible to the liveness probe (its sockets close a moment before its process can be reaped).
_LOSS_DETECTION_GRACE = 0.25

# What a globally terminal status reads as until the job's result is set (see JobMaster.status).
_SETTLING_STATUS = {
    JobStatus.FAILED: JobStatus.FAILING,
    JobStatus.CANCELED: JobStatus.CANCELLING,
    JobStatus.FINISHED: JobStatus.RUNNING,
}

log = logging.getLogger(__name__)


class JobMaster:
    """Runs one job graph; ``result`` completes with a JobExecutionResult or a JobExecutionError.

    Args:
        job_graph: the job.
        config: the job's configuration.
        resource_manager: where slots and TaskExecutor gateways come from.
        main_thread: the JobMaster's main-thread executor (shared with the ResourceManager).
        previous: the JobMaster a rescale replaces: its collect channel and checkpoint statistics go on.
    """

    def __init__(
        self,
        job_graph: JobGraph,
        config: Configuration,
        resource_manager: ResourceManager,
        main_thread: ComponentMainThreadExecutor,
        *,
        previous: JobMaster | None = None,
    ) -> None:
        self.job_graph = job_graph
        self._config = config
        self._rm = resource_manager
        self._main = main_thread
        self.graph = ExecutionGraph.from_job_graph(job_graph)
        self.result: concurrent.futures.Future[JobExecutionResult] = concurrent.futures.Future()
        self._accumulators: dict[str, dict[int, Any]] = {}
        self._final_committables: dict[str, dict[int, list[Any]]] = {}  # sink uid -> subtask -> committables
        #: what the job's collect sinks delivered for execute_and_collect (also the final commit's channel)
        self.collect_results = previous.collect_results if previous is not None else CollectResults()
        self.watermark_alignment = WatermarkAlignmentCoordinator()  # the sources' alignment groups
        self._started = time.monotonic()
        self._terminated = threading.Event()
        self._released: list[concurrent.futures.Future] = []  # the TaskExecutors' release_job calls
        self.superseded = False  # a rescale stops this JobMaster for a successor: it reads RESTARTING
        self._cancelled_by: str | None = None  # who asked first (main thread), for JobCancelledError
        # resource id -> (the loss, when it was noticed), in order of loss (main thread)
        self._lost_task_executors: dict[str, tuple[TaskExecutorLostError, float]] = {}
        self._slots = SharedSlotAllocator(
            job_graph.job_id, resource_manager, local_recovery=config.checkpointing.local_recovery
        )
        options = config.checkpointing
        initial = plan_restore(job_graph, options, config.storage)
        restore = initial.restore
        # jobmanager storage (the checkpoint dir unset): a directory that lives as long as the job
        self._checkpoint_storage = resolve_checkpoint_storage(options, job_graph.job_id)
        options = self._checkpoint_storage.options
        self.checkpoints: CheckpointCoordinator | None = None
        checkpointing = None
        if options.directory is not None:
            self.checkpoints = CheckpointCoordinator(
                graph=self.graph,
                options=options,
                main_thread=main_thread,
                send=self._send_to_task,
                # Flink: exceeding tolerable-failed-checkpoints fails the job *globally*, and the
                # restart strategy decides whether it restarts (from the latest checkpoint) or fails.
                fail_job=lambda cause: self.failover.handle_global_failure(cause),
                first_checkpoint_id=initial.first_checkpoint_id,
                lineage_id=initial.lineage_id,
                storage=config.storage,
                stats=previous.checkpoints.stats if previous is not None and previous.checkpoints else None,
            )
            if restore is not None:
                self.checkpoints.restore_started(restore, is_savepoint=initial.kind is CheckpointKind.SAVEPOINT)
            checkpointing = CheckpointDeployment(
                storage=self.checkpoints.storage,
                mode=(
                    BarrierHandlerMode.ALTERNATING
                    if options.unaligned and options.mode is CheckpointingMode.EXACTLY_ONCE
                    else BarrierHandlerMode.ALIGNED
                ),
                timeout=options.timeout.total_seconds(),
                at_least_once=options.mode is CheckpointingMode.AT_LEAST_ONCE,
                final_checkpoint=options.interval is not None and options.checkpoints_after_tasks_finish,
            )
        self._deployer = RpcTaskDeployer(
            self.graph,
            config,
            resource_manager,
            self._cancel_unacknowledged,
            checkpointing=checkpointing,
            restore=restore,
            lineage_id=initial.lineage_id,
        )
        self.scheduler = DefaultScheduler(
            self.graph,
            slot_allocator=self._slots,
            deployer=self._deployer,
            versioner=ExecutionVertexVersioner(),
            main_thread=main_thread,
            failure_listener=self,
        )
        self.failover = FailoverCoordinator(
            graph=self.graph,
            scheduler=self.scheduler,
            handler=ExecutionFailureHandler(
                self.graph,
                create_failover_strategy(config.failover.failover_strategy, self.graph),
                create_restart_strategy(restart_strategy_config(config)),
            ),
            checkpoints=self.checkpoints,
            set_restore=self._deployer.set_restore,
            initial_restore=restore,
        )

    @property
    def checkpoint_storage(self) -> JobCheckpointStorage:
        """Where this job's checkpoints go (``jobmanager``: a directory that lives as long as the job)."""
        return self._checkpoint_storage

    @property
    def job_id(self) -> str:
        return self.job_graph.job_id

    @property
    def status(self) -> JobStatus:
        """The job's status as clients see it: terminal only once :attr:`result` is set.

        Until then (a checkpoint commit still running decides its checkpoint; a finished job
        commits its final output) FAILED reads FAILING, CANCELED CANCELLING and FINISHED
        RUNNING, so a terminal status comes with final checkpoint statistics and committed
        output. A JobMaster that a rescale stops reads RESTARTING.
        """
        status = self.graph.job_status
        if self.superseded:
            return JobStatus.RESTARTING
        if status.is_globally_terminal and not self._terminated.is_set():
            return _SETTLING_STATUS[status]
        return status

    def start(self) -> None:
        """Schedule every vertex (asynchronously, on the main thread)."""
        log.info("job %r (%s) submitted: %d tasks", self.job_graph.name, self.job_id, len(self.graph.vertex_ids()))
        self.scheduler.termination_future.add_done_callback(
            lambda f: self._main.execute(lambda: self._on_terminated(f.result()))
        )
        self._main.execute(self._start_scheduling)

    def _start_scheduling(self) -> None:
        try:
            self.scheduler.start_scheduling()
        except Exception as exc:  # noqa: BLE001 - e.g. an illegal state: the job fails
            self.scheduler.fail_job(exc)
            return
        if self.checkpoints is not None:
            self.checkpoints.start()

    def _send_to_task(
        self, execution: Execution, call: Callable[[TaskExecutorGateway], Any]
    ) -> concurrent.futures.Future:
        """``call`` on the gateway of the TaskExecutor running ``execution`` (False if it has no slot)."""
        slot: LogicalSlot | None = execution.assigned_slot
        if slot is None:
            future: concurrent.futures.Future = concurrent.futures.Future()
            future.set_result(False)
            return future
        return self._rm.call_async(slot.resource_id, call)

    def trigger_savepoint(self, *, stop: bool = False) -> concurrent.futures.Future[CompletedCheckpointInfo]:
        """Take an (always aligned) savepoint; the future yields where it is.

        With ``stop`` (Flink's stop-with-savepoint) no checkpoint is triggered
        after the savepoint, and the job is cancelled on the main thread as
        soon as the savepoint completed: no checkpoint newer than the savepoint
        can commit sink output, so restoring the savepoint stays exact. If the
        savepoint fails, periodic checkpoints resume and the job keeps running.
        """
        return self._trigger(CheckpointKind.SAVEPOINT, stop=stop)

    def stop_with_checkpoint(self) -> concurrent.futures.Future[CompletedCheckpointInfo]:
        """Stop-with-savepoint's semantics with a checkpoint (a rescale's: unaligned, or with finished tasks)."""
        return self._trigger(CheckpointKind.CHECKPOINT, stop=True)

    def _trigger(self, kind: CheckpointKind, *, stop: bool) -> concurrent.futures.Future[CompletedCheckpointInfo]:
        result: concurrent.futures.Future[CompletedCheckpointInfo] = concurrent.futures.Future()

        def done(inner: concurrent.futures.Future[CompletedCheckpointInfo]) -> None:  # main thread
            if inner.exception() is not None:
                if stop and self.checkpoints is not None:
                    self.checkpoints.resume_periodic()
                result.set_exception(inner.exception())
                return
            if stop:
                self.cancel_now(by=f"stop-with-{kind}")
            result.set_result(inner.result())

        def trigger() -> None:
            if self.checkpoints is None or not self._checkpoint_storage.outlives_job:
                result.set_exception(ConfigurationError(SAVEPOINT_NEEDS_DIRECTORY))
                return
            if stop:
                self.checkpoints.suspend_periodic()
            # the coordinator completes its futures on the main thread, so ``done`` runs there
            self.checkpoints.trigger(kind).add_done_callback(done)

        self._main.execute(trigger)
        return result

    def describe_pending_checkpoints(self, timeout: float = 2.0) -> list[str]:
        """What the pending checkpoints and savepoints wait for (any thread; for error messages).

        Asks the main thread; if it does not answer within ``timeout`` seconds,
        that is what is reported (a busy main thread delays every checkpoint).
        """
        answer: concurrent.futures.Future[list[str]] = concurrent.futures.Future()

        def describe() -> None:
            answer.set_result(self.checkpoints.describe_pending() if self.checkpoints is not None else [])

        try:
            self._main.execute(describe)
            return answer.result(timeout)
        except concurrent.futures.TimeoutError:
            return [f"the JobMaster's main thread did not answer within {timeout} s"]
        except RuntimeError:  # the main thread is shut down: the job is over
            return []

    def acknowledge_checkpoint(self, ack: CheckpointAck) -> None:
        """A task's acknowledgement (any thread; applied on the main thread)."""

        def apply() -> None:
            if self.checkpoints is not None:
                self.checkpoints.receive_ack(ack)

        self._main.execute(apply)

    def decline_checkpoint(self, decline: CheckpointDecline) -> None:
        """A task's decline (any thread; applied on the main thread)."""

        def apply() -> None:
            if self.checkpoints is not None:
                self.checkpoints.receive_decline(decline)

        self._main.execute(apply)

    def cancel(self, *, by: str = "the program (JobClient.cancel)") -> None:
        """Cancel the job (asynchronous; ``result`` fails with JobCancelledError naming ``by``)."""
        self._main.execute(lambda: self.cancel_now(by=by))

    def cancel_now(self, *, by: str) -> None:
        """Cancel the job (main thread). ``by`` (who asked) is reported; the first request's is kept."""
        if self._cancelled_by is None:
            self._cancelled_by = by
        self.scheduler.cancel()

    def wait_terminal(self, timeout: float | None = None) -> bool:
        return self._terminated.wait(timeout)

    def wait_released(self, timeout: float) -> bool:
        """Wait until every TaskExecutor released this job (after :meth:`wait_terminal`); False on timeout.

        A successor of the same job id starts after: a late release would drop its partitions and slots.
        """
        return not concurrent.futures.wait(self._released, timeout=timeout).not_done

    # -- events from TaskExecutors (any thread) -------------------------------------------------

    def update_task_execution_state(self, update: TaskExecutionState) -> None:
        self._main.execute(lambda: self._apply_update(update))

    def task_executor_lost(self, resource_id: str, reason: str) -> None:
        """Fail every unfinished execution that ran on ``resource_id`` (main thread)."""
        self._record_losses()
        cause, _ = self._lost_task_executors.setdefault(
            resource_id, (TaskExecutorLostError(f"TaskExecutor {resource_id} lost: {reason}"), time.time())
        )
        for vertex in self.graph.vertices():
            execution = vertex.current_execution
            slot = execution.assigned_slot
            if slot is not None and slot.resource_id == resource_id and not execution.is_terminal:
                self.scheduler.update_task_execution_state(execution.attempt_id, ExecutionState.FAILED, cause)

    # -- failure listener ------------------------------------------------------------------------

    def on_task_failure(self, execution: Execution, cause: BaseException) -> None:
        """A task failed: the failover coordinator restarts its region (or everything) or fails the job.

        A consumer's broken channel is often the first sign that a TaskExecutor
        died, before the process monitor or the heartbeats report it. The loss
        is then detected here, before the failover decides anything: the dead
        TaskExecutor leaves the ResourceManager (the restart cannot deploy onto it,
        which would be a second failure), and the recorded cause is the loss
        (e.g. the process exit), not the symptom.
        """
        if is_channel_error(cause):
            deployed = execution.state_timestamps.get(ExecutionState.DEPLOYING, 0.0)
            loss = self._loss_since(deployed)
            # A killed process closes its sockets a moment before it can be reaped, so a peer
            # may see the broken channel before the probe sees the exit: look again, briefly.
            deadline = time.monotonic() + _LOSS_DETECTION_GRACE
            while loss is None and self._rm.can_detect_deaths and time.monotonic() < deadline:
                time.sleep(0.01)
                loss = self._loss_since(deployed)
            if loss is not None:
                log.info("job %s: %s failed because %s", self.job_id, execution.attempt_id, loss)
                cause = loss
        self.failover.on_task_failure(execution, cause)

    def _loss_since(self, since: float) -> TaskExecutorLostError | None:
        """The first TaskExecutor loss noticed at or after ``since`` (probing liveness now), or None."""
        self._rm.detect_dead_task_executors()
        self._record_losses()
        return next((error for error, lost_at in self._lost_task_executors.values() if lost_at >= since), None)

    def _record_losses(self) -> None:
        for resource_id, (reason, lost_at) in self._rm.losses().items():
            self._lost_task_executors.setdefault(
                resource_id, (TaskExecutorLostError(f"TaskExecutor {resource_id} lost: {reason}"), lost_at)
            )

    # -- internals (main thread) -----------------------------------------------------------------

    def _apply_update(self, update: TaskExecutionState) -> None:
        try:
            attempt = ExecutionAttemptID.from_full_id(update.execution_id)
        except ValueError:
            log.warning("ignoring state update with malformed execution id %r", update.execution_id)
            return
        accepted = self.scheduler.update_task_execution_state(attempt, update.state, update.error)
        if accepted and update.state is ExecutionState.RUNNING and self.checkpoints is not None:
            self.checkpoints.task_running()
        if accepted and update.state is ExecutionState.FINISHED:
            if self.checkpoints is not None:
                self.checkpoints.task_finished(update.execution_id, attempt.execution_vertex_id)
            for name, value in update.accumulators.items():
                self._accumulators.setdefault(name, {})[attempt.subtask_index] = value
            for uid, committables in update.committables.items():
                self._final_committables.setdefault(uid, {})[attempt.subtask_index] = committables

    def _cancel_unacknowledged(self, attempt: ExecutionAttemptID) -> None:
        try:
            self._main.execute(
                lambda: self.scheduler.update_task_execution_state(attempt, ExecutionState.CANCELED, None)
            )
        except RuntimeError:  # a late RPC answer: the cluster closed the main thread, the job is over
            log.debug("job %s: cancel answer for %s came after shutdown", self.job_id, attempt)

    def _on_terminated(self, status: JobStatus) -> None:
        self._released = self._rm.release_job(self.job_id)
        if self.checkpoints is None:
            self._after_checkpoints_drained(status)
            return
        # A commit still running decides its checkpoint's outcome; the job completes only
        # after it (and retention) returned, so nothing is written after execute() returned.
        drained = self.checkpoints.stop(f"job {status.name}")
        drained.add_done_callback(lambda _f: self._after_checkpoints_drained(status))  # on the main thread

    def _after_checkpoints_drained(self, status: JobStatus) -> None:
        if status is JobStatus.FINISHED and self._final_committables:
            # Delta commits take a while: keep the main thread (shared with the ResourceManager) free.
            threading.Thread(
                target=self._commit_final_and_complete, name=f"final-commit-{self.job_id[:8]}", daemon=True
            ).start()
            return
        self._complete(status)

    def _commit_final_and_complete(self) -> None:
        """Commit what the two-phase-commit sinks prepared at the end of input, then complete the job."""
        try:
            commit_final_output(self.job_graph, self._final_committables, self.collect_results)
        except JobExecutionError as error:
            self._checkpoint_storage.discard()
            self.result.set_exception(error)
            self._terminated.set()
            return
        self._main.execute(lambda: self._complete(JobStatus.FINISHED))

    def _complete(self, status: JobStatus) -> None:
        self._checkpoint_storage.discard()  # jobmanager storage ends with the job, before execute() returns
        runtime = timedelta(seconds=time.monotonic() - self._started)
        name, job_id = self.job_graph.name, self.job_id
        if status is JobStatus.FINISHED:
            accumulators = {k: [v[i] for i in sorted(v)] for k, v in self._accumulators.items()}
            self.result.set_result(
                JobExecutionResult(job_id=job_id, job_name=name, net_runtime=runtime, accumulators=accumulators)
            )
            log.info("job %r (%s) finished in %.2f s", name, job_id, runtime.total_seconds())
        elif status is JobStatus.CANCELED:
            self.result.set_exception(self._cancelled_error())
        else:
            cause = self._root_cause(self.scheduler.job_failure_cause)
            reason = f"\n{self.failover.failure_reason}" if self.failover.failure_reason else ""
            error = JobExecutionError(f"job {name!r} ({job_id}) failed: {cause}{reason}", job_id=job_id)
            error.__cause__ = cause
            self.result.set_exception(error)
        self._terminated.set()

    def _cancelled_error(self) -> JobCancelledError:
        """What ``result`` raises for a CANCELED job: who cancelled it and where it can resume."""
        by = self._cancelled_by or "a request of unknown origin"
        completed = self.checkpoints.completed if self.checkpoints is not None else []
        last = completed[-1].path if completed else None
        if last is not None:
            resume = f"last completed checkpoint: {last} (resume with execution.state-recovery.path)"
        else:
            resume = "no checkpoint had completed" if self.checkpoints is not None else "checkpointing was off"
        message = f"job {self.job_graph.name!r} ({self.job_id}) was cancelled by {by}; {resume}"
        return JobCancelledError(message, job_id=self.job_id, cancelled_by=by, last_checkpoint=last)

    def _root_cause(self, cause: BaseException | None) -> BaseException | None:
        """The failure to report: a consumer's channel error is a symptom when a TaskExecutor died (main thread)."""
        if not is_channel_error(cause):
            return cause
        self._rm.detect_dead_task_executors()
        self._record_losses()
        if not self._lost_task_executors:
            return cause
        root, _ = next(iter(self._lost_task_executors.values()))
        log.info("job %s: reporting %s as the root cause of %s", self.job_id, root, str(cause).partition("\n")[0])
        return root
