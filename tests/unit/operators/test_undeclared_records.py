"""Records of a stream without a declared type reach the next function exactly as emitted (issue 30 item 1):
anything but dicts is pickled, as PyFlink pickles it, while declared types and dicts stay Arrow columns;
fan-out copies any kind of record; key_by / timestamp field names read pickled named Rows."""

from __future__ import annotations

from fractions import Fraction

import pyarrow as pa
import pytest

from flinklike_spark import Row, RowKind, Types
from flinklike_spark._runtime.graph.job_graph import PartitionerKind, PartitionerSpec
from flinklike_spark._runtime.network.partitioner import create_channel_selector
from flinklike_spark._runtime.operators.async_operator import AsyncOperatorDescriptor
from flinklike_spark._runtime.operators.operator_registry import create_operator
from flinklike_spark._runtime.operators.operator_spec import OperatorSpec
from flinklike_spark._runtime.operators.rows import RecordKind, RowsConverter, declared_kind
from flinklike_spark._runtime.operators.stream_operator import OperatorContext, Output
from flinklike_spark._runtime.tasks.record_writer import BroadcastingOutput
from flinklike_spark.common.typeinfo import to_arrow_schema
from flinklike_spark.common.types import copy_record, pickled_field_values, records_of

pytestmark = pytest.mark.timeout(30)


def through(records, converter=None):
    """``records`` as the next operator gets them, and the batch's record kind."""
    converter = converter or RowsConverter(None, stream_name="Map")
    batch = converter.to_batch(records)
    return records_of(batch), declared_kind(batch.schema)


def test_undeclared_rows_and_tuples_come_back_as_emitted():
    records = [
        Row("a", 2),  # stays positional: <Row('a', 2)>, not Row(f0='a', f1=2)
        Row(word="w", count=1),  # keeps its keyword order
        (1, "one"),
        (2, 2.5, None),  # another length, a float where an int was
        Row(3, [3], {"x": Row(4)}),
        {5, 6},
        Fraction(1, 3),
    ]
    out, kind = through(records)
    assert kind == RecordKind.PICKLED
    assert out == records and [type(r) for r in out] == [type(r) for r in records]
    assert [repr(r) for r in out[:2]] == ["<Row('a', 2)>", "Row(word='w', count=1)"]


def test_an_undeclared_stream_stays_pickled_when_later_records_are_dicts():
    converter = RowsConverter(None, stream_name="Map")
    through([(1, 2)], converter)
    assert through([{"a": 1}, (3,)], converter) == ([{"a": 1}, (3,)], RecordKind.PICKLED)


def test_undeclared_dicts_and_declared_types_stay_arrow_columns():
    batch = RowsConverter(None, stream_name="s").to_batch([{"key": 1, "seq": 2}])
    assert batch.schema.metadata is None and batch.schema.names == ["key", "seq"]
    pair = RowsConverter(to_arrow_schema(Types.TUPLE([Types.STRING(), Types.INT()])), stream_name="s")
    batch = pair.to_batch([("a", 1), ("b", 2)])
    assert batch.schema.names == ["f0", "f1"] and batch.column(1).type == pa.int32()
    assert records_of(batch) == [("a", 1), ("b", 2)]


def test_copy_record_copies_what_a_consumer_could_change_and_keeps_the_kind():
    row, record, values = Row("a", [1]), {"k": [1]}, [1, 2]
    assert copy_record(row) == row and copy_record(row) is not row and repr(copy_record(row)) == "<Row('a', [1])>"
    named = Row(b=1, a=2)
    named.set_row_kind(RowKind.UPDATE_AFTER)
    assert copy_record(named) == named and copy_record(named).get_row_kind() is RowKind.UPDATE_AFTER
    assert copy_record(record) == record and copy_record(record) is not record
    assert copy_record(values) == values and copy_record(values) is not values
    for same in (5, "s", (1, [2]), None, 2.5):
        assert copy_record(same) is same
    fraction = Fraction(1, 3)
    assert copy_record(fraction) == fraction


