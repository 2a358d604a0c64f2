"""Window functions declared with PyFlink's generic subscripts: ProcessWindowFunction[tuple, tuple, str,
TimeWindow] with a ProcessWindowFunction.Context[TimeWindow] annotation, WindowFunction[...],
ProcessAllWindowFunction[...] and AllWindowFunction[...], on event-time tumbling and sliding windows,
also combined with a ReduceFunction and an AggregateFunction."""

from collections.abc import Iterable

from pyflink.common import Time, Types, WatermarkStrategy
from pyflink.common.watermark_strategy import TimestampAssigner
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.functions import (
    AggregateFunction,
    AllWindowFunction,
    ProcessAllWindowFunction,
    ProcessWindowFunction,
    WindowFunction,
)
from pyflink.datastream.window import SlidingEventTimeWindows, TimeWindow, TumblingEventTimeWindows


class Describe(ProcessWindowFunction[tuple, tuple, str, TimeWindow]):
    def process(
        self, key: str, context: ProcessWindowFunction.Context[TimeWindow], elements: Iterable[tuple]
    ) -> Iterable[tuple]:
        window = context.window()
        yield key, window.start, window.end, window.max_timestamp(), sorted(e[1] for e in elements)


class Count(WindowFunction[tuple, tuple, str, TimeWindow]):
    def apply(self, key: str, window: TimeWindow, inputs: Iterable[tuple]) -> Iterable[tuple]:
        yield key, window.start, len(list(inputs))


class Everything(ProcessAllWindowFunction[tuple, tuple, TimeWindow]):
    def process(self, context: ProcessAllWindowFunction.Context[TimeWindow], elements: Iterable[tuple]):
        yield context.window().start, sum(e[1] for e in elements)


class Keys(AllWindowFunction[tuple, tuple, TimeWindow]):
    def apply(self, window: TimeWindow, inputs: Iterable[tuple]) -> Iterable[tuple]:
        yield window.start, ",".join(sorted({e[0] for e in inputs}))


class Average(AggregateFunction):
    def create_accumulator(self):
        return 0, 0

    def add(self, value, accumulator):
        return accumulator[0] + value[1], accumulator[1] + 1

    def get_result(self, accumulator):
        return accumulator[0] / accumulator[1]

    def merge(self, a, b):
        return a[0] + b[0], a[1] + b[1]


class WithWindow(ProcessWindowFunction[float, tuple, str, TimeWindow]):
    def process(self, key, context: "ProcessWindowFunction.Context[TimeWindow]", averages):
        for average in averages:
            yield key, context.window().start, average


class Ts(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value[2]


def main():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    data = [
        ("a", 1, 1000),
        ("b", 2, 1500),
        ("a", 3, 2500),
        ("a", 4, 4100),
        ("b", 5, 4900),
        ("b", 6, 6000),
        ("a", 7, 8999),
        ("c", 8, 9000),
    ]
    ds = env.from_collection(data, type_info=Types.TUPLE([Types.STRING(), Types.INT(), Types.LONG()]))
    ds = ds.assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(Ts())
    )
    keyed = ds.key_by(lambda r: r[0], key_type=Types.STRING())

    described = keyed.window(TumblingEventTimeWindows.of(Time.seconds(3))).process(
        Describe(), Types.PICKLED_BYTE_ARRAY()
    )
    print("process:", sorted(described.execute_and_collect()))
    counted = keyed.window(SlidingEventTimeWindows.of(Time.seconds(4), Time.seconds(2))).apply(
        Count(), Types.TUPLE([Types.STRING(), Types.LONG(), Types.INT()])
    )
    print("apply:", sorted(counted.execute_and_collect()))
    everything = ds.window_all(TumblingEventTimeWindows.of(Time.seconds(5))).process(
        Everything(), Types.TUPLE([Types.LONG(), Types.INT()])
    )
    print("process all:", sorted(everything.execute_and_collect()))
    keys = ds.window_all(TumblingEventTimeWindows.of(Time.seconds(5))).apply(
        Keys(), Types.TUPLE([Types.LONG(), Types.STRING()])
    )
    print("apply all:", sorted(keys.execute_and_collect()))
    reduced = keyed.window(TumblingEventTimeWindows.of(Time.seconds(3))).reduce(
        lambda a, b: (a[0], a[1] + b[1], max(a[2], b[2])),
        window_function=Count(),
        output_type=Types.TUPLE([Types.STRING(), Types.LONG(), Types.INT()]),
    )
    print("reduce + window function:", sorted(reduced.execute_and_collect()))
    averaged = keyed.window(TumblingEventTimeWindows.of(Time.seconds(3))).aggregate(
        Average(),
        window_function=WithWindow(),
        accumulator_type=Types.TUPLE([Types.INT(), Types.INT()]),
        output_type=Types.TUPLE([Types.STRING(), Types.LONG(), Types.DOUBLE()]),
    )
    print("aggregate + process window function:", sorted(averaged.execute_and_collect()))


if __name__ == "__main__":
    main()
