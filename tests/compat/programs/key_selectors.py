"""KeySelector classes as key_by arguments (on tuples and on Rows), with a reduce per key and a
composite (tuple) key."""

from pyflink.common import Row, Types
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.functions import KeySelector, ReduceFunction


class ByUser(KeySelector):
    def get_key(self, value):
        return value[0]


class ByUserAndParity(KeySelector):
    def get_key(self, value):
        return value.user, value.amount % 2


class ByFirstTwo(KeySelector):
    def get_key(self, value):
        return value[0], value[1]


class Add(ReduceFunction):
    def reduce(self, a, b):
        return a[0], a[1] + b[1]


def main():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    pair = Types.TUPLE([Types.STRING(), Types.INT()])
    data = [("ann", 1), ("bob", 2), ("ann", 3), ("cid", 4), ("bob", 5), ("ann", 6)]
    tuples = env.from_collection(data, type_info=pair)
    rolled = tuples.key_by(ByUser(), key_type=Types.STRING()).reduce(Add())
    print("rolling sums:", sorted(rolled.execute_and_collect()))

    row_type = Types.ROW_NAMED(["user", "amount"], [Types.STRING(), Types.INT()])
    rows = env.from_collection([Row(user=u, amount=a) for u, a in data], type_info=row_type)
    keyed = rows.key_by(ByUserAndParity(), key_type=Types.TUPLE([Types.STRING(), Types.INT()]))
    counted = (
        keyed.map(
            lambda r: (r.user, r.amount % 2, r.amount),
            output_type=Types.TUPLE([Types.STRING(), Types.INT(), Types.INT()]),
        )
        .key_by(ByFirstTwo())
        .reduce(lambda a, b: (a[0], a[1], a[2] + b[2]))
    )
    print("sums by user and parity:", sorted(counted.execute_and_collect()))


if __name__ == "__main__":
    main()
