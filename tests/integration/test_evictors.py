"""Window evictors (PyFlink's CountEvictor, TimeEvictor, DeltaEvictor) against what the elements say."""

from __future__ import annotations

import pytest

from connectors import CollectSink
from flinklike_spark import ProcessWindowFunction, StreamExecutionEnvironment, Types, WatermarkStrategy
from flinklike_spark.common.watermark_strategy import TimestampAssigner
from flinklike_spark.datastream.window import (
    CountEvictor,
    CountTrigger,
    DeltaEvictor,
    GlobalWindows,
    Time,
    TimeEvictor,
    TumblingEventTimeWindows,
)

pytestmark = pytest.mark.timeout(120)

ROW = Types.TUPLE([Types.STRING(), Types.LONG(), Types.LONG()])  # key, value, timestamp ms
# One 10 s window per key: values 1..6 at 0.5 s steps for "a", and three for "b".
EVENTS = [("a", v, 500 * v) for v in range(1, 7)] + [("b", 10 * v, 1000 * v) for v in range(1, 4)]


class ByTimestamp(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value[2]


class Values(ProcessWindowFunction):
    def process(self, key, context, elements):
        yield key, [e[1] for e in elements]


def windowed(configure):
    env = StreamExecutionEnvironment.get_execution_environment(
        {"parallelism.default": 1, "flinklike.local.taskmanager-mode": "thread"}
    )
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(ByTimestamp())
    keyed = (
        env.from_collection(EVENTS, type_info=ROW)
        .assign_timestamps_and_watermarks(strategy)
        .key_by(lambda r: r[0], key_type=Types.STRING())
    )
    configure(keyed).sink_to(CollectSink("out"))
    return sorted(CollectSink.rows(env.execute("evictors"), name="out"))


def test_count_evictor_keeps_the_last_elements():
    out = windowed(lambda k: k.window(TumblingEventTimeWindows.of(Time.seconds(10))).evictor(CountEvictor.of(2))
                   .process(Values(), Types.PICKLED_BYTE_ARRAY()))  # fmt: skip
    assert out == [("a", [5, 6]), ("b", [20, 30])]


def test_time_evictor_keeps_the_last_window_size_before_the_newest_and_reduce_sees_only_those():
    out = windowed(lambda k: k.window(TumblingEventTimeWindows.of(Time.seconds(10)))
                   .evictor(TimeEvictor.of(Time.milliseconds(1000)))
                   .reduce(lambda a, b: (a[0], a[1] + b[1], max(a[2], b[2]))))  # fmt: skip
    # a: newest 3000 ms, keeps timestamps > 2000 (values 5, 6); b: newest 3000, keeps > 2000 (30)
    assert out == [("a", 11, 3000), ("b", 30, 3000)]


def test_delta_evictor_drops_elements_far_from_the_last():
    out = windowed(lambda k: k.window(TumblingEventTimeWindows.of(Time.seconds(10)))
                   .evictor(DeltaEvictor.of(3, lambda element, last: abs(element[1] - last[1])))
                   .process(Values(), Types.PICKLED_BYTE_ARRAY()))  # fmt: skip
    assert out == [("a", [4, 5, 6]), ("b", [30])]


def test_sliding_count_window_from_a_count_trigger_and_an_evictor():
    """Flink's classic count window of size 3 sliding by 2: GlobalWindows, CountTrigger(2), CountEvictor(3)."""
    out = windowed(lambda k: k.window(GlobalWindows.create()).trigger(CountTrigger.of(2))
                   .evictor(CountEvictor.of(3)).process(Values(), Types.PICKLED_BYTE_ARRAY()))  # fmt: skip
    # a: fires after 2, 4, 6 elements with the last 3; b: fires once, after 2
    assert out == [("a", [1, 2]), ("a", [2, 3, 4]), ("a", [4, 5, 6]), ("b", [10, 20])]


def test_evict_after_keeps_what_the_function_saw_out_of_the_next_firing():
    out = windowed(lambda k: k.window(GlobalWindows.create()).trigger(CountTrigger.of(2))
                   .evictor(CountEvictor.of(1, do_evict_after=True)).process(Values(), Types.PICKLED_BYTE_ARRAY()))  # fmt: skip
    # a: [1, 2] -> keep [2]; [2, 3, 4] -> keep [4]; [4, 5, 6]
    assert out == [("a", [1, 2]), ("a", [2, 3, 4]), ("a", [4, 5, 6]), ("b", [10, 20])]


def test_bad_evictor_arguments_are_refused():
    with pytest.raises(ValueError, match="max_count >= 0"):
        CountEvictor.of(-1)
    with pytest.raises(ValueError, match="delta function"):
        DeltaEvictor.of(1.0, 5)
