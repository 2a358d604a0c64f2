"""RuntimeContext.get_metrics_group(): a counter, a meter, a distribution and a gauge registered in
open() of a map; each record carries the counter's and the meter's counts as the function sees them."""

from pyflink.common import Types
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.functions import MapFunction, RuntimeContext


class Measured(MapFunction):
    def open(self, runtime_context: RuntimeContext):
        group = runtime_context.get_metrics_group().add_group("compat")
        self.seen = group.counter("seen")
        self.dropped = group.counter("dropped")
        self.rate = group.meter("rate", time_span_in_seconds=60)
        self.sizes = group.distribution("sizes")
        self.last = 0
        group.gauge("last", lambda: self.last)

    def map(self, value):
        self.seen.inc()
        if value[1] < 0:
            self.dropped.inc(2)
            self.dropped.dec()
        self.rate.mark_event(3)
        self.sizes.update(value[1])
        self.last = value[1]
        return value[0], value[1], self.seen.get_count(), self.dropped.get_count(), self.rate.get_count()


def main():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    data = [("a", 1), ("b", -2), ("a", 3), ("c", 4), ("b", -5)]
    ds = env.from_collection(data, type_info=Types.TUPLE([Types.STRING(), Types.INT()]))
    out = ds.map(
        Measured(), output_type=Types.TUPLE([Types.STRING(), Types.INT(), Types.LONG(), Types.LONG(), Types.LONG()])
    )
    for record in out.execute_and_collect():
        print(record)


if __name__ == "__main__":
    main()
