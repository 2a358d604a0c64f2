"""One submitted job across its JobMasters: the adaptive scheduler's rescale path.

Under ``jobmanager.scheduler: default`` a job has one JobMaster for its whole
life. Under ``adaptive`` its resource requirements (per vertex, a parallelism
range: :mod:`~flinklike_spark._runtime.jobmaster.resource_requirements`) can
change while it runs, and a change that alters the parallelism the cluster's
slots allow is a *rescale*:

0. if the bounds ask for more slots than the cluster has and
   ``slotmanager.number-of-slots.max`` allows more, TaskExecutors are started
   (the parallelism is what the slots that came allow);
1. the running JobMaster takes a checkpoint and is cancelled as soon as it
   completed, as stop-with-savepoint does (no checkpoint after it commits sink
   output, so restoring it is exact);
2. once that JobMaster ended and the TaskExecutors released the job, a new
   JobMaster of the same job id runs the job graph at the new parallelism,
   restoring that checkpoint (key groups, source splits and, of an unaligned
   checkpoint, in-flight data are redistributed as on any restore at another
   parallelism); TaskExecutors started for a rescale that then hold no slot
   are stopped.

Flink's AdaptiveScheduler restarts from the latest completed checkpoint; a
checkpoint triggered for the purpose loses no progress and replays little. A
checkpoint, not a savepoint: it keeps the checkpointing mode (unaligned under
backpressure) and is taken with finished tasks (a source reader left without
splits finishes). The job's :attr:`AdaptiveJob.result` spans every JobMaster:
the stop of a rescale is not the job's end. If the checkpoint fails the job
runs on unchanged and the rescale fails with the checkpoint's error.

Waiting for resources (Flink's WaitingForResources): before its first
JobMaster starts, a job of the adaptive scheduler whose upper bounds ask for
more slots than the cluster has (after TaskExecutors up to
``slotmanager.number-of-slots.max`` started) waits until the slots met the
upper bounds, or stayed unchanged for
``jobmanager.adaptive-scheduler.resource-stabilization-timeout`` and meet the
lower bounds; it then starts at what the slots allow. Lower bounds not met
within ``jobmanager.adaptive-scheduler.resource-wait-timeout`` fail the
submission with :class:`~flinklike_spark.errors.NoResourceAvailableError`
naming the slots it has and needs. The wait happens inside the constructor, so
``submit_job`` (``execute_async``) returns once the job runs: a JobClient always
has a JobMaster behind it.

Reactive mode (``scheduler-mode: reactive``): every vertex's upper bound is its
max parallelism, so a job uses every slot of the cluster. A control thread
follows the cluster's slots: more slots, unchanged for the stabilization
timeout, rescale the job up through the path above; a TaskExecutor lost with
the job's tasks (its slots fall below the job's parallelism, or the JobMaster
fails with a :class:`~flinklike_spark.errors.TaskExecutorLostError`) cannot
be stopped with a checkpoint, so the JobMaster is cancelled and, once its
slots are released, the job waits for resources again and runs at what the
remaining slots allow from the latest *completed* checkpoint (its sink output
was committed, or the restore commits it: the restore is exact). Such a loss
is a rescale, not a failure counted by the restart strategy.

States (:class:`AdaptiveJobState`, Flink's AdaptiveScheduler states that
apply here): WAITING_FOR_RESOURCES -> EXECUTING -> RESTARTING (a rescale) ->
EXECUTING, or (reactive mode, a lost TaskExecutor) RESTARTING ->
WAITING_FOR_RESOURCES -> EXECUTING; FINISHED once the job's result is set.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any, Protocol

from flinklike_spark._runtime.graph.execution_state import JobStatus
from flinklike_spark._runtime.graph.job_graph import JobGraph
from flinklike_spark._runtime.jobmaster.jobmaster import JobMaster
from flinklike_spark._runtime.jobmaster.resource_requirements import JobResourceRequirements
from flinklike_spark._runtime.state_machine import StateMachine
from flinklike_spark.config import Configuration, SchedulerType
from flinklike_spark.errors import (
    JobCancelledError,
    JobExecutionError,
    JobNotRunningError,
    NoResourceAvailableError,
    RescaleRefusedError,
    TaskExecutorLostError,
)

__all__ = ["AdaptiveJob", "AdaptiveJobState", "JobResources", "RescaleEvent"]

log = logging.getLogger(__name__)

#: Seconds a rescale waits for the tasks to run, or to end and the TaskExecutors to release the job.
_STOP_TIMEOUT = 120.0
#: Seconds between two looks at the cluster's slots (waiting for resources, reactive mode).
_SLOT_POLL = 0.05


def _wait_until_running(master: JobMaster) -> None:
    """Until every task of ``master`` runs (or finished), ``master`` ended, or :data:`_STOP_TIMEOUT` passed."""
    deadline = time.monotonic() + _STOP_TIMEOUT
    while not master.result.done() and time.monotonic() < deadline:
        if master.graph.every_task_running():
            return
        time.sleep(0.02)


def _lost_task_executor(error: BaseException | None) -> TaskExecutorLostError | None:
    """The TaskExecutor loss in ``error``'s cause chain, if any."""
    while error is not None and not isinstance(error, TaskExecutorLostError):
        error = error.__cause__
    return error


