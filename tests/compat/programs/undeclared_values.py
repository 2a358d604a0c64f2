"""Records of streams without a declared type reach the next function as the very objects emitted (PyFlink
pickles them): plain ints connected into a CoMapFunction / CoFlatMapFunction (also when the stream has
a second consumer), keyed and broadcast connects, positional Rows (``<Row('a', 2)>``), named Rows in
their keyword order, tuples of mixed lengths and field types, sets and lists, also through side outputs
(an OutputTag without a type), windows, keyed state and execute_and_collect."""

from pyflink.common import Row, Time, Types, WatermarkStrategy
from pyflink.common.watermark_strategy import TimestampAssigner
from pyflink.datastream import OutputTag, StreamExecutionEnvironment
from pyflink.datastream.functions import (
    BroadcastProcessFunction,
    CoFlatMapFunction,
    CoMapFunction,
    KeyedBroadcastProcessFunction,
    KeyedCoProcessFunction,
    ProcessFunction,
    ProcessWindowFunction,
)
from pyflink.datastream.state import MapStateDescriptor, ValueStateDescriptor
from pyflink.datastream.window import TumblingEventTimeWindows

RULES = MapStateDescriptor("rules", Types.PICKLED_BYTE_ARRAY(), Types.PICKLED_BYTE_ARRAY())
ODD = OutputTag("odd")  # no type: its values are pickled too


def show(records):
    """Each record with its type, sorted by that text (parallelism > 1 gives no fixed order)."""
    return sorted(f"{type(r).__name__}:{r!r}" for r in records)


class Scale(CoFlatMapFunction):
    def flat_map1(self, value):
        yield value * 10
        yield Row(value, "left")

    def flat_map2(self, value):
        yield value
        yield (value,) * value


class Describe(CoMapFunction):
    def map1(self, value):
        return "left", value, type(value).__name__

    def map2(self, value):
        return Row(side="right", value=value)


class Pair(KeyedCoProcessFunction):
    def open(self, runtime_context):
        self.last = runtime_context.get_state(ValueStateDescriptor("last", Types.PICKLED_BYTE_ARRAY()))

    def process_element1(self, value, ctx):
        previous = self.last.value()
        self.last.update(value)
        yield ctx.get_current_key(), previous, value

    def process_element2(self, value, ctx):
        yield Row(ctx.get_current_key(), value)


class Lookup(BroadcastProcessFunction):
    def process_element(self, value, ctx):
        yield value, type(value).__name__

    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(RULES).put(value[0], value)
        yield Row("rule", value)


class KeyedLookup(KeyedBroadcastProcessFunction):
    def process_element(self, value, ctx):
        yield ctx.get_current_key(), value

    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(RULES).put(value[0], value)


class SplitOdd(ProcessFunction):
    def process_element(self, value, ctx):
        if value % 2:
            yield ODD, Row(value, {value})
        else:
            yield [value, None]


class Ts(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value[1] * 1000


class Collect(ProcessWindowFunction):
    def process(self, key, context, elements):
        yield Row(key, context.window().start, sorted(e[1] for e in elements))


def main():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    ints = env.from_collection([1, 2, 3])
    others = env.from_collection([4, 5])
    print("co_flat_map:", show(ints.connect(others).flat_map(Scale()).execute_and_collect()))
    doubled = ints.map(lambda i: i * 2)  # two consumers: the connect and the union below
    both = doubled.connect(others).map(Describe()).union(doubled)
    print("co_map with a second consumer:", show(both.execute_and_collect()))

    keyed = ints.key_by(lambda i: i % 2).connect(others.key_by(lambda i: i % 2)).process(Pair())
    print("keyed connect:", show(keyed.execute_and_collect()))
    rules = env.from_collection([("a", 1), ("b", 2.5, "extra")]).broadcast(RULES)
    words = env.from_collection([Row("a", 1), ("b",), "c"])
    print("broadcast connect:", show(words.connect(rules).process(Lookup()).execute_and_collect()))
    keyed_words = words.key_by(lambda w: str(w[0]))
    print("keyed broadcast connect:", show(keyed_words.connect(rules).process(KeyedLookup()).execute_and_collect()))

    env.set_parallelism(1)
    positional = ints.map(lambda i: Row("a", i))
    print("positional Rows:", [(repr(r), str(r), r[1]) for r in positional.execute_and_collect()])
    print("positional Rows mapped on:", list(positional.map(lambda r: (r[0], r[1] + 1, len(r))).execute_and_collect()))
    named = ints.map(lambda i: Row(word="w", count=i))
    print("named Rows:", [(repr(r), r.as_dict(), r.count) for r in named.execute_and_collect()])
    mixed = ints.map(lambda i: (i, "one") if i == 1 else ((i, 2.5, None) if i == 2 else Row(i, [i])))
    print("mixed records:", show(mixed.execute_and_collect()))

    split = ints.process(SplitOdd())
    odd = split.get_side_output(ODD)  # before the job runs: PyFlink registers the tag here
    print("main output:", show(split.execute_and_collect()))
    print("untyped side output:", show(odd.execute_and_collect()))

    events = env.from_collection(
        [("a", 1), ("b", 2), ("a", 4), ("a", 12), ("b", 3.5)]
    ).assign_timestamps_and_watermarks(WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(Ts()))
    windows = events.key_by(lambda e: e[0]).window(TumblingEventTimeWindows.of(Time.seconds(10)))
    print("window process:", show(windows.process(Collect()).execute_and_collect()))
    reduced = (
        events.key_by(lambda e: e[0])
        .window(TumblingEventTimeWindows.of(Time.seconds(10)))
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
    )
    print("window reduce:", show(reduced.execute_and_collect()))
    counted = events.key_by(lambda e: e[0]).count_window(2).reduce(lambda a, b: Row(a[0], a[1], b[1]))
    print("count window:", show(counted.execute_and_collect()))
    running = events.key_by(lambda e: e[0]).reduce(lambda a, b: (a[0], a[1] + b[1], "sum"))
    print("keyed reduce:", show(running.execute_and_collect()))


if __name__ == "__main__":
    main()
