"""Vectorized built-in aggregations against the per-record operators they replace.

Both operators are driven directly with the same Arrow batches, watermarks and
checkpoints; the vectorized one must give exactly the per-record one's output
(rows, order where the per-record path defines one, timestamps), late-record
count and state: a snapshot of either restores into the other, also after a
rescale that splits it by key group exactly as the restore path does.
"""

from __future__ import annotations

import collections
import pickle
import random

import pyarrow as pa
import pytest

from flinklike_spark._runtime.operators.keyed_operators import FieldAggregation, KeyedReduceOperator
from flinklike_spark._runtime.operators.operator_registry import create_operator
from flinklike_spark._runtime.operators.operator_spec import OperatorSpec
from flinklike_spark._runtime.operators.stream_operator import OperatorContext, RestoredEntry, RestoredState
from flinklike_spark._runtime.operators.vectorized_aggregation import (
    VectorizedRollingAggregateOperator,
    VectorizedWindowAggregateOperator,
    _first_and_int_cumsum,
)
from flinklike_spark._runtime.operators.window_descriptor import PaneKind, WindowOperatorDescriptor
from flinklike_spark._runtime.operators.window_operator import WindowOperator
from flinklike_spark._runtime.record_timestamps import with_timestamps
from flinklike_spark._runtime.state.key_groups import key_group_for, key_group_range
from flinklike_spark.common.types import RECORD_KIND_KEY, RecordKind
from flinklike_spark.datastream import aggregations as agg
from flinklike_spark.datastream.window import SlidingEventTimeWindows, Time, TumblingEventTimeWindows
from flinklike_spark.errors import ConfigurationError
from tests.support.outputs import ListOutput

MAX_WATERMARK = 2**63 - 1
MAX_PARALLELISM = 128


def build(spec: OperatorSpec, cls=None, *, restored=None, subtask=0, parallelism=1):
    op = cls(spec) if cls is not None else create_operator(spec)
    out = ListOutput()
    context = OperatorContext(
        task_name="t", subtask_index=subtask, parallelism=parallelism, max_parallelism=MAX_PARALLELISM,
        attempt_number=0,
    )  # fmt: skip
    op.setup(context, out)
    op.initialize_state(restored)
    op.open()
    return op, out


def batch_of(rows, schema, timestamps=None):
    batch = pa.RecordBatch.from_pylist(rows, schema=schema)
    return with_timestamps(batch, timestamps) if timestamps is not None else batch


def split_snapshot(snapshot, parallelism):
    """Per new subtask, the RestoredState the restore path would give it (pickled like storage)."""
    restored = []
    for subtask in range(parallelism):
        groups = key_group_range(MAX_PARALLELISM, parallelism, subtask)
        entries = tuple(
            RestoredEntry(
                state_name=name,
                state_kind=kind,
                key_group=group,
                key=pickle.loads(pickle.dumps(key)),
                value=pickle.loads(pickle.dumps(value)),
                subtask=0,
            )  # fmt: skip
            for name, kind, rows in ((s.name, s.kind, s.entries) for s in snapshot.keyed)
            for group, key, value in rows
            if group in groups
        )
        restored.append(RestoredState(checkpoint_id=1, keyed=entries))
    return restored


def subtask_of(key, parallelism):
    group = key_group_for(key, MAX_PARALLELISM)
    return next(s for s in range(parallelism) if group in key_group_range(MAX_PARALLELISM, parallelism, s))


# -- rolling field aggregations ----------------------------------------------------------------

ROLLING_SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int32()), ("w", pa.int64()), ("x", pa.float64())])


def rolling_rows(seed, n, keys=9):
    rng = random.Random(seed)
    return [
        {"k": f"k{rng.randrange(keys)}", "v": rng.randint(-50, 50), "w": rng.randint(0, 3), "x": rng.random()}
        for _ in range(n)
    ]


def rolling_spec(aggregation, field, schema=ROLLING_SCHEMA):
    return OperatorSpec(
        uid="agg", name="agg", kind="keyed_reduce", function=FieldAggregation(aggregation, field),
        input_schema=schema, output_schema=schema, key_field="k",
    )  # fmt: skip


def run_rolling(spec, cls, chunks, restored=None):
    op, out = build(spec, cls, restored=restored)
    for rows, stamps in chunks:
        op.process_batch(batch_of(rows, spec.input_schema, stamps))
    return op, out


