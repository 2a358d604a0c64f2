"""The embedded local cluster: a JobMaster in this process plus N TaskExecutors.

TaskExecutors run as child processes (``flinklike.local.taskmanager-mode:
process``, the default) started with ``subprocess`` (spawn semantics: nothing
is forked, the user's ``__main__`` is never re-imported), or as threads of this
process (``thread``). All of them register over authenticated Flight RPC; the
cluster's secret is generated per cluster and handed to children over a pipe.

A child that exits unexpectedly, or stops heartbeating for
``heartbeat.timeout``, is reported lost to the running jobs, and a child
declared lost is killed: like a worker that Flink's ResourceManager released,
a frozen TaskExecutor must not come back and write for a job that has moved
on, and closing the cluster must not wait for it. A replacement process is
started for every lost one (a standalone cluster's process supervisor would do
the same), so restarted tasks find slots again within ``slot.request.timeout``.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
import uuid

import cloudpickle

from flinklike_spark.config import Configuration, TaskManagerMode
from flinklike_spark.errors import FlinklikeError
from flinklike_spark.job_client import JobClient
from flinklike_spark._runtime.graph.job_graph import JobGraph
from flinklike_spark._runtime.jobmaster.jobmaster import JobMaster
from flinklike_spark._runtime.jobmaster.resource_manager import ResourceManager
from flinklike_spark._runtime.jobmaster.main_thread import MainThreadExecutor
from flinklike_spark._runtime.rpc import FlightNode, generate_secret
from flinklike_spark._runtime.taskexecutor.task_executor import TaskExecutor, TaskExecutorRegistration

__all__ = ["MiniCluster"]

log = logging.getLogger(__name__)

_REGISTRATION_TIMEOUT = 120.0


class MiniCluster:
    """A local cluster. Use as a context manager or call ``start``/``close``.

    Args:
        config: the cluster's configuration (``local.number-taskmanager``,
            ``taskmanager.numberOfTaskSlots``, ``flinklike.local.taskmanager-mode`` ...).
    """

    def __init__(self, config: Configuration | None = None) -> None:
        self.config = config or Configuration()
        self._secret = generate_secret()
        self._main = MainThreadExecutor(name="jobmaster-main")
        self._node = FlightNode(self._secret)
        self.resource_manager = ResourceManager(
            self.config, self._secret, self._main, liveness_probe=self._exit_reason
        )
        self._processes: dict[str, subprocess.Popen] = {}
        self._thread_executors: dict[str, TaskExecutor] = {}
        self._jobs: dict[str, JobMaster] = {}
        self._closed = threading.Event()
        self._spawn_lock = threading.Lock()  # close() never misses a replacement started meanwhile
        self._monitor = threading.Thread(target=self._monitor_processes, name="minicluster-monitor", daemon=True)

    def __enter__(self) -> MiniCluster:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    @property
    def task_executor_pids(self) -> dict[str, int]:
        return {rid: p.pid for rid, p in self._processes.items()}

    def start(self) -> None:
        node = self._node
        node.register_handler("register_task_executor", self._on_register)
        node.register_handler("heartbeat", self._on_heartbeat)
        node.register_handler("update_task_execution_state", self._on_task_state)
        node.register_handler("checkpoint_report", self._on_checkpoint_report)
        node.start()
        cluster = self.config.cluster
        ids = [f"taskmanager-{i}-{uuid.uuid4().hex[:6]}" for i in range(cluster.number_of_task_managers)]
        for resource_id in ids:
            if cluster.task_manager_mode is TaskManagerMode.PROCESS:
                self._spawn(resource_id)
            else:
                executor = TaskExecutor(
                    resource_id=resource_id, config=self.config, secret=self._secret, jobmaster_address=node.address
                )
                self._thread_executors[resource_id] = executor
                executor.start()
        self._monitor.start()
        self.resource_manager.add_job_listener(self)  # kills what it declares lost
        self.resource_manager.start_heartbeat_checks()
        if not self.resource_manager.wait_for_task_executors(len(ids), timeout=_REGISTRATION_TIMEOUT):
            dead = {rid: p.returncode for rid, p in self._processes.items() if p.poll() is not None}
            self.close()
            raise FlinklikeError(
                f"only {self.resource_manager.num_registered()} of {len(ids)} TaskExecutors registered within "
                f"{_REGISTRATION_TIMEOUT:.0f} s; exited processes and codes: {dead or 'none'}"
            )
        log.info("MiniCluster up: %d TaskExecutors (%s), JobMaster RPC at %s", len(ids), cluster.task_manager_mode.value,
                 node.address)  # fmt: skip

    def _spawn(self, resource_id: str) -> None:
        bootstrap = cloudpickle.dumps(
            {
                "resource_id": resource_id,
                "config": self.config,
                "secret": self._secret,
                "jobmaster_address": self._node.address,
                "log_level": logging.getLogger().getEffectiveLevel() or logging.WARNING,
                "sys_path": [p for p in sys.path if p],
            }
        )
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([p for p in sys.path if p])
        process = subprocess.Popen(
            [sys.executable, "-m", "flinklike_spark._runtime.taskexecutor.process_main"],
            stdin=subprocess.PIPE,
            env=env,
        )
        process.stdin.write(len(bootstrap).to_bytes(8, "big") + bootstrap)
        process.stdin.flush()  # keep stdin open: its EOF tells the child that we died
        self._processes[resource_id] = process

    def _exit_reason(self, resource_id: str) -> str | None:
        """Why the TaskExecutor ``resource_id`` is dead (its process exited), or None (the liveness probe)."""
        process = self._processes.get(resource_id)
        if process is None or process.poll() is None:
            return None
        return f"TaskExecutor process {process.pid} exited with code {process.returncode}"

    def _monitor_processes(self) -> None:
        reported: set[str] = set()
        while not self._closed.wait(0.2):
            for resource_id in list(self._processes):
                reason = self._exit_reason(resource_id) if resource_id not in reported else None
                if reason is not None:
                    reported.add(resource_id)
                    self.resource_manager.task_executor_lost(resource_id, reason)
                    self._replace(resource_id)

    def _replace(self, lost: str) -> None:
        """Start a new TaskExecutor process for one that died (monitor thread)."""
        with self._spawn_lock:
            if self._closed.is_set():
                return
            dead = self._processes.pop(lost)
            if dead.stdin is not None:
                dead.stdin.close()
            resource_id = f"taskmanager-{uuid.uuid4().hex[:6]}"
            log.warning("TaskExecutor %s is gone; starting %s in its place", lost, resource_id)
            try:
                self._spawn(resource_id)
            except Exception:  # noqa: BLE001 - jobs then fail on slot.request.timeout, naming the shortage
                log.exception("could not start a replacement TaskExecutor for %s", lost)

    def task_executor_lost(self, resource_id: str, reason: str) -> None:
        """Loss listener (main thread): kill the process of a TaskExecutor declared lost, so that the
        monitor starts a replacement."""
        process = self._processes.get(resource_id)
        if process is not None and process.poll() is None:
            log.warning("killing unresponsive TaskExecutor %s (pid %d): %s", resource_id, process.pid, reason)
            process.kill()

    # -- RPC handlers (Flight threads): post to the main thread ------------------------------

    def _on_register(self, registration: TaskExecutorRegistration) -> bool:
        self.resource_manager.register(registration)
        return True

    def _on_heartbeat(self, payload) -> bool:
        resource_id, slot_report = payload
        return self.resource_manager.heartbeat(resource_id, slot_report)

    def _on_task_state(self, state) -> bool:
        job = self._jobs.get(state.job_id)
        if job is None:
            return False
        job.update_task_execution_state(state)
        return True

    def _on_checkpoint_report(self, message) -> bool:
        job = self._jobs.get(message.job_id)
        if job is None:
            return False
        job.receive_checkpoint_report(message)
        return True

    # -- jobs -----------------------------------------------------------------------------------

    def submit_job(self, job_graph: JobGraph, *, owns_cluster: bool = False) -> JobClient:
        """Start ``job_graph``; with ``owns_cluster`` the cluster closes when the job ends."""
        job = JobMaster(job_graph, self.config, self.resource_manager, self._main)
        self._jobs[job_graph.job_id] = job
        self.resource_manager.add_job_listener(job)
        job.start()
        return JobClient(
            job_id=job_graph.job_id,
            result=job.result,
            status=lambda: job.status,
            cancel=job.cancel,
            trigger_savepoint=job.trigger_savepoint,
            stop_with_savepoint=lambda: job.trigger_savepoint(stop=True),
            metrics=lambda: self.resource_manager.task_metrics(),
            exception_history=lambda: job.failover.handler.exception_history,
            restarts=lambda: job.failover.handler.number_of_restarts,
            attempts=lambda: {str(v.id): v.current_execution.attempt_number for v in job.graph.vertices()},
            pending_checkpoints=job.describe_pending_checkpoints,
            on_done=self.close if owns_cluster else None,
        )

    def close(self) -> None:
        """Cancel running jobs, stop every TaskExecutor, stop RPC. Idempotent."""
        with self._spawn_lock:
            if self._closed.is_set():
                return
            self._closed.set()
        for job in self._jobs.values():
            job.cancel()
        for job in self._jobs.values():
            job.wait_terminal(timeout=10.0)
        acknowledged = self.resource_manager.shutdown_task_executors()
        for executor in self._thread_executors.values():
            executor.close()
        deadline = time.monotonic() + 10.0
        for resource_id, process in self._processes.items():
            if resource_id not in acknowledged and process.poll() is None:
                process.kill()  # lost or unresponsive (e.g. frozen): waiting for it would only delay the client
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5.0)
            if process.stdin is not None:
                process.stdin.close()
        self.resource_manager.close()
        self._node.shutdown()
        self._main.shutdown()