class Collecting(Output):
    def __init__(self) -> None:
        self.rows: list = []

    def emit_rows(self, rows, timestamps=None) -> None:
        self.rows.extend(rows)

    def emit_batch(self, batch) -> None:  # pragma: no cover - not used here
        raise AssertionError

    def emit_watermark(self, timestamp) -> None:
        pass


def test_fan_out_hands_plain_values_rows_and_objects_to_every_consumer():
    first, second = Collecting(), Collecting()
    records = [1, Row("a", 2), (3,), {"k": 4}, {5}]
    BroadcastingOutput([first, second]).emit_rows(records)  # dict(1) failed the job before
    assert first.rows == second.rows == records
    first.rows[1][0] = "changed"
    assert second.rows[1] == Row("a", 2)


def test_key_by_a_field_name_keys_pickled_named_rows_as_a_key_selector_would():
    records = [Row(user=f"u{i % 7}", n=i) for i in range(50)]
    batch = RowsConverter(None, stream_name="s").to_batch(records)
    assert pickled_field_values(batch, "user") == [r.user for r in records]
    assert pickled_field_values(batch, "missing") is None
    assert pickled_field_values(RowsConverter(None, stream_name="s").to_batch([{"user": "x"}]), "user") is None

    def channels(spec):
        selector = create_channel_selector(spec, 4, subtask_index=0)
        return {r.n: channel for channel, piece in selector.split(batch) for r in records_of(piece)}

    by_field = channels(PartitionerSpec(kind=PartitionerKind.HASH, key_field="user"))
    by_selector = channels(PartitionerSpec(kind=PartitionerKind.HASH, key_selector=lambda r: r.user))
    assert by_field == by_selector and len(by_field) == 50 and len(set(by_field.values())) > 1


def test_row_kind_prints_as_in_pyflink():
    assert [str(kind) for kind in RowKind] == ["+I", "-U", "+U", "-D"]


def test_pickled_byte_array_fields_hold_any_object_as_in_pyflink():
    fields = Types.TUPLE([Types.STRING(), Types.PICKLED_BYTE_ARRAY(), Types.LIST(Types.PICKLED_BYTE_ARRAY())])
    records = [("a", {1, 2}, [Row("x", 1), None]), ("b", None, [])]
    out, kind = through(records, RowsConverter(to_arrow_schema(fields), stream_name="s"))
    assert kind == RecordKind.TUPLE and out == records and repr(out[0][2][0]) == "<Row('x', 1)>"


class Pending:
    """An async function whose requests stay in flight until released."""

    def __init__(self) -> None:
        self.release = None

    def open(self, runtime_context) -> None:
        pass

    def close(self) -> None:
        pass

    async def async_invoke(self, value):
        import asyncio

        while self.release is None:
            await asyncio.sleep(0.01)
        return [value]

    def timeout(self, value):  # pragma: no cover - the timeout is an hour
        return []


def test_async_in_flight_plain_values_and_rows_are_checkpointed_as_they_are():
    spec = OperatorSpec(
        uid="a",
        name="async",
        kind="async_wait",
        function=AsyncOperatorDescriptor(function=Pending(), timeout_ms=3_600_000, capacity=10, ordered=True),
    )
    operator = create_operator(spec)
    operator.setup(OperatorContext(task_name="t", subtask_index=0, parallelism=1, max_parallelism=128,
                                   attempt_number=0), Collecting())  # fmt: skip
    operator.initialize_state(None)
    operator.open()
    try:
        records = [1, Row("a", 2), (3, None)]
        operator.process_rows(records, [10, 20, 30])
        [state] = operator.snapshot_state(1).operator  # dict(1) failed here before
        assert [value for _, value in state.entries] == list(zip(records, [10, 20, 30], strict=True))
    finally:
        operator.function.release = True
        operator.finish()
        operator.close()
