"""The JobMaster's side of a cluster: RPC node, ResourceManager, job routing, loss handling.

A :class:`ClusterEndpoint` runs in the client (or the Spark driver): one
authenticated Flight node that TaskExecutors register and report to, the
:class:`~flinklike_spark._runtime.jobmaster.resource_manager.ResourceManager`
and the JobMasters of submitted jobs. Where TaskExecutors run is its
:class:`~flinklike_spark._runtime.cluster.launcher.TaskExecutorLauncher`'s
business.

Loss handling: a monitor thread asks the launcher every 0.2 s whether a
TaskExecutor is gone (its process exited, its Spark task ended); such a
TaskExecutor is reported lost to the running jobs (failover restarts the
affected regions) and the launcher is asked for replacements, all lost ones
of one pass in one :meth:`~TaskExecutorLauncher.launch` (on Spark: one barrier
stage each). A TaskExecutor the ResourceManager declares lost by heartbeat timeout
is killed through the launcher: like a worker that Flink's ResourceManager
released, a frozen TaskExecutor must not come back and write for a job that
moved on; once gone it is replaced the same way.

Spare TaskExecutors (``slotmanager.redundant-taskmanager-num``, Flink's
FLINK-18625): the cluster starts that many TaskExecutors beyond
``local.number-taskmanager``. They are ordinary TaskExecutors whose slots are
free: the ResourceManager hands out any free slot, so a job's tasks may land on
any of them, and after a loss the restarted tasks take the free slots at once
instead of waiting for the replacement to start and register. The replacement
is still launched; once registered, its free slots are the new spare capacity.
``start`` waits for the ``local.number-taskmanager`` TaskExecutors jobs need,
not for the spares (as Flink's redundant workers, they come when the resource
provider can start them).

Reactive mode (``scheduler-mode: reactive``) starts no replacements: as in
Flink, the cluster is as large as its deployment makes it, and jobs follow it
(:mod:`~flinklike_spark._runtime.cluster.adaptive_job`). TaskExecutors join a
running cluster through :meth:`ClusterEndpoint.start_task_executors` (Flink: one
more ``taskmanager.sh start``); under reactive mode the jobs then scale up.
"""

from __future__ import annotations

import concurrent.futures
import logging
import sys
import threading
import time
import uuid

from checkpointing.layout import CheckpointLayout
from flinklike_spark._runtime.autoscaler.job_autoscaler import JobAutoscaler
from flinklike_spark._runtime.autoscaler.metric_window import VertexSample, sample_vertex
from flinklike_spark._runtime.checkpoint_messages import CheckpointAck, CheckpointDecline
from flinklike_spark._runtime.cluster.adaptive_job import AdaptiveJob
from flinklike_spark._runtime.cluster.launcher import TaskExecutorBootstrap, TaskExecutorLauncher
from flinklike_spark._runtime.deployment import TaskExecutionState
from flinklike_spark._runtime.gateways import serve_cluster_endpoint
from flinklike_spark._runtime.graph.execution_state import ExecutionState
from flinklike_spark._runtime.graph.job_graph import JobGraph
from flinklike_spark._runtime.jobmaster.jobmaster import JobMaster
from flinklike_spark._runtime.jobmaster.main_thread import MainThreadExecutor
from flinklike_spark._runtime.jobmaster.resource_manager import ResourceManager
from flinklike_spark._runtime.rest.web_monitor import WebMonitor
from flinklike_spark._runtime.rpc import FlightNode, generate_secret
from flinklike_spark._runtime.taskexecutor.registration import TaskExecutorRegistration
from flinklike_spark._runtime.taskexecutor.task_slot import SlotReport
from flinklike_spark._runtime.watermark_alignment import WatermarkReport
from flinklike_spark.common.watermark_strategy import MAX_WATERMARK
from flinklike_spark.config import Configuration, SchedulerType
from flinklike_spark.errors import ConfigurationError, FlinklikeError
from flinklike_spark.job_client import JobClient

__all__ = ["REGISTRATION_TIMEOUT", "ClusterEndpoint"]

