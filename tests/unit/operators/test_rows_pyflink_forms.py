"""Records in the forms PyFlink accepts: Rows and tuples mixed on a declared ROW or TUPLE stream, and objects whose
class pickle cannot name (a class of the user's ``__main__``, a local class) pickled by value."""

from __future__ import annotations

import pytest

from flinklike_spark import Row, Types
from flinklike_spark._runtime.operators.rows import RowsConverter
from flinklike_spark.common.typeinfo import to_arrow_schema
from flinklike_spark.common.types import records_of
from flinklike_spark.errors import SchemaMismatchError

pytestmark = pytest.mark.timeout(30)


def round_trip(records, type_info=None):
    schema = None if type_info is None else to_arrow_schema(type_info)
    return records_of(RowsConverter(schema, stream_name="Map").to_batch(records))


def test_rows_and_tuples_mix_on_a_declared_named_row_stream():
    named = Types.ROW_NAMED(["id", "name"], [Types.INT(), Types.STRING()])
    out = round_trip([Row(id=3, name="three"), (4, "four"), Row(5, "five")], named)
    assert [(type(r).__name__, r.id, r.name) for r in out] == [
        ("Row", 3, "three"),
        ("Row", 4, "four"),
        ("Row", 5, "five"),
    ]


def test_rows_and_tuples_mix_on_a_declared_tuple_stream():
    out = round_trip([(1, "a"), Row(2, "b")], Types.TUPLE([Types.INT(), Types.STRING()]))
    assert out == [(1, "a"), (2, "b")] and all(type(r) is tuple for r in out)


def test_dicts_stay_refused_on_a_declared_tuple_stream_and_a_wrong_arity_is_named():
    with pytest.raises(SchemaMismatchError, match="is not a tuple"):
        round_trip([(1,), {"id": 1}], Types.TUPLE([Types.INT()]))
    with pytest.raises(SchemaMismatchError, match=r"has 3 fields, the stream's schema .* has 2"):
        round_trip(
            [Row(id=1, name="a"), (2, "b", "extra")], Types.ROW_NAMED(["id", "name"], [Types.INT(), Types.STRING()])
        )


def test_an_object_of_a_class_pickle_cannot_name_is_pickled_by_value():
    class Point:  # a local class: pickle cannot find it by name, as a class of the user's __main__ in a worker
        def __init__(self, x):
            self.x = x

    [point] = round_trip([Point(7)])
    assert type(point).__name__ == "Point" and point.x == 7
    assert round_trip([1, "two", None]) == [1, "two", None]  # plain values keep the fast pickle path
