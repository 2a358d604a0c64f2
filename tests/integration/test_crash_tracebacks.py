"""Native crashes leave their Python stack (issue 27, item 12).

Every child process the engine starts (TaskExecutors, the Spark bridge's job
runner, the benchmark engines) enables ``faulthandler``: a SIGSEGV (the
quick benchmark's client died so once, without a word) then prints
"Fatal Python error: Segmentation fault" and every thread's stack on the
process's stderr. Each test crashes a real child with SIGSEGV and reads its
stderr.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from connectors import CollectSink, SequenceSource
from flinklike_spark import MapFunction, StreamExecutionEnvironment
from flinklike_spark.errors import JobExecutionError
from tests.support.processes import task_executors_under

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

REPO = Path(__file__).resolve().parents[2]
FATAL = "Fatal Python error: Segmentation fault"


class CrashOnFirstRecord(MapFunction):
    def map(self, value):
        # A real invalid read in this thread of the TaskExecutor process. (os.kill(getpid(), SIGSEGV) is
        # asynchronous: any thread may take it, and the task may finish the job before the process dies.)
        ctypes.string_at(0)
        return value


def test_a_task_executor_that_crashes_prints_the_stack_of_the_crashing_function(capfd):
    env = StreamExecutionEnvironment.get_execution_environment({"restart-strategy.type": "none"})
    env.from_source(SequenceSource(num_keys=1, records_per_key=5)).map(CrashOnFirstRecord()).sink_to(CollectSink("c"))
    with pytest.raises(JobExecutionError):
        env.execute("segfault")
    err = capfd.readouterr().err
    assert FATAL in err, err[-3000:]
    stack = err[err.index(FATAL) :]
    assert "in map" in stack and "test_crash_tracebacks.py" in stack, stack[:3000]


def _wait_idle(process: psutil.Process, quiet: float = 0.5, timeout: float = 60.0) -> None:
    """Until ``process`` used no CPU for ``quiet`` seconds: its imports are done and it waits on stdin."""
    deadline = time.monotonic() + timeout
    last = sum(process.cpu_times()[:2])
    while time.monotonic() < deadline:
        time.sleep(quiet)
        now = sum(process.cpu_times()[:2])
        if now == last:
            return
        last = now
    raise AssertionError(f"process {process.pid} kept busy for {timeout} s")


def test_the_spark_bridge_job_runner_prints_its_stack_on_a_crash():
    runner = subprocess.Popen(
        [sys.executable, "-m", "flinklike_spark.spark.job_runner"], stdin=subprocess.PIPE, stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONFAULTHANDLER": ""}, cwd=REPO,
    )  # fmt: skip
    try:
        _wait_idle(psutil.Process(runner.pid))  # blocked reading its job spec from stdin
        runner.send_signal(signal.SIGSEGV)
        _, err = runner.communicate(timeout=30)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
    err = err.decode(errors="replace")
    assert runner.returncode == -signal.SIGSEGV
    assert FATAL in err and "job_runner.py" in err, err[-3000:]


def test_a_benchmark_engine_prints_its_stack_on_a_crash():
    sys.path.insert(0, str(REPO / "benchmarks" / "compare"))
    try:
        import run as harness
    finally:
        sys.path.pop(0)
    argv, env = harness.command(harness.Variant("flinklike", 1), "W1", 50_000_000, {"flinklike": Path(sys.executable)})
    assert env["PYTHONFAULTHANDLER"] == "1"  # and every Python process the engine starts
    env["PYTHONFAULTHANDLER"] = ""  # what is tested here is the engine's own faulthandler.enable()
    engine = subprocess.Popen(argv, env=env, cwd=harness.HERE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    task_executors: list[psutil.Process] = []
    try:
        process = psutil.Process(engine.pid)
        deadline = time.monotonic() + 90
        while not task_executors:  # the engine is in main(), running its job
            assert engine.poll() is None and time.monotonic() < deadline, "the engine started no TaskExecutor"
            time.sleep(0.2)
            task_executors = task_executors_under(process.pid)
        engine.send_signal(signal.SIGSEGV)
        _, err = engine.communicate(timeout=60)
    finally:
        if engine.poll() is None:
            engine.kill()
            engine.wait()
        _, alive = psutil.wait_procs(task_executors, timeout=30)  # they exit when their parent's pipe closes
        for leftover in alive:
            leftover.kill()
    err = err.decode(errors="replace")
    assert FATAL in err and "engine_flinklike.py" in err, err[-3000:]
