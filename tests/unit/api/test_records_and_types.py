"""PyFlink's Row, tuples and typed values as records; event timestamps in batches (issue 13 item 6)."""

from __future__ import annotations

import datetime
import pickle
from decimal import Decimal
from fractions import Fraction

import pyarrow as pa
import pytest

from flinklike_spark import Row, RowKind, Types, WatermarkStrategy
from flinklike_spark._runtime.operators.rows import RowsConverter
from flinklike_spark._runtime.record_timestamps import (
    TIMESTAMP_COLUMN,
    split_timestamps,
    strip_timestamps,
    with_timestamps,
)
from flinklike_spark.common.typeinfo import to_arrow_schema
from flinklike_spark.common.types import RECORD_KIND_KEY, records_of
from flinklike_spark.errors import SchemaMismatchError


def test_row_follows_pyflink_semantics():
    row = Row(name="Alice", age=11)
    assert row.get_field_names() == ["name", "age"]  # PyFlink 2.3 keeps keyword fields in their order
    assert (row.name, row["age"], row[0], len(row), "Alice" in row) == ("Alice", 11, "Alice", 2, True)
    assert row.as_dict() == {"name": "Alice", "age": 11}
    assert repr(row) == str(row) == "Row(name='Alice', age=11)"
    assert row == Row(age=11, name="Alice") and row != Row(name="Alice", age=12)  # equal field by field
    assert repr(Row("a", 2)) == str(Row("a", 2)) == "<Row('a', 2)>"
    person = Row("name", "age")
    alice = person("Alice", 11)
    assert alice.get_field_names() == ["name", "age"] and alice.age == 11
    assert pickle.loads(pickle.dumps(alice)) == alice and hash(alice) == hash(("Alice", 11))
    assert Row("Alice", 11) != alice and Row("Alice", 11) == Row("Alice", 11)
    nested = Row(key=1, value=Row(name="a", age=2))
    assert nested.as_dict(True) == {"key": 1, "value": {"name": "a", "age": 2}}
    row["age"] = 12
    assert row.age == 12 and row.get_row_kind() is RowKind.INSERT
    with pytest.raises(AttributeError, match="no field 'missing'"):
        _ = row.missing
    with pytest.raises(ValueError, match="not both"):
        Row(1, name="x")
    with pytest.raises(TypeError, match="without field names"):
        Row(1, 2).as_dict()


@pytest.mark.parametrize(
    ("records", "schema", "kind"),
    [
        ([{"a": 1, "b": "x"}, {"a": 2, "b": "y"}], None, None),
        (
            [Row(a=1, b="x"), Row(a=2, b="y")],
            to_arrow_schema(Types.ROW_NAMED(["a", "b"], [Types.INT(), Types.STRING()])),
            b"row",
        ),
        ([Row(a=1, b="x"), Row(a=2, b="y")], None, b"pickled"),  # undeclared: pickled, as in PyFlink
        ([Row(1, "x"), Row(2, "y")], to_arrow_schema(Types.ROW([Types.LONG(), Types.STRING()])), b"positional-row"),
        ([(1, "x"), (2, "y")], to_arrow_schema(Types.TUPLE([Types.INT(), Types.STRING()])), b"tuple"),
        ([(1, "x"), (2, "y")], None, b"pickled"),
        (["x", "y"], to_arrow_schema(Types.STRING()), b"value"),
        ([{"a": {1, 2}}, "x", (3, [4])], to_arrow_schema(Types.PICKLED_BYTE_ARRAY()), b"pickled"),
    ],
)
def test_records_round_trip_through_arrow_batches_as_their_kind(records, schema, kind):
    batch = RowsConverter(schema, stream_name="s").to_batch(records)
    assert (batch.schema.metadata or {}).get(RECORD_KIND_KEY) == kind
    # The kind survives Arrow IPC (the network and channel state).
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    [received] = list(pa.ipc.open_stream(sink.getvalue()))
    expected = records
    if kind == b"positional-row":  # as in PyFlink, downstream Types.ROW rows are named f0, f1, ...
        expected = [Row(f0=r[0], f1=r[1]) for r in records]
    assert records_of(received) == expected


def test_positional_records_take_the_declared_names_and_kind_as_in_pyflink():
    named = RowsConverter(to_arrow_schema(Types.ROW_NAMED(["id", "name"], [Types.INT(), Types.STRING()])),
                          stream_name="s")  # fmt: skip
    assert records_of(named.to_batch([(1, "a"), (2, "b")])) == [Row("id", "name")(1, "a"), Row("id", "name")(2, "b")]
    rows = RowsConverter(to_arrow_schema(Types.ROW([Types.INT(), Types.STRING()])), stream_name="s")
    [row] = records_of(rows.to_batch([(1, "a")]))
    assert row == Row(f0=1, f1="a") and row.f0 == 1 and str(row) == "Row(f0=1, f1='a')"  # PyFlink's names
    with pytest.raises(SchemaMismatchError, match=r"record \(1, 'a', 3\) has 3 fields"):
        rows.to_batch([(1, "a", 3)])


def test_mixed_records_are_refused_naming_the_record():
    with pytest.raises(SchemaMismatchError, match=r"record \{'a': 1\} is not a tuple"):
        RowsConverter(to_arrow_schema(Types.TUPLE([Types.INT()])), stream_name="s").to_batch([(1,), {"a": 1}])
    rows = RowsConverter(None, stream_name="s")
    rows.to_batch([{"a": 1}])
    with pytest.raises(SchemaMismatchError, match="dicts, Rows or tuples"):
        rows.to_batch(["plain"])  # a stream of rows stays one


