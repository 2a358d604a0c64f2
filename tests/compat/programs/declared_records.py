"""Streams declared Types.TUPLE collect as tuples wherever they come from (a collection, a map, a keyed
process function, a window, a connect, a side output), and
Types.PICKLED_BYTE_ARRAY() is a stream's type like any other (map, process, an
OutputTag, keyed state) and a field's, its values handed on unchanged."""

from pyflink.common import Row, Time, Types, WatermarkStrategy
from pyflink.common.watermark_strategy import TimestampAssigner
from pyflink.datastream import OutputTag, StreamExecutionEnvironment
from pyflink.datastream.functions import CoMapFunction, KeyedProcessFunction, ProcessFunction
from pyflink.datastream.state import ValueStateDescriptor
from pyflink.datastream.window import TumblingEventTimeWindows

PAIR = Types.TUPLE([Types.STRING(), Types.INT()])
PAIRS = OutputTag("pairs", Types.TUPLE([Types.STRING(), Types.INT()]))  # its own type: PAIR gets a Java twin
OBJECTS = OutputTag("objects", Types.PICKLED_BYTE_ARRAY())


def show(records):
    return sorted(f"{type(r).__name__}:{r!r}" for r in records)


class Total(KeyedProcessFunction):
    def open(self, runtime_context):
        self.seen = runtime_context.get_state(ValueStateDescriptor("seen", Types.PICKLED_BYTE_ARRAY()))

    def process_element(self, value, ctx):
        seen = (self.seen.value() or frozenset()) | {value[1]}
        self.seen.update(seen)
        yield value[0], len(seen)


class Route(ProcessFunction):
    def process_element(self, value, ctx):
        yield PAIRS, (value[0], value[1] * 100)
        yield OBJECTS, {value[0]: [value[1]]}
        yield Row(name=value[0], n=value[1])


class Both(CoMapFunction):
    def map1(self, value):
        return value

    def map2(self, value):
        return value, 0


class Ts(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value[1] * 1000


def main():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    pairs = env.from_collection([("a", 1), ("b", 2), ("a", 3)], type_info=PAIR)
    print("collection:", show(pairs.execute_and_collect()))
    print("map of tuples:", show(pairs.map(lambda t: (t[0] * 2, t[1]), output_type=PAIR).execute_and_collect()))
    totals = pairs.key_by(lambda t: t[0]).process(Total(), output_type=PAIR)
    print("keyed process:", show(totals.execute_and_collect()))
    windowed = (
        pairs.assign_timestamps_and_watermarks(
            WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(Ts())
        )
        .key_by(lambda t: t[0])
        .window(TumblingEventTimeWindows.of(Time.seconds(10)))
        .reduce(lambda a, b: (a[0], a[1] + b[1]), output_type=PAIR)
    )
    print("window reduce:", show(windowed.execute_and_collect()))
    connected = pairs.connect(env.from_collection(["c"], type_info=Types.STRING())).map(Both(), output_type=PAIR)
    print("connect:", show(connected.execute_and_collect()))

    routed = pairs.process(Route(), output_type=Types.ROW_NAMED(["name", "n"], [Types.STRING(), Types.INT()]))
    pairs_out, objects_out = routed.get_side_output(PAIRS), routed.get_side_output(OBJECTS)  # before it runs
    print("main output:", show(routed.execute_and_collect()))
    print("TUPLE side output:", show(pairs_out.execute_and_collect()))
    print("pickled side output:", show(objects_out.execute_and_collect()))

    anything = [{1, 2}, ("y", [3]), 4.5, {"k": [1]}]  # values PyFlink's Java side can read (no None)
    pickled = env.from_collection(anything).map(lambda v: v, output_type=Types.PICKLED_BYTE_ARRAY())
    print("pickled map:", [repr(v) for v in pickled.execute_and_collect()])
    rows = pickled.map(lambda v: Row(v, [v]), output_type=Types.PICKLED_BYTE_ARRAY())
    print("pickled Rows:", [repr(v) for v in rows.execute_and_collect()])
    fields = Types.TUPLE([Types.STRING(), Types.PICKLED_BYTE_ARRAY(), Types.LIST(Types.PICKLED_BYTE_ARRAY())])
    with_fields = pairs.map(lambda t: (t[0], {t[1]}, [Row(t[1]), "x"]), output_type=fields)
    # (collected as they are, PyFlink hands pickled fields over as bytearrays: a function sees the values)
    seen = with_fields.map(lambda t: f"{t[0]} {t[1]!r} {t[2]!r}", output_type=Types.STRING())
    print("pickled fields:", list(seen.execute_and_collect()))
    print(
        "pickled to STRING:",
        list(pickled.map(lambda v: type(v).__name__, output_type=Types.STRING()).execute_and_collect()),
    )


if __name__ == "__main__":
    main()
