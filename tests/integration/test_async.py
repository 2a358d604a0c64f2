"""AsyncDataStream end to end: ordered/unordered results, timeouts, and in-flight requests across a resume."""

from __future__ import annotations

import asyncio
import random

import pytest

from connectors import CollectSink, SequenceSource
from flinklike_spark import KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor
from flinklike_spark.datastream.async_stream import AsyncDataStream, AsyncFunction
from flinklike_spark.datastream.window import Time
from tests.support.checkpoint_jobs import checkpoint_config, run_and_cancel

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

END_OF_TIME = 2**62


class Double(AsyncFunction):
    """Answers after a random delay; values divisible by 7 take 'forever' (timeout)."""

    def __init__(self, slow_every: int | None = None) -> None:
        self.slow_every = slow_every

    async def async_invoke(self, value):
        delay = 10 if self.slow_every and value["x"] % self.slow_every == 0 else random.random() * 0.01
        await asyncio.sleep(delay)
        return [{"x": value["x"], "y": value["x"] * 2}]

    def timeout(self, value):
        return [{"x": value["x"], "y": -1}]


@pytest.mark.parametrize("ordered", [True, False])
def test_ordered_and_unordered_results_and_timeouts_against_python(ordered):
    env = StreamExecutionEnvironment.get_execution_environment({"parallelism.default": 1})
    numbers = env.from_collection([{"x": i} for i in range(300)], batch_size=7)
    wait = AsyncDataStream.ordered_wait if ordered else AsyncDataStream.unordered_wait
    rows = list(wait(numbers, Double(slow_every=50), Time.milliseconds(300), capacity=20).execute_and_collect())
    expected = [{"x": i, "y": -1 if i % 50 == 0 else 2 * i} for i in range(300)]
    if ordered:
        assert rows == expected
    else:
        assert sorted(rows, key=lambda r: r["x"]) == expected
        assert rows != expected, "unordered results come as they complete (the timed-out ones last)"


class ExactCount(KeyedProcessFunction):
    def open(self, runtime_context):
        self.next = runtime_context.get_state(ValueStateDescriptor("next"))

    def process_element(self, value, ctx):
        expected = self.next.value() or 0
        if value["seq"] != expected:
            raise AssertionError(f"key {value['key']}: seq {value['seq']}, expected {expected}")
        if expected == 0:
            ctx.timer_service().register_event_time_timer(END_OF_TIME)
        self.next.update(expected + 1)

    def on_timer(self, timestamp, ctx):
        yield {"key": ctx.get_current_key(), "count": self.next.value()}


class Slow(AsyncFunction):
    async def async_invoke(self, value):
        await asyncio.sleep(0.02)
        return [value]


def build(config: dict, rate: float | None) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment(config)
    source = env.from_source(SequenceSource(num_keys=8, records_per_key=400, rows_per_second=rate), name="seq").uid(
        "seq"
    )
    AsyncDataStream.ordered_wait(source, Slow(), 5_000, capacity=50).uid("async").key_by("key").process(
        ExactCount()
    ).uid("count").sink_to(CollectSink("counts"))
    return env


@pytest.mark.parametrize("mode", ["aligned", "unaligned"])
def test_in_flight_requests_survive_a_resume_exactly_once(tmp_path, mode):
    directory = str(tmp_path / "checkpoints")
    run_and_cancel(build(checkpoint_config(directory, mode), rate=600), directory, checkpoints=2)
    result = build(checkpoint_config(directory, mode) | {"execution.state-recovery.path": directory}, None).execute()
    assert {r["key"]: r["count"] for r in CollectSink.rows(result)} == {k: 400 for k in range(8)}
