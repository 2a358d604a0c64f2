"""PyFlink programs' call forms, run as written for PyFlink with only the imports changed.

The program below follows PyFlink's documentation examples (side outputs with
``OutputTag(name, Types.ROW([...]))``, ``KeySelector`` classes, generic function
classes such as ``ProcessWindowFunction[IN, OUT, KEY, W]`` with
``Context[TimeWindow]`` annotations, broadcast state with ``ReadOnlyContext``).
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from connectors import CollectSink
from flinklike_spark import (
    BroadcastProcessFunction,
    KeyedProcessFunction,
    KeySelector,
    MapStateDescriptor,
    OutputTag,
    ProcessWindowFunction,
    Row,
    StreamExecutionEnvironment,
    Types,
    WatermarkStrategy,
)
from flinklike_spark.common.watermark_strategy import TimestampAssigner
from flinklike_spark.datastream.window import Time, TimeWindow, TumblingEventTimeWindows

pytestmark = pytest.mark.timeout(120)

ROW_TYPE = Types.ROW([Types.STRING(), Types.LONG(), Types.LONG()])  # (key, value, timestamp ms)
EVENTS = [("a", 1, 1000), ("b", 2, 1500), ("a", 3, 2500), ("a", 4, 4000), ("b", 5, 4100), ("a", 6, 9000)]


class ByFirstField(KeySelector):
    def get_key(self, value):
        return value[0]


class EventTime(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value[2]


class SumPerWindow(ProcessWindowFunction[tuple, tuple, str, TimeWindow]):
    def process(self, key: str, context: ProcessWindowFunction.Context[TimeWindow], elements: Iterable[tuple]):
        yield key, context.window().start, sum(e[1] for e in elements)


class SplitLarge(KeyedProcessFunction[str, tuple, tuple]):
    def __init__(self, large: OutputTag) -> None:
        self.large = large

    def process_element(self, value, ctx: KeyedProcessFunction.Context):
        if value[1] >= 4:
            yield self.large, Row(value[0], value[1])
        else:
            yield value


class Labels(BroadcastProcessFunction):
    def __init__(self, descriptor: MapStateDescriptor) -> None:
        self.descriptor = descriptor

    def process_element(self, value, ctx: BroadcastProcessFunction.ReadOnlyContext):
        assert isinstance(ctx, BroadcastProcessFunction.ReadOnlyContext), type(ctx)
        yield value[0], ctx.get_broadcast_state(self.descriptor).get(value[0])

    def process_broadcast_element(self, value, ctx: BroadcastProcessFunction.Context):
        assert isinstance(ctx, BroadcastProcessFunction.Context), type(ctx)
        ctx.get_broadcast_state(self.descriptor).put(value[0], value[1])


def env():
    return StreamExecutionEnvironment.get_execution_environment(
        {"parallelism.default": 1, "flinklike.local.taskmanager-mode": "thread"}
    )


def test_key_selector_class_generic_window_function_and_typed_side_output():
    e = env()
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(EventTime())
    events = e.from_collection(EVENTS, type_info=ROW_TYPE).assign_timestamps_and_watermarks(strategy)
    large = OutputTag("large", Types.ROW([Types.STRING(), Types.LONG()]))
    split = events.key_by(ByFirstField(), key_type=Types.STRING()).process(SplitLarge(large), output_type=ROW_TYPE)
    split.get_side_output(large).sink_to(CollectSink("large"))
    (
        events.key_by(ByFirstField(), key_type=Types.STRING())
        .window(TumblingEventTimeWindows.of(Time.seconds(2)))
        .process(SumPerWindow(), Types.TUPLE([Types.STRING(), Types.LONG(), Types.LONG()]))
        .sink_to(CollectSink("sums"))
    )
    result = e.execute("pyflink call forms")
    assert sorted(tuple(r) for r in CollectSink.rows(result, name="large")) == [("a", 4), ("a", 6), ("b", 5)]
    assert sorted(CollectSink.rows(result, name="sums")) == [
        ("a", 0, 1), ("a", 2000, 3), ("a", 4000, 4), ("a", 8000, 6), ("b", 0, 2), ("b", 4000, 5),
    ]  # fmt: skip


def test_broadcast_function_with_pyflink_context_annotations():
    e = env()
    descriptor = MapStateDescriptor("labels", Types.STRING(), Types.STRING())
    labels = e.from_collection([("a", "apple"), ("b", "banana")], type_info=Types.TUPLE([Types.STRING()] * 2))
    keys = e.from_collection([("a",), ("b",), ("c",)], type_info=Types.TUPLE([Types.STRING()]))
    # Broadcast elements are processed first only if they arrive first: feed the keys later.
    out = keys.connect(labels.broadcast(descriptor)).process(
        Labels(descriptor), Types.TUPLE([Types.STRING(), Types.STRING()])
    )
    out.sink_to(CollectSink("labelled"))
    rows = CollectSink.rows(e.execute("broadcast"), name="labelled")
    assert {r[0] for r in rows} == {"a", "b", "c"}
    assert all(label in (None, {"a": "apple", "b": "banana", "c": None}[key]) for key, label in rows)