class AdaptiveJobState(Enum):
    WAITING_FOR_RESOURCES = "waiting-for-resources"  # for the slots to meet the bounds or to settle
    EXECUTING = "executing"
    RESTARTING = "restarting"  # a rescale: stop-with-checkpoint, then a JobMaster at the new parallelism
    FINISHED = "finished"  # the job's result is set


_S = AdaptiveJobState
ADAPTIVE_JOB_TRANSITIONS: Mapping[AdaptiveJobState, frozenset[AdaptiveJobState]] = {
    _S.WAITING_FOR_RESOURCES: frozenset({
        _S.EXECUTING,  # the slots met the upper bounds, or settled meeting the lower ones: a JobMaster starts
        _S.FINISHED,  # too few slots within resource-wait-timeout, the job cancelled, or its JobMaster not started
    }),
    _S.EXECUTING: frozenset({
        _S.RESTARTING,  # a rescale, or (reactive) a TaskExecutor lost with the job's tasks
        _S.FINISHED,  # the JobMaster's result is the job's
    }),
    _S.RESTARTING: frozenset({
        _S.EXECUTING,  # the job runs at the new parallelism, or the rescale did not stop it
        _S.WAITING_FOR_RESOURCES,  # reactive: the job lost a TaskExecutor and waits for the slots to settle
        _S.FINISHED,  # the job ended or failed during the rescale
    }),
    _S.FINISHED: frozenset(),
}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class RescaleEvent:
    """A rescale that ran: why, from what to what parallelism, through which checkpoint, and its times.

    ``timestamp`` is when it was asked for (epoch ms); ``duration_ms`` runs until every task
    at the new parallelism runs (restored, or finished: a source reader left without splits).
    """

    timestamp: int
    cause: str
    parallelism_before: Mapping[str, int]
    parallelism_after: Mapping[str, int]
    checkpoint_id: int  # 0: the job started over without a checkpoint, or from the one it was submitted with
    checkpoint_path: str  # "": no checkpoint (the job started over)
    duration_ms: int

    def to_json(self) -> dict[str, Any]:
        return {
            "timestamp": self.timestamp, "cause": self.cause, "checkpoint": self.checkpoint_id,
            "checkpointPath": self.checkpoint_path, "durationMs": self.duration_ms,
            "parallelismBefore": dict(self.parallelism_before), "parallelismAfter": dict(self.parallelism_after),
        }  # fmt: skip


class JobResources(Protocol):
    """The slots a job may use (the cluster endpoint); thread-safe."""

    def slots_possible(self, job_id: str) -> int:
        """Slots the job could hold once TaskExecutors up to ``slotmanager.number-of-slots.max`` started."""

    def ensure_slots(self, job_id: str, wanted: int) -> int:
        """Start TaskExecutors toward ``wanted`` slots for the job (blocks until they register); the slots then."""

    def release_idle(self) -> list[str]:
        """Stop TaskExecutors started for a rescale that hold no slot; their ids."""

    def slots_available(self, job_id: str) -> int:
        """The registered slots the job could hold now (free, or its own)."""

    def task_executors(self) -> frozenset[str]:
        """The resource ids of the registered TaskExecutors."""


