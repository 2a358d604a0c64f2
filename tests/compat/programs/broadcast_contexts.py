"""Broadcast state with the nested context classes PyFlink programs name: a BroadcastProcessFunction[...]
(generic subscript) annotated with BroadcastProcessFunction.ReadOnlyContext / .Context, and a
KeyedBroadcastProcessFunction whose keyed side buffers in keyed state and joins with the broadcast rules
from an event-time timer (its OnTimerContext), so the result does not depend on which input runs first."""

from pyflink.common import Types, WatermarkStrategy
from pyflink.common.watermark_strategy import TimestampAssigner
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.functions import BroadcastProcessFunction, KeyedBroadcastProcessFunction, RuntimeContext
from pyflink.datastream.state import ListStateDescriptor, MapStateDescriptor

RULES = MapStateDescriptor("rules", Types.STRING(), Types.INT())


class Echo(BroadcastProcessFunction[tuple, tuple, tuple]):
    def process_element(self, value, ctx: BroadcastProcessFunction.ReadOnlyContext):
        yield "element", value[0], value[1] * 2

    def process_broadcast_element(self, value, ctx: BroadcastProcessFunction.Context):
        ctx.get_broadcast_state(RULES).put(value[0], value[1])
        yield "rule", value[0], value[1]


class Join(KeyedBroadcastProcessFunction[str, tuple, tuple, tuple]):
    def open(self, runtime_context: RuntimeContext):
        self.pending = runtime_context.get_list_state(ListStateDescriptor("pending", Types.INT()))

    def process_element(self, value, ctx: KeyedBroadcastProcessFunction.ReadOnlyContext):
        self.pending.add(value[1])
        ctx.timer_service().register_event_time_timer(ctx.timestamp())

    def process_broadcast_element(self, value, ctx: KeyedBroadcastProcessFunction.Context):
        ctx.get_broadcast_state(RULES).put(value[0], value[1])

    def on_timer(self, timestamp, ctx: KeyedBroadcastProcessFunction.OnTimerContext):
        rules = ctx.get_broadcast_state(RULES)
        factor = rules.get(ctx.get_current_key()) if rules.contains(ctx.get_current_key()) else 1
        values = sorted(self.pending.get())
        self.pending.clear()
        yield ctx.get_current_key(), timestamp, [v * factor for v in values]


class Ts(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value[2]


def main():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    events = env.from_collection(
        [("a", 1, 10), ("b", 2, 20), ("a", 3, 20), ("c", 4, 30), ("b", 5, 40)],
        type_info=Types.TUPLE([Types.STRING(), Types.INT(), Types.LONG()]),
    )
    events = events.assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(Ts())
    )
    rules = env.from_collection([("a", 10), ("b", 100)], type_info=Types.TUPLE([Types.STRING(), Types.INT()]))

    echoed = events.connect(rules.broadcast(RULES)).process(
        Echo(), output_type=Types.TUPLE([Types.STRING(), Types.STRING(), Types.INT()])
    )
    print("broadcast process:", sorted(echoed.execute_and_collect()))

    joined = (
        events.key_by(lambda e: e[0], key_type=Types.STRING())
        .connect(rules.broadcast(RULES))
        .process(Join(), output_type=Types.PICKLED_BYTE_ARRAY())
    )
    print("keyed broadcast process:", sorted(joined.execute_and_collect()))


if __name__ == "__main__":
    main()
