"""A value that does not fit its stream's type fails with SchemaMismatchError; it is never truncated or dropped."""

from __future__ import annotations

import datetime
import decimal

import pyarrow as pa
import pytest

from flinklike_spark._runtime.operators.rows import RowsConverter
from flinklike_spark.errors import SchemaMismatchError

pytestmark = pytest.mark.timeout(30)


def converter_fixed_by(first_rows, schema=None) -> RowsConverter:
    converter = RowsConverter(schema, stream_name="Map")
    converter.to_batch(first_rows)
    return converter


def test_a_float_in_a_declared_long_field_is_refused_not_truncated():
    schema = pa.schema([("key", pa.int64()), ("price", pa.int64())])
    converter = RowsConverter(schema, stream_name="Map")
    with pytest.raises(SchemaMismatchError, match=r"stream 'Map': field 'price' .* value 0\.99 \(float\).* int64"):
        converter.to_batch([{"key": 1, "price": 0.99}])


def test_a_float_in_an_inferred_int_field_is_refused_in_a_later_batch():
    converter = converter_fixed_by([{"key": 1, "price": 300}])
    with pytest.raises(SchemaMismatchError, match=r"field 'price' .* value 300\.5 \(float\)"):
        converter.to_batch([{"key": 1, "price": 301}, {"key": 2, "price": 300.5}])


def test_a_struct_that_gains_a_field_is_refused_not_cut():
    converter = converter_fixed_by([{"key": 1, "s": {"a": 1}}])
    with pytest.raises(
        SchemaMismatchError, match=r"field 's' .* fields \['b'\] that the stream's type struct<a: int64>"
    ):
        converter.to_batch([{"key": 1, "s": {"a": 2, "b": 3}}])


def test_a_float_nested_in_a_struct_is_refused():
    converter = converter_fixed_by([{"key": 1, "s": {"a": 1, "c": "x"}}])
    with pytest.raises(SchemaMismatchError, match=r"value \{'a': 2\.5, 'c': 'y'\}"):
        converter.to_batch([{"key": 1, "s": {"a": 2, "c": "y"}}, {"key": 1, "s": {"a": 2.5, "c": "y"}}])


def test_an_int_too_large_for_its_field_is_refused():
    converter = converter_fixed_by([{"key": 1, "n": 3}], pa.schema([("key", pa.int64()), ("n", pa.int32())]))
    with pytest.raises(SchemaMismatchError, match=r"field 'n' .* value 4294967296"):
        converter.to_batch([{"key": 1, "n": 2**32}])


@pytest.mark.parametrize(
    ("field_type", "value", "expected"),
    [
        (pa.int64(), 300.0, 300),  # a whole float fits an integer field exactly
        (pa.float64(), 3, 3.0),  # ints widen to floats
        (pa.int32(), 7, 7),
        (pa.decimal128(10, 2), decimal.Decimal("1.25"), decimal.Decimal("1.25")),
        (pa.timestamp("us"), datetime.datetime(2026, 1, 1, 12, 0, 0, 5), datetime.datetime(2026, 1, 1, 12, 0, 0, 5)),
        (pa.int64(), None, None),
        (pa.struct([("a", pa.int64()), ("c", pa.string())]), {"a": 2}, {"a": 2, "c": None}),
        (pa.map_(pa.string(), pa.int64()), {"x": 1}, [("x", 1)]),
        (pa.list_(pa.int64()), [1, 2], [1, 2]),
    ],
)
def test_values_that_fit_exactly_are_converted(field_type, value, expected):
    converter = RowsConverter(pa.schema([("key", pa.int64()), ("v", field_type)]), stream_name="Map")
    assert converter.to_batch([{"key": 1, "v": value}]).to_pylist() == [{"key": 1, "v": expected}]


def test_str_for_long_is_still_refused():
    converter = RowsConverter(pa.schema([("key", pa.int64())]), stream_name="Map")
    with pytest.raises(SchemaMismatchError, match=r"value '12' \(str\)"):
        converter.to_batch([{"key": "12"}])


@pytest.mark.parametrize("schema", [None, pa.schema([("key", pa.string()), ("v", pa.int64())])])
def test_a_lone_surrogate_names_the_stream_field_and_value(schema):
    converter = RowsConverter(schema, stream_name="Collection Source")
    with pytest.raises(SchemaMismatchError, match=r"stream 'Collection Source': field 'key' .* not valid Unicode"):
        converter.to_batch([{"key": "ok", "v": 1}, {"key": "bad\ud800", "v": 2}])
