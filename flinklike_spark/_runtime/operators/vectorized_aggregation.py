"""Vectorized built-in aggregations: keyed windows and rolling field aggregations on grouped Arrow kernels.

Two operators replace their per-record counterparts when a job uses only
built-ins (:func:`vectorized_operator_class` decides, from the OperatorSpec,
when the chain creates the operator):

* :class:`VectorizedWindowAggregateOperator` for ``window(TumblingEventTimeWindows)``
  with the default trigger, no evictor, no allowed lateness, no late-data side
  output and no declared output type, ending in ``aggregate(<built-in from
  flinklike_spark.datastream.aggregations>, None | KeyedWindowResult)``, keyed by a field.
* :class:`VectorizedRollingAggregateOperator` for ``KeyedStream.sum/min/max/
  min_by/max_by`` by field name or position, keyed by a field, on a stream of
  dict records with a declared schema, when the field is an integer (any
  numeric type for ``sum``; the same holds for the window's columns). Float ``min``/``max`` stay per record: Python's
  comparisons with NaN are not those of any grouped kernel.

Semantics are the per-record operators' (Flink's): the rolling operator emits
one row per input row, in input order, with the input row's timestamp; the
window operator emits one row per key and window when the watermark passes
the window's end, with timestamp ``window.max_timestamp()``, and drops (and
counts in ``num_late_records_dropped``) records whose window is already late.
Integer results are exact (within int64: Python's ints do not overflow, a
64-bit accumulator wraps); a float ``sum`` adds record by record in record
order per key, as the per-record path does (``np.add.at`` and a per-key
``np.cumsum``, not pandas' compensated sums), so it gives the same bits.

Checkpoints use the per-record operators' state layout (``_reduce/value``:
the key's current result record; ``_window/contents``: ``{TimeWindow:
accumulator}`` per key, with its event-time timer), so a checkpoint taken by
either path restores into the other, and a rescale redistributes it by key
group like every keyed state.

Work per batch is O(rows in the batch + keys the batch touches) for the
rolling operator and O(rows + keys of the open windows) for the window
operator, all in pyarrow/pandas kernels; Python runs per batch and per fired
window, never per record.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from checkpointing.schemas import StateKind
from checkpointing.state_snapshots import KeyedStateSnapshot
from checkpointing.writer import KeyedColumns
from flinklike_spark._runtime.operators.operator_spec import OperatorKind, OperatorSpec
from flinklike_spark._runtime.operators.stream_operator import (
    OperatorRuntimeContext,
    OperatorSnapshot,
    RestoredState,
    StreamOperator,
    call_close,
    call_open,
)
from flinklike_spark._runtime.record_timestamps import TIMESTAMP_COLUMN, with_timestamps
from flinklike_spark._runtime.state.keyed_state import key_groups_of
from flinklike_spark.common.types import BIG_DEC_KEY, RecordKind, declared_kind
from flinklike_spark.common.watermark_strategy import MIN_WATERMARK
from flinklike_spark.datastream.aggregations import BuiltinAggregateFunction, KeyedWindowResult
from flinklike_spark.datastream.window import EventTimeTrigger, TimeWindow, TumblingEventTimeWindows
from flinklike_spark.errors import ConfigurationError

__all__ = [
    "VectorizedRollingAggregateOperator",
    "VectorizedWindowAggregateOperator",
    "vectorized_operator_class",
]

_REDUCE_STATE = "_reduce/value"  # as keyed_operators (the per-record rolling reduce)
_CONTENTS = "_window/contents"  # as window_operator
_EVENT_TIMERS = "_window/event_time_timers"
_KEY = "__key"


def vectorized_operator_class(spec: OperatorSpec) -> type[StreamOperator] | None:
    """The vectorized operator class for ``spec``, or None when the per-record operator must run it."""
    if spec.kind is OperatorKind.WINDOW:
        return VectorizedWindowAggregateOperator if _window_eligible(spec) else None
    if spec.kind is OperatorKind.KEYED_REDUCE:
        return VectorizedRollingAggregateOperator if _rolling_field(spec) is not None else None
    return None


#: the record kinds whose batches each vectorized operator reads by column name: the rolling operator emits
#: the input record with its field replaced, so only dicts; a window emits its own result dicts, so named
#: rows (a CSV, JSON or Avro source's records) too
_ROLLING_KINDS: Final = frozenset({None, RecordKind.DICT})
_WINDOW_KINDS: Final = _ROLLING_KINDS | {RecordKind.NAMED_ROW}


def _dict_schema(spec: OperatorSpec, kinds: frozenset = _ROLLING_KINDS) -> pa.Schema | None:
    schema = spec.input_schema
    if schema is None or declared_kind(schema) not in kinds:
        return None
    if not isinstance(spec.key_field, str) or spec.key_field not in schema.names:
        return None
    key = schema.field(spec.key_field)
    if key.metadata and BIG_DEC_KEY in key.metadata:
        return None  # BIG_DEC keys are text in Arrow and Decimals in records: the per-record path keys by the Decimal
    return schema


def _window_eligible(spec: OperatorSpec) -> bool:
    d = spec.function
    schema = _dict_schema(spec, _WINDOW_KINDS)
    if schema is None or spec.output_schema is not None:
        return False
    if type(d.aggregate_function) is not BuiltinAggregateFunction:  # a user subclass is a user function
        return False
    if d.window_function is not None and type(d.window_function) is not KeyedWindowResult:
        return False
    if type(d.assigner) is not TumblingEventTimeWindows or type(d.trigger) is not EventTimeTrigger:
        return False
    if d.evictor is not None or d.allowed_lateness or d.late_data_tag is not None:
        return False
    for column in d.aggregate_function.columns:
        if column.kind == "count":
            continue
        if column.field not in schema.names:
            return False
        field_type = schema.field(column.field).type
        # Python's < and > with NaN are no kernel's: float min/max stay per record, as in the rolling case.
        if not (pa.types.is_integer(field_type) or (column.kind == "sum" and pa.types.is_floating(field_type))):
            return False
    if isinstance(d.window_function, KeyedWindowResult):
        fixed = {d.window_function.key_name, d.window_function.start_name, d.window_function.end_name}
        if fixed & {c.name for c in d.aggregate_function.columns}:
            return False  # the result dict would overwrite a fixed field: keep Python's dict semantics
    return True


def _rolling_field(spec: OperatorSpec) -> str | None:
    """The aggregated field's name when a vectorized rolling aggregation can run ``spec``, else None."""
    from flinklike_spark._runtime.operators.keyed_operators import FieldAggregation

    fn = spec.function
    schema = _dict_schema(spec)
    if schema is None or type(fn) is not FieldAggregation:
        return None
    field = fn.field
    if isinstance(field, int):
        if not 0 <= field < len(schema.names):
            return None  # the per-record path raises its IndexError naming the record
        field = schema.names[field]
    if field not in schema.names or field == TIMESTAMP_COLUMN:
        return None
    field_type = schema.field(field).type
    if pa.types.is_integer(field_type):
        return field
    if fn.aggregation == "sum" and pa.types.is_floating(field_type):
        return field
    return None


