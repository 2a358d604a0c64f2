"""Window evictors, which PyFlink 2.3 does not offer (its WindowedStream has no evictor()): CountEvictor,
TimeEvictor and DeltaEvictor, evicting before and after the window function, on event-time and global
windows. Written as PyFlink would spell them; the expected output is recorded from the Java twin
(java/Evictors.java) on Flink 2.3's own runtime."""

from pyflink.common import Time, Types, WatermarkStrategy
from pyflink.common.watermark_strategy import TimestampAssigner
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.functions import ProcessWindowFunction
from pyflink.datastream.window import (
    CountEvictor,
    CountTrigger,
    DeltaEvictor,
    GlobalWindows,
    TimeEvictor,
    TumblingEventTimeWindows,
)


class Values(ProcessWindowFunction):
    def process(self, key, context, elements):
        yield key, [e[1] for e in elements]


class Ts(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value[2]


def show(label, stream):
    lines = sorted(str(record) for record in stream.execute_and_collect())  # sorted as text, as the twin does
    print(f"{label}: [{', '.join(lines)}]")


def main():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    events = [("a", v, 500 * v) for v in range(1, 7)] + [("b", 10 * v, 1000 * v) for v in range(1, 4)]
    keyed = (
        env.from_collection(events, type_info=Types.TUPLE([Types.STRING(), Types.LONG(), Types.LONG()]))
        .assign_timestamps_and_watermarks(WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(Ts()))
        .key_by(lambda e: e[0], key_type=Types.STRING())
    )
    values = Types.PICKLED_BYTE_ARRAY()

    show(
        "count evictor",
        keyed.window(TumblingEventTimeWindows.of(Time.seconds(10)))
        .evictor(CountEvictor.of(2))
        .process(Values(), values),
    )
    show(
        "time evictor + reduce",
        keyed.window(TumblingEventTimeWindows.of(Time.seconds(10)))
        .evictor(TimeEvictor.of(Time.milliseconds(1000)))
        .reduce(lambda a, b: (a[0], a[1] + b[1], max(a[2], b[2]))),
    )
    show(
        "count evictor after firing",
        keyed.window(GlobalWindows.create())
        .trigger(CountTrigger.of(2))
        .evictor(CountEvictor.of(1, True))
        .process(Values(), values),
    )
    show(
        "delta evictor",
        keyed.window(GlobalWindows.create())
        .trigger(CountTrigger.of(3))
        .evictor(DeltaEvictor.of(1.5, lambda old, new: abs(old[1] - new[1])))
        .process(Values(), values),
    )
    show(
        "time evictor after firing",
        keyed.window(GlobalWindows.create())
        .trigger(CountTrigger.of(2))
        .evictor(TimeEvictor.of(Time.milliseconds(600), True))
        .process(Values(), values),
    )


if __name__ == "__main__":
    main()