log = logging.getLogger(__name__)

REGISTRATION_TIMEOUT = 120.0
"""Seconds ``start`` waits for the first TaskExecutors to register."""


class ClusterEndpoint:
    """A cluster's JobMaster side. Use as a context manager or call ``start``/``close``.

    Args:
        config: the cluster's configuration; ``local.number-taskmanager`` plus
            ``slotmanager.redundant-taskmanager-num`` TaskExecutors of
            ``taskmanager.numberOfTaskSlots`` slots are started.
        launcher: starts the TaskExecutors.
        rpc_host: the interface the endpoint's Flight node binds and advertises
            (``jobmanager.rpc.address``); TaskExecutors must reach it.
        resource_id_prefix: prefix of the TaskExecutors' resource ids.
    """

    def __init__(
        self,
        config: Configuration,
        launcher: TaskExecutorLauncher,
        *,
        rpc_host: str = "127.0.0.1",
        resource_id_prefix: str = "taskmanager",
    ) -> None:
        self.config = config
        self.launcher = launcher
        self._prefix = resource_id_prefix
        self._secret = generate_secret()
        self._main = MainThreadExecutor(name="jobmaster-main")
        self._node = FlightNode(self._secret, host=rpc_host)
        self.resource_manager = ResourceManager(
            self.config, self._secret, self._main, liveness_probe=launcher.exit_reason
        )
        self._launched: list[str] = []  # guarded by _launch_lock
        self._on_demand: set[str] = set()  # started for a rescale (slotmanager.number-of-slots.max); _launch_lock
        self._jobs: dict[str, JobMaster] = {}  # job id -> its current JobMaster (a rescale replaces it)
        self.adaptive_jobs: dict[str, AdaptiveJob] = {}
        self._closed = threading.Event()
        self._launch_lock = threading.Lock()  # close() never misses a replacement started meanwhile
        self._monitor = threading.Thread(target=self._monitor_task_executors, name="cluster-monitor", daemon=True)
        # REST API, dashboard and Prometheus (flinklike_spark/_runtime/rest/); jobs stay listed after they end
        self.web_monitor = WebMonitor(config, jobs=lambda: dict(self._jobs), main_thread=self._main,
                                      resource_manager=self.resource_manager,
                                      adaptive_jobs=lambda: dict(self.adaptive_jobs))  # fmt: skip
        self.metric_store = self.web_monitor.metric_store

    def __enter__(self) -> ClusterEndpoint:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    @property
    def address(self) -> str:
        """The endpoint's Flight address (known after ``start``)."""
        return self._node.address

    def start(self) -> None:
        """Start RPC, launch the TaskExecutors (and the spares) and wait until those jobs need registered.

        Raises:
            FlinklikeError: the launcher reported that TaskExecutors cannot start, or
                ``local.number-taskmanager`` of them did not register within
                :data:`REGISTRATION_TIMEOUT` (the cluster is closed then).
        """
        node = self._node
        serve_cluster_endpoint(node, self)
        node.start()
        count = self.config.cluster.number_of_task_managers
        spares = self.config.cluster.redundant_task_managers
        try:
            self.web_monitor.start()
            self._launch([f"{self._prefix}-{i}-{uuid.uuid4().hex[:6]}" for i in range(count + spares)])
            self._monitor.start()
            self.resource_manager.add_job_listener(self)  # kills what it declares lost
            self.resource_manager.start_heartbeat_checks()
            self._wait_for_registrations(count)
            if self.config.cluster.max_slots is not None:  # elastic: hold only what hosts TaskExecutors
                self._give_back_idle(None)
        except BaseException:
            self.close()
            raise
        log.info("cluster up: %d TaskExecutors (+%d spare) on %s, JobMaster RPC at %s, dashboard at %s", count,
                 spares, self.launcher.description, node.address, self.web_monitor.url)  # fmt: skip

    def _wait_for_registrations(self, count: int) -> None:
        deadline = time.monotonic() + REGISTRATION_TIMEOUT
        while not self.resource_manager.wait_for_task_executors(count, timeout=0.25):
            failure = self.launcher.launch_failure()
            if failure is not None:
                raise FlinklikeError(f"TaskExecutors on {self.launcher.description} cannot start: {failure}")
            if time.monotonic() > deadline:
                exited = self.launcher.exited()
                raise FlinklikeError(
                    f"only {self.resource_manager.num_registered()} of {count} TaskExecutors on "
                    f"{self.launcher.description} registered within {REGISTRATION_TIMEOUT:.0f} s; "
                    f"exited processes and codes: {exited or 'none'}"
                )

    def _bootstrap(self, resource_id: str) -> TaskExecutorBootstrap:
        return TaskExecutorBootstrap(
            resource_id=resource_id,
            config=self.config,
            secret=self._secret,
            jobmaster_address=self._node.address,
            host=self.config.cluster.task_manager_host,
            log_level=logging.getLogger().getEffectiveLevel() or logging.WARNING,
            sys_path=tuple(p for p in sys.path if p),
        )

    def _launch(self, resource_ids: list[str]) -> None:
        with self._launch_lock:
            if self._closed.is_set():
                return
            self._launched += resource_ids
            self.launcher.launch([self._bootstrap(rid) for rid in resource_ids])

    def _monitor_task_executors(self) -> None:
        reported: set[str] = set()
        while not self._closed.wait(0.2):
            with self._launch_lock:
                candidates = [rid for rid in self._launched if rid not in reported]
            lost = {}
            for resource_id in candidates:
                reason = self.launcher.exit_reason(resource_id)
                if reason is not None:
                    lost[resource_id] = reason
            if not lost:
                continue
            reported.update(lost)
            for resource_id, reason in lost.items():
                self.resource_manager.task_executor_lost(resource_id, reason)
            self._replace(sorted(lost))

    def _replace(self, lost: list[str]) -> None:
        """Start new TaskExecutors for ones that are gone (monitor thread); none under reactive mode."""
        if self._closed.is_set():
            return
        with self._launch_lock:
            self._launched = [rid for rid in self._launched if rid not in lost]
        for resource_id in lost:
            self.launcher.forget(resource_id)
        if self.config.failover.reactive:
            with self._launch_lock:
                self._on_demand.difference_update(lost)
            log.warning("TaskExecutors %s are gone; reactive mode starts none in their place", lost)
            return
        replacements = [f"{self._prefix}-{uuid.uuid4().hex[:6]}" for _ in lost]
        with self._launch_lock:  # a replacement of a TaskExecutor started for a rescale is one too
            on_demand = [r for r, gone in zip(replacements, lost, strict=True) if gone in self._on_demand]
            self._on_demand.difference_update(lost)
            self._on_demand.update(on_demand)
        self.resource_manager.mark_on_demand(on_demand)
        log.warning("TaskExecutors %s are gone; starting %s in their place on %s", lost, replacements,
                    self.launcher.description)  # fmt: skip
        try:
            self._launch(replacements)
        except Exception:  # noqa: BLE001 - jobs then fail on slot.request.timeout, naming the shortage
            log.exception("could not start replacement TaskExecutors for %s", lost)

    def task_executor_lost(self, resource_id: str, reason: str) -> None:
        """Loss listener (main thread): stop a TaskExecutor declared lost, so that it is replaced."""
        self.launcher.kill(resource_id, reason)

    # -- RPC handlers (Flight threads): post to the main thread ------------------------------

    def register_task_executor(self, registration: TaskExecutorRegistration) -> bool:
        self.resource_manager.register(registration)
        return True

    def heartbeat(
        self, resource_id: str, slot_report: SlotReport, metrics: dict[str, dict[str, float]] | None = None
    ) -> bool:
        if metrics:
            self.metric_store.add_task_metrics(metrics)
        return self.resource_manager.heartbeat(resource_id, slot_report)

    def update_task_execution_state(self, state: TaskExecutionState) -> bool:
        job = self._jobs.get(state.job_id)
        if job is None:
            return False
        if state.metrics:
            self.metric_store.add_task_metrics({state.execution_id: state.metrics})
        job.update_task_execution_state(state)
        return True

    def acknowledge_checkpoint(self, ack: CheckpointAck) -> bool:
        job = self._jobs.get(ack.job_id)
        if job is None:
            return False
        job.acknowledge_checkpoint(ack)
        return True

    def decline_checkpoint(self, decline: CheckpointDecline) -> bool:
        job = self._jobs.get(decline.job_id)
        if job is None:
            return False
        job.decline_checkpoint(decline)
        return True

    def deliver_collect_result(self, job_id: str, collect_id: str, batch_id: str, payload: bytes) -> bool:
        job = self._jobs.get(job_id)
        return job is not None and job.collect_results.deliver(collect_id, batch_id, payload)

    def report_watermark(self, report: WatermarkReport) -> int:
        job = self._jobs.get(report.job_id)
        return MAX_WATERMARK if job is None else job.watermark_alignment.report(report)

    # -- jobs -----------------------------------------------------------------------------------

    def submit_job(self, job_graph: JobGraph, *, owns_cluster: bool = False) -> JobClient:
        """Start ``job_graph``; with ``owns_cluster`` the cluster closes when the job ends.

        Under the adaptive scheduler this returns once the job waited for resources and runs.

        Raises:
            NoResourceAvailableError: the slots did not meet the job's lower bounds within
                ``jobmanager.adaptive-scheduler.resource-wait-timeout``.
            ConfigurationError: ``job.autoscaler.enabled`` without ``jobmanager.scheduler: adaptive``.
        """
        autoscaling = self.config.autoscaler.enabled
        if autoscaling and self.config.failover.scheduler is not SchedulerType.ADAPTIVE:
            raise ConfigurationError(
                "job.autoscaler.enabled: true needs jobmanager.scheduler: adaptive (the autoscaler applies its "
                f"decisions by rescaling the running job), got jobmanager.scheduler: "
                f"{self.config.failover.scheduler.value}"
            )
        job = AdaptiveJob(job_graph, self.config, start_master=self._start_master, resources=self)
        self.adaptive_jobs[job_graph.job_id] = job
        if autoscaling:
            self._start_autoscaler(job)
        return JobClient(
            job_id=job_graph.job_id,
            result=job.result,
            status=lambda: job.status,
            cancel=job.cancel,
            trigger_savepoint=lambda: job.master.trigger_savepoint(),
            stop_with_savepoint=lambda: job.master.trigger_savepoint(stop=True),
            metrics=lambda: self.resource_manager.task_metrics(),
            exception_history=lambda: job.master.failover.handler.exception_history,
            restarts=lambda: job.master.failover.handler.number_of_restarts,
            attempts=lambda: {str(v.id): v.current_execution.attempt_number for v in job.master.graph.vertices()},
            pending_checkpoints=lambda: job.master.describe_pending_checkpoints(),
            collect_results=job.master.collect_results,
            placement=lambda: self._placement(job.master),
            on_done=self.close if owns_cluster else None,
            web_interface_url=self.web_monitor.url,
            storage=self.config.storage,
            resource_requirements=job,
            start_task_executors=self.start_task_executors,
        )

    def _start_master(self, job_graph: JobGraph, config: Configuration, previous: JobMaster | None) -> JobMaster:
        """Build and start a JobMaster for ``job_graph`` and route the job's messages to it."""
        with self._launch_lock:
            if self._closed.is_set():
                raise FlinklikeError(f"the cluster is shutting down: job {job_graph.job_id} is not started")
            master = JobMaster(job_graph, config, self.resource_manager, self._main, previous=previous)
            self._jobs[job_graph.job_id] = master
        self.resource_manager.add_job_listener(master)
        master.start()
        return master

    def _start_autoscaler(self, job: AdaptiveJob) -> None:
        directory = self.config.checkpointing.directory
        layout = CheckpointLayout(base_url=directory, storage=self.config.storage) if directory else None
        job.autoscaler = JobAutoscaler(job, self.config.autoscaler, sample=self._sample, decisions_table=layout)
        job.result.add_done_callback(lambda _: job.autoscaler.close())
        job.autoscaler.start()

    def _sample(self, master: JobMaster) -> dict[str, VertexSample]:
        """One autoscaler sample per vertex of ``master``'s current attempts (counters fetched if half an interval old)."""
        max_age = self.config.autoscaler.interval.total_seconds() / 2
        self.metric_store.refresh_if_older(max_age, lambda: self.resource_manager.task_metrics(timeout=1.0))
        done: concurrent.futures.Future[dict[str, list[str]]] = concurrent.futures.Future()

        def attempts() -> None:
            try:
                done.set_result({vid: [v.current_execution.attempt_id.full_id for v in ejv.task_vertices]
                                 for vid, ejv in master.graph.job_vertices.items()})  # fmt: skip
            except BaseException as exc:  # noqa: BLE001 - handed to the autoscaler's thread
                done.set_exception(exc)

        self._main.execute(attempts)
        samples = {}
        for vertex_id, ids in done.result(timeout=10.0).items():
            sample = sample_vertex((i, self.metric_store.raw(i)) for i in ids)
            if sample is not None:
                samples[vertex_id] = sample
        return samples

    # -- resources that follow a job's requirements (AdaptiveJob's JobResources) -------------------

    def slots_possible(self, job_id: str) -> int:
        """The slots ``job_id`` could hold once TaskExecutors up to ``slotmanager.number-of-slots.max`` started."""
        return self.resource_manager.slots_for_job(job_id) + self._slot_room()

    def _slot_room(self) -> int:
        most = self.config.cluster.max_slots
        if most is None:
            return 0
        per = self.config.cluster.slots_per_task_manager
        with self._launch_lock:
            starting = [rid for rid in self._launched if not self.resource_manager.is_registered(rid)]
        return max(0, (most - self.resource_manager.total_slots()) // per * per - len(starting) * per)

    def ensure_slots(self, job_id: str, wanted: int) -> int:
        """Start TaskExecutors until ``job_id`` could hold ``wanted`` slots, within ``slotmanager.number-of-slots.max``.

        Waits up to :data:`REGISTRATION_TIMEOUT` for them to register; returns the slots the job
        could hold then (fewer than ``wanted`` if the maximum or a failed start stopped it).
        """
        have = self.resource_manager.slots_for_job(job_id)
        per = self.config.cluster.slots_per_task_manager
        count = min(-(-(wanted - have) // per), self._slot_room() // per) if wanted > have else 0
        if count <= 0:
            return have
        started = [f"{self._prefix}-{uuid.uuid4().hex[:6]}" for _ in range(count)]
        log.info("job %s wants %d slots and has %d: starting TaskExecutors %s", job_id, wanted, have, started)
        with self._launch_lock:
            self._on_demand.update(started)
        self.resource_manager.mark_on_demand(started)
        self._launch(started)
        self._wait_registered(started)
        return self.resource_manager.slots_for_job(job_id)

    def _wait_registered(self, started: list[str]) -> list[str]:
        """Wait up to :data:`REGISTRATION_TIMEOUT` for ``started`` to register (or exit); the ones that did not."""
        deadline = time.monotonic() + REGISTRATION_TIMEOUT
        while True:
            pending = [rid for rid in started if not self.resource_manager.is_registered(rid)]
            if not pending or all(self.launcher.exit_reason(rid) for rid in pending):
                return pending
            if time.monotonic() >= deadline or self._closed.is_set():
                return pending
            time.sleep(0.05)

    def start_task_executors(self, count: int) -> list[str]:
        """Start ``count`` more TaskExecutors (Flink: ``taskmanager.sh start``); their resource ids once registered.

        Their slots are free for any job; under reactive mode the running jobs scale up to them.

        Raises:
            ValueError: ``count`` is below 1.
            FlinklikeError: some did not register within :data:`REGISTRATION_TIMEOUT`, or the cluster is closed.
        """
        if count < 1:
            raise ValueError(f"count must be at least 1, got {count}")
        if self._closed.is_set():
            raise FlinklikeError("the cluster is shut down: no TaskExecutor is started")
        started = [f"{self._prefix}-{uuid.uuid4().hex[:6]}" for _ in range(count)]
        log.info("starting TaskExecutors %s on %s", started, self.launcher.description)
        self._launch(started)
        pending = self._wait_registered(started)
        if pending:
            reasons = {rid: self.launcher.exit_reason(rid) or "not registered" for rid in pending}
            raise FlinklikeError(f"TaskExecutors {reasons} did not register within {REGISTRATION_TIMEOUT:.0f} s")
        return started

    def slots_available(self, job_id: str) -> int:
        """The registered slots ``job_id`` could hold now: free ones and its own."""
        return self.resource_manager.slots_for_job(job_id)

    def task_executors(self) -> frozenset[str]:
        """The resource ids of the registered TaskExecutors."""
        return frozenset(self.resource_manager.task_executor_pids())

    def release_idle(self) -> list[str]:
        """Stop the TaskExecutors started for a rescale that hold no slot (after a rescale down)."""
        with self._launch_lock:
            candidates = sorted(self._on_demand)
        released = []
        for resource_id in candidates:
            with self._launch_lock:  # off the monitor's list first: its exit is not a loss to replace
                if resource_id in self._launched:
                    self._launched.remove(resource_id)
            if self.resource_manager.release_task_executor(resource_id):
                released.append(resource_id)
                with self._launch_lock:
                    self._on_demand.discard(resource_id)
            else:
                with self._launch_lock:
                    if resource_id in self._on_demand and resource_id not in self._launched:
                        self._launched.append(resource_id)
        if released:
            self._give_back_idle(len(released))
        return released

    def _give_back_idle(self, count: int | None) -> None:
        """Give back ``count`` idle hosts of TaskExecutors (Spark executors) in the background, within 30 s: a
        released TaskExecutor's host turns idle once its task returned. None: every idle host for 30 s (at the
        start, the resource provider's hosts may register after the TaskExecutors the cluster waited for)."""
        if not self.launcher.returns_hosts:
            return

        def give_back() -> None:
            wanted, deadline = count, time.monotonic() + 30.0
            while not self._closed.is_set() and time.monotonic() < deadline:
                given = self.launcher.give_back_idle(wanted)
                if wanted is not None:
                    wanted -= len(given)
                    if wanted <= 0:
                        return
                time.sleep(0.5 if wanted is not None else 1.0)

        threading.Thread(target=give_back, name="give-back-idle", daemon=True).start()

    def _placement(self, job: JobMaster) -> dict[str, dict]:
        pids = self.resource_manager.task_executor_pids()
        placement = {}
        for vertex in job.graph.vertices():
            execution = vertex.current_execution
            slot = execution.assigned_slot
            resource_id = getattr(slot, "resource_id", None)
            placement[str(vertex.id)] = {"state": execution.state.name, "attempt": execution.attempt_number,
                                         "resource_id": resource_id, "pid": pids.get(resource_id),
                                         "deployed_at": execution.state_timestamps.get(ExecutionState.DEPLOYING)}  # fmt: skip
        return placement

    def close(self) -> None:
        """Cancel running jobs, stop every TaskExecutor, stop RPC. Idempotent."""
        with self._launch_lock:
            if self._closed.is_set():
                return
            self._closed.set()
        for adaptive in self.adaptive_jobs.values():
            if adaptive.autoscaler is not None:
                adaptive.autoscaler.close(wait=10.0)
        for job in self._jobs.values():
            job.cancel(by="the cluster shutting down")
        for job in self._jobs.values():
            job.wait_terminal(timeout=10.0)
        acknowledged = self.resource_manager.shutdown_task_executors()
        self.launcher.close(acknowledged, timeout=10.0)
        self.web_monitor.close()
        self.resource_manager.close()
        self._node.shutdown()
        self._main.shutdown()
