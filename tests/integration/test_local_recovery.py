"""Task-local recovery (``execution.state-recovery.from-local``): restarted subtasks on a surviving
TaskExecutor restore their keyed state from its local copy, the others from Delta; exactly once per key.

Each restored task reports ``restoredFromLocal`` (1: keyed state from the local copy, 0: from Delta).
"""

from __future__ import annotations

import contextlib
import os
import signal

import pytest

from checkpointing import list_completed_checkpoints
from connectors import CollectSink, SequenceSource
from flinklike_spark import StreamExecutionEnvironment
from tests.support.checkpoint_jobs import checkpoint_config
from tests.support.exact_count_job import NUM_KEYS, RECORDS_PER_KEY, SlowExactCount
from tests.support.failover_jobs import task_executor_processes, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


class FailOnce(SlowExactCount):
    """The exact count, raising once when the file ``trigger`` appears (removed first: exactly once)."""

    def __init__(self, seconds_per_record: float, trigger: str) -> None:
        super().__init__(seconds_per_record)
        self.trigger = trigger

    def process_element(self, value, ctx):
        try:
            os.remove(self.trigger)
        except FileNotFoundError:
            return super().process_element(value, ctx)
        raise RuntimeError("injected user failure")


def _start(tmp_path, *, local: str = "execution.state-recovery.from-local"):
    directory = str(tmp_path / "checkpoints")
    config = checkpoint_config(directory, "aligned") | {
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": 3,
        "restart-strategy.fixed-delay.delay": "0 ms",
        local: True,
    }
    env = StreamExecutionEnvironment.get_execution_environment(config)
    (
        env.from_source(SequenceSource(num_keys=NUM_KEYS, records_per_key=RECORDS_PER_KEY), name="seq")
        .uid("seq")
        .key_by("key")
        .process(FailOnce(0.0005, str(tmp_path / "fail")))
        .uid("count")
        .sink_to(CollectSink("counts"))
    )
    client = env.execute_async("local recovery")
    wait_for(lambda: client.job_id and list_completed_checkpoints(directory, client.job_id), "a checkpoint")
    return client


def _restored_from(client, expected: set[float]) -> list[float]:
    """The ``restoredFromLocal`` values of the running restored tasks, once they are all of ``expected``."""
    seen: list[float] = []

    def restored() -> bool:
        nonlocal seen
        seen = sorted(m["restoredFromLocal"] for m in client.task_metrics().values() if "restoredFromLocal" in m)
        return len(seen) >= 4 and set(seen) == expected  # 2 sources + 2 counts (sinks chained to counts)

    try:
        wait_for(restored, f"restored tasks reporting {expected}", 60)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen {seen}: {client.task_metrics()}") from None
    return seen


def _exact_counts(client) -> None:
    result = client.wait(timeout=180)
    counts = {row["key"]: row["count"] for row in CollectSink.rows(result)}
    assert counts == {key: RECORDS_PER_KEY for key in range(NUM_KEYS)}  # the function checks order and gaps


@pytest.mark.parametrize("key", ["execution.state-recovery.from-local", "state.backend.local-recovery"])
def test_a_restart_after_a_user_exception_restores_keyed_state_from_the_local_copies(tmp_path, key):
    client = _start(tmp_path, local=key)
    try:
        (tmp_path / "fail").write_text("x")
        wait_for(lambda: client.num_restarts >= 1, "the restart")
        assert set(_restored_from(client, {1.0})) == {1.0}
        _exact_counts(client)
    except BaseException:
        with contextlib.suppress(Exception):
            client.cancel()
        raise
    assert client.num_restarts == 1


def test_a_killed_task_executors_subtasks_restore_from_delta_the_survivors_locally(tmp_path):
    client = _start(tmp_path)
    try:
        task_executor_processes()[0].send_signal(signal.SIGKILL)
        wait_for(lambda: client.num_restarts >= 1, "the restart")
        assert set(_restored_from(client, {0.0, 1.0})) == {0.0, 1.0}
        _exact_counts(client)
    except BaseException:
        with contextlib.suppress(Exception):
            client.cancel()
        raise
