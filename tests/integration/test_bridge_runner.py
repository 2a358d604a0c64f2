"""The Spark bridge's engine-job runner (the process a readStream source starts), driven as the source drives it."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import psutil
import pytest

pytest.importorskip("pyspark", reason="the bridge needs pyspark (the [spark] or [test] extra)")

from flinklike_spark.spark.job_record_table import RunnerState  # noqa: E402
from flinklike_spark.spark.job_runner import EngineJob, JobSpec  # noqa: E402
from tests.spark.pipelines import COUNTED  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def test_a_finished_bounded_job_is_not_resumed_and_no_warning_is_logged(tmp_path, caplog):
    job = EngineJob(
        JobSpec(
            pipeline="tests.spark.pipelines:bounded_count",
            config={"execution.checkpointing.interval": "200 ms", "execution.checkpointing.dir": str(tmp_path)},
            schema=COUNTED,
            directory=str(tmp_path),
        )
    )
    job.ensure_running()
    deadline = time.monotonic() + 150
    while job.running() or job.record is None or job.record.state is not RunnerState.FINISHED:
        assert time.monotonic() < deadline, f"the bounded job did not finish: {job.record}"
        time.sleep(0.2)
    with caplog.at_level(logging.INFO, logger="flinklike_spark.spark.job_runner"):
        job.ensure_running()  # what the source does on its next call
    assert not job.running(), "a finished bounded job was started again"
    messages = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert not [m for level, m in messages if level >= logging.WARNING], messages
    assert any("finished" in m for _, m in messages), messages


def test_the_runner_reports_its_dashboard_and_the_engines_progress(tmp_path):
    from tests.support.rest_helpers import get, wait_for

    job = EngineJob(
        JobSpec(
            pipeline="tests.spark.pipelines:keyed_count",
            config={
                "execution.checkpointing.interval": "200 ms",
                "execution.checkpointing.dir": str(tmp_path),
                "rest.port": 0,
            },  # fmt: skip
            schema=COUNTED,
            directory=str(tmp_path),
        )
    )
    try:
        record = job.wait_started(timeout=120)
        assert record.state is RunnerState.RUNNING and record.web_interface_url.startswith("http://127.0.0.1:")
        assert get(f"{record.web_interface_url}/jobs/{record.job_id}")["state"] == "RUNNING"

        def source_records(progress):
            return next(v for name, v in progress["vertices"].items() if name.startswith("Source: seq"))

        # task metrics are at most metrics.fetcher.update-interval (10 s) old, reports come every 5 s
        progress = wait_for(
            "progress with completed checkpoints and records in the runner's record",
            lambda: (
                (p := job.record.progress)
                and p["numberOfCompletedCheckpoints"] >= 1
                and source_records(p)["write-records"] > 0
                and p
            ),
            timeout=60,
        )
        assert progress["state"] == "RUNNING" and progress["numRestarts"] == 0
        assert progress["lastCheckpointDuration"] >= 0 and progress["lastCheckpointSize"] > 0
        log = (tmp_path / "_bridge" / "runner.log").read_text()
        assert f"dashboard and REST API: {record.web_interface_url}" in log
        assert "checkpoints completed" in log
    finally:
        job.stop()
    assert job.record.state is RunnerState.STOPPED and job.record.web_interface_url == record.web_interface_url


def _files_outside_delta_tables(directory: Path) -> list[str]:
    """Files under ``directory`` that belong to no Delta table (a table is a directory with a ``_delta_log``)."""
    stray = []
    for path in directory.rglob("*"):
        if path.is_file() and not any((parent / "_delta_log").is_dir() for parent in path.parents):
            stray.append(str(path.relative_to(directory)))
    return sorted(stray)


def test_two_supervisors_of_one_job_never_run_it_twice(tmp_path):
    """Two queries on one directory (or a restarted query while the old runner cancels): one job at a time."""
    from tests.support.rest_helpers import wait_for

    spec = JobSpec(
        pipeline="tests.spark.pipelines:keyed_count",
        config={
            "execution.checkpointing.interval": "200 ms",
            "execution.checkpointing.dir": str(tmp_path),
            "rest.port": 0,
        },  # fmt: skip
        schema=COUNTED,
        directory=str(tmp_path),
    )
    first, second = EngineJob(spec), EngineJob(spec)
    try:
        running = first.wait_started(timeout=120)
        assert running.pid == first.pid and running.state is RunnerState.RUNNING
        second.ensure_running()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # the second runner waits for the first one's claim
            assert second.running(), "the second runner gave up or failed instead of waiting"
            assert first.record.pid == first.pid
            assert not psutil.Process(second.pid).children(), "the second runner started a cluster"
            time.sleep(0.5)
        first.stop()  # the first query stops: its runner releases the record, the second takes it
        taken = wait_for("the second runner to run the job",
                         lambda: (r := second.record) and r.pid == second.pid and r.state is RunnerState.RUNNING and r,
                         timeout=120)  # fmt: skip
        assert taken.job_id != running.job_id
    finally:
        second.stop()
        first.stop()
    assert second.record.state is RunnerState.STOPPED
    # The record is a Delta table: no lock or JSON file of the bridge's own beside the tables.
    assert _files_outside_delta_tables(tmp_path) == ["_bridge/runner.log"]
