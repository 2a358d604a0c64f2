"""Keyed rolling aggregations sum / min / max / min_by / max_by on tuples (by position), on named Rows (by
field name and by position) and on plain numbers; parallelism 1, so every record is printed in order."""

from pyflink.common import Row, Types
from pyflink.datastream import StreamExecutionEnvironment

DATA = [("a", 3, 1.5), ("b", 7, 0.5), ("a", 1, 4.0), ("a", 3, 0.25), ("b", 2, 9.0), ("a", 9, 2.0)]


def main():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    tuples = env.from_collection(DATA, type_info=Types.TUPLE([Types.STRING(), Types.INT(), Types.DOUBLE()]))
    by_key = tuples.key_by(lambda t: t[0], key_type=Types.STRING())
    rows = env.from_collection([Row(name=n, count=c, score=s) for n, c, s in DATA], type_info=Types.ROW_NAMED(
        ["name", "count", "score"], [Types.STRING(), Types.INT(), Types.DOUBLE()]))
    rows_by_key = rows.key_by(lambda r: r.name, key_type=Types.STRING())

    for label, stream in [
        ("tuple sum(1)", by_key.sum(1)),
        ("tuple sum(2)", by_key.sum(2)),
        ("tuple min(1)", by_key.min(1)),
        ("tuple max(2)", by_key.max(2)),
        ("tuple min_by(1)", by_key.min_by(1)),
        ("tuple max_by(2)", by_key.max_by(2)),
        ("row sum('count')", rows_by_key.sum("count")),
        ("row min('score')", rows_by_key.min("score")),
        ("row max(1)", rows_by_key.max(1)),
        ("row min_by('count')", rows_by_key.min_by("count")),
        ("row max_by('score')", rows_by_key.max_by("score")),
    ]:
        print(label, [str(r) if isinstance(r, Row) else r for r in stream.execute_and_collect()])

    numbers = env.from_collection([5, 3, 8, 1, 4], type_info=Types.INT())
    by_parity = numbers.key_by(lambda n: n % 2, key_type=Types.INT())
    print("number sum()", list(by_parity.sum().execute_and_collect()))
    print("number max()", list(by_parity.max().execute_and_collect()))
    print("number min_by()", list(by_parity.min_by().execute_and_collect()))


if __name__ == "__main__":
    main()
