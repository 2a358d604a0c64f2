"""The Spark bridge's engine-job runner (the process a readStream source starts), driven as the source drives it."""

from __future__ import annotations

import logging
import time

import pytest

pytest.importorskip("pyspark", reason="the bridge needs pyspark (the [spark] or [test] extra)")

from flinklike_spark.spark.job_runner import EngineJob, JobSpec, RunnerState  # noqa: E402
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