def _split(
    batch: pa.RecordBatch, operator: StreamOperator, kinds: frozenset = _ROLLING_KINDS
) -> tuple[pa.RecordBatch, pa.Array | None]:
    """``batch`` without its timestamp column, and that column (None if absent); records must be of ``kinds``."""
    if declared_kind(batch.schema) not in kinds:
        taken = " or ".join(sorted(str(kind or RecordKind.DICT) for kind in kinds))
        raise ConfigurationError(
            f"operator {operator.name!r}: the vectorized built-in aggregation takes {taken} records, got a batch of "
            f"{declared_kind(batch.schema)!r} records"
        )
    names = batch.schema.names
    if names and names[-1] == TIMESTAMP_COLUMN:
        index = len(names) - 1
        return batch.remove_column(index), batch.column(index)
    return batch, None


class VectorizedWindowAggregateOperator(StreamOperator):
    """Keyed tumbling event-time windows aggregated with built-ins, one Arrow batch at a time.

    Working state: per open window (by start) one Arrow table with a row per
    key: the key and one accumulator column per built-in column.
    """

    vectorized = True

    def __init__(self, spec: OperatorSpec) -> None:
        super().__init__(spec)
        d = spec.function
        self.descriptor = d
        self.size: int = d.assigner.size
        self.offset: int = d.assigner.offset
        self.aggregate: BuiltinAggregateFunction = d.aggregate_function
        self.columns = self.aggregate.columns
        self.window_function: KeyedWindowResult | None = d.window_function
        self.key_field: str = spec.key_field
        self.watermark = MIN_WATERMARK
        self.panes: dict[int, _Pane] = {}  # window start -> accumulators, one row per key
        self.num_late_records_dropped = 0
        schema = spec.input_schema
        self._acc_names = [f"a{i}" for i in range(len(self.columns))]
        self._acc_types = [
            pa.int64() if c.kind == "count" else _widened(schema.field(c.field).type) for c in self.columns
        ]
        self._key_type = schema.field(self.key_field).type

    def setup(self, context, output) -> None:
        super().setup(context, output)
        self.runtime_context = OperatorRuntimeContext(context, None, self.name)

    def open(self) -> None:
        if self.window_function is not None:
            call_open(self.window_function, self.runtime_context)

    def close(self) -> None:
        if self.window_function is not None:
            call_close(self.window_function)

    # -- elements -----------------------------------------------------------------------------

    def process_batch(self, batch: pa.RecordBatch) -> None:
        batch, timestamps = _split(batch, self, _WINDOW_KINDS)
        if batch.num_rows == 0:
            return
        if timestamps is None or timestamps.null_count:
            raise ConfigurationError(
                f"operator {self.name!r}: TumblingEventTimeWindows needs an event timestamp on every record, "
                f"and a record has none: give the source a WatermarkStrategy with a timestamp assigner"
            )
        ts = timestamps.to_numpy(zero_copy_only=False)
        starts = ts - np.remainder(ts - self.offset, self.size)
        live = starts + (self.size - 1) > self.watermark  # a window is late once its end passed the watermark
        if not live.all():
            self.num_late_records_dropped += int((~live).sum())
            if not live.any():
                return
        unique = np.unique(starts[live])
        table = pa.Table.from_batches([batch])
        for start in unique.tolist():
            rows = table.filter(pa.array(starts == start)) if len(unique) > 1 or not live.all() else table
            self._add(start, rows)

    def _add(self, start: int, rows: pa.Table) -> None:
        pane = self.panes.get(start)
        if pane is None:
            pane = self.panes[start] = _Pane(self._key_type, self.columns, self._acc_types)
        slot = pane.slots(rows.column(self.key_field).combine_chunks())
        for i, column in enumerate(self.columns):
            if column.kind == "count":
                pane.accs[i] += np.bincount(slot, minlength=len(pane.keys))
                continue
            values = rows.column(column.field)
            if values.null_count:
                raise TypeError(f"{column.kind}({column.field!r}): the field is null in a record of {self.name!r}")
            acc = pane.accs[i]
            v = values.to_numpy().astype(acc.dtype, copy=False)
            if column.kind == "sum":
                np.add.at(acc, slot, v)  # unbuffered: row by row in row order, as the per-record path adds
            elif column.kind == "min":
                np.minimum.at(acc, slot, v)
            else:
                np.maximum.at(acc, slot, v)

    # -- firing ------------------------------------------------------------------------------

    def process_watermark(self, timestamp: int) -> None:
        self.watermark = timestamp
        due = sorted(start for start in self.panes if start + self.size - 1 <= timestamp)
        for start in due:
            self._fire(start, self.panes.pop(start).table(self._acc_names))
        self.output.emit_watermark(timestamp)

    def _fire(self, start: int, pane: pa.Table) -> None:
        n = pane.num_rows
        if n == 0:
            return
        arrays: list[pa.Array] = []
        names: list[str] = []
        wf = self.window_function
        if wf is not None:
            key = pane.column(_KEY)
            arrays += [
                key.cast(_widened(key.type)),
                pa.array(np.full(n, start, np.int64)),
                pa.array(np.full(n, start + self.size, np.int64)),
            ]
            names += [wf.key_name, wf.start_name, wf.end_name]
        for column, name in zip(self.columns, self._acc_names):
            arrays.append(pane.column(name))
            names.append(column.name)
        table = pa.table(arrays, names=names).combine_chunks()
        stamps = pa.array(np.full(n, start + self.size - 1, np.int64))
        for batch in table.to_batches():
            self.output.emit_batch(with_timestamps(batch, stamps[: batch.num_rows]))

    # -- checkpoints (the per-record WindowOperator's layout) ---------------------------------

    def snapshot_state(self, checkpoint_id: int) -> OperatorSnapshot:
        by_key: dict[Any, dict[TimeWindow, list]] = {}
        timers: list[tuple[Any, int]] = []
        for start, accumulators_of in sorted(self.panes.items()):
            pane = accumulators_of.table(self._acc_names)
            window = TimeWindow(start, start + self.size)
            keys = pane.column(_KEY).to_pylist()
            accumulators = zip(*(pane.column(name).to_pylist() for name in self._acc_names))
            for key, accumulator in zip(keys, accumulators):
                by_key.setdefault(key, {})[window] = list(accumulator)
                timers.append(((key, window), window.max_timestamp()))
        if not by_key:
            return OperatorSnapshot()
        max_parallelism = self.context.max_parallelism
        keys = list(by_key)
        timer_keys = [namespace[0] for namespace, _ in timers]
        return OperatorSnapshot(keyed=[
            KeyedStateSnapshot(name=_CONTENTS, kind=StateKind.MAP, entries=KeyedColumns(
                keys, list(by_key.values()), lambda: key_groups_of(keys, max_parallelism),
            )),
            KeyedStateSnapshot(name=_EVENT_TIMERS, kind=StateKind.TIMER, entries=KeyedColumns(
                [ns for ns, _ in timers], [ts for _, ts in timers],
                lambda: key_groups_of(timer_keys, max_parallelism),
            )),
        ])  # fmt: skip

    def initialize_state(self, restored: RestoredState | None) -> None:
        if restored is None:
            return
        rows: dict[int, tuple[list, list[list]]] = {}
        for entry in restored.keyed:
            if entry.state_name != _CONTENTS:
                continue  # timers follow from the panes; built-ins keep no other state
            for window, accumulator in entry.value.items():
                keys, accumulators = rows.setdefault(window.start, ([], []))
                keys.append(entry.key)
                accumulators.append(accumulator)
        key_type = self.spec.input_schema.field(self.key_field).type
        for start, (keys, accumulators) in rows.items():
            columns = [pa.array(keys, key_type)]
            for i, acc_type in enumerate(self._acc_types):
                columns.append(pa.array([acc[i] for acc in accumulators], acc_type))
            self.panes[start] = _Pane.of(pa.table(columns, names=[_KEY, *self._acc_names]), self.columns)


