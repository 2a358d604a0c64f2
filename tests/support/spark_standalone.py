"""A real Spark standalone cluster on 127.0.0.1, started from pyspark's package.

One master and one worker (``--cores 2``), as the Spark docs describe them
(``bin/spark-class org.apache.spark.deploy.master.Master`` / ``...Worker``;
the pyspark wheel has no ``sbin/start-*.sh``). Applications connect with
:meth:`StandaloneCluster.spark_conf`: two executors of one core each.
Everything it started (master, worker, executor JVMs and their Python
workers) is killed by :meth:`StandaloneCluster.stop`.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import zipfile
from pathlib import Path

import psutil
import pyspark

from flinklike_spark._runtime.network.ports import free_port

__all__ = [
    "ROOT",
    "SPARK_HOME",
    "StandaloneCluster",
    "still_serving",
    "task_executor_workers",
    "wait_until",
    "write_project_zip",
]

SPARK_HOME = Path(pyspark.__file__).resolve().parent
ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("flinklike_spark", "connectors", "checkpointing")


def write_project_zip(path: Path) -> Path:
    """Zip this checkout's packages into ``path``, as ``--py-files`` ships them; return ``path``.

    Built from the checkout, so executors run the code under test rather than an installed copy.
    """
    with zipfile.ZipFile(path, "w") as archive:
        for package in PACKAGES:
            for source in sorted((ROOT / package).rglob("*.py")):
                archive.write(source, source.relative_to(ROOT))
    return path


class StandaloneCluster:
    """A standalone master and worker; ``start()`` returns once the worker registered.

    Args:
        work_dir: the worker's ``--work-dir`` (executor logs land there).
        cores / memory: what the worker offers.
    """

    def __init__(self, work_dir: Path, *, cores: int = 2, memory: str = "2g") -> None:
        self.work_dir = Path(work_dir)
        self.cores = cores
        self.memory = memory
        self.port = free_port()
        self.web_port = free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self._processes: list[subprocess.Popen] = []
        self._logs: list = []

    def _spawn(self, name: str, *args: str) -> subprocess.Popen:
        log = open(self.work_dir / f"{name}.log", "wb")  # noqa: SIM115 - closed in stop()
        self._logs.append(log)
        env = dict(os.environ, SPARK_HOME=str(SPARK_HOME), SPARK_LOCAL_IP="127.0.0.1")
        process = subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), *args],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip
        self._processes.append(process)
        return process

    def start(self, timeout: float = 90.0) -> StandaloneCluster:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._spawn("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                    "--port", str(self.port), "--webui-port", str(self.web_port))  # fmt: skip
        self._wait_for_log("master.log", "I have been elected leader", timeout)
        self._spawn("worker", "org.apache.spark.deploy.worker.Worker", self.master_url, "--host", "127.0.0.1",
                    "--cores", str(self.cores), "--memory", self.memory, "--webui-port", str(free_port()),
                    "--work-dir", str(self.work_dir / "work"))  # fmt: skip
        self._wait_for_log("worker.log", "Successfully registered with master", timeout)
        return self

    def _wait_for_log(self, name: str, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        path = self.work_dir / name
        while time.monotonic() < deadline:
            if path.exists() and text in path.read_text(errors="replace"):
                return
            if any(p.poll() is not None for p in self._processes):
                break
            time.sleep(0.3)
        self.stop()
        tail = path.read_text(errors="replace")[-3000:] if path.exists() else "(no log)"
        raise RuntimeError(f"Spark standalone {name} did not log {text!r} within {timeout:.0f} s:\n{tail}")

    def spark_conf(self) -> dict[str, str]:
        """Client settings for an application on this cluster: two one-core executors on 127.0.0.1."""
        return {
            "spark.master": self.master_url,
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.executor.cores": "1",
            "spark.cores.max": "2",
            "spark.executor.memory": "512m",
            "spark.ui.enabled": "false",
        }

    def descendants(self) -> list[psutil.Process]:
        """Every live process the master and worker started (executors and their Python workers)."""
        found = []
        for process in self._processes:
            try:
                found += psutil.Process(process.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                pass
        return [p for p in found if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]

    def executor_processes(self) -> list[psutil.Process]:
        """This cluster's executor JVMs (``CoarseGrainedExecutorBackend``), not other users' ones."""
        found = []
        for process in self.descendants():
            try:
                if any("CoarseGrainedExecutorBackend" in part for part in process.cmdline()):
                    found.append(process)
            except psutil.NoSuchProcess:
                pass
        return found

    def stop(self) -> list[psutil.Process]:
        """Kill the worker (with its executors and their Python workers) and the master. Idempotent.

        Returns the processes of the cluster still running afterwards (none, unless something escaped).
        """
        victims = self.descendants() + [psutil.Process(p.pid) for p in self._processes if p.poll() is None]
        for process in reversed(self._processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)
        for process in victims:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(victims, timeout=30)
        for log in self._logs:
            log.close()
        self._processes.clear()
        self._logs.clear()
        return [p for p in victims if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


if __name__ == "__main__":  # manual experiments: start, print the master URL, stop on Enter
    import tempfile

    directory = Path(tempfile.mkdtemp(prefix="spark-standalone-"))
    cluster = StandaloneCluster(directory).start()
    print(cluster.master_url, directory, flush=True)
    try:
        input()
    finally:
        cluster.stop()
        shutil.rmtree(directory, ignore_errors=True)


def task_executor_workers(cluster: StandaloneCluster) -> dict[int, set[int]]:
    """Python workers of Spark executors that serve a port: the TaskExecutors (pid -> ports).

    A TaskExecutor runs in a Python worker forked by an executor's
    ``pyspark.daemon``; it is the only kind of worker that listens on a port.
    """
    found: dict[int, set[int]] = {}
    for executor in cluster.executor_processes():
        try:
            workers = [w for daemon in executor.children() for w in daemon.children()]
        except psutil.NoSuchProcess:
            continue
        for worker in workers:
            try:
                ports = {c.laddr.port for c in worker.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
            except psutil.NoSuchProcess:
                continue
            if ports:
                found[worker.pid] = ports
    return found


def still_serving(workers: dict[int, set[int]]) -> dict[int, set[int]]:
    """Those of ``workers`` (pid -> ports) whose process still listens on one of those ports."""
    alive = {}
    for pid, ports in workers.items():
        try:
            process = psutil.Process(pid)
            if process.status() == psutil.STATUS_ZOMBIE:
                continue
            listening = {c.laddr.port for c in process.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
        except psutil.NoSuchProcess:
            continue
        if listening & ports:
            alive[pid] = listening & ports
    return alive


def wait_until(predicate, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)
