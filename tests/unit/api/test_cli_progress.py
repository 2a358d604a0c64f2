"""`flinklike run` progress: failures and restarts are printed as they happen."""

from __future__ import annotations

import concurrent.futures
import io
import time
from datetime import UTC, datetime

from flinklike_spark._runtime.graph.execution_state import JobStatus
from flinklike_spark._runtime.jobmaster.failover import ExceptionHistoryEntry
from flinklike_spark.cli import ProgressReporter
from flinklike_spark.errors import RemoteTaskError
from flinklike_spark.job_client import JobClient


def entry(message: str, will_restart: bool) -> ExceptionHistoryEntry:
    return ExceptionHistoryEntry(
        timestamp=datetime.now(UTC),
        root_cause=RemoteTaskError(f"RuntimeError: {message}", task_name="Map (1/2)#0", remote_traceback="tb"),
        task="Map (1/2)#0",
        restarted=frozenset({"map-0", "src-0"}) if will_restart else frozenset(),
        will_restart=will_restart,
    )


def test_each_failure_is_printed_once_with_the_restart_count():
    history: list[ExceptionHistoryEntry] = []
    client = JobClient(
        job_id="0123456789abcdef",
        result=concurrent.futures.Future(),
        status=lambda: JobStatus.RUNNING,
        cancel=lambda: None,
        metrics=lambda: {"t": {"records_in": 10.0, "records_out": 10.0, "uptime_seconds": 1.0}},
        trigger_savepoint=concurrent.futures.Future,
        stop_with_savepoint=concurrent.futures.Future,
        exception_history=lambda: tuple(history),
    )
    stream = io.StringIO()
    reporter = ProgressReporter(client, stream=stream, interval=0.02)
    reporter.start()
    history.append(entry("boom", True))
    time.sleep(0.2)
    history.append(entry("again", False))
    time.sleep(0.2)
    reporter.stop()
    lines = stream.getvalue().splitlines()
    failures = [line for line in lines if " failed: " in line]
    assert failures == [
        "job 01234567 Map (1/2)#0 failed: RuntimeError: boom; restarting 2 tasks",
        "job 01234567 Map (1/2)#0 failed: RuntimeError: again; not restarting",
    ]
    assert any(line.endswith("restarts 1") for line in lines)


def test_run_help_explains_the_progress_line(capsys):
    import pytest as _pytest

    from flinklike_spark.cli import main

    with _pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "'in' and 'out': the records all its tasks received and emitted" in text
    assert "Ctrl-C cancels the running jobs" in text
