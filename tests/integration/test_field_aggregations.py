"""KeyedStream.sum/min/max/min_by/max_by on every record kind, by position and by name, against PyFlink's results.

PyFlink's semantics: ``sum``/``min``/``max`` keep the key's first record and
replace only the aggregated field; ``min_by``/``max_by`` emit the whole record
holding the extreme value, the first one on ties; a record of a basic type is
aggregated itself. One record is emitted per input record (rolling).
"""

from __future__ import annotations

import pytest

from connectors import CollectSink
from flinklike_spark import Row, StreamExecutionEnvironment, Types

pytestmark = pytest.mark.timeout(120)

AGGREGATIONS = ("sum", "min", "max", "min_by", "max_by")


def run_aggregations(records, type_info, field, key_selector, key_type):
    env = StreamExecutionEnvironment.get_execution_environment(
        {"parallelism.default": 1, "flinklike.local.taskmanager-mode": "thread"}
    )
    keyed = env.from_collection(records, type_info=type_info).key_by(key_selector, key_type=key_type)
    for aggregation in AGGREGATIONS:
        getattr(keyed, aggregation)(field).sink_to(CollectSink(aggregation))
    result = env.execute("field aggregations")
    return {aggregation: CollectSink.rows(result, name=aggregation) for aggregation in AGGREGATIONS}


TUPLES = [("k", 2, 9), ("k", 2, 1), ("k", 2, 0), ("k", 3, 5)]


def test_tuples_by_position():
    out = run_aggregations(
        TUPLES, Types.TUPLE([Types.STRING(), Types.INT(), Types.INT()]), 1, lambda r: r[0], Types.STRING()
    )
    assert out["min_by"] == [("k", 2, 9)] * 4  # ties keep the first record
    assert out["max_by"] == [("k", 2, 9), ("k", 2, 9), ("k", 2, 9), ("k", 3, 5)]
    assert out["sum"] == [("k", 2, 9), ("k", 4, 9), ("k", 6, 9), ("k", 9, 9)]
    assert out["min"] == [("k", 2, 9)] * 4
    assert out["max"] == [("k", 2, 9), ("k", 2, 9), ("k", 2, 9), ("k", 3, 9)]
    third = run_aggregations(
        TUPLES, Types.TUPLE([Types.STRING(), Types.INT(), Types.INT()]), 2, lambda r: r[0], Types.STRING()
    )
    assert third["max_by"] == [("k", 2, 9)] * 4
    assert third["min_by"] == [("k", 2, 9), ("k", 2, 1), ("k", 2, 0), ("k", 2, 0)]
    assert third["sum"] == [("k", 2, 9), ("k", 2, 10), ("k", 2, 10), ("k", 2, 15)]


def test_positional_rows_by_position():
    rows = [Row(*t) for t in TUPLES]
    out = run_aggregations(
        rows, Types.ROW([Types.STRING(), Types.INT(), Types.INT()]), 2, lambda r: r[0], Types.STRING()
    )
    assert [tuple(r) for r in out["min_by"]] == [("k", 2, 9), ("k", 2, 1), ("k", 2, 0), ("k", 2, 0)]
    assert [tuple(r) for r in out["sum"]] == [("k", 2, 9), ("k", 2, 10), ("k", 2, 10), ("k", 2, 15)]
    assert all(isinstance(r, Row) for r in out["sum"])


def test_named_rows_by_name_and_by_position():
    row_type = Types.ROW_NAMED(["k", "v1", "v2"], [Types.STRING(), Types.INT(), Types.INT()])
    rows = [Row(k=a, v1=b, v2=c) for a, b, c in TUPLES]
    by_name = run_aggregations(rows, row_type, "v2", lambda r: r["k"], Types.STRING())
    by_position = run_aggregations(rows, row_type, 2, lambda r: r["k"], Types.STRING())
    assert by_name == by_position
    assert [r.v2 for r in by_name["sum"]] == [9, 10, 10, 15]
    assert [r.v1 for r in by_name["sum"]] == [2, 2, 2, 2]
    assert [tuple(r) for r in by_name["max_by"]] == [("k", 2, 9)] * 4


def test_dicts_by_name_and_by_position():
    records = [{"k": a, "v1": b, "v2": c} for a, b, c in TUPLES]
    by_name = run_aggregations(records, None, "v1", lambda r: r["k"], Types.STRING())
    by_position = run_aggregations(records, None, 1, lambda r: r["k"], Types.STRING())
    assert by_name == by_position
    assert [r["v1"] for r in by_name["sum"]] == [2, 4, 6, 9]
    assert by_name["min_by"] == [records[0]] * 4


def test_basic_values_aggregate_themselves():
    out = run_aggregations([3, 1, 4, 1, 5], Types.INT(), 0, lambda v: v % 2, Types.INT())
    # keys: odd 3, 1, 1, 5; even 4
    assert out["sum"] == [3, 4, 4, 5, 10]
    assert out["min"] == out["min_by"] == [3, 1, 4, 1, 1]
    assert out["max"] == out["max_by"] == [3, 3, 4, 3, 5]
