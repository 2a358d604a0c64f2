"""DefaultScheduler: allocate slots, deploy, track task states, cancel, restart subsets.

Follows Flink's ``DefaultScheduler.allocateSlotsAndDeploy``:

1. record a new version of every vertex to deploy (:class:`ExecutionVertexVersioner`);
2. move their current executions CREATED -> SCHEDULED;
3. request one slot per vertex from the :class:`ExecutionSlotAllocator`;
4. wait until *all* requested slot futures are done (completions are re-posted
   to the main thread);
5. for each vertex, in request order: if its version was superseded meanwhile
   (a restart or cancel happened), refuse the deployment and return the slot;
   if its slot request failed, fail the execution; otherwise assign the slot,
   move to DEPLOYING and call :meth:`TaskDeployer.deploy`. A failed deploy
   future fails the execution.

Task state reports arrive through :meth:`DefaultScheduler.update_task_execution_state`;
reports of unknown or stale attempts are ignored. The failover *decision* is
not made here: every task failure goes to an injected :class:`TaskFailureListener`
which may call :meth:`DefaultScheduler.restart_vertices` (region or full
restart, after a backoff) or :meth:`DefaultScheduler.fail_job`.

Thread rule: every method of :class:`DefaultScheduler` must be called on the
main thread (``main_thread.assert_running_in_main_thread()`` is checked), and
scheduler state only changes there. Slot and deploy futures may complete on
any thread; their callbacks only post work to the main thread.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any, Protocol

from flinklike_spark._runtime.graph.execution_graph import (
    Execution,
    ExecutionAttemptID,
    ExecutionGraph,
    ExecutionVertexID,
)
from flinklike_spark._runtime.graph.execution_state import ExecutionState, JobStatus
from flinklike_spark._runtime.jobmaster.main_thread import ComponentMainThreadExecutor
from flinklike_spark._runtime.jobmaster.versioner import ExecutionVertexVersion, ExecutionVertexVersioner
from flinklike_spark.errors import IllegalStateTransition, SlotAllocationError, StaleDeploymentError

__all__ = [
    "DefaultScheduler",
    "ExecutionSlotAllocator",
    "TaskDeployer",
    "TaskFailureListener",
]

log = logging.getLogger(__name__)

_CANCELABLE_BEFORE_DEPLOY = frozenset({ExecutionState.CREATED, ExecutionState.SCHEDULED})
_DEPLOYED = frozenset({ExecutionState.DEPLOYING, ExecutionState.INITIALIZING, ExecutionState.RUNNING})


class ExecutionSlotAllocator(Protocol):
    """Hands out slots for execution vertices (the JobMaster's slot pool side)."""

    def allocate_slots(
        self, requests: list[ExecutionVertexID]
    ) -> dict[ExecutionVertexID, concurrent.futures.Future[Any]]:
        """Request one slot per vertex; return one future per requested vertex.

        A future either yields an opaque slot object or fails (e.g. with
        :class:`SlotAllocationError` on timeout). Futures may complete on any thread.
        """
        ...

    def cancel(self, vertex_id: ExecutionVertexID) -> None:
        """Withdraw the pending request of ``vertex_id``, if any.

        Must complete (fail or cancel) that request's future, so that a batch
        waiting for all its slots is not blocked forever.
        """
        ...

    def release(self, slot: Any) -> None:
        """Give back a slot that was allocated but is no longer used."""
        ...


class TaskDeployer(Protocol):
    """Submits tasks to TaskExecutors and cancels them."""

    def deploy(self, execution: Execution, slot: Any) -> concurrent.futures.Future[None]:
        """Submit ``execution`` into ``slot``; the future completes when the TaskExecutor acknowledged."""
        ...

    def cancel(self, execution: Execution) -> None:
        """Ask the TaskExecutor to cancel ``execution``; the result arrives as a CANCELED (or FAILED) update."""
        ...


class TaskFailureListener(Protocol):
    """Decides what to do about a failed execution (failover strategy + restart backoff)."""

    def on_task_failure(self, execution: Execution, cause: BaseException) -> None:
        """Called on the main thread after ``execution`` entered FAILED."""
        ...


@dataclasses.dataclass(kw_only=True)
class _DeploymentHandle:
    version: ExecutionVertexVersion
    execution: Execution
    slot_future: concurrent.futures.Future[Any]


@dataclasses.dataclass(kw_only=True, eq=False)
class _TerminationWaiter:
    vertex_ids: frozenset[ExecutionVertexID]
    callback: Callable[[], None]


class DefaultScheduler:
    """Deploys execution vertices into slots and tracks their states.

    Args:
        execution_graph: the graph to schedule; its job status starts in CREATED.
        slot_allocator: where slots come from.
        deployer: how tasks are submitted and cancelled.
        versioner: vertex versions (shared with whoever else supersedes operations).
        main_thread: the JobMaster's main-thread executor.
        failure_listener: told about every execution that fails while the job
            is RUNNING (not about failures of executions that were being
            cancelled). Default: :meth:`fail_job` (no restarts).
    """

    def __init__(
        self,
        execution_graph: ExecutionGraph,
        *,
        slot_allocator: ExecutionSlotAllocator,
        deployer: TaskDeployer,
        versioner: ExecutionVertexVersioner,
        main_thread: ComponentMainThreadExecutor,
        failure_listener: TaskFailureListener | None = None,
    ) -> None:
        self._graph = execution_graph
        self._slots = slot_allocator
        self._deployer = deployer
        self._versioner = versioner
        self._main = main_thread
        self._failure_listener = failure_listener
        self._waiters: list[_TerminationWaiter] = []
        self._job_failure_cause: BaseException | None = None
        self._termination: concurrent.futures.Future[JobStatus] = concurrent.futures.Future()

    # -- queries ------------------------------------------------------------------------------

    @property
    def execution_graph(self) -> ExecutionGraph:
        return self._graph

    @property
    def job_status(self) -> JobStatus:
        return self._graph.job_status

    @property
    def job_failure_cause(self) -> BaseException | None:
        """The cause given to :meth:`fail_job`, if the job failed."""
        return self._job_failure_cause

    @property
    def termination_future(self) -> concurrent.futures.Future[JobStatus]:
        """Completes with FINISHED, CANCELED or FAILED once the job is globally terminal."""
        return self._termination

    # -- scheduling ---------------------------------------------------------------------------

    def start_scheduling(self) -> None:
        """Move the job CREATED -> RUNNING and deploy every vertex (eager scheduling).

        Raises:
            IllegalStateTransition: the job is not CREATED.
        """
        self._main.assert_running_in_main_thread()
        self._graph.transition_job_status(JobStatus.RUNNING, expected=JobStatus.CREATED)
        self.allocate_slots_and_deploy(self._graph.vertex_ids())

    def allocate_slots_and_deploy(self, vertex_ids: Iterable[ExecutionVertexID]) -> None:
        """Schedule the current executions of ``vertex_ids`` (all must be CREATED).

        Returns once the slots were requested; deployment happens later on the
        main thread, when every requested slot future is done.

        Raises:
            IllegalStateTransition: the job is not RUNNING (a CREATED job is moved
                to RUNNING first), or an execution is not CREATED.
            KeyError: an id is not a vertex of the graph.
        """
        self._main.assert_running_in_main_thread()
        ids = list(dict.fromkeys(vertex_ids))
        if not ids:
            return
        if self._graph.job_status is JobStatus.CREATED:
            self._graph.transition_job_status(JobStatus.RUNNING)
        if self._graph.job_status is not JobStatus.RUNNING:
            raise IllegalStateTransition(
                f"cannot deploy {[str(i) for i in ids]}: job is {self._graph.job_status.name}, "
                f"deployments need CREATED or RUNNING",
                source=self._graph.job_status,
            )
        executions = [self._graph.get_vertex(i).current_execution for i in ids]
        not_created = [f"{e.attempt_id}={e.state.name}" for e in executions if e.state is not ExecutionState.CREATED]
        if not_created:
            raise IllegalStateTransition(
                f"can only schedule executions in CREATED, got {not_created}", target=ExecutionState.SCHEDULED
            )
        versions = self._versioner.record_modifications(ids)
        for execution in executions:
            execution.transition(ExecutionState.SCHEDULED)
        try:
            futures = self._slots.allocate_slots(ids)
        except Exception as exc:  # noqa: BLE001 - the request failed as a whole: every slot failed
            futures = {}
            request_error: BaseException | None = exc
        else:
            request_error = None
        handles = []
        for vertex_id, execution in zip(ids, executions, strict=True):
            future = futures.get(vertex_id)
            if future is None:
                future = concurrent.futures.Future()
                future.set_exception(
                    request_error or SlotAllocationError(f"slot allocator returned no slot request for {vertex_id}")
                )
            handles.append(_DeploymentHandle(version=versions[vertex_id], execution=execution, slot_future=future))
        self._wait_for_all_slots_and_deploy(handles)

    def _wait_for_all_slots_and_deploy(self, handles: list[_DeploymentHandle]) -> None:
        remaining = len(handles)

        def on_slot_done_in_main_thread() -> None:
            nonlocal remaining
            remaining -= 1
            if remaining == 0:
                for handle in handles:
                    self._deploy_or_handle_error(handle)

        for handle in handles:
            # completions may happen on any thread (or already have): always re-post
            handle.slot_future.add_done_callback(lambda _f: self._main.execute(on_slot_done_in_main_thread))

    def _deploy_or_handle_error(self, handle: _DeploymentHandle) -> None:
        execution = handle.execution
        future = handle.slot_future
        slot, error = None, None
        if future.cancelled():
            error = SlotAllocationError(f"slot request of {execution.vertex_id} was cancelled")
        elif future.exception() is not None:
            error = future.exception()
        else:
            slot = future.result()

        if self._versioner.is_modified(handle.version) or execution.state is not ExecutionState.SCHEDULED:
            log.debug(
                "refusing to deploy %s: this deployment was superseded by another one (state %s)",
                execution.attempt_id,
                execution.state.name,
            )
            if slot is not None:
                self._release_slot(slot)
            return
        if error is not None:
            self._fail_execution(execution, error)
            return
        try:
            execution.assign_slot(slot)
            execution.transition(ExecutionState.DEPLOYING)
            deployed = self._deployer.deploy(execution, slot)
        except Exception as exc:  # noqa: BLE001 - a failed submission fails the execution
            self._fail_execution(execution, exc)
            return
        deployed.add_done_callback(lambda f: self._main.execute(lambda: self._on_deploy_done(execution, f)))

    def _on_deploy_done(self, execution: Execution, future: concurrent.futures.Future[None]) -> None:
        if future.cancelled():
            error: BaseException | None = StaleDeploymentError(f"deployment of {execution.attempt_id} was cancelled")
        else:
            error = future.exception()
        if error is None:
            return
        if self._graph.find_current_execution(execution.attempt_id) is None or execution.is_terminal:
            log.debug("ignoring deploy failure of %s (no longer current or already terminal): %s",
                      execution.attempt_id, error)  # fmt: skip
            return
        self._fail_execution(execution, error)

    # -- task state reports -------------------------------------------------------------------

    def update_task_execution_state(
        self,
        attempt_id: ExecutionAttemptID,
        state: ExecutionState,
        cause: BaseException | None = None,
    ) -> bool:
        """Apply a state reported by a task.

        Returns:
            True if the report was applied; False if it was ignored because the
            attempt is unknown or stale (not its vertex's current execution),
            the execution is already terminal, or the edge is not legal
            (e.g. RUNNING for an execution being cancelled). A FINISHED or
            FAILED report for a CANCELING execution completes the cancellation
            (CANCELED), as Flink's ``Execution.processFail`` does: a consumer
            whose producer was cancelled first fails on the released partition
            before its own cancel call arrives, and that is not a task failure.
        """
        self._main.assert_running_in_main_thread()
        execution = self._graph.find_current_execution(attempt_id)
        if execution is None:
            log.debug("ignoring %s for unknown or stale attempt %s", state.name, attempt_id)
            return False
        if execution.is_terminal:
            log.debug("ignoring %s for %s: already %s", state.name, attempt_id, execution.state.name)
            return False
        if execution.state is ExecutionState.CANCELING and state in (ExecutionState.FINISHED, ExecutionState.FAILED):
            if cause is not None:
                log.debug("execution %s failed while being cancelled: %s", attempt_id, cause)
            state = ExecutionState.CANCELED
        if state is ExecutionState.FAILED:
            self._fail_execution(execution, cause or RuntimeError(f"task {attempt_id} failed without a cause"))
            return True
        if not execution.can_transition(state):
            log.debug("ignoring %s for %s in state %s", state.name, attempt_id, execution.state.name)
            return False
        execution.transition(state)
        if execution.is_terminal:
            self._on_terminal(execution)
        return True

    def _fail_execution(self, execution: Execution, cause: BaseException) -> None:
        was_cancelling = execution.state is ExecutionState.CANCELING
        if not execution.mark_failed(cause):
            return
        log.info("execution %s failed: %s", execution.attempt_id, cause)
        self._on_terminal(execution)
        if was_cancelling or self._graph.job_status is not JobStatus.RUNNING:
            return
        if self._failure_listener is None:
            self.fail_job(cause)
        else:
            self._failure_listener.on_task_failure(execution, cause)

    def _on_terminal(self, execution: Execution) -> None:
        slot = execution.take_slot()
        if slot is not None:
            self._release_slot(slot)
        self._check_waiters()
        self._check_job_termination()

    def _release_slot(self, slot: Any) -> None:
        try:
            self._slots.release(slot)
        except Exception:  # noqa: BLE001 - a slot we cannot return is logged, not fatal
            log.exception("could not release slot %r", slot)

    def _check_waiters(self) -> None:
        ready = [w for w in self._waiters if self._all_terminal(w.vertex_ids)]
        if not ready:
            return
        self._waiters = [w for w in self._waiters if not any(w is r for r in ready)]
        for waiter in ready:
            waiter.callback()

    def _all_terminal(self, vertex_ids: Iterable[ExecutionVertexID]) -> bool:
        return all(self._graph.get_vertex(v).current_execution.is_terminal for v in vertex_ids)

    def _check_job_termination(self) -> None:
        status = self._graph.job_status
        vertices = list(self._graph.vertices())
        if status is JobStatus.RUNNING:
            if all(v.execution_state is ExecutionState.FINISHED for v in vertices):
                self._terminate(JobStatus.FINISHED)
        elif status in (JobStatus.CANCELLING, JobStatus.FAILING):
            if all(v.current_execution.is_terminal for v in vertices):
                self._terminate(JobStatus.CANCELED if status is JobStatus.CANCELLING else JobStatus.FAILED)

    def _terminate(self, status: JobStatus) -> None:
        self._graph.transition_job_status(status)
        log.info("job %s (%s) is %s", self._graph.job_name, self._graph.job_id, status.name)
        if not self._termination.done():
            self._termination.set_result(status)

    # -- cancel / fail / restart --------------------------------------------------------------

    def _cancel_execution(self, execution: Execution) -> None:
        vertex_id = execution.vertex_id
        state = execution.state
        if state in _CANCELABLE_BEFORE_DEPLOY:
            # supersede the pending deployment, so its slot is returned when it arrives
            self._versioner.record_vertex_modification(vertex_id)
            self._slots.cancel(vertex_id)
            execution.transition(ExecutionState.CANCELED)
            self._on_terminal(execution)
        elif state in _DEPLOYED:
            execution.transition(ExecutionState.CANCELING)
            try:
                self._deployer.cancel(execution)
            except Exception as exc:  # noqa: BLE001 - an unreachable task is failed, not leaked
                self._fail_execution(execution, exc)
        # CANCELING or terminal: nothing to do

    def cancel_vertices(self, vertex_ids: Iterable[ExecutionVertexID]) -> concurrent.futures.Future[None]:
        """Cancel the current executions of ``vertex_ids`` without changing the job status.

        Executions not yet deployed go straight to CANCELED (their slot requests
        are withdrawn); deployed ones go to CANCELING and the deployer is asked
        to cancel them. Returns a future completed on the main thread once all
        of them are terminal.
        """
        self._main.assert_running_in_main_thread()
        ids = frozenset(vertex_ids)
        for vertex_id in self._in_topological_order(ids):
            self._cancel_execution(self._graph.get_vertex(vertex_id).current_execution)
        done: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._when_terminal(ids, lambda: done.set_result(None))
        return done

    def _in_topological_order(self, vertex_ids: Iterable[ExecutionVertexID]) -> list[ExecutionVertexID]:
        wanted = set(vertex_ids)
        for vertex_id in wanted:
            self._graph.get_vertex(vertex_id)  # KeyError naming an unknown id
        return [v for v in self._graph.vertex_ids() if v in wanted]

    def _when_terminal(self, vertex_ids: frozenset[ExecutionVertexID], callback: Callable[[], None]) -> None:
        if self._all_terminal(vertex_ids):
            callback()
        else:
            self._waiters.append(_TerminationWaiter(vertex_ids=vertex_ids, callback=callback))

    def cancel(self) -> concurrent.futures.Future[JobStatus]:
        """Cancel the job: CANCELLING now, CANCELED once every execution is terminal.

        Idempotent; a job that is already terminal is left as it is. Returns
        :attr:`termination_future`.
        """
        self._main.assert_running_in_main_thread()
        status = self._graph.job_status
        if status.is_terminal or status is JobStatus.CANCELLING:
            return self._termination
        self._graph.transition_job_status(JobStatus.CANCELLING)
        self.cancel_vertices(self._graph.vertex_ids())
        self._check_job_termination()
        return self._termination

    def fail_job(self, cause: BaseException) -> concurrent.futures.Future[JobStatus]:
        """Fail the job: FAILING now (every execution is cancelled), FAILED once all are terminal.

        No-op if the job is already terminal, CANCELLING or FAILING. Returns
        :attr:`termination_future`.
        """
        self._main.assert_running_in_main_thread()
        status = self._graph.job_status
        if status.is_terminal or status in (JobStatus.CANCELLING, JobStatus.FAILING):
            return self._termination
        self._job_failure_cause = cause
        if status is JobStatus.RUNNING:
            self._graph.transition_job_status(JobStatus.FAILING)
            self.cancel_vertices(self._graph.vertex_ids())
            self._check_job_termination()
        else:
            self._terminate(JobStatus.FAILED)
        return self._termination

    def restart_vertices(
        self,
        vertex_ids: Iterable[ExecutionVertexID],
        *,
        delay: timedelta = timedelta(0),
        restore: Callable[[list[ExecutionVertexID]], None] | None = None,
    ) -> concurrent.futures.Future[None]:
        """Restart ``vertex_ids`` with new attempts (the failover strategy chose them).

        Flink's ``restartTasksWithDelay``: cancels their non-terminal executions
        (``cancelTasksAsync``), bumps their versions (so slot arrivals of
        in-flight deployments are refused and their slots returned), and once
        ``delay`` has passed *and* all of them are terminal (``restartTasks``)
        resets each vertex whose version was not bumped again meanwhile, calls
        ``restore`` with those vertices (``restoreState``: the caller assigns
        their restore point) and calls :meth:`allocate_slots_and_deploy`. A
        restart superseded by a newer one for all its vertices does nothing.

        Returns:
            a future completed when the new attempts were scheduled; it fails with
            :class:`StaleDeploymentError` if the job left RUNNING before that, or
            with what ``restore`` raised (the vertices then stay CREATED).
        """
        self._main.assert_running_in_main_thread()
        ids = frozenset(vertex_ids)
        order = self._in_topological_order(ids)
        for vertex_id in order:
            self._cancel_execution(self._graph.get_vertex(vertex_id).current_execution)
        versions = list(self._versioner.record_modifications(order).values())
        done: concurrent.futures.Future[None] = concurrent.futures.Future()

        def restart() -> None:
            if self._graph.job_status is not JobStatus.RUNNING:
                done.set_exception(
                    StaleDeploymentError(
                        f"restart of {sorted(str(i) for i in ids)} dropped: job is {self._graph.job_status.name}"
                    )
                )
                return
            unmodified = self._in_topological_order(self._versioner.get_unmodified_execution_vertices(versions))
            for vertex_id in unmodified:
                self._graph.get_vertex(vertex_id).reset_for_new_execution()
            if restore is not None and unmodified:
                try:
                    restore(unmodified)
                except Exception as exc:  # noqa: BLE001 - the caller decides (Flink: a global failure)
                    done.set_exception(exc)
                    return
            try:
                self.allocate_slots_and_deploy(unmodified)
            except BaseException as exc:
                done.set_exception(exc)
                raise
            done.set_result(None)

        if delay > timedelta(0):
            self._main.schedule(delay, lambda: self._when_terminal(ids, restart))
        else:
            self._when_terminal(ids, restart)
        return done
