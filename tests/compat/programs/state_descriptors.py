"""Keyed state declared in PyFlink's argument order: ValueStateDescriptor(name, type_info),
ListStateDescriptor(name, elem_type_info), MapStateDescriptor(name, key_type_info, value_type_info),
ReducingStateDescriptor(name, reduce_function, type_info), AggregatingStateDescriptor(name,
agg_function, state_type_info), used by a KeyedProcessFunction whose contexts are annotated with its
nested Context and OnTimerContext classes (PyFlink's KeyedProcessFunction is not generic: no subscript)."""

from pyflink.common import Types, WatermarkStrategy
from pyflink.common.watermark_strategy import TimestampAssigner
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.functions import AggregateFunction, KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)


class Mean(AggregateFunction):
    def create_accumulator(self):
        return 0, 0

    def add(self, value, accumulator):
        return accumulator[0] + value, accumulator[1] + 1

    def get_result(self, accumulator):
        return accumulator[0] / accumulator[1]

    def merge(self, a, b):
        return a[0] + b[0], a[1] + b[1]


class Summary(KeyedProcessFunction):
    def open(self, runtime_context: RuntimeContext):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.INT()))
        self.items = runtime_context.get_list_state(ListStateDescriptor("items", Types.STRING()))
        self.per_item = runtime_context.get_map_state(MapStateDescriptor("per-item", Types.STRING(), Types.INT()))
        self.total = runtime_context.get_reducing_state(
            ReducingStateDescriptor("total", lambda a, b: a + b, Types.INT())
        )
        self.mean = runtime_context.get_aggregating_state(
            AggregatingStateDescriptor("mean", Mean(), Types.TUPLE([Types.INT(), Types.INT()]))
        )

    def process_element(self, value, ctx: KeyedProcessFunction.Context):
        _, item, amount, ts = value
        self.count.update((self.count.value() or 0) + 1)
        self.items.add(item)
        self.per_item.put(item, (self.per_item.get(item) or 0) + amount)
        self.total.add(amount)
        self.mean.add(amount)
        ctx.timer_service().register_event_time_timer(100)

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext):
        yield (
            ctx.get_current_key(),
            timestamp,
            str(ctx.time_domain()),
            self.count.value(),
            ",".join(sorted(self.items.get())),
            ",".join(f"{k}={v}" for k, v in sorted(self.per_item.items())),
            self.total.get(),
            self.mean.get(),
        )


class Ts(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value[3]


def main():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    data = [
        ("ann", "tea", 3, 1),
        ("bob", "pie", 5, 2),
        ("ann", "pie", 4, 3),
        ("ann", "tea", 2, 4),
        ("bob", "jam", 1, 5),
        ("cid", "tea", 7, 6),
    ]
    ds = env.from_collection(data, type_info=Types.TUPLE([Types.STRING(), Types.STRING(), Types.INT(), Types.LONG()]))
    ds = ds.assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(Ts())
    )
    out = ds.key_by(lambda r: r[0], key_type=Types.STRING()).process(
        Summary(),
        output_type=Types.TUPLE(
            [
                Types.STRING(),
                Types.LONG(),
                Types.STRING(),
                Types.INT(),
                Types.STRING(),
                Types.STRING(),
                Types.INT(),
                Types.DOUBLE(),
            ]
        ),
    )
    for record in sorted(out.execute_and_collect()):
        print(record)


if __name__ == "__main__":
    main()
