"""RuntimeExecutionMode.BATCH on bounded input: keyed reduce and sum emit each key's final value only, and a
keyed process function sees every record of its key. (An event-time window collected in BATCH mode hangs
PyFlink 2.3's local execution, so none is here.)"""

from pyflink.common import Types
from pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
from pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import ValueStateDescriptor


class Count(KeyedProcessFunction):
    def open(self, runtime_context: RuntimeContext):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.INT()))

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)
        if self.count.value() == 2:
            yield value[0], "second record", value[1]


def main():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    env.set_parallelism(2)
    words = "to be or not to be that is the question to be".split()
    pairs = env.from_collection(
        [(w, i) for i, w in enumerate(words)], type_info=Types.TUPLE([Types.STRING(), Types.INT()])
    )
    counts = (
        pairs.map(lambda p: (p[0], 1), output_type=Types.TUPLE([Types.STRING(), Types.INT()]))
        .key_by(lambda p: p[0], key_type=Types.STRING())
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
    )
    print("reduce:", sorted(counts.execute_and_collect()))
    sums = pairs.key_by(lambda p: p[0], key_type=Types.STRING()).sum(1)
    print("sum:", sorted(sums.execute_and_collect()))
    seconds = pairs.key_by(lambda p: p[0], key_type=Types.STRING()).process(
        Count(), output_type=Types.TUPLE([Types.STRING(), Types.STRING(), Types.INT()])
    )
    print("process:", sorted(seconds.execute_and_collect()))


if __name__ == "__main__":
    main()
