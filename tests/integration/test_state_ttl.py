"""State TTL across a checkpoint and a restore, on a real local cluster.

A keyed count keeps its count in TTL value state. The job is cancelled after a
few checkpoints; the checkpoint's ``operator_state`` rows hold each count with
its last-write timestamp. Resumed with a long TTL, every key ends at exactly
``RECORDS_PER_KEY`` (TTL state survives a restore). Resumed only once the
checkpointed timestamps are older than a short TTL, every restored count has
expired, so each key counts only the records after the checkpoint: exactly
``RECORDS_PER_KEY - count in the checkpoint``.
"""

from __future__ import annotations

import time

import pytest

from checkpointing import (
    decode_operator_state,
    list_completed_checkpoints,
    read_operator_state,
)
from connectors import CollectSink, SequenceSource
from flinklike_spark import (
    KeyedProcessFunction,
    StreamExecutionEnvironment,
    Time,
    ValueStateDescriptor,
)
from flinklike_spark.datastream.state import StateTtlConfig, TtlValue
from tests.support.checkpoint_jobs import checkpoint_config, run_and_cancel

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

END_OF_TIME = 2**62
NUM_KEYS = 12
RECORDS_PER_KEY = 3_000
SHORT_TTL_MS = 3_000


class TtlCount(KeyedProcessFunction):
    """Counts per key in TTL value state; emits the count when the input ends."""

    def __init__(self, ttl_ms: int, seconds_per_record: float) -> None:
        self.ttl_ms = ttl_ms
        self.seconds_per_record = seconds_per_record

    def open(self, runtime_context):
        descriptor = ValueStateDescriptor("count")
        descriptor.enable_time_to_live(StateTtlConfig.new_builder(Time.milliseconds(self.ttl_ms)).build())
        self.count = runtime_context.get_state(descriptor)

    def process_element(self, value, ctx):
        ctx.timer_service().register_event_time_timer(END_OF_TIME)
        self.count.update((self.count.value() or 0) + 1)
        time.sleep(self.seconds_per_record)

    def on_timer(self, timestamp, ctx):
        yield {"key": ctx.get_current_key(), "count": self.count.value() or 0}


def build(config: dict, ttl_ms: int, seconds_per_record: float) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment(config)
    (
        env.from_source(SequenceSource(num_keys=NUM_KEYS, records_per_key=RECORDS_PER_KEY), name="seq")
        .uid("seq")
        .key_by("key")
        .process(TtlCount(ttl_ms, seconds_per_record))
        .uid("count")
        .sink_to(CollectSink("counts"))
    )
    return env


def checkpointed_counts(directory: str, job_id: str) -> dict[int, TtlValue]:
    latest = list_completed_checkpoints(directory, job_id)[-1]
    table = read_operator_state(directory, job_id, latest.checkpoint_id, "count", key_groups=range(128))
    return {e.key: e.value for e in decode_operator_state(table) if e.state_name == "count"}


def resume(directory: str, ttl_ms: int, backend: str = "hashmap") -> dict[int, int]:
    config = checkpoint_config(directory, "aligned") | {
        "execution.state-recovery.path": directory,
        "state.backend.type": backend,
    }
    result = build(config, ttl_ms, 0).execute("resumed")
    return {row["key"]: row["count"] for row in CollectSink.rows(result)}


@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
@pytest.mark.parametrize("expired", [False, True], ids=["alive", "expired"])
def test_ttl_state_is_checkpointed_with_timestamps_and_expires_after_restore(tmp_path, expired, backend):
    if backend == "rocksdb":
        pytest.importorskip("rocksdict")
    directory = str(tmp_path / "checkpoints")
    ttl_ms = SHORT_TTL_MS if expired else 3_600_000
    config = checkpoint_config(directory, "aligned") | {"state.backend.type": backend}
    job_id = run_and_cancel(build(config, ttl_ms, 0.0003), directory, checkpoints=3)
    stored = checkpointed_counts(directory, job_id)
    assert stored and all(isinstance(v, TtlValue) and 0 < v.value <= RECORDS_PER_KEY for v in stored.values())
    assert sum(v.value for v in stored.values()) < NUM_KEYS * RECORDS_PER_KEY  # cancelled mid-way
    if expired:
        # Resume only once every checkpointed entry is past its TTL (the TaskExecutors' wall clock).
        newest = max(v.timestamp for v in stored.values())
        time.sleep(max(0.0, (newest + SHORT_TTL_MS + 200) / 1000 - time.time()))
        expected = {key: RECORDS_PER_KEY - stored[key].value if key in stored else RECORDS_PER_KEY
                    for key in range(NUM_KEYS)}  # fmt: skip
    else:
        expected = {key: RECORDS_PER_KEY for key in range(NUM_KEYS)}
    assert resume(directory, ttl_ms, backend) == expected
