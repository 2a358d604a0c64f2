"""TaskExecutors on this machine: child processes (the default) or threads of the client.

:class:`ProcessLauncher` forks each TaskExecutor from the client's
:mod:`~flinklike_spark._runtime.cluster.fork_server` (a helper that imported
the TaskExecutor's modules once; the client itself is never forked and the
user's ``__main__`` is never re-imported), or with
``flinklike.local.taskmanager-start-method: spawn`` starts ``python -m
flinklike_spark._runtime.cluster.process_main`` with ``subprocess``. Either
way it writes the bootstrap to the child's stdin, so the secret never appears
on a command line; the pipe stays open and its EOF tells the child that the
client died. With ``process.taskmanager.working-dir`` each
child runs in a private working directory of its own (cwd and ``TMPDIR``), so
that tests can show that TaskExecutors share nothing local with the client or
each other (only the object store). :class:`ThreadLauncher` runs TaskExecutors as
threads of this process (``flinklike.local.taskmanager-mode: thread``: for
``memory://`` file systems and debugging).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence

from flinklike_spark._runtime.cluster.fork_server import ForkedProcess, fork_server
from flinklike_spark._runtime.cluster.launcher import TaskExecutorBootstrap
from flinklike_spark._runtime.taskexecutor.task_executor import TaskExecutor
from flinklike_spark.config import TaskManagerStartMethod

__all__ = ["LOCAL_HOST", "ProcessLauncher", "ThreadLauncher", "private_working_dir"]

log = logging.getLogger(__name__)

LOCAL_HOST = "127.0.0.1"
"""Where local TaskExecutors bind unless ``taskmanager.host`` says otherwise."""


def private_working_dir(parent: str | None, resource_id: str) -> str | None:
    """Create and return ``<parent>/tm_<resource_id>`` (with ``tmp/``), Flink's TaskManager working
    directory under ``process.taskmanager.working-dir``; None without a parent (the client's cwd)."""
    if parent is None:
        return None
    directory = os.path.join(os.path.abspath(parent), f"tm_{resource_id}")
    os.makedirs(os.path.join(directory, "tmp"), exist_ok=True)
    return directory


class ProcessLauncher:
    """One child process per TaskExecutor. ``pids`` maps resource ids to live children's pids."""

    description = "local processes"

    def __init__(self, start_method: TaskManagerStartMethod = TaskManagerStartMethod.FORKSERVER) -> None:
        self._lock = threading.Lock()
        self._processes: dict[str, subprocess.Popen | ForkedProcess] = {}
        self._start_method = start_method

    @property
    def pids(self) -> dict[str, int]:
        with self._lock:
            return {rid: p.pid for rid, p in self._processes.items()}

    def launch(self, bootstraps: Sequence[TaskExecutorBootstrap]) -> None:
        for bootstrap in bootstraps:
            self._spawn(bootstrap.with_host(LOCAL_HOST))

    def _spawn(self, bootstrap: TaskExecutorBootstrap) -> None:
        data = bootstrap.to_bytes()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in bootstrap.sys_path)
        cwd = private_working_dir(bootstrap.config.cluster.task_manager_working_dir, bootstrap.resource_id)
        if cwd is not None:
            env["TMPDIR"] = os.path.join(cwd, "tmp")
        process = self._start(env, cwd)
        process.stdin.write(len(data).to_bytes(8, "big") + data)
        process.stdin.flush()  # keep stdin open: its EOF tells the child that we died
        with self._lock:
            self._processes[bootstrap.resource_id] = process

    def _start(self, env: dict[str, str], cwd: str | None) -> subprocess.Popen | ForkedProcess:
        if self._start_method is TaskManagerStartMethod.FORKSERVER:
            try:
                return fork_server().spawn(env, cwd)
            except OSError as exc:
                log.warning("cannot fork a TaskExecutor from the fork server (%s); spawning a fresh interpreter", exc)
        return subprocess.Popen(
            [sys.executable, "-m", "flinklike_spark._runtime.cluster.process_main"], stdin=subprocess.PIPE, env=env,
            cwd=cwd,
        )  # fmt: skip

    def exit_reason(self, resource_id: str) -> str | None:
        with self._lock:
            process = self._processes.get(resource_id)
        if process is None or process.poll() is None:
            return None
        return f"TaskExecutor process {process.pid} exited with code {process.returncode}"

    def launch_failure(self) -> str | None:
        return None

    def exited(self) -> dict[str, int | None]:
        """Exit codes of the children that exited (for error messages)."""
        with self._lock:
            return {rid: p.returncode for rid, p in self._processes.items() if p.poll() is not None}

    def kill(self, resource_id: str, reason: str) -> None:
        with self._lock:
            process = self._processes.get(resource_id)
        if process is not None and process.poll() is None:
            log.warning("killing unresponsive TaskExecutor %s (pid %d): %s", resource_id, process.pid, reason)
            process.kill()

    returns_hosts = False  # a released TaskExecutor's process exits: nothing else holds resources

    def give_back_idle(self, count: int | None) -> list[str]:
        return []

    def forget(self, resource_id: str) -> None:
        """Drop an exited child (after a replacement was started), closing its stdin pipe."""
        with self._lock:
            process = self._processes.pop(resource_id, None)
        if process is not None and process.stdin is not None:
            process.stdin.close()

    def close(self, acknowledged: Iterable[str], timeout: float) -> None:
        acknowledged = set(acknowledged)
        deadline = time.monotonic() + timeout
        with self._lock:
            processes = dict(self._processes)
        for resource_id, process in processes.items():
            if resource_id not in acknowledged and process.poll() is None:
                process.kill()  # lost or unresponsive (e.g. frozen): waiting for it would only delay the client
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5.0)
            if process.stdin is not None:
                process.stdin.close()


class ThreadLauncher:
    """TaskExecutors as objects in this process; ``executors`` maps resource ids to them."""

    description = "threads of the client"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.executors: dict[str, TaskExecutor] = {}

    def launch(self, bootstraps: Sequence[TaskExecutorBootstrap]) -> None:
        for bootstrap in bootstraps:
            executor = TaskExecutor.from_bootstrap(bootstrap.with_host(LOCAL_HOST))
            with self._lock:
                self.executors[bootstrap.resource_id] = executor
            executor.start()

    def exit_reason(self, resource_id: str) -> str | None:
        with self._lock:
            executor = self.executors.get(resource_id)
        if executor is not None and executor.wait_closed(0):
            return f"TaskExecutor thread {resource_id} closed"
        return None

    def launch_failure(self) -> str | None:
        return None

    def exited(self) -> dict[str, int | None]:
        return {}

    def kill(self, resource_id: str, reason: str) -> None:
        with self._lock:
            executor = self.executors.get(resource_id)
        if executor is not None:
            log.warning("closing unresponsive TaskExecutor %s: %s", resource_id, reason)
            threading.Thread(target=executor.close, name="tm-kill", daemon=True).start()

    returns_hosts = False  # threads of the client: nothing to give back

    def give_back_idle(self, count: int | None) -> list[str]:
        return []

    def forget(self, resource_id: str) -> None:
        with self._lock:
            self.executors.pop(resource_id, None)

    def close(self, acknowledged: Iterable[str], timeout: float) -> None:
        with self._lock:
            executors = list(self.executors.values())
        for executor in executors:
            executor.close()
