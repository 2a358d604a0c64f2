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
    rows = env.from_collection(
        [Row(name=n, count=c, score=s) for n, c, s in DATA],
        type_info=Types.ROW_NAMED(["name", "count", "score"], [Types.STRING(), Types.INT(), Types.DOUBLE()]),
    )
    rows_by_key = rows.key_by(lambda r: r.name, key_type=Types.STRING())

    labelled = [
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
    ]
    numbers = env.from_collection([5, 3, 8, 1, 4], type_info=Types.INT())
    by_parity = numbers.key_by(lambda n: n % 2, key_type=Types.INT())
    labelled += [
        ("number sum()", by_parity.sum()),
        ("number max()", by_parity.max()),
        ("number min_by()", by_parity.min_by()),
    ]

    # One job: every aggregation's records, labelled, in one stream (each label's in order: one subtask each)
    tagged = [
        stream.map(
            lambda r, label=label: (label, str(r) if isinstance(r, Row) else repr(r)),
            output_type=Types.TUPLE([Types.STRING(), Types.STRING()]),
        )
        for label, stream in labelled
    ]
    by_label = {label: [] for label, _ in labelled}
    for label, record in tagged[0].union(*tagged[1:]).execute_and_collect():
        by_label[label].append(record)
    for label, records in by_label.items():
        print(f"{label} [{', '.join(records)}]")


if __name__ == "__main__":
    main()
