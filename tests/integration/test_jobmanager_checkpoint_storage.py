"""``env.enable_checkpointing(ms)`` and nothing else, as PyFlink programs do: checkpoints live as long as the job.

Flink keeps them in the JobManager (``jobmanager`` checkpoint storage); here they
go to a private temporary directory created at submission and deleted when the
job ends. Failover within the job restores from it exactly once; savepoints are
refused, naming the key that keeps checkpoints after the job.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import tempfile
from pathlib import Path

import pytest

from checkpointing import list_completed_checkpoints
from connectors import CollectSink
from flinklike_spark.errors import ConfigurationError
from tests.support.exact_count_job import NUM_KEYS, RECORDS_PER_KEY, build
from tests.support.failover_jobs import task_executor_processes, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

_STORAGE_LOG = "flinklike_spark._runtime.jobmaster.checkpoint_storage"


def test_a_job_with_only_enable_checkpointing_survives_a_killed_task_executor_exactly_once(
    tmp_path, monkeypatch, caplog
):
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # where the job-lifetime directory is created
    caplog.set_level(logging.INFO, logger=_STORAGE_LOG)
    config = {
        "parallelism.default": 2,
        "local.number-taskmanager": 2,
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": 1,
        "restart-strategy.fixed-delay.delay": "0 ms",
        # small buffers: backpressure keeps the sources running (a finished source stops checkpoints)
        "taskmanager.memory.segment-size": "2kb",
    }
    env = build(config, seconds_per_record=0.0005)
    env.enable_checkpointing(200)  # no directory, no storage key: PyFlink's idiom
    client = env.execute_async("checkpoints without a directory")
    try:
        wait_for(lambda: client.job_id and list(temp.glob("flinklike-checkpoints-*")), "the job's checkpoint storage")
        (storage,) = temp.glob("flinklike-checkpoints-*")
        wait_for(lambda: list_completed_checkpoints(str(storage), client.job_id), "a checkpoint")
        with pytest.raises(ConfigurationError, match="savepoints need a directory that outlives the job: set "
                           "execution.checkpointing.dir"):  # fmt: skip
            client.trigger_savepoint(timeout=30)
        task_executor_processes()[0].send_signal(signal.SIGKILL)
        result = client.wait(timeout=180)
    except BaseException:
        with contextlib.suppress(Exception):
            client.cancel()
        raise
    counts = {row["key"]: row["count"] for row in CollectSink.rows(result)}
    assert counts == {key: RECORDS_PER_KEY for key in range(NUM_KEYS)}  # exactly once (the function checks order)
    assert client.num_restarts == 1
    assert not Path(storage).exists(), "the job-lifetime checkpoint storage outlived the job"
    warnings = [r for r in caplog.records if r.name == _STORAGE_LOG]
    assert len(warnings) == 1 and "set execution.checkpointing.dir to keep them" in warnings[0].getMessage()