def test_undeclared_plain_values_and_objects_are_pickled_as_in_pyflink():
    converter = RowsConverter(None, stream_name="s")
    values = ["plain", None, 3, {"a": 1}, (1, 2), Fraction(1, 3)]
    first = converter.to_batch(values[:1])  # the first records decide: not a dict, Row or tuple
    batch = converter.to_batch(values)
    assert first.schema.names == batch.schema.names == ["f0"] and batch.schema.field("f0").type == pa.binary()
    assert records_of(batch) == values


def test_timestamps_travel_in_a_reserved_trailing_column():
    batch = pa.RecordBatch.from_pylist([{"a": 1}, {"a": 2}])
    assert with_timestamps(batch, [None, None]) is batch  # no timestamps: no column
    stamped = with_timestamps(batch, [5, None])
    assert stamped.schema.names == ["a", TIMESTAMP_COLUMN]
    assert split_timestamps(stamped) == (batch, [5, None])
    assert strip_timestamps(stamped).equals(batch) and split_timestamps(batch) == (batch, None)


def test_source_assigner_reads_arrow_timestamp_columns_as_epoch_millis():
    base = datetime.datetime(2026, 1, 1)  # naive: Arrow's timestamp[ms] without a zone (UTC)
    epoch = int(base.replace(tzinfo=datetime.UTC).timestamp() * 1000)
    batch = pa.RecordBatch.from_pylist(
        [{"when": base + datetime.timedelta(milliseconds=ms)} for ms in (0, 999)],
        schema=pa.schema([("when", pa.timestamp("ms"))]),
    )
    generator = WatermarkStrategy().with_timestamp_assigner("when").create_generator()
    assert generator.assign(batch).to_pylist() == [epoch, epoch + 999]
    assert generator.current_watermark() == epoch + 998
    by_function = WatermarkStrategy().with_timestamp_assigner(lambda r: r["when"]).create_generator()
    assert by_function.assign(batch) == [epoch, epoch + 999]


def test_rows_and_tuples_nested_in_declared_types_come_back_as_declared():
    inner_row, inner_tuple = Types.ROW([Types.INT(), Types.STRING()]), Types.TUPLE([Types.BIG_DEC(), Types.LONG()])
    declared = Types.ROW_NAMED(["id", "pos", "pair"], [Types.INT(), inner_row, inner_tuple])
    records = [Row(id=1, pos=Row(2, "x"), pair=(Decimal("1.5"), 7)), Row(id=2, pos=None, pair=(Decimal("10"), 8))]
    [first, second] = records_of(RowsConverter(to_arrow_schema(declared), stream_name="s").to_batch(records))
    assert first == Row("id", "pos", "pair")(1, Row(f0=2, f1="x"), (Decimal("1.5"), 7))  # PyFlink: Row(f0=..), tuple
    assert second.pos is None and second.pair == (Decimal("10"), 8)
    tuples = RowsConverter(to_arrow_schema(Types.TUPLE([Types.INT(), inner_row])), stream_name="s")
    assert records_of(tuples.to_batch([(1, Row(2, "y"))])) == [(1, Row(f0=2, f1="y"))]


def test_big_dec_values_keep_their_scale():
    values = [Decimal("1.50"), Decimal("3"), Decimal("0.000123"), Decimal("1E+3"), Decimal("-0.0"), None]
    batch = RowsConverter(to_arrow_schema(Types.BIG_DEC()), stream_name="s").to_batch(values)
    assert [str(v) for v in records_of(batch)] == ["1.50", "3", "0.000123", "1E+3", "-0.0", "None"]
    many_digits = Decimal("12345678901234567890123456789012345678901234567890.123456789012345678901")
    assert records_of(RowsConverter(to_arrow_schema(Types.BIG_DEC()), stream_name="s").to_batch([many_digits])) == [
        many_digits
    ]  # beyond decimal128's 38 digits, as Java's BigDecimal


def test_big_dec_takes_what_pyflinks_coder_writes_as_a_number_and_refuses_the_rest():
    converter = RowsConverter(to_arrow_schema(Types.BIG_DEC()), stream_name="s")
    assert records_of(converter.to_batch([7, 0.1])) == [Decimal("7"), Decimal("0.1")]  # str(value), as PyFlink
    for bad in ["1.5", True, Decimal("NaN"), Decimal("Infinity"), float("inf")]:
        with pytest.raises(SchemaMismatchError, match="which is not a BIG_DEC value: a finite Decimal, int or float"):
            converter.to_batch([Decimal(1), bad])


def test_big_dec_keeps_its_scale_at_any_depth_and_user_records_are_not_changed():
    declared = Types.ROW_NAMED(
        ["d", "ds", "by_name", "pair", "named"],
        [
            Types.BIG_DEC(),
            Types.LIST(Types.BIG_DEC()),
            Types.MAP(Types.STRING(), Types.BIG_DEC()),
            Types.TUPLE([Types.BIG_DEC(), Types.LONG()]),
            Types.ROW_NAMED(["x"], [Types.BIG_DEC()]),
        ],
    )
    record = {"d": Decimal("1.50"), "ds": [Decimal("2.0"), None], "by_name": {"k": Decimal("3.10")},
              "pair": (Decimal("4.000"), 1), "named": Row(x=Decimal("5.0"))}  # fmt: skip
    converter = RowsConverter(to_arrow_schema(declared), stream_name="s")
    [back] = records_of(converter.to_batch([record]))
    assert [str(back["d"]), [str(v) for v in back["ds"][:1]], str(back["by_name"][0][1])] == ["1.50", ["2.0"], "3.10"]
    assert str(back["pair"][0]) == "4.000" and str(back["named"].x) == "5.0"
    assert record["d"] == Decimal("1.50") and isinstance(record["ds"][0], Decimal)  # the user's dict is untouched
