"""A lost TaskExecutor is one failure: its slots are released before the restart, nothing is deployed onto it,
and the exception history names the process exit, not a peer's broken channel.

Before the fix, with ``fixed-delay`` at 0 ms and one attempt, the restart raced
the loss detection: it deployed onto the dead TaskExecutor ("RPC 'request_slot'
... the peer is unreachable"), counted that as a second failure and the job
failed; the recorded cause was a consumer's BrokenChannelError.
"""

from __future__ import annotations

import contextlib
import signal
import time

import pytest

from checkpointing import list_completed_checkpoints
from connectors import CollectSink
from tests.support.checkpoint_jobs import checkpoint_config
from tests.support.exact_count_job import NUM_KEYS, RECORDS_PER_KEY, build
from tests.support.failover_jobs import task_executor_processes, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.mark.parametrize("run", [1, 2, 3])
def test_a_killed_task_executor_costs_one_restart_and_is_the_recorded_cause(tmp_path, run):
    directory = str(tmp_path / "checkpoints")
    config = checkpoint_config(directory, "aligned") | {
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": 1,
        "restart-strategy.fixed-delay.delay": "0 ms",
    }
    client = build(config, seconds_per_record=0.0005).execute_async("one loss, one restart")
    try:
        wait_for(lambda: client.job_id and list_completed_checkpoints(directory, client.job_id), "a checkpoint")
        victim = task_executor_processes()[run % 2]
        victim.send_signal(signal.SIGKILL)
        started = time.monotonic()
        result = client.wait(timeout=180)
    except BaseException:
        with contextlib.suppress(Exception):  # it may have failed already: report the first error
            client.cancel()
        raise
    counts = {row["key"]: row["count"] for row in CollectSink.rows(result)}
    assert counts == {key: RECORDS_PER_KEY for key in range(NUM_KEYS)}  # exactly once (the function checks order)
    assert client.num_restarts == 1
    history = client.get_exception_history()
    assert len(history) == 1, [str(e.root_cause).partition("\n")[0] for e in history]
    assert f"TaskExecutor process {victim.pid} exited with code -9" in str(history[0].root_cause)
    assert time.monotonic() - started < 120
