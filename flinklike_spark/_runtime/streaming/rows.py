"""Conversion between Arrow batches and records, with the stream's schema enforced.

A stream's schema is either declared (a source's schema, ``output_type=``) or
inferred from the first rows emitted to it, then fixed. A later row with other
fields or values of another type raises :class:`SchemaMismatchError` that names
the stream, the field and the schema; nothing of that batch is emitted.

Records are dicts, PyFlink ``Row`` objects, tuples, or (on a stream declared
with a basic type such as ``Types.STRING()``) plain values. On the data plane
every kind is Arrow columns: a dict's and a named Row's by name, a positional
Row's and a tuple's ``f0``, ``f1``, ... (Flink's tuple field names), a plain
value's ``f0``. A batch of non-dict records says its kind in its schema
metadata (:data:`RECORD_KIND_KEY`), so every consumer, across the network and
after a restore from channel state, gets records of the kind the producer
emitted (:func:`records_of`).
"""

from __future__ import annotations

import pickle
from typing import Any

import pyarrow as pa

from flinklike_spark.errors import SchemaMismatchError
from flinklike_spark.row import RECORD_KIND_KEY, RecordKind, Row, declared_kind, records_of

__all__ = ["RECORD_KIND_KEY", "RecordKind", "RowsConverter", "declared_kind", "records_of"]

_POSITIONAL = (RecordKind.TUPLE, RecordKind.POSITIONAL_ROW)


def _kind_of(record: Any) -> str | None:
    if type(record) is dict or isinstance(record, dict):
        return RecordKind.DICT
    if isinstance(record, Row):
        return RecordKind.NAMED_ROW if record.get_field_names() is not None else RecordKind.POSITIONAL_ROW
    if isinstance(record, tuple):
        return RecordKind.TUPLE
    return None


def _encode(record: Any, kind: str) -> dict:
    if kind == RecordKind.NAMED_ROW:
        return record.as_dict(recursive=True)
    if kind == RecordKind.VALUE:
        return {"f0": record}
    return {f"f{i}": value for i, value in enumerate(record)}