class _Pane:
    """The panes of one window: its keys (slot = position) and one numpy accumulator per built-in column.

    A new key's accumulators start at the identity of their aggregation (0, or
    the type's largest / smallest value for min / max); a key only exists once
    a record of it was added, so no identity is ever emitted.
    """

    __slots__ = ("accs", "columns", "keys")

    def __init__(self, key_type: pa.DataType, columns, acc_types: list[pa.DataType]) -> None:
        self.keys: pa.Array = pa.array([], key_type)
        self.columns = columns
        self.accs: list[np.ndarray] = [np.empty(0, t.to_pandas_dtype()) for t in acc_types]

    @classmethod
    def of(cls, table: pa.Table, columns) -> _Pane:
        pane = cls.__new__(cls)
        pane.keys = table.column(0).combine_chunks()
        pane.columns = columns
        pane.accs = [table.column(i + 1).to_numpy().copy() for i in range(len(columns))]
        return pane

    def slots(self, keys: pa.Array) -> np.ndarray:
        """The slot of every key, new keys appended (in order of first appearance)."""
        slots = pc.index_in(keys, value_set=self.keys)
        if slots.null_count:
            new = pc.unique(keys.filter(pc.is_null(slots)))
            self.keys = pa.concat_arrays([self.keys, new])
            self.accs = [np.concatenate([acc, np.full(len(new), _identity(c.kind, acc.dtype), acc.dtype)])
                         for acc, c in zip(self.accs, self.columns)]  # fmt: skip
            slots = pc.index_in(keys, value_set=self.keys)
        return slots.to_numpy().astype(np.intp, copy=False)

    def table(self, names: list[str]) -> pa.Table:
        return pa.table([self.keys, *(pa.array(acc) for acc in self.accs)], names=[_KEY, *names])


