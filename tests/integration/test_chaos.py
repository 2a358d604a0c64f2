"""Chaos test: exactly-once output and an unbroken per-key state chain under random faults.

Flink's ``UnalignedCheckpointITCase`` invariant on a real multi-process
cluster: a keyed job (source -> rebalance -> a map that raises on demand ->
key_by -> a KeyedProcessFunction keeping per key the number of records seen
and the last seq -> DeltaSink) runs with checkpoints while the test injects
at least ``FAULTS`` random faults: exceptions in random map subtasks and
SIGKILL of random TaskExecutor processes. The job must finish; the Delta table
must then hold every ``(key, seq)`` exactly once, and per key the state
values seen by the records (``count_before``) must be exactly ``0 .. n-1``: a
lost or duplicated state update, or output committed from a state that was
later rolled back, breaks that chain.
"""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path

import pytest

from connectors import DeltaSink, SequenceSource
from flinklike_spark import KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor
from tests.support.delta_sink_job import rows_in_commit_order
from tests.support.failover_jobs import (
    FailOnDemand,
    assert_no_task_executor_left,
    inject_fault,
    task_executor_processes,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

NUM_KEYS = 12
RECORDS_PER_KEY = 1_500
ROWS_PER_SECOND = 400  # the job needs >= 45 s, long enough for every fault
FAULTS = 10


class StateChain(KeyedProcessFunction):
    """Per key: how many records came before this one, and the highest seq so far."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))
        self.last_seq = runtime_context.get_state(ValueStateDescriptor("last_seq"))

    def process_element(self, value, ctx):
        count = self.count.value() or 0
        self.count.update(count + 1)
        self.last_seq.update(max(value["seq"], self.last_seq.value() or -1))
        yield {"key": value["key"], "seq": value["seq"], "count_before": count}


def run_with_faults(tmp_path: Path, mode: str) -> None:
    faults_dir = tmp_path / "faults"
    faults_dir.mkdir()
    table = tmp_path / "out"
    config = {
        "parallelism.default": 2,
        "local.number-taskmanager": 2,
        "execution.checkpointing.interval": "200ms",
        "execution.checkpointing.dir": str(tmp_path / "checkpoints"),
        "execution.checkpointing.num-retained": 2,
        "execution.checkpointing.unaligned.enabled": True,
        "taskmanager.memory.segment-size": "2kb",
        # exponential-delay is Flink's default with checkpointing; faster backoff keeps the test short
        "restart-strategy.exponential-delay.initial-backoff": "100 ms",
        "restart-strategy.exponential-delay.max-backoff": "1 s",
    }
    if mode == "aligned-with-timeout":
        config["execution.checkpointing.aligned-checkpoint-timeout"] = "5ms"
    env = StreamExecutionEnvironment.get_execution_environment(config)
    (
        env.from_source(
            SequenceSource(
                num_keys=NUM_KEYS, records_per_key=RECORDS_PER_KEY, rows_per_second=ROWS_PER_SECOND, batch_size=20
            ),  # fmt: skip
            name="seq",
        )
        .uid("seq")
        .rebalance()
        .map(FailOnDemand(str(faults_dir)))
        .uid("fail")
        .key_by("key")
        .process(StateChain())
        .uid("chain")
        .sink_to(DeltaSink(table))
        .uid("delta")
    )
    client = env.execute_async(f"chaos {mode}")
    rng = random.Random(f"chaos-{mode}")
    injected, noticed = [], 0
    try:
        time.sleep(3)
        while noticed < FAULTS:
            assert not client.done(), f"the job ended after only {noticed} noticed faults: {injected}"
            before = len(client.get_exception_history())
            if rng.random() < 0.5:
                subtask = rng.randrange(2)
                inject_fault(faults_dir, subtask)
                injected.append(f"raise in map subtask {subtask}")
            else:
                victim = rng.choice(task_executor_processes())
                victim.send_signal(signal.SIGKILL)
                injected.append(f"SIGKILL TaskExecutor pid {victim.pid}")
            # A killed TaskExecutor that hosted nothing yet (a replacement still starting) fails no task.
            deadline = time.monotonic() + (60 if injected[-1].startswith("raise") else 15)
            while len(client.get_exception_history()) == before and time.monotonic() < deadline:
                time.sleep(0.05)
            if len(client.get_exception_history()) > before:
                noticed += 1
            else:
                assert injected[-1].startswith("SIGKILL"), f"fault {injected[-1]} was never noticed"
            time.sleep(rng.uniform(0.3, 3.0))  # sometimes strike again while the job still recovers
        for stale in faults_dir.iterdir():  # a raise aimed at a subtask that never read again
            stale.unlink()
        client.wait(300)
    finally:
        if not client.done():
            client.cancel()
    history = client.get_exception_history()
    assert len(history) >= FAULTS and all(entry.will_restart for entry in history)
    # failures while a restart is pending join that attempt (exponential-delay), as in Flink
    assert FAULTS // 2 <= client.num_restarts <= len(history)

    seqs: dict[int, list[int]] = {}
    chain: dict[int, list[int]] = {}
    for row in rows_in_commit_order(table):
        seqs.setdefault(row["key"], []).append(row["seq"])
        chain.setdefault(row["key"], []).append(row["count_before"])
    assert sorted(seqs) == list(range(NUM_KEYS))
    for key in range(NUM_KEYS):
        duplicated = len(seqs[key]) - len(set(seqs[key]))
        missing = sorted(set(range(RECORDS_PER_KEY)) - set(seqs[key]))[:5]
        assert sorted(seqs[key]) == list(range(RECORDS_PER_KEY)), (
            f"key {key}: {len(seqs[key])} rows, {duplicated} duplicated, first missing {missing}; faults: {injected}"
        )
        assert sorted(chain[key]) == list(range(RECORDS_PER_KEY)), f"key {key}: state chain broken; faults: {injected}"
    assert_no_task_executor_left()


@pytest.mark.parametrize("mode", ["unaligned", "aligned-with-timeout"])
def test_exactly_once_and_unbroken_state_chain_under_random_faults(tmp_path, mode):
    run_with_faults(tmp_path, mode)
