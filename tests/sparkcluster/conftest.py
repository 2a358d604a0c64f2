"""A real Spark standalone cluster on 127.0.0.1 for the ``spark``-marked cluster tests.

One master and one worker (3 cores) started from pyspark's package, shared by
every test of this directory (session scope: Spark takes 20-30 s to start) and
killed at the end, after checking that nothing of it is left running.

The Spark *drivers* of these tests run in subprocesses (``cluster_jobs.py``,
directly or under ``spark-submit``): a process holds one SparkContext, and the
``tests/spark`` suite's local session may live in the pytest process; a
subprocess driver can also be killed, which one test needs.

The executors get the project the way Spark users ship code: a zip of the
packages in ``spark.submit.pyFiles`` (``--py-files``). It is built from this
checkout, so the executors run the code under test rather than an installed
copy.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support.spark_standalone import ROOT, StandaloneCluster, write_project_zip


@pytest.fixture(scope="session")
def project_zip(tmp_path_factory) -> Path:
    """The project's packages as one zip, as ``--py-files`` ships them."""
    return write_project_zip(tmp_path_factory.mktemp("pyfiles") / "flinklike.zip")


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory):
    # 3 cores: applications take 2 one-core executors (spark_conf); the spare TaskExecutor test asks for a third
    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark-standalone"), cores=3).start()
    try:
        yield cluster
    finally:
        left = cluster.stop()
    assert not left, f"processes of the Spark cluster left running: {[(p.pid, p.name()) for p in left]}"


class Driver:
    """A Spark driver subprocess speaking ``cluster_jobs.py``'s JSON-lines protocol."""

    def __init__(self, command: list[str], log: Path) -> None:  # runs in log's directory (spark-warehouse)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(Path(__file__).parent)]),
                   PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)  # fmt: skip
        self._log = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.log_path = log
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, env=env, cwd=log.parent,
            start_new_session=True,
        )  # fmt: skip
        self._events: queue.Queue = queue.Queue()
        self.output: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for raw in self.process.stdout:
            line = raw.decode(errors="replace").strip()
            self.output.append(line)
            if line.startswith("{"):
                self._events.put(json.loads(line))
        self._events.put(None)

    def expect(self, event: str, timeout: float) -> dict:
        """The next event named ``event`` (others before it are skipped)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                message = self._events.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                message = "timeout"
            if message is None or message == "timeout":
                raise AssertionError(
                    f"driver: no {event!r} event ({'exited ' + str(self.process.poll()) if message is None else message}"
                    f"); stdout: {self.output[-5:]}; stderr tail:\n{self.log_path.read_text(errors='replace')[-4000:]}"
                )
            if message.get("event") == event:
                print(f"driver event {message}")  # shown with -s or on failure: where the time goes
                return message

    def run(self, scenario: str, args: dict) -> None:
        """Start ``scenario`` in a ``serve`` driver."""
        self.send(json.dumps({"scenario": scenario, "args": args}))

    def send(self, line: str) -> None:
        self.process.stdin.write(line.encode() + b"\n")
        self.process.stdin.flush()

    def wait(self, timeout: float) -> int:
        return self.process.wait(timeout)

    def kill(self) -> None:
        """SIGKILL the driver's whole process group (its JVM too)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(30)

    def stop(self) -> None:
        self.kill()
        self._log.close()


@pytest.fixture(scope="module")
def session_driver(spark_cluster, project_zip, tmp_path_factory):
    """One ``cluster_jobs.py serve`` driver with a session on the cluster, shared by a module's tests
    (each sends a scenario); the project ships as ``spark.submit.pyFiles``."""
    conf = spark_cluster.spark_conf() | {"spark.submit.pyFiles": str(project_zip)}
    log = tmp_path_factory.mktemp("driver") / "driver.log"
    driver = Driver([sys.executable, str(Path(__file__).with_name("cluster_jobs.py")), "serve",
                     json.dumps({"spark_conf": conf})], log)  # fmt: skip
    try:
        driver.expect("session", timeout=240)
        yield driver
    finally:
        driver.stop()


@pytest.fixture
def start_driver(tmp_path):
    drivers: list[Driver] = []

    def start(command: list[str]) -> Driver:
        driver = Driver(command, tmp_path / f"driver-{len(drivers)}.log")
        drivers.append(driver)
        return driver

    yield start
    for driver in drivers:
        driver.stop()