def chunked(rows, seed, with_timestamps_too=True):
    rng = random.Random(seed)
    chunks, i = [], 0
    while i < len(rows):
        size = rng.choice([1, 2, 7, 40, 200])
        piece = rows[i : i + size]
        stamps = [rng.randint(0, 10**6) for _ in piece] if with_timestamps_too else None
        chunks.append((piece, stamps))
        i += size
    return chunks


@pytest.mark.parametrize("aggregation", ["sum", "min", "max", "min_by", "max_by"])
@pytest.mark.parametrize("field", ["v", "w", 1])
def test_rolling_matches_the_per_record_operator(aggregation, field):
    spec = rolling_spec(aggregation, field)
    assert isinstance(create_operator(spec), VectorizedRollingAggregateOperator)
    chunks = chunked(rolling_rows(1, 700), 2)
    _, expected = run_rolling(spec, KeyedReduceOperator, chunks)
    _, got = run_rolling(spec, None, chunks)
    assert got.rows == expected.rows
    assert got.timestamps == expected.timestamps
    assert len(got.rows) == 700


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_grouped_first_and_int_cumsum_match_pandas_including_wrap_around(seed):
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 5000))
    groups = rng.integers(0, int(rng.integers(1, 300)), n)
    values = rng.integers(-(2**62), 2**62, n)  # running sums overflow int64: both wrap around
    first, cumulative = _first_and_int_cumsum(groups, values)
    positions = pd.Series(np.arange(n)).groupby(groups, sort=False)
    assert first.tolist() == positions.transform("first").tolist()
    assert cumulative.tolist() == pd.Series(values).groupby(groups, sort=False).cumsum().tolist()
    assert _first_and_int_cumsum(groups, None)[1] is None


def test_rolling_float_sum_adds_in_record_order_exactly():
    spec = rolling_spec("sum", "x")
    assert isinstance(create_operator(spec), VectorizedRollingAggregateOperator)
    chunks = chunked(rolling_rows(3, 500), 4, with_timestamps_too=False)
    _, expected = run_rolling(spec, KeyedReduceOperator, chunks)
    _, got = run_rolling(spec, None, chunks)
    assert got.rows == expected.rows  # bit for bit: the same additions in the same order
    assert got.timestamps == [None] * 500


@pytest.mark.parametrize("aggregation", ["sum", "min_by", "max"])
@pytest.mark.parametrize("new_parallelism", [1, 3])
@pytest.mark.parametrize("first,second", [("vectorized", "vectorized"), ("per-record", "vectorized"),
                                          ("vectorized", "per-record")])  # fmt: skip
def test_rolling_snapshot_restore_and_rescale(aggregation, new_parallelism, first, second):
    classes = {"vectorized": VectorizedRollingAggregateOperator, "per-record": KeyedReduceOperator}
    spec = rolling_spec(aggregation, "v")
    rows = rolling_rows(5, 600, keys=13)
    head, tail = rows[:350], rows[350:]
    _, uninterrupted = run_rolling(spec, KeyedReduceOperator, [(rows, None)])
    op, before = run_rolling(spec, classes[first], chunked(head, 6, False))
    snapshot = op.snapshot_state(1)  # split_snapshot pickles keys and values as storage does
    restored = split_snapshot(snapshot, new_parallelism)
    outputs = []
    for subtask in range(new_parallelism):
        mine = [r for r in tail if subtask_of(r["k"], new_parallelism) == subtask]
        op2, out = build(spec, classes[second], restored=restored[subtask], subtask=subtask,
                         parallelism=new_parallelism)  # fmt: skip
        if mine:
            op2.process_batch(batch_of(mine, ROLLING_SCHEMA))
        outputs.append(out.rows)
    after = [row for rows_ in outputs for row in rows_]
    assert before.rows == uninterrupted.rows[:350]
    # Per key, nothing lost, nothing duplicated, nothing out of order.
    per_key = collections.defaultdict(list)
    for row in uninterrupted.rows[350:]:
        per_key[row["k"]].append(row)
    got_per_key = collections.defaultdict(list)
    for row in after:
        got_per_key[row["k"]].append(row)
    assert got_per_key == per_key


def test_rolling_falls_back_where_semantics_are_python_only():
    assert not isinstance(create_operator(rolling_spec("min", "x")), VectorizedRollingAggregateOperator)  # float min
    assert isinstance(create_operator(rolling_spec("sum", "x")), VectorizedRollingAggregateOperator)

    class MySum(FieldAggregation):
        pass

    spec = rolling_spec("sum", "v")
    spec.function = MySum("sum", "v")  # a user subclass is a user function
    assert type(create_operator(spec)) is KeyedReduceOperator
    spec = rolling_spec("sum", "v")
    spec.key_field, spec.key_selector = None, lambda row: row["k"]
    assert type(create_operator(spec)) is KeyedReduceOperator
    spec = rolling_spec("sum", "v")
    spec.input_schema = None  # inferred schema: records may be of any kind
    assert type(create_operator(spec)) is KeyedReduceOperator


