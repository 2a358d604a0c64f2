"""print() of records as PyFlink prints them: records without a declared type with str() (``<Row('a', 1)>``,
tuples, sets), Rows of a Types.ROW / ROW_NAMED stream as ``+I[a,1]``, tuples of a Types.TUPLE stream and
values of basic types as Java prints them (``(a,1)``, ``true``, ``1.0E7``), with a sink identifier."""

from pyflink.common import Row, Types
from pyflink.datastream import StreamExecutionEnvironment


def main():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    numbers = env.from_collection([1, 2, 3], type_info=Types.INT())
    numbers.map(lambda i: Row("a", i)).print("positional")
    numbers.map(lambda i: Row(word="w", n=i)).print("named")
    numbers.map(lambda i: (i, "x", [i]) if i > 1 else {i}).print("undeclared")
    numbers.map(lambda i: f"text {i}").print("strings")
    numbers.map(lambda i: Row("r", i * 0.5), output_type=Types.ROW([Types.STRING(), Types.DOUBLE()])).print("ROW")
    numbers.map(
        lambda i: Row(name="n", v=i if i > 1 else None),
        output_type=Types.ROW_NAMED(["name", "v"], [Types.STRING(), Types.INT()]),
    ).print("ROW_NAMED")
    numbers.map(
        lambda i: ("t", i, i > 1), output_type=Types.TUPLE([Types.STRING(), Types.LONG(), Types.BOOLEAN()])
    ).print("TUPLE")
    numbers.map(lambda i: 10.0 ** (i * 3), output_type=Types.DOUBLE()).print("DOUBLE")
    numbers.map(lambda i: i / 8, output_type=Types.FLOAT()).print("FLOAT")
    numbers.map(lambda i: i % 2 == 0, output_type=Types.BOOLEAN()).print("BOOLEAN")
    numbers.map(lambda i: i * 1000, output_type=Types.LONG()).print()
    env.execute("print records")


if __name__ == "__main__":
    main()