class AdaptiveJob:
    """A submitted job: its current JobMaster, its resource requirements, and a result that outlives rescales.

    The constructor waits for resources under the adaptive scheduler (see the module
    docstring) and returns once the first JobMaster started.

    Args:
        job_graph: the job as submitted.
        config: the job's configuration.
        start_master: builds and starts a JobMaster for a job graph and configuration, and routes
            the job's messages to it; raises if the cluster is closing.
        resources: the cluster's slots, and TaskExecutors started or stopped for a rescale.

    Raises:
        NoResourceAvailableError: the slots did not meet the lower bounds within
            ``jobmanager.adaptive-scheduler.resource-wait-timeout``.
    """

    def __init__(
        self,
        job_graph: JobGraph,
        config: Configuration,
        *,
        start_master: Callable[[JobGraph, Configuration, JobMaster | None], JobMaster],
        resources: JobResources,
    ) -> None:
        self.job_id = job_graph.job_id
        self._graph = job_graph
        self._config = config
        self._start_master = start_master
        self._resources = resources
        self.result: concurrent.futures.Future = concurrent.futures.Future()
        options = config.failover
        self._reactive = options.reactive
        self.requirements = (JobResourceRequirements.reactive if self._reactive else JobResourceRequirements.of)(
            job_graph
        )
        self.rescales: list[RescaleEvent] = []
        self.last_failure: str | None = None  # why the latest rescale that failed failed
        self.num_failures = 0
        self.autoscaler: Any = None  # a JobAutoscaler with job.autoscaler.enabled (set by the cluster endpoint)
        self._state = StateMachine(f"job {self.job_id}", _S.WAITING_FOR_RESOURCES, ADAPTIVE_JOB_TRANSITIONS)
        self._lock = threading.Lock()  # one rescale at a time; guards master, requirements, cancel
        self._cancelled_by: str | None = None
        self._checkpoint_timeout = config.checkpointing.timeout.total_seconds() + 30.0
        #: the checkpoint the current JobMaster restored (id 0 if unknown), for a restart before it took one
        self._restored: tuple[int, str] | None = (0, path) if (path := config.checkpointing.recovery_path) else None
        try:
            if options.scheduler is SchedulerType.ADAPTIVE:
                after = self.requirements.parallelism_for(self._wait_for_resources())
                if after != self.parallelism:
                    log.info("job %s starts at parallelism %s, what the cluster's slots allow", self.job_id, after)
                    self._graph = job_graph.with_parallelism(after)
            self._state.transition(_S.EXECUTING)
            self.master = start_master(self._graph, config, None)
        except BaseException as exc:
            self._fail(exc)
            raise
        self._follow(self.master)
        if self._reactive:
            threading.Thread(target=self._follow_slots, name=f"reactive-{self.job_id[:8]}", daemon=True).start()

    @property
    def state(self) -> AdaptiveJobState:
        return self._state.state

    @property
    def status(self) -> JobStatus:
        """The job's status: RESTARTING during a rescale (and a wait for resources after one), else its JobMaster's."""
        if self.state in (_S.RESTARTING, _S.WAITING_FOR_RESOURCES):
            return JobStatus.RESTARTING
        return self.master.status

    @property
    def parallelism(self) -> dict[str, int]:
        return {v.id: v.parallelism for v in self._graph}

    @property
    def graph(self) -> JobGraph:
        """The job graph the current JobMaster runs (at the current parallelism)."""
        return self._graph

    def running_master(self) -> JobMaster | None:
        """The current JobMaster if the job is EXECUTING and every task runs (or finished), else None."""
        master = self.master
        if self.state is AdaptiveJobState.EXECUTING and master.status is JobStatus.RUNNING:
            return master if master.graph.every_task_running() else None
        return None

    def slots_possible(self) -> int:
        """The slots the job could hold once TaskExecutors up to ``slotmanager.number-of-slots.max`` started."""
        return self._resources.slots_possible(self.job_id)

    def cancel(self, *, by: str = "the program (JobClient.cancel)") -> None:
        """Cancel the job; a rescale in progress then starts no new JobMaster."""
        self._cancelled_by = self._cancelled_by or by
        self.master.cancel(by=by)

    # -- results ----------------------------------------------------------------------------------

    def _follow(self, master: JobMaster) -> None:
        master.result.add_done_callback(lambda f: self._master_ended(master, f))

    def _master_ended(self, master: JobMaster, ended: concurrent.futures.Future) -> None:
        if self.state in (_S.RESTARTING, _S.WAITING_FOR_RESOURCES) and master is self.master:
            return  # the rescale's own stop: the rescale decides what follows
        lost = _lost_task_executor(ended.exception())
        if self._reactive and lost is not None and self._restart_after_loss(master, str(lost)):
            return  # reactive mode: a lost TaskExecutor shrinks the job, it does not end it
        self._finish(ended)

    def _finish(self, ended: concurrent.futures.Future) -> None:
        """Set the job's result from a JobMaster's (done) result; the first call wins."""
        with self._lock:
            if self.result.done():
                return
            self._state.transition(AdaptiveJobState.FINISHED)
            error = ended.exception()
            if error is not None:
                self.result.set_exception(error)
            else:
                self.result.set_result(ended.result())

    def _resume(self, master: JobMaster) -> None:
        """A rescale that did not stop ``master``: back to EXECUTING, or to the result it reached meanwhile."""
        master.superseded = False
        if self.state is AdaptiveJobState.RESTARTING:
            self._state.transition(AdaptiveJobState.EXECUTING)
        if master.result.done():  # it finished or failed while the rescale ran: that decides what follows
            self._master_ended(master, master.result)

    def _fail(self, error: BaseException) -> None:
        failed: concurrent.futures.Future = concurrent.futures.Future()
        failed.set_exception(error)
        self._finish(failed)

    # -- rescaling --------------------------------------------------------------------------------

    def put_requirements_json(self, body: Any, *, cause: str) -> concurrent.futures.Future[RescaleEvent | None]:
        """:meth:`update_requirements` from FLIP-291's JSON (checked against the running job graph)."""
        return self.update_requirements(JobResourceRequirements.from_json(body, self._graph), cause=cause)

    def update_requirements(
        self, requirements: JobResourceRequirements, *, cause: str
    ) -> concurrent.futures.Future[RescaleEvent | None]:
        """Set the job's resource requirements; rescale if the parallelism they allow differs.

        The checks run at once; the rescale runs on a thread of its own. The future yields
        the rescale once the job runs on at the new parallelism, or None if the parallelism
        stays (the requirements are kept); it fails with CheckpointFailedError if the
        rescale's checkpoint failed (the job runs on unchanged) or JobNotRunningError if the
        job ended meanwhile.

        Raises:
            RescaleRefusedError: the job runs under the default scheduler, or the cluster has
                fewer slots than a lower bound. The job runs on unchanged.
            JobNotRunningError: the job is over, restarting, or already rescaling.
        """
        if self._config.failover.scheduler is not SchedulerType.ADAPTIVE:
            raise RescaleRefusedError(
                f"job {self.job_id} runs under jobmanager.scheduler: {self._config.failover.scheduler.value}; "
                "changing a running job's resource requirements needs jobmanager.scheduler: adaptive"
            )
        result: concurrent.futures.Future[RescaleEvent | None] = concurrent.futures.Future()
        with self._lock:
            master = self.master
            if self.state is not AdaptiveJobState.EXECUTING or master.status is not JobStatus.RUNNING:
                raise JobNotRunningError(
                    f"job {self.job_id} cannot be rescaled while it is {self.status.name}",
                    job_id=self.job_id, status=self.status.name,
                )  # fmt: skip
            before = self.parallelism
            after = requirements.parallelism_for(self._resources.slots_possible(self.job_id))
            self.requirements = requirements
            if after == before:
                log.info("job %s: new resource requirements keep parallelism %s", self.job_id, before)
                result.set_result(None)
                return result
            self._state.transition(AdaptiveJobState.RESTARTING)
            master.superseded = True

        def run() -> None:
            try:
                result.set_result(self._rescale(master, before, requirements, cause))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller through the future
                log.warning("job %s: the rescale to %s failed: %s: %s", self.job_id, after, type(exc).__name__, exc)
                self.last_failure = f"the rescale to {after} ({cause}) failed: {type(exc).__name__}: {exc}"
                self.num_failures += 1
                result.set_exception(exc)

        threading.Thread(target=run, name=f"rescale-{self.job_id[:8]}", daemon=True).start()
        return result

    def _rescale(
        self, master: JobMaster, before: dict[str, int], requirements: JobResourceRequirements, cause: str
    ) -> RescaleEvent | None:
        """Get the slots, stop ``master`` with a checkpoint and start the job at the new parallelism from it.

        Runs on the rescale thread, in RESTARTING. Returns None (back to EXECUTING, the job
        untouched) if fewer slots than hoped for came and they allow no other parallelism.
        """
        asked = time.time()
        wanted = max(b.upper for b in requirements.bounds.values())
        try:
            after = requirements.parallelism_for(self._resources.ensure_slots(self.job_id, wanted))
            if after == before:
                log.warning("job %s: no more slots came; it keeps parallelism %s", self.job_id, before)
                self._resume(master)
                return None
            log.info("job %s rescales %s -> %s (%s): stop-with-checkpoint", self.job_id, before, after, cause)
            _wait_until_running(master)  # deploying tasks (a start, a failover) take no checkpoint
            checkpoint = master.stop_with_checkpoint().result(self._checkpoint_timeout)
        except BaseException:
            self._resume(master)
            raise
        if not (master.wait_terminal(_STOP_TIMEOUT) and master.wait_released(_STOP_TIMEOUT)):
            error = JobExecutionError(
                f"job {self.job_id}: its tasks did not end and release their slots within {_STOP_TIMEOUT:.0f} s "
                f"of the rescale's checkpoint {checkpoint.checkpoint_id} ({checkpoint.path}); restore it to go on",
                job_id=self.job_id,
            )
            self._fail(error)
            raise error
        ended = master.result
        if self._cancelled_by is not None or not isinstance(ended.exception(), JobCancelledError):
            self._finish(ended)  # cancelled meanwhile, or it finished or failed before the stop
            raise JobNotRunningError(
                f"job {self.job_id} ended during its rescale: {self.status.name}", job_id=self.job_id
            )
        return self._start_successor(master, after, (checkpoint.checkpoint_id, checkpoint.path), before, cause, asked)

    def _start_successor(
        self,
        master: JobMaster,
        after: dict[str, int],
        restore: tuple[int, str] | None,
        before: dict[str, int],
        cause: str,
        asked: float,
    ) -> RescaleEvent:
        """Run the job at ``after`` from ``restore`` (checkpoint id, path; None: from scratch) after ``master``.

        ``master`` ended and its TaskExecutors released the job. Records the rescale and goes to EXECUTING.
        """
        graph = self._graph.with_parallelism(after)
        config = self._config if restore is None else self._config.with_values(
            {"execution.state-recovery.path": restore[1]}
        )  # fmt: skip
        try:
            new_master = self._start_master(graph, config, master)
        except BaseException as exc:
            self._fail(exc)
            raise
        self._graph, self.master, self._restored = graph, new_master, restore
        _wait_until_running(new_master)  # the job reads RESTARTING until its tasks run again
        checkpoint_id, path = restore or (0, "")
        event = RescaleEvent(
            timestamp=int(asked * 1000), cause=cause, parallelism_before=before, parallelism_after=after,
            checkpoint_id=checkpoint_id, checkpoint_path=path, duration_ms=int((time.time() - asked) * 1000),
        )  # fmt: skip
        self.rescales.append(event)
        self._state.transition(_S.EXECUTING)
        self._follow(new_master)  # a result set meanwhile was ignored as the rescale's: now it is the job's
        log.info("job %s rescaled to %s from checkpoint %d in %d ms (%s)", self.job_id, after, checkpoint_id,
                 event.duration_ms, cause)  # fmt: skip
        if self._cancelled_by is not None:
            new_master.cancel(by=self._cancelled_by)
        released = self._resources.release_idle()
        if released:
            log.info("job %s rescaled down: stopped the idle TaskExecutors %s", self.job_id, released)
        return event

    # -- waiting for resources, reactive mode ------------------------------------------------------

    def _wait_for_resources(self) -> int:
        """WAITING_FOR_RESOURCES: the slots to run with (at least the lower bounds); blocks.

        Starts TaskExecutors toward the upper bounds (``slotmanager.number-of-slots.max``), then
        returns once the slots meet the upper bounds, or stayed unchanged for the stabilization
        timeout and meet the lower bounds, or the wait timeout passed and they meet the lower bounds.

        Raises:
            NoResourceAvailableError: the lower bounds are not met within the wait timeout.
            JobCancelledError: the job was cancelled meanwhile.
        """
        options = self._config.failover
        bounds = self.requirements.bounds.values()
        wanted, needed = max(b.upper for b in bounds), max(b.lower for b in bounds)
        stable_for = options.resource_stabilization_timeout.total_seconds()
        timeout = options.resource_wait_timeout
        started = time.monotonic()
        slots = self._resources.ensure_slots(self.job_id, wanted)
        changed = time.monotonic()
        while slots < wanted:
            if self._cancelled_by is not None:
                raise JobCancelledError(
                    f"job {self.job_id} was cancelled by {self._cancelled_by} while it waited for resources",
                    job_id=self.job_id, cancelled_by=self._cancelled_by, last_checkpoint=(self._restored or (0, None))[1],
                )  # fmt: skip
            now = time.monotonic()
            if slots >= needed and now - changed >= stable_for:
                break
            if timeout is not None and now - started >= timeout.total_seconds():
                if slots >= needed:
                    break
                raise NoResourceAvailableError(
                    f"job {self.job_id} has {slots} slots after waiting {timeout} "
                    f"(jobmanager.adaptive-scheduler.resource-wait-timeout) and needs {needed} for its lower "
                    f"bounds (it would use {wanted}); add TaskExecutors or lower the bounds"
                )
            time.sleep(_SLOT_POLL)
            now_slots = self._resources.slots_available(self.job_id)
            if now_slots != slots:
                slots, changed = now_slots, time.monotonic()
        log.info("job %s: %d slots after waiting %.1f s for resources (it would use %d)", self.job_id, slots,
                 time.monotonic() - started, wanted)  # fmt: skip
        return slots

    def _follow_slots(self) -> None:
        """Reactive mode's control loop (its own thread, until the job's result is set).

        Slots below the job's parallelism: a TaskExecutor with the job's tasks is gone, restart at
        once (the wait for resources debounces). More slots than it uses, unchanged for the
        stabilization timeout: rescale up (a failed attempt is tried again after another timeout).
        """
        stable_for = self._config.failover.resource_stabilization_timeout.total_seconds()
        known = self._resources.task_executors()
        slots, changed = self._resources.slots_possible(self.job_id), time.monotonic()
        while not self.result.done():
            time.sleep(_SLOT_POLL)
            now_slots = self._resources.slots_possible(self.job_id)
            if now_slots != slots:
                slots, changed = now_slots, time.monotonic()
            if self.state is not _S.EXECUTING:
                continue
            members = self._resources.task_executors()
            if slots < max(self.parallelism.values()):
                gone = ", ".join(sorted(known - members)) or "a TaskExecutor"
                self._restart_after_loss(self.master, f"TaskExecutor {gone} lost")
            elif (
                time.monotonic() - changed >= stable_for
                and self.requirements.parallelism_for(slots) != self.parallelism
            ):
                added = ", ".join(sorted(members - known)) or "slots freed"
                try:
                    self.update_requirements(self.requirements, cause=f"reactive: {slots} slots ({added} registered)")
                except (JobNotRunningError, RescaleRefusedError) as exc:
                    log.info("job %s: no reactive rescale to %d slots now: %s", self.job_id, slots, exc)
                changed = time.monotonic()
            else:
                continue
            known = members

    def _restart_after_loss(self, master: JobMaster, cause: str) -> bool:
        """Reactive mode: ``master`` lost a TaskExecutor; restart the job from its latest checkpoint (any thread).

        False if ``master`` is not the running one (a rescale or a restart already replaces it).
        """
        with self._lock:
            if self.result.done() or self.state is not _S.EXECUTING or master is not self.master:
                return False
            self._state.transition(_S.RESTARTING)
            master.superseded = True
        log.warning("job %s: %s; reactive mode restarts it at what the remaining slots allow", self.job_id, cause)
        threading.Thread(
            target=self._run_restart, args=(master, cause), name=f"reactive-restart-{self.job_id[:8]}", daemon=True
        ).start()
        return True

    def _run_restart(self, master: JobMaster, cause: str) -> None:
        asked, before = time.time(), self.parallelism
        try:
            if not master.result.done():
                master.cancel(by=f"reactive mode ({cause})")
            if not (master.wait_terminal(_STOP_TIMEOUT) and master.wait_released(_STOP_TIMEOUT)):
                raise JobExecutionError(
                    f"job {self.job_id}: its tasks did not end and release their slots within {_STOP_TIMEOUT:.0f} s "
                    f"after {cause}", job_id=self.job_id,
                )  # fmt: skip
            if self._cancelled_by is not None:
                self._finish(master.result)
                return
            # The latest completed checkpoint: a commit in flight was drained before the master ended.
            completed = master.checkpoints.completed if master.checkpoints is not None else []
            restore = (completed[-1].checkpoint_id, completed[-1].path) if completed else self._restored
            self._state.transition(_S.WAITING_FOR_RESOURCES)
            after = self.requirements.parallelism_for(self._wait_for_resources())
            self._start_successor(master, after, restore, before, f"reactive: {cause}", asked)
        except BaseException as exc:  # noqa: BLE001 - the job's result carries it
            log.warning("job %s: the restart after %s failed: %s: %s", self.job_id, cause, type(exc).__name__, exc)
            self.last_failure = f"the restart after {cause} failed: {type(exc).__name__}: {exc}"
            self.num_failures += 1
            self._fail(exc)
