"""Per-record operators on a KeyedStream: map / flat_map / filter with keyed state, and rolling reduce.

After ``key_by``, PyFlink runs ``map``, ``flat_map`` and ``filter`` keyed: the
function's ``runtime_context.get_state(...)`` is state of the current record's
key. ``reduce`` (and the field aggregations ``sum``/``min``/``max``/``min_by``/
``max_by`` built on it) keeps one value per key and emits the updated value for
every record (Flink's rolling ``StreamGroupedReduceOperator``). State is
checkpointed and rescaled by key group like every keyed state. Output rows
keep the event timestamp of the record they came from.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import TYPE_CHECKING, Any

from checkpointing.schemas import StateKind
from flinklike_spark._runtime.operators.stream_operator import (
    OperatorRuntimeContext,
    OperatorSnapshot,
    RestoredState,
    UserFunctionOperator,
    call_open,
    describe_operator,
)
from flinklike_spark._runtime.record_timestamps import Timestamps
from flinklike_spark._runtime.state.incremental_snapshot import incremental_snapshots, take_keyed_snapshot
from flinklike_spark._runtime.state.state_backends import create_keyed_state_backend
from flinklike_spark.common.types import Row
from flinklike_spark.datastream.functions import FilterFunction, FlatMapFunction, MapFunction, ReduceFunction
from flinklike_spark.datastream.state import ValueStateDescriptor
from flinklike_spark.errors import ConfigurationError

__all__ = [
    "FieldAggregation",
    "KeyedFilterOperator",
    "KeyedFlatMapOperator",
    "KeyedMapOperator",
    "KeyedReduceOperator",
]

if TYPE_CHECKING:  # pragma: no cover
    from flinklike_spark._runtime.operators.operator_spec import OperatorSpec

_REDUCE_STATE = "_reduce/value"


class _KeyedFunctionOperator(UserFunctionOperator):
    """A user function with keyed state of the current record's key."""

    method = ""
    function_type: type = object

    def __init__(self, spec: OperatorSpec) -> None:
        super().__init__(spec)
        self.key_field = spec.key_field
        self.key_selector = spec.key_selector
        fn = self.function
        self.call = getattr(fn, self.method) if isinstance(fn, self.function_type) else fn

    def setup(self, context, output) -> None:
        super().setup(context, output)
        self.backend = create_keyed_state_backend(context, owner=describe_operator(self))
        self.incremental = incremental_snapshots(self.backend, context)

    def open(self) -> None:
        call_open(self.function, OperatorRuntimeContext(self.context, self.backend, self.name))

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.backend.close()

    def initialize_state(self, restored: RestoredState | None) -> None:
        if restored is not None:
            for entry in restored.keyed:
                self.backend.restore_entry(entry.state_name, entry.key, entry.value)
            for entry in restored.operator:
                if entry.state_kind == StateKind.TYPE_INFO:
                    self.backend.restore_type(entry.state_name, entry.value)
            if self.incremental is not None and restored.keyed_base is not None:
                self.incremental.restored(restored.checkpoint_id, restored.keyed_base)

    def snapshot_state(self, checkpoint_id: int) -> OperatorSnapshot:
        keyed = take_keyed_snapshot(self.backend, self.incremental, checkpoint_id)
        return OperatorSnapshot(
            keyed=keyed.entries,
            keyed_changes=keyed.changes,
            chain=keyed.chain,
            operator=self.backend.snapshot_declared_types(),
        )

    def _keys(self, rows: list[dict]):
        """Every row, with the backend's current key set to the row's key before it is yielded
        (the batch's keys are handed to the backend's ``prefetch`` first)."""
        backend = self.backend
        key_field, selector = self.key_field, self.key_selector
        keys = [row[key_field] for row in rows] if key_field is not None else [selector(row) for row in rows]
        backend.prefetch(keys)
        for row, key in zip(rows, keys):
            backend.current_key = key
            yield row


class KeyedMapOperator(_KeyedFunctionOperator):
    method = "map"
    function_type = MapFunction

    def process_rows(self, rows: list[dict], timestamps: Timestamps = None) -> None:
        call = self.call
        self.output.emit_rows([call(row) for row in self._keys(rows)], timestamps)


class KeyedFlatMapOperator(_KeyedFunctionOperator):
    method = "flat_map"
    function_type = FlatMapFunction

    def process_rows(self, rows: list[dict], timestamps: Timestamps = None) -> None:
        call = self.call
        out: list[dict] = []
        out_ts: list = []
        for row, timestamp in zip(self._keys(rows), timestamps or [None] * len(rows), strict=True):
            produced = call(row)
            if produced is not None:
                before = len(out)
                out.extend(produced)
                out_ts.extend([timestamp] * (len(out) - before))
        if out:
            self.output.emit_rows(out, out_ts)


class KeyedFilterOperator(_KeyedFunctionOperator):
    method = "filter"
    function_type = FilterFunction

    def process_rows(self, rows: list[dict], timestamps: Timestamps = None) -> None:
        call = self.call
        keep = [bool(call(row)) for row in self._keys(rows)]
        out = [row for row, kept in zip(rows, keep) if kept]
        if out:
            out_ts = None if timestamps is None else [t for t, kept in zip(timestamps, keep) if kept]
            self.output.emit_rows(out, out_ts)


