"""Three behaviours of PyFlink's own tests, as a PyFlink 2.3 program shows them: a keyed stream's
execute_and_collect yields Row(f0=key, f1=record); from_collection wraps a BYTE, SHORT or INT value that does
not fit around as Java's narrowing conversion does (43878 as SHORT is -21658); and the checkpointing mode is
AT_LEAST_ONCE while checkpointing is off, EXACTLY_ONCE once it is enabled."""

from pyflink.common import Types
from pyflink.datastream import StreamExecutionEnvironment


def main():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    print("mode while checkpointing is off:", env.get_checkpoint_config().get_checkpointing_mode())
    print("environment's mode:", env.get_checkpointing_mode())

    pairs = env.from_collection([("a", 1), ("b", 2), ("a", 3)], type_info=Types.TUPLE([Types.STRING(), Types.INT()]))
    with pairs.key_by(lambda p: p[0], key_type=Types.STRING()).execute_and_collect() as results:
        for record in results:
            print("keyed stream collected:", type(record).__name__, record)
    keyed_then_mapped = pairs.key_by(lambda p: p[0], key_type=Types.STRING()).map(
        lambda p: p, output_type=Types.TUPLE([Types.STRING(), Types.INT()])
    )
    print("keyed map collected:", keyed_then_mapped.execute_and_collect(limit=3))

    shorts = env.from_collection([43878, 1, -5, 32768], type_info=Types.SHORT())
    print("SHORT values:", shorts.execute_and_collect(limit=4))
    rows = env.from_collection([(1, 43878)], type_info=Types.ROW([Types.INT(), Types.SHORT()]))
    print("ROW with a SHORT field:", rows.execute_and_collect(limit=1))
    print("BYTE values:", env.from_collection([200, -129, 7], type_info=Types.BYTE()).execute_and_collect(limit=3))
    print("INT values:", env.from_collection([2**31 + 5], type_info=Types.INT()).execute_and_collect(limit=1))

    env.enable_checkpointing(1000)
    print("mode once checkpointing is enabled:", env.get_checkpoint_config().get_checkpointing_mode())


if __name__ == "__main__":
    main()