# -- windows -----------------------------------------------------------------------------------

EVENT_SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.int64()), ("f", pa.float64())])


#: the same events as named rows (what a CSV, JSON or Avro source gives)
EVENT_ROWS_SCHEMA = EVENT_SCHEMA.with_metadata({RECORD_KIND_KEY: RecordKind.NAMED_ROW})


def window_spec(aggregate, window_function=None, size=1000, schema=EVENT_SCHEMA, **extra):
    assigner = TumblingEventTimeWindows.of(Time.milliseconds(size))
    descriptor = WindowOperatorDescriptor(
        assigner=assigner, trigger=assigner.get_default_trigger(None), pane_kind=PaneKind.AGGREGATE,
        aggregate_function=aggregate, window_function=window_function, **extra,
    )  # fmt: skip
    return OperatorSpec(uid="w", name="w", kind="window", function=descriptor, input_schema=schema, key_field="k")


def events(seed, n=2000, keys=11, disorder=1500):
    rng = random.Random(seed)
    rows, stamps, base = [], [], 0
    for _ in range(n):
        base += rng.randint(0, 6)
        rows.append({"k": rng.randrange(keys), "v": rng.randint(-100, 100), "f": rng.random() * 10})
        stamps.append(max(0, base - rng.randint(0, disorder)))
    return rows, stamps


def drive_windows(op, rows, stamps, seed, *, delay=200, finish=True, schema=EVENT_SCHEMA):
    """Batches of random sizes, each followed by a bounded-out-of-orderness watermark (late records occur)."""
    rng = random.Random(seed)
    i, max_ts = 0, -(2**62)
    while i < len(rows):
        size = rng.choice([1, 5, 50, 300])
        op.process_batch(batch_of(rows[i : i + size], schema, stamps[i : i + size]))
        max_ts = max(max_ts, *stamps[i : i + size])
        op.process_watermark(max_ts - delay - 1)
        i += size
    if finish:
        op.process_watermark(MAX_WATERMARK)


def as_counter(out):
    return collections.Counter((tuple(sorted(row.items())), ts) for row, ts in zip(out.rows, out.timestamps))


AGGREGATES = {
    "count": lambda: agg.count(),
    "all": lambda: agg.combine(agg.count("n"), agg.sum("v"), agg.min("v", "lo"), agg.max("v", "hi"), agg.sum("f")),
    "float": lambda: agg.sum("f", "total"),
}


@pytest.mark.parametrize("aggregate", sorted(AGGREGATES))
@pytest.mark.parametrize("window_function", [None, "keyed"])
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("schema", [EVENT_SCHEMA, EVENT_ROWS_SCHEMA], ids=["dicts", "named rows"])
def test_window_matches_the_per_record_operator(aggregate, window_function, seed, schema):
    wf = agg.KeyedWindowResult("k") if window_function else None
    spec = window_spec(AGGREGATES[aggregate](), wf, schema=schema)
    assert isinstance(create_operator(spec), VectorizedWindowAggregateOperator)
    rows, stamps = events(seed)
    reference, expected = build(spec, WindowOperator)
    drive_windows(reference, rows, stamps, seed, schema=schema)
    op, got = build(spec)
    drive_windows(op, rows, stamps, seed, schema=schema)
    assert as_counter(got) == as_counter(expected)
    assert got.watermarks == expected.watermarks
    assert op.num_late_records_dropped == reference.num_late_records_dropped > 0
    # Firings come in window order, as the per-record operator's timers fire.
    assert [ts for ts in got.timestamps] == sorted(got.timestamps)
    if window_function and aggregate != "float":
        assert sum(r["count" if aggregate == "count" else "n"] for r in got.rows) + op.num_late_records_dropped == 2000


@pytest.mark.parametrize("new_parallelism", [1, 3])
@pytest.mark.parametrize("first,second", [("vectorized", "vectorized"), ("per-record", "vectorized"),
                                          ("vectorized", "per-record")])  # fmt: skip
