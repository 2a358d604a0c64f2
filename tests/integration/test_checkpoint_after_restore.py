"""After a restore the first checkpoint does not wait for the periodic interval.

A job resumed from a checkpoint, and the same job after a failover, take a
checkpoint as soon as every task runs again: the sooner one completes, the less
input a second failure replays. The interval here is 60 s; both first
checkpoints must complete well within it.
"""

from __future__ import annotations

import contextlib
import signal

import pytest

from checkpointing import list_completed_checkpoints
from flinklike_spark.errors import JobCancelledError
from tests.support.checkpoint_jobs import checkpoint_config, run_and_cancel
from tests.support.exact_count_job import build
from tests.support.failover_jobs import task_executor_processes, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def test_a_restored_job_checkpoints_once_its_tasks_run_and_again_after_a_failover(tmp_path):
    directory = str(tmp_path / "checkpoints")
    run_and_cancel(build(checkpoint_config(directory, "aligned")), directory, checkpoints=2)
    config = checkpoint_config(directory, "aligned") | {
        "execution.state-recovery.path": directory,
        "execution.checkpointing.interval": "60s",
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": 3,
        "restart-strategy.fixed-delay.delay": "0 ms",
    }
    client = build(config, seconds_per_record=0.002).execute_async("resumed with a 60 s interval")

    def completed() -> int:
        return len(list_completed_checkpoints(directory, client.job_id))

    try:
        wait_for(lambda: completed() >= 1, "the first checkpoint of the resumed job", 40)
        task_executor_processes()[0].send_signal(signal.SIGKILL)
        wait_for(lambda: client.num_restarts >= 1, "the failover", 40)
        wait_for(lambda: completed() >= 2, "the first checkpoint after the failover", 40)
    finally:
        client.cancel()
        with contextlib.suppress(JobCancelledError):
            client.wait(60)
