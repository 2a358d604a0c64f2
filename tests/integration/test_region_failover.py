"""Region failover on a real multi-process cluster: only the failed pipelined region restarts.

A job of 4 independent pipelined regions (source -> map -> sink over forward
edges, chaining off, parallelism 4): subtask 2's map fails once. With
``region`` failover only region 2's tasks get attempt 1, and the other
regions' sinks keep writing while region 2 waits out its restart delay; with
``full`` every task restarts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from connectors import SequenceSource
from flinklike_spark import JobExecutionError, StreamExecutionEnvironment
from flinklike_spark.testing import FailingMapper
from tests.support.failover_jobs import ProgressSink, progress, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

FAILING_SUBTASK = 2
RESTART_DELAY = 1.5


def start(tmp_path: Path, strategy: str):
    env = StreamExecutionEnvironment.get_execution_environment(
        {
            "parallelism.default": 4,
            "local.number-taskmanager": 2,
            "jobmanager.execution.failover-strategy": strategy,
            "restart-strategy.type": "fixed-delay",
            "restart-strategy.fixed-delay.attempts": 3,
            "restart-strategy.fixed-delay.delay": f"{RESTART_DELAY} s",
            "execution.buffer-timeout.interval": "20 ms",
        }
    )
    env.disable_operator_chaining()
    (
        env.from_source(
            SequenceSource(num_keys=4, records_per_key=None, rows_per_second=800, batch_size=10), name="seq"
        )  # fmt: skip
        .uid("seq")
        .map(FailingMapper(300, subtask=FAILING_SUBTASK))
        .uid("map")
        .sink_to(ProgressSink(str(tmp_path)))
        .uid("sink")
    )
    return env.execute_async(f"regions-{strategy}")


def test_a_failure_restarts_only_its_region_while_the_others_keep_emitting(tmp_path):
    client = start(tmp_path, "region")
    try:
        wait_for(lambda: any(a == 1 for a, _, _ in progress(tmp_path, FAILING_SUBTASK)), "region 2 running again")
        [failure] = client.get_exception_history()
        assert "injected failure" in str(failure.root_cause) and failure.will_restart
        assert failure.task == "Map (3/4)#0"
        assert failure.restarted == {"seq-2", "map-2", "sink-2"}
        assert client.num_restarts == 1
        attempts = client.get_attempt_numbers()
        assert {k for k, a in attempts.items() if a == 1} == {"seq-2", "map-2", "sink-2"}
        assert all(a == 0 for k, a in attempts.items() if not k.endswith("-2"))
        failed_at = failure.timestamp.timestamp()
        back_at = min(t for a, t, _ in progress(tmp_path, FAILING_SUBTASK) if a == 1)
        assert back_at - failed_at >= RESTART_DELAY * 0.9, "the restart waited for the backoff"
        for subtask in (0, 1, 3):
            during = [t for a, t, _ in progress(tmp_path, subtask) if failed_at < t < back_at]
            assert len(during) >= 5, f"region {subtask} stalled during region 2's restart ({len(during)} writes)"
            assert {a for a, _, _ in progress(tmp_path, subtask)} == {0}, f"region {subtask} restarted"
        assert not client.done()
    finally:
        client.cancel()
        with pytest.raises(JobExecutionError):  # cancelled
            client.wait(60)


def test_full_failover_restarts_every_task(tmp_path):
    client = start(tmp_path, "full")
    try:
        wait_for(lambda: all(any(a == 1 for a, _, _ in progress(tmp_path, s)) for s in range(4)), "all regions back")
        [failure] = client.get_exception_history()
        assert len(failure.restarted) == 12
        assert set(client.get_attempt_numbers().values()) == {1}
    finally:
        client.cancel()
        with pytest.raises(JobExecutionError):  # cancelled
            client.wait(60)
