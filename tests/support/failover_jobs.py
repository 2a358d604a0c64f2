"""Helpers of the failover integration tests: fault injection, progress probes, the process tree."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil

from flinklike_spark import MapFunction
from flinklike_spark.connector_api import Sink, SinkWriter
from tests.support.processes import task_executors_under

__all__ = [
    "FailOnDemand",
    "ProgressSink",
    "assert_no_task_executor_left",
    "inject_fault",
    "progress",
    "task_executor_processes",
    "wait_for",
]


class FailOnDemand(MapFunction):
    """Raises once for every file ``<dir>/fault-<subtask>`` the test creates (it is removed first: exactly once)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def open(self, runtime_context):
        self.trigger = os.path.join(self.directory, f"fault-{runtime_context.index_of_this_subtask}")

    def map(self, value):
        try:
            os.remove(self.trigger)
        except FileNotFoundError:
            return value
        raise RuntimeError(f"injected fault at {value}")


def inject_fault(directory: Path, subtask: int) -> None:
    """Make :class:`FailOnDemand`'s subtask ``subtask`` raise at its next record."""
    (directory / f"fault-{subtask}").write_text("x")


class ProgressSink(Sink):
    """Appends ``<attempt> <wall time> <rows>`` per batch to ``<dir>/region-<subtask>.log``."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def create_writer(self, context):
        return _ProgressWriter(Path(self.directory) / f"region-{context.subtask_index}.log", context.attempt_number)


class _ProgressWriter(SinkWriter):
    def __init__(self, path: Path, attempt: int) -> None:
        self.path, self.attempt = path, attempt

    def write(self, batch):
        with self.path.open("a") as f:
            f.write(f"{self.attempt} {time.time():.3f} {batch.num_rows}\n")


def progress(directory: Path, subtask: int) -> list[tuple[int, float, int]]:
    """``(attempt, wall time, rows)`` per batch :class:`ProgressSink` wrote for ``subtask``."""
    path = directory / f"region-{subtask}.log"
    if not path.exists():
        return []
    return [(int(a), float(t), int(n)) for a, t, n in (line.split() for line in path.read_text().splitlines())]


def wait_for(condition, what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


#: TaskExecutor processes that were alive when the current test started (tests/conftest.py records them):
#: they belong to someone else on this xdist worker (a session-scoped Spark JVM's Python workers, say).
_PREEXISTING: set[int] = set()


def note_preexisting_task_executors() -> None:
    """Remember the TaskExecutor processes alive now: :func:`task_executor_processes` leaves them out."""
    _PREEXISTING.clear()
    _PREEXISTING.update(process.pid for process in task_executors_under(os.getpid()))


def task_executor_processes() -> list[psutil.Process]:
    """The live TaskExecutor processes under this process started since the current test began.

    A zombie (exited, not yet reaped) is not alive; TaskExecutors that were running before the test
    started are not the test's (a test that SIGKILLs "a TaskExecutor" must kill one of its own job).
    """
    return [process for process in task_executors_under(os.getpid()) if process.pid not in _PREEXISTING]


def assert_no_task_executor_left(timeout: float = 30.0) -> None:
    wait_for(lambda: not task_executor_processes(), "every TaskExecutor process to exit", timeout)