def _identity(kind: str, dtype: np.dtype) -> Any:
    if kind in ("count", "sum"):
        return 0
    info = np.iinfo(dtype) if dtype.kind in "iu" else np.finfo(dtype)
    return info.max if kind == "min" else info.min


def _widened(field_type: pa.DataType) -> pa.DataType:
    """The accumulator (and result) type of a field: what the per-record path's results, Python ints
    and floats, are inferred as downstream."""
    if pa.types.is_integer(field_type):
        return pa.int64()
    if pa.types.is_floating(field_type):
        return pa.float64()
    return field_type


def _sequential_float_cumsum(groups: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per group, the running sum added in row order, as Python's ``a + b`` does record by record.

    pandas' grouped cumsum compensates rounding (Kahan), which gives other bits
    than sequential addition; ``np.cumsum`` adds sequentially, so it runs per
    group (one call per key in the batch, not per record).
    """
    order = np.argsort(groups, kind="stable")
    sorted_groups = groups[order]
    bounds = np.flatnonzero(np.diff(sorted_groups)) + 1
    result = np.empty_like(values)
    for segment in np.split(order, bounds):
        result[segment] = np.cumsum(values[segment])
    return result


def _first_and_int_cumsum(groups: np.ndarray, values: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
    """Per row: the position of its group's first row, and (``values`` given) its group's running sum in row
    order, with int64's wrap-around as pandas' grouped ``cumsum`` has. Exact for integers in any order, so one
    sort groups the rows: no per-call pandas overhead on the per-batch path."""
    order = np.argsort(groups, kind="stable")
    sorted_groups = groups[order]
    starts_mask = np.empty(len(order), dtype=bool)
    starts_mask[:1] = True
    np.not_equal(sorted_groups[1:], sorted_groups[:-1], out=starts_mask[1:])
    segment = np.cumsum(starts_mask) - 1  # per sorted row, its group's index among the batch's groups
    starts = np.flatnonzero(starts_mask)
    first = np.empty_like(order)
    first[order] = order[starts][segment]
    if values is None:
        return first, None
    sorted_values = values[order].astype(np.int64, copy=False)
    running = np.cumsum(sorted_values)
    running -= (running[starts] - sorted_values[starts])[segment]
    cumulative = np.empty_like(running)
    cumulative[order] = running
    return first, cumulative


class VectorizedRollingAggregateOperator(StreamOperator):
    """``KeyedStream.sum/min/max/min_by/max_by`` by field, one Arrow batch at a time.

    Working state: the keys seen (an Arrow array, position = slot) and the
    key's current result record per slot (an Arrow table), which is exactly
    the per-record operator's ``_reduce/value`` state.
    """

    vectorized = True

    def __init__(self, spec: OperatorSpec) -> None:
        super().__init__(spec)
        self.aggregation: str = spec.function.aggregation
        self.field: str = _rolling_field(spec)  # type: ignore[assignment]
        self.key_field: str = spec.key_field
        self.schema: pa.Schema = spec.input_schema.remove_metadata()
        self.keys: pa.Array = pa.array([], self.schema.field(self.key_field).type)
        self.current: pa.Table = self.schema.empty_table()

    def setup(self, context, output) -> None:
        super().setup(context, output)
        self.runtime_context = OperatorRuntimeContext(context, None, self.name)

    def open(self) -> None:
        call_open(self.spec.function, self.runtime_context)

    def close(self) -> None:
        call_close(self.spec.function)

    def process_batch(self, batch: pa.RecordBatch) -> None:
        batch, timestamps = _split(batch, self)
        n = batch.num_rows
        if n == 0:
            return
        if batch.schema.names != self.schema.names:
            raise ConfigurationError(
                f"operator {self.name!r}: batch fields {batch.schema.names} differ from the stream's {self.schema.names}"
            )
        rows = pa.Table.from_batches([batch]).cast(self.schema)
        values = rows.column(self.field)
        if values.null_count:
            raise TypeError(f"{self.aggregation}({self.field!r}): the field is null in a record of {self.name!r}")
        keys = rows.column(self.key_field).combine_chunks()
        slots = pc.index_in(keys, value_set=self.keys)
        if slots.null_count:  # new keys, in order of first appearance
            self.keys = pa.concat_arrays([self.keys, pc.unique(keys.filter(pc.is_null(slots)))])
            slots = pc.index_in(keys, value_set=self.keys)
        slot = slots.to_numpy(zero_copy_only=False).astype(np.int64)
        known = len(self.current)
        # The touched keys' current results go first: the batch continues each key's sequence.
        prior_slots = np.unique(slot[slot < known])
        combined = pa.concat_tables([self.current.take(pa.array(prior_slots)), rows]).combine_chunks()
        groups = np.concatenate([prior_slots, slot])
        field_values = combined.column(self.field).to_numpy()
        result_pos, result_values = self._run(groups, field_values)
        p = len(prior_slots)
        out = combined.take(pa.array(result_pos[p:]))
        if result_values is not None:
            index = out.schema.get_field_index(self.field)
            new = pa.array(result_values[p:]).cast(self.schema.field(self.field).type)
            out = out.set_column(index, self.schema.field(self.field), new)
        for piece in out.combine_chunks().to_batches():
            stamps = None if timestamps is None else timestamps.slice(0, piece.num_rows)
            self.output.emit_batch(with_timestamps(piece, stamps))
            if timestamps is not None:
                timestamps = timestamps.slice(piece.num_rows)
        self._update(groups, out, p, slot)

    def _run(self, groups: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Per row of the combined table: the position of the row whose other fields the result has
        (the group's first, or for min_by/max_by its best so far) and the result's field value (None: as is)."""
        import pandas as pd  # imported when a rolling aggregation first runs, not with every TaskExecutor

        aggregation = self.aggregation
        if aggregation == "sum" and values.dtype.kind != "f":
            return _first_and_int_cumsum(groups, values)
        if aggregation in ("sum", "min", "max"):
            first, _ = _first_and_int_cumsum(groups, None)
            if aggregation == "sum":
                return first, _sequential_float_cumsum(groups, values.astype(np.float64))
            grouped_values = pd.Series(values).groupby(groups, sort=False)
            cumulative = grouped_values.cummin() if aggregation == "min" else grouped_values.cummax()
            return first, cumulative.to_numpy()
        positions = np.arange(len(groups))
        grouped_values = pd.Series(values).groupby(groups, sort=False)
        grouped_positions = pd.Series(positions).groupby(groups, sort=False)
        best = grouped_values.cummin() if aggregation == "min_by" else grouped_values.cummax()
        previous = best.groupby(groups, sort=False).shift(1, fill_value=0)  # int stays int; firsts use is_first
        is_first = grouped_positions.cumcount().to_numpy() == 0
        improves = (values < previous.to_numpy()) if aggregation == "min_by" else (values > previous.to_numpy())
        marks = pd.Series(np.where(is_first | improves, positions, -1))
        marks = marks.where(marks >= 0)
        return marks.groupby(groups, sort=False).ffill().to_numpy().astype(np.int64), None

    def _update(self, groups: np.ndarray, out: pa.Table, p: int, slot: np.ndarray) -> None:
        """Each touched key's last result becomes its current record."""
        reversed_slots = slot[::-1]
        touched, last_from_end = np.unique(reversed_slots, return_index=True)
        last = len(slot) - 1 - last_from_end
        size = len(self.keys)
        index = np.arange(size, dtype=np.int64)
        index[touched] = len(self.current) + np.arange(len(touched))
        # Keys never seen before have no row in ``current``: every slot >= len(current) is touched.
        self.current = pa.concat_tables([self.current, out.take(pa.array(last))]).take(pa.array(index))
        self.current = self.current.combine_chunks()

    # -- checkpoints (the per-record KeyedReduceOperator's layout) -----------------------------

    def snapshot_state(self, checkpoint_id: int) -> OperatorSnapshot:
        if len(self.current) == 0:
            return OperatorSnapshot()
        keys = self.keys.to_pylist()
        values = self.current.to_pylist()
        max_parallelism = self.context.max_parallelism
        entries = KeyedColumns(keys, values, lambda: key_groups_of(keys, max_parallelism))
        return OperatorSnapshot(keyed=[KeyedStateSnapshot(name=_REDUCE_STATE, kind=StateKind.VALUE, entries=entries)])

    def initialize_state(self, restored: RestoredState | None) -> None:
        if restored is None:
            return
        entries = [e for e in restored.keyed if e.state_name == _REDUCE_STATE]
        if not entries:
            return
        self.keys = pa.array([e.key for e in entries], self.schema.field(self.key_field).type)
        self.current = pa.Table.from_pylist([e.value for e in entries], schema=self.schema)
