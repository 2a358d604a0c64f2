"""Records as PyFlink hands them over: Types.ROW rows named f0, f1, ... (str(row), row.f0, row[1]), named
rows (given as Rows or tuples), a Row nested in a declared ROW and a tuple nested in a declared TUPLE, and
plain values and objects of a stream without a declared type (PyFlink pickles them), also as keyed state."""

from pyflink.common import Row, Types
from pyflink.datastream import StreamExecutionEnvironment


class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __repr__(self):
        return f"Point({self.x}, {self.y})"


def main():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)

    positional = env.from_collection([Row(1, "one"), Row(2, "two")], type_info=Types.ROW([Types.INT(), Types.STRING()]))
    print("ROW str:", [str(r) for r in positional.execute_and_collect()])
    print("ROW fields:", [(r.f0, r[1], r.as_dict()) for r in positional.execute_and_collect()])
    mapped = positional.map(
        lambda r: Row(r.f0 * 10, r.f1.upper()), output_type=Types.ROW([Types.LONG(), Types.STRING()])
    )
    print("ROW mapped:", [repr(r) for r in mapped.execute_and_collect()])

    named_type = Types.ROW_NAMED(["id", "name"], [Types.INT(), Types.STRING()])
    named = env.from_collection([Row(id=3, name="three"), (4, "four")], type_info=named_type)
    print("ROW_NAMED:", [(str(r), r.id, r["name"]) for r in named.execute_and_collect()])

    nested_type = Types.ROW_NAMED(["id", "inner"], [Types.INT(), Types.ROW([Types.STRING(), Types.DOUBLE()])])
    nested = env.from_collection(
        [Row(id=1, inner=Row("x", 0.5)), Row(id=2, inner=Row("y", 1.5))], type_info=nested_type
    )
    print("nested ROW:", [(str(r), r.inner.f0, type(r.inner).__name__) for r in nested.execute_and_collect()])
    tuple_type = Types.TUPLE([Types.INT(), Types.TUPLE([Types.STRING(), Types.INT()])])
    nested_tuples = env.from_collection([(1, ("a", 2)), (3, ("b", 4))], type_info=tuple_type)
    print("nested TUPLE:", [(r, type(r[1]).__name__) for r in nested_tuples.execute_and_collect()])

    plain = env.from_collection([1, "two", 3.0, (4, "four"), {"five": 5}, None, [6]])
    print("pickled:", [repr(v) for v in plain.execute_and_collect()])
    objects = env.from_collection([1, 2, 3], type_info=Types.INT()).map(lambda i: Point(i, i * i))
    print("objects:", [repr(p) for p in objects.execute_and_collect()])
    back = objects.map(lambda p: p.x + p.y, output_type=Types.INT())
    print("objects back to INT:", list(back.execute_and_collect()))
    keyed = objects.key_by(lambda p: p.x % 2).reduce(lambda a, b: Point(a.x + b.x, a.y + b.y))
    print("keyed objects:", [repr(p) for p in keyed.execute_and_collect()])


if __name__ == "__main__":
    main()
