"""The keyed exact-count job of the checkpoint tests: stops, resumes, faults and TaskExecutor loss.

``build`` makes a job whose counting function checks, per key, that every
``seq`` arrives exactly once and in order (it raises otherwise, failing the
job), slowly enough for backpressure and in-flight data; ``resume`` runs it to
the end from the latest checkpoint and returns the final count per key.
"""

from __future__ import annotations

import time

from connectors import CollectSink, SequenceSource
from flinklike_spark import KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor
from tests.support.checkpoint_jobs import checkpoint_config

__all__ = ["END_OF_TIME", "NUM_KEYS", "RECORDS_PER_KEY", "SlowExactCount", "build", "resume"]

END_OF_TIME = 2**62
NUM_KEYS = 12
RECORDS_PER_KEY = 3_000


class SlowExactCount(KeyedProcessFunction):
    """Counts per key, slowly; raises on a lost, duplicated or reordered ``seq``."""

    def __init__(self, seconds_per_record: float) -> None:
        self.seconds_per_record = seconds_per_record

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))
        self.next_seq = runtime_context.get_state(ValueStateDescriptor("next_seq"))

    def process_element(self, value, ctx):
        expected = self.next_seq.value() or 0
        if value["seq"] != expected:
            raise AssertionError(f"key {value['key']}: got seq {value['seq']}, expected {expected}")
        if expected == 0:
            ctx.timer_service().register_event_time_timer(END_OF_TIME)
        self.next_seq.update(expected + 1)
        self.count.update((self.count.value() or 0) + 1)
        time.sleep(self.seconds_per_record)

    def on_timer(self, timestamp, ctx):
        yield {"key": ctx.get_current_key(), "count": self.count.value()}


def build(config: dict, *, seconds_per_record: float = 0.0003) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment(config)
    (
        env.from_source(SequenceSource(num_keys=NUM_KEYS, records_per_key=RECORDS_PER_KEY), name="seq")
        .uid("seq")
        .key_by("key")
        .process(SlowExactCount(seconds_per_record))
        .uid("count")
        .sink_to(CollectSink("counts"))
    )
    return env


def resume(directory: str, mode: str, *, parallelism: int = 2) -> dict[int, int]:
    config = checkpoint_config(directory, mode, parallelism) | {"execution.state-recovery.path": directory}
    result = build(config, seconds_per_record=0).execute("resumed")
    return {row["key"]: row["count"] for row in CollectSink.rows(result)}
