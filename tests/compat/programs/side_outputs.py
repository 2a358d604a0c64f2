"""Side outputs declared with a TypeInformation: OutputTag("small", Types.ROW([...])) and an OutputTag of
Types.TUPLE, filled by a ProcessFunction and a KeyedProcessFunction (``yield tag, value``)."""

from pyflink.common import Row, Types
from pyflink.datastream import OutputTag, StreamExecutionEnvironment
from pyflink.datastream.functions import KeyedProcessFunction, ProcessFunction

SMALL = OutputTag("small", Types.ROW([Types.STRING(), Types.INT()]))
ODD_TOTALS = OutputTag("odd-totals", Types.TUPLE([Types.STRING(), Types.LONG()]))


class SplitBySize(ProcessFunction):
    def process_element(self, value, ctx: ProcessFunction.Context):
        if value[1] < 10:
            yield SMALL, Row(value[0], value[1])
        else:
            yield value[0], value[1] * 10


class RunningTotal(KeyedProcessFunction):
    def open(self, runtime_context):
        self.totals = {}

    def process_element(self, value, ctx: KeyedProcessFunction.Context):
        total = self.totals.get(ctx.get_current_key(), 0) + value[1]
        self.totals[ctx.get_current_key()] = total
        if total % 2:
            yield ODD_TOTALS, (ctx.get_current_key(), total)
        yield ctx.get_current_key(), total


def main():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    pair = Types.TUPLE([Types.STRING(), Types.INT()])
    ds = env.from_collection([("a", 3), ("b", 12), ("a", 40), ("c", 7), ("b", 9), ("a", 5)], type_info=pair)

    split = ds.process(SplitBySize(), output_type=pair)
    small = split.get_side_output(SMALL)
    totals = ds.key_by(lambda r: r[0], key_type=Types.STRING()).process(
        RunningTotal(), output_type=Types.TUPLE([Types.STRING(), Types.LONG()])
    )
    odd = totals.get_side_output(ODD_TOTALS)

    with split.execute_and_collect() as results:
        print("main:", sorted(results))
    print("small:", sorted(str(row) for row in small.execute_and_collect()))
    print("small fields:", sorted((row.f0, row.f1) for row in small.execute_and_collect()))
    print("totals:", sorted(totals.execute_and_collect()))
    print("odd totals:", sorted(odd.execute_and_collect()))


if __name__ == "__main__":
    main()