def test_window_snapshot_restore_and_rescale(new_parallelism, first, second):
    classes = {"vectorized": VectorizedWindowAggregateOperator, "per-record": WindowOperator}
    spec = window_spec(AGGREGATES["all"](), agg.KeyedWindowResult("k"))
    rows, stamps = events(7, n=1200)
    reference, uninterrupted = build(spec, WindowOperator)
    reference.process_batch(batch_of(rows[:700], EVENT_SCHEMA, stamps[:700]))
    reference.process_watermark(max(stamps[:700]) - 1500)
    cut = len(uninterrupted.rows)
    reference.process_batch(batch_of(rows[700:], EVENT_SCHEMA, stamps[700:]))
    reference.process_watermark(MAX_WATERMARK)

    op, before = build(spec, classes[first])
    op.process_batch(batch_of(rows[:700], EVENT_SCHEMA, stamps[:700]))
    op.process_watermark(max(stamps[:700]) - 1500)
    assert as_counter(before) == collections.Counter(
        (tuple(sorted(r.items())), t) for r, t in zip(uninterrupted.rows[:cut], uninterrupted.timestamps[:cut])
    )
    snapshot = op.snapshot_state(1)
    assert {s.name for s in snapshot.keyed} >= {"_window/contents", "_window/event_time_timers"}
    restored = split_snapshot(snapshot, new_parallelism)
    after = ListOutput()
    for subtask in range(new_parallelism):
        op2, out = build(spec, classes[second], restored=restored[subtask], subtask=subtask,
                         parallelism=new_parallelism)  # fmt: skip
        op2.process_watermark(max(stamps[:700]) - 1500)  # the watermark is not state: it comes again
        mine = [i for i in range(700, 1200) if subtask_of(rows[i]["k"], new_parallelism) == subtask]
        if mine:
            op2.process_batch(batch_of([rows[i] for i in mine], EVENT_SCHEMA, [stamps[i] for i in mine]))
        op2.process_watermark(MAX_WATERMARK)
        after.rows += out.rows
        after.timestamps += out.timestamps
    expected = ListOutput()
    expected.rows, expected.timestamps = uninterrupted.rows[cut:], uninterrupted.timestamps[cut:]
    assert as_counter(after) == as_counter(expected)


def test_window_falls_back_to_per_record_unless_all_built_in():
    class MyCount(agg.BuiltinAggregateFunction):
        pass

    assert type(create_operator(window_spec(MyCount(agg.count().columns)))) is WindowOperator
    assert type(create_operator(window_spec(agg.count(), allowed_lateness=10))) is WindowOperator
    sliding = window_spec(agg.count())
    sliding.function.assigner = SlidingEventTimeWindows.of(Time.seconds(2), Time.seconds(1))
    assert type(create_operator(sliding)) is WindowOperator
    assert (
        type(create_operator(window_spec(agg.count("k"), agg.KeyedWindowResult("k")))) is WindowOperator
    )  # name clash
    assert (
        type(create_operator(window_spec(agg.max("f")))) is WindowOperator
    )  # float max: NaN compares as in Python only
    assert type(create_operator(window_spec(agg.sum("f")))) is VectorizedWindowAggregateOperator


def test_window_needs_timestamps():
    op, _ = build(window_spec(agg.count()))
    with pytest.raises(ConfigurationError, match="event timestamp"):
        op.process_batch(batch_of([{"k": 1, "v": 1, "f": 1.0}], EVENT_SCHEMA))


# -- the aggregations module -------------------------------------------------------------------


def test_builtins_as_plain_aggregate_functions():
    fn = agg.combine(agg.count(), agg.sum("v", "total"), agg.min("v"), agg.max("v", "hi"))
    acc = fn.create_accumulator()
    for v in (3, -1, 7):
        acc = fn.add({"v": v}, acc)
    assert fn.get_result(acc) == {"count": 3, "total": 9, "v": -1, "hi": 7}
    other = fn.add({"v": 10}, fn.create_accumulator())
    assert fn.get_result(fn.merge(acc, other)) == {"count": 4, "total": 19, "v": -1, "hi": 10}


def test_builtins_reject_bad_arguments():
    with pytest.raises(ConfigurationError, match="distinct"):
        agg.combine(agg.count(), agg.count())
    with pytest.raises(ConfigurationError, match="field name"):
        agg.sum("")
    with pytest.raises(ConfigurationError, match="built-in aggregates"):
        agg.combine(agg.count(), "sum")
    with pytest.raises(KeyError, match="no field 'v'"):
        agg.sum("v").add({"w": 1}, agg.sum("v").create_accumulator())
