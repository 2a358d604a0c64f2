"""Types.BIG_DEC() fields in a running job: keyed aggregations and keyed state keep each value's scale, and a
DeltaSink writes the exact text (a string column: Delta's decimals have one fixed scale per column)."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pytest

from connectors import CollectSink, read_delta_table
from connectors.delta import DeltaSink
from flinklike_spark import KeyedProcessFunction, Row, StreamExecutionEnvironment, Types, ValueStateDescriptor

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


class CountPerKey(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)
        yield str(ctx.get_current_key()), self.count.value()


def _by_key(rows, field="price"):
    per_key: dict[str, list[str]] = {}
    for row in rows:
        per_key.setdefault(row.k, []).append(str(row[field]))
    return per_key


def test_big_dec_fields_keep_their_scale_through_aggregations_keyed_state_and_a_delta_sink(tmp_path):
    env = StreamExecutionEnvironment.get_execution_environment({"parallelism.default": 2})
    declared = Types.ROW_NAMED(["k", "price"], [Types.STRING(), Types.BIG_DEC()])
    prices = ["1.50", "-0.125", "2.5", "1000", "1.5", "0.10"]
    rows = [Row(k="ab"[i % 2], price=Decimal(p)) for i, p in enumerate(prices)]
    stream = env.from_collection(rows, type_info=declared)
    stream.key_by("k").sum("price").sink_to(CollectSink("sum"))
    stream.key_by("k").min("price").sink_to(CollectSink("min"))
    stream.key_by("k").max("price").sink_to(CollectSink("max"))
    counted = stream.key_by("price").process(CountPerKey(), output_type=Types.TUPLE([Types.STRING(), Types.LONG()]))
    counted.sink_to(CollectSink("count"))
    stream.sink_to(DeltaSink(str(tmp_path / "prices")))
    result = env.execute("big decimals")

    # a: 1.50, 2.5, 1.5; b: -0.125, 1000, 0.10 (Python's Decimal arithmetic, as PyFlink's functions do it)
    assert _by_key(CollectSink.rows(result, name="sum")) == {
        "a": ["1.50", "4.00", "5.50"], "b": ["-0.125", "999.875", "999.975"]
    }  # fmt: skip
    assert _by_key(CollectSink.rows(result, name="min")) == {
        "a": ["1.50", "1.50", "1.50"], "b": ["-0.125", "-0.125", "-0.125"]
    }  # fmt: skip
    assert _by_key(CollectSink.rows(result, name="max")) == {
        "a": ["1.50", "2.5", "2.5"],
        "b": ["-0.125", "1000", "1000"],
    }
    # Decimal("1.50") == Decimal("1.5"): one key (Python's equality), on one subtask, with one count
    counts = sorted(CollectSink.rows(result, name="count"))
    assert sorted(c for k, c in counts if k in ("1.50", "1.5")) == [1, 2]
    assert sorted(k for k, _ in counts if k not in ("1.50", "1.5")) == ["-0.125", "0.10", "1000", "2.5"]

    table = read_delta_table(tmp_path / "prices")
    assert table.schema.field("price").type == pa.string()
    assert sorted(table.column("price").to_pylist()) == sorted(prices)