class RowsConverter:
    """Turns lists of records (dicts, Rows, tuples, values) into RecordBatches of one fixed schema."""

    __slots__ = ("_declared", "_declared_kind", "_field_set", "_names", "schema", "stream_name")

    def __init__(self, schema: pa.Schema | None, *, stream_name: str) -> None:
        self.stream_name = stream_name
        self.schema: pa.Schema | None = None
        self._names: list[str] = []
        self._field_set: frozenset[str] = frozenset()
        self._declared_kind = declared_kind(schema)
        self._declared = schema is not None
        if schema is not None:
            self._fix(schema)

    def _fix(self, schema: pa.Schema) -> None:
        # The record kind is the records' (in each batch's metadata), not the declared schema's.
        self.schema = schema.remove_metadata() if schema.metadata else schema
        self._names = list(schema.names)
        self._field_set = frozenset(self._names)

    def to_batch(self, rows: list[Any]) -> pa.RecordBatch:
        """Convert ``rows`` (all or nothing): dicts, Rows, tuples, or values on a stream declared so.

        Raises:
            SchemaMismatchError: a row has missing or extra fields, or a value
                that does not fit its field's type, or records of different kinds.
        """
        first = rows[0]
        if self._declared_kind == RecordKind.PICKLED:
            batch = self._dicts_to_batch([{"f0": pickle.dumps(r, protocol=pickle.HIGHEST_PROTOCOL)} for r in rows])
            return batch.replace_schema_metadata({RECORD_KIND_KEY: RecordKind.PICKLED.encode()})
        if type(first) is dict:
            return self._dicts_to_batch(rows)
        kind = _kind_of(first)
        if kind is None and self._declared_kind == RecordKind.VALUE:
            kind = RecordKind.VALUE
        if kind is None:
            self._raise_not_dict(rows)
        if kind == RecordKind.DICT:
            return self._dicts_to_batch(rows)
        for record in rows:
            other = _kind_of(record) if kind != RecordKind.VALUE else RecordKind.VALUE
            if other != kind:
                raise SchemaMismatchError(
                    f"stream {self.stream_name!r}: record {_short(record)} is not a {kind} like the batch's first "
                    f"record {_short(first)}; a stream's records are all dicts, all Rows or all tuples"
                )
        if kind in (RecordKind.TUPLE, RecordKind.POSITIONAL_ROW) and self._declared:
            # As in PyFlink, positional records take the declared type's field names and kind: tuples
            # on a stream declared Types.ROW_NAMED([...]) are Rows with those names downstream.
            kind = self._declared_kind if self._declared_kind in _POSITIONAL else RecordKind.NAMED_ROW
            dicts = [self._by_position(record) for record in rows]
        else:
            dicts = [_encode(record, kind) for record in rows]
        batch = self._dicts_to_batch(dicts)
        return batch.replace_schema_metadata({RECORD_KIND_KEY: kind.encode()})

    def _by_position(self, record: Any) -> dict:
        if len(record) != len(self._names):
            raise SchemaMismatchError(
                f"stream {self.stream_name!r}: record {_short(record)} has {len(record)} fields, the stream's "
                f"schema [{_schema_text(self.schema)}] has {len(self._names)}"
            )
        return dict(zip(self._names, record))

    def _dicts_to_batch(self, rows: list[dict]) -> pa.RecordBatch:
        if self.schema is None:
            try:
                batch = pa.RecordBatch.from_pylist(rows)
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                raise SchemaMismatchError(
                    f"stream {self.stream_name!r}: cannot infer an Arrow schema from rows like {rows[0]!r}: {exc}. "
                    f"Declare the schema with output_type=pyarrow.schema([...])"
                ) from exc
            if any(not isinstance(row, dict) for row in rows):
                self._raise_not_dict(rows)
            self._fix(batch.schema)
            self._check_fields(rows)
            return batch
        self._check_fields(rows)
        try:
            return pa.RecordBatch.from_pylist(rows, schema=self.schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
            raise SchemaMismatchError(self._describe_type_error(rows, exc)) from exc

    def _raise_not_dict(self, rows: list) -> None:
        bad = next(row for row in rows if not isinstance(row, dict))
        raise SchemaMismatchError(
            f"stream {self.stream_name!r}: functions must return rows as dicts, Rows or tuples (or values of the "
            f"stream's declared basic type), got {type(bad).__name__}: {bad!r}"
        )

    def _check_fields(self, rows: list[dict]) -> None:
        names = self._field_set
        width = len(names)
        for row in rows:
            if type(row) is not dict:
                if not isinstance(row, dict):
                    self._raise_not_dict(rows)
            if len(row) != width or row.keys() != names:
                missing = sorted(names - row.keys())
                extra = sorted(row.keys() - names)
                raise SchemaMismatchError(
                    f"stream {self.stream_name!r}: record {_short(row)} does not match the stream's schema "
                    f"[{_schema_text(self.schema)}]: missing fields {missing}, unexpected fields {extra}"
                )

    def _describe_type_error(self, rows: list[dict], exc: Exception) -> str:
        assert self.schema is not None
        for field in self.schema:
            try:
                pa.array([row[field.name] for row in rows], type=field.type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
                for row in rows:
                    try:
                        pa.array([row[field.name]], type=field.type)
                    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
                        return (
                            f"stream {self.stream_name!r}: field {field.name!r} of record {_short(row)} has value "
                            f"{row[field.name]!r} ({type(row[field.name]).__name__}), which does not fit the "
                            f"stream's type {field.type} (schema [{_schema_text(self.schema)}])"
                        )
        return f"stream {self.stream_name!r}: rows do not fit schema [{_schema_text(self.schema)}]: {exc}"


def _schema_text(schema: pa.Schema | None) -> str:
    return ", ".join(f"{f.name}: {f.type}" for f in schema) if schema is not None else "?"


def _short(row: object) -> str:
    text = repr(row)
    return text if len(text) <= 200 else text[:197] + "..."
