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

States (:class:`AdaptiveJobState`, Flink's AdaptiveScheduler states that
apply here): EXECUTING -> RESTARTING (a rescale) -> EXECUTING, and FINISHED
once the job's result is set.
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
from flinklike_spark.errors import JobCancelledError, JobExecutionError, JobNotRunningError, RescaleRefusedError

__all__ = ["AdaptiveJob", "AdaptiveJobState", "JobResources", "RescaleEvent"]

log = logging.getLogger(__name__)

#: Seconds a rescale waits for the tasks to run, or to end and the TaskExecutors to release the job.
_STOP_TIMEOUT = 120.0


def _wait_until_running(master: JobMaster) -> None:
    """Until every task of ``master`` runs (or finished), ``master`` ended, or :data:`_STOP_TIMEOUT` passed."""
    deadline = time.monotonic() + _STOP_TIMEOUT
    while not master.result.done() and time.monotonic() < deadline:
        if master.graph.every_task_running():
            return
        time.sleep(0.02)


class AdaptiveJobState(Enum):
    EXECUTING = "executing"
    RESTARTING = "restarting"  # a rescale: stop-with-checkpoint, then a JobMaster at the new parallelism
    FINISHED = "finished"  # the job's result is set


ADAPTIVE_JOB_TRANSITIONS: Mapping[AdaptiveJobState, frozenset[AdaptiveJobState]] = {
    AdaptiveJobState.EXECUTING: frozenset({AdaptiveJobState.RESTARTING, AdaptiveJobState.FINISHED}),
    AdaptiveJobState.RESTARTING: frozenset({AdaptiveJobState.EXECUTING, AdaptiveJobState.FINISHED}),
    AdaptiveJobState.FINISHED: frozenset(),
}


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
    checkpoint_id: int
    checkpoint_path: str
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


class AdaptiveJob:
    """A submitted job: its current JobMaster, its resource requirements, and a result that outlives rescales.

    Args:
        job_graph: the job as submitted.
        config: the job's configuration.
        start_master: builds and starts a JobMaster for a job graph and configuration, and routes
            the job's messages to it; raises if the cluster is closing.
        resources: the cluster's slots, and TaskExecutors started or stopped for a rescale.
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
        self.requirements = JobResourceRequirements.of(job_graph)
        self.rescales: list[RescaleEvent] = []
        self.last_failure: str | None = None  # why the latest rescale that failed failed
        self.num_failures = 0
        self.autoscaler: Any = None  # a JobAutoscaler with job.autoscaler.enabled (set by the cluster endpoint)
        self._state = StateMachine(f"job {self.job_id}", AdaptiveJobState.EXECUTING, ADAPTIVE_JOB_TRANSITIONS)
        self._lock = threading.Lock()  # one rescale at a time; guards master, requirements, cancel
        self._cancelled_by: str | None = None
        self._checkpoint_timeout = config.checkpointing.timeout.total_seconds() + 30.0
        self.master = start_master(job_graph, config, None)
        self._follow(self.master)

    @property
    def state(self) -> AdaptiveJobState:
        return self._state.state

    @property
    def status(self) -> JobStatus:
        """The job's status: RESTARTING during a rescale, else its JobMaster's."""
        return JobStatus.RESTARTING if self.state is AdaptiveJobState.RESTARTING else self.master.status

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

    def cancel(self, *, by: str = "the program (JobClient.cancel)") -> None:
        """Cancel the job; a rescale in progress then starts no new JobMaster."""
        self._cancelled_by = self._cancelled_by or by
        self.master.cancel(by=by)

    # -- results ----------------------------------------------------------------------------------

    def _follow(self, master: JobMaster) -> None:
        master.result.add_done_callback(lambda f: self._master_ended(master, f))

    def _master_ended(self, master: JobMaster, ended: concurrent.futures.Future) -> None:
        if self.state is AdaptiveJobState.RESTARTING and master is self.master:
            return  # the rescale's own stop: the rescale decides what follows
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
        if master.result.done():  # it finished or failed while the rescale ran: that is the job's result
            self._finish(master.result)

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
        graph = self._graph.with_parallelism(after)
        config = self._config.with_values({"execution.state-recovery.path": checkpoint.path})
        try:
            new_master = self._start_master(graph, config, master)
        except BaseException as exc:
            self._fail(exc)
            raise
        self._graph, self.master = graph, new_master
        _wait_until_running(new_master)  # the job reads RESTARTING until its tasks run again
        event = RescaleEvent(
            timestamp=int(asked * 1000), cause=cause, parallelism_before=before, parallelism_after=after,
            checkpoint_id=checkpoint.checkpoint_id, checkpoint_path=checkpoint.path,
            duration_ms=int((time.time() - asked) * 1000),
        )  # fmt: skip
        self.rescales.append(event)
        self._state.transition(AdaptiveJobState.EXECUTING)
        self._follow(new_master)  # a result set meanwhile was ignored as the rescale's: now it is the job's
        log.info("job %s rescaled to %s from checkpoint %d in %d ms", self.job_id, after, checkpoint.checkpoint_id,
                 event.duration_ms)  # fmt: skip
        if self._cancelled_by is not None:
            new_master.cancel(by=self._cancelled_by)
        released = self._resources.release_idle()
        if released:
            log.info("job %s rescaled down: stopped the idle TaskExecutors %s", self.job_id, released)
        return event