class KeyedReduceOperator(_KeyedFunctionOperator):
    """Rolling reduce: emits ``reduce(previous result, row)`` for every row (the first row as is).

    In BATCH execution it emits only each key's final result, at the end of the input
    (Flink's batch semantics), with the timestamp of the key's last record.
    """

    method = "reduce"
    function_type = ReduceFunction

    def open(self) -> None:
        super().open()
        self.state = self.backend.get_state(ValueStateDescriptor(_REDUCE_STATE), ValueStateDescriptor)
        #: BATCH: key -> timestamp of its last record (insertion order: first arrival)
        self._batch_keys: dict[Any, int | None] | None = {} if self.context.batch_execution else None

    def process_rows(self, rows: list[dict], timestamps: Timestamps = None) -> None:
        call, state, batch_keys = self.call, self.state, self._batch_keys
        out: list[dict] = []
        for index, row in enumerate(self._keys(rows)):
            current = state.value()
            result = row if current is None else call(current, row)
            state.update(result)
            if batch_keys is None:
                out.append(result)
            else:
                batch_keys[self.backend.current_key] = timestamps[index] if timestamps is not None else None
        if out:
            self.output.emit_rows(out, timestamps)

    def finish(self) -> None:
        if not self._batch_keys:
            return
        out, out_ts = [], []
        for key, timestamp in self._batch_keys.items():
            self.backend.current_key = key
            out.append(self.state.value())
            out_ts.append(timestamp)
        self._batch_keys.clear()
        self.output.emit_rows(out, out_ts if any(ts is not None for ts in out_ts) else None)


_AGGREGATIONS = ("sum", "min", "max", "min_by", "max_by")


@dataclasses.dataclass(frozen=True)
class FieldAggregation(ReduceFunction):
    """``sum``/``min``/``max``/``min_by``/``max_by`` of one field as a reduce function (Flink's semantics).

    ``sum``, ``min`` and ``max`` return the first record of the key with only
    the field replaced by the running aggregate; ``min_by``/``max_by`` return
    the whole record holding the extreme value (the earliest one on ties).
    The field is a name (dicts, named Rows) or a position (PyFlink's int: the
    n-th field of a tuple, a Row or a dict); a record of a basic type (a number)
    is aggregated itself, whatever the field. Records keep their kind.
    """

    aggregation: str
    field: str | int

    def __post_init__(self) -> None:
        if self.aggregation not in _AGGREGATIONS:
            raise ConfigurationError(f"unknown aggregation {self.aggregation!r}; valid: {list(_AGGREGATIONS)}")
        if not isinstance(self.field, (str, int)) or isinstance(self.field, bool):
            raise ConfigurationError(f"{self.aggregation}() needs a field name or position, got {self.field!r}")

    def _get(self, record: Any) -> Any:
        """The aggregated field of ``record``; a basic value (a number...) is its own field, as in PyFlink."""
        field = self.field
        if isinstance(record, dict):
            if isinstance(field, int):
                names = list(record)
                if not 0 <= field < len(names):
                    raise IndexError(
                        f"{self.aggregation}({field}): position out of range for a record of "
                        f"{len(names)} fields {names}: {record!r}"
                    )
                field = names[field]
            if field not in record:
                raise KeyError(f"{self.aggregation}({field!r}): the record has no field {field!r}: {record!r}")
            return record[field]
        if isinstance(record, Row):
            if isinstance(field, str) and field not in (record.get_field_names() or ()):
                raise KeyError(
                    f"{self.aggregation}({field!r}): the Row has no field {field!r}; "
                    f"its fields are {record.get_field_names()}: {record!r}"
                )
            return self._positional(record, field)
        if isinstance(record, (tuple, list)):
            if isinstance(field, str):
                raise KeyError(
                    f"{self.aggregation}({field!r}): a {type(record).__name__} record has no field names; "
                    f"give the field's position (0..{len(record) - 1}): {record!r}"
                )
            return self._positional(record, field)
        return record

    def _positional(self, record: Any, field: str | int) -> Any:
        if isinstance(field, int) and not 0 <= field < len(record):
            raise IndexError(
                f"{self.aggregation}({field}): position out of range for a record of {len(record)} fields: {record!r}"
            )
        return record[field]

    def _with(self, record: Any, value: Any) -> Any:
        """A copy of ``record`` whose aggregated field is ``value``."""
        field = self.field
        if isinstance(record, dict):
            name = list(record)[field] if isinstance(field, int) else field
            return {**record, name: value}
        if isinstance(record, Row):
            row = copy.copy(record)
            row[field] = value
            return row
        if isinstance(record, (tuple, list)):
            values = list(record)
            values[field] = value
            return type(record)(values)
        return value

    def reduce(self, value1: Any, value2: Any) -> Any:
        a, b = self._get(value1), self._get(value2)
        aggregation = self.aggregation
        if aggregation == "sum":
            return self._with(value1, a + b)
        if aggregation == "min":
            return self._with(value1, b) if b < a else value1
        if aggregation == "max":
            return self._with(value1, b) if b > a else value1
        if aggregation == "min_by":
            return value2 if b < a else value1
        return value2 if b > a else value1

    def __call__(self, value1: Any, value2: Any) -> Any:
        return self.reduce(value1, value2)
