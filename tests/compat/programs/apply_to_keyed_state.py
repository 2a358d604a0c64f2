"""KeyedBroadcastProcessFunction.Context.apply_to_keyed_state, which PyFlink 2.3 does not offer: broadcast
rules that ban a key or scale its sum reach the keyed state already built (apply_to_keyed_state) and the
records still to come (the broadcast state), so the final sums, emitted by event-time timers once both
inputs end, do not depend on which input runs first. Written as PyFlink would spell it; the expected output
is recorded from the Java twin (java/ApplyToKeyedState.java) on Flink 2.3's own runtime."""

import time

from pyflink.common import Types, WatermarkStrategy
from pyflink.common.watermark_strategy import TimestampAssigner
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.functions import KeyedBroadcastProcessFunction, RuntimeContext
from pyflink.datastream.state import MapStateDescriptor, ValueStateDescriptor

SUMS = ValueStateDescriptor("sum", Types.LONG())
RULES = MapStateDescriptor("rules", Types.STRING(), Types.LONG())


class ApplyRules(KeyedBroadcastProcessFunction):
    def open(self, runtime_context: RuntimeContext):
        self.sum = runtime_context.get_state(SUMS)

    def process_element(self, value, ctx: KeyedBroadcastProcessFunction.ReadOnlyContext):
        rules = ctx.get_broadcast_state(RULES)
        key = value[0]
        if rules.contains("ban:" + key):
            return
        factor = rules.get("scale:" + key) if rules.contains("scale:" + key) else 1
        self.sum.update((self.sum.value() or 0) + value[1] * factor)
        ctx.timer_service().register_event_time_timer(1000)

    def process_broadcast_element(self, value, ctx: KeyedBroadcastProcessFunction.Context):
        kind, target, argument = value
        ctx.get_broadcast_state(RULES).put(f"{kind}:{target}", argument)

        def apply(key, state):
            if key == target and kind == "ban":
                state.clear()
            elif key == target:
                state.update(state.value() * argument)

        ctx.apply_to_keyed_state(SUMS, apply)

    def on_timer(self, timestamp, ctx: KeyedBroadcastProcessFunction.OnTimerContext):
        if self.sum.value() is not None:
            yield f"('{ctx.get_current_key()}', {self.sum.value()})"


class Ts(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value[2]


def slowly(rule):
    time.sleep(0.5)  # the rules usually come after the records (either order gives the same sums)
    return rule


def main():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    records = [("a", 1, 10), ("b", 2, 20), ("c", 3, 30), ("a", 4, 40), ("b", 5, 50), ("d", 6, 60), ("c", 7, 70)]
    keyed = (
        env.from_collection(records, type_info=Types.TUPLE([Types.STRING(), Types.LONG(), Types.LONG()]))
        .assign_timestamps_and_watermarks(WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(Ts()))
        .key_by(lambda r: r[0], key_type=Types.STRING())
    )
    rule_type = Types.TUPLE([Types.STRING(), Types.STRING(), Types.LONG()])
    rules = env.from_collection([("scale", "a", 10), ("ban", "b", 0), ("scale", "d", 100)], type_info=rule_type).map(
        slowly, output_type=rule_type
    )
    sums = keyed.connect(rules.broadcast(RULES)).process(ApplyRules(), output_type=Types.STRING())
    for line in sorted(sums.execute_and_collect()):
        print(line)


if __name__ == "__main__":
    main()
