"""Conversion between Arrow batches and records, with the stream's schema enforced.

A stream's schema is either declared (a source's schema, ``output_type=``) or
inferred from the first rows emitted to it, then fixed. A later row with other
fields or values of another type raises :class:`SchemaMismatchError` that names
the stream, the field and the schema; nothing of that batch is emitted.

Records are dicts, PyFlink ``Row`` objects, tuples, or (on a stream declared
with a basic type such as ``Types.STRING()``) plain values. A stream without a
declared type whose first records are not dicts is a stream of pickled objects,
as in PyFlink: the next function gets an equal object of the same kind (a
positional Row stays positional, tuples of mixed lengths and field types stay
as they were). On the data plane every other kind is Arrow columns: a dict's
and a named Row's by name, a positional Row's and a tuple's (on a stream
declared ``Types.ROW`` / ``TUPLE`` / ``ROW_NAMED``) ``f0``, ``f1``, ... (Flink's
tuple field names), a plain value's ``f0``. A batch of non-dict records says
its kind in its schema metadata (:data:`RECORD_KIND_KEY`), so every consumer,
across the network and after a restore from channel state, gets records of the
kind the producer emitted (:func:`records_of`).
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any

import cloudpickle
import pyarrow as pa

from flinklike_spark.common.types import (
    BIG_DEC_KEY,
    PICKLED_FIELD_KEY,
    RECORD_KIND_KEY,
    RecordKind,
    Row,
    declared_kind,
    nested_function,
    records_of,
)
from flinklike_spark.errors import SchemaMismatchError

__all__ = ["RECORD_KIND_KEY", "RecordKind", "RowsConverter", "declared_kind", "records_of"]

_POSITIONAL = (RecordKind.TUPLE, RecordKind.POSITIONAL_ROW)
_ROWLIKE = (*_POSITIONAL, RecordKind.NAMED_ROW)
#: What Arrow raises for a Python value it cannot convert (a lone surrogate in a str: UnicodeEncodeError).
_CONVERSION_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, UnicodeEncodeError)


def _kind_of(record: Any) -> str | None:
    if type(record) is dict or isinstance(record, dict):
        return RecordKind.DICT
    if isinstance(record, Row):
        return RecordKind.NAMED_ROW if record.get_field_names() is not None else RecordKind.POSITIONAL_ROW
    if isinstance(record, tuple):
        return RecordKind.TUPLE
    return None


def _arrowable(value: Any) -> Any:
    """``value`` with Rows (at any depth) as dicts (named) or tuples (positional), which Arrow converts."""
    if isinstance(value, Row):
        if value.get_field_names() is not None:
            return {name: _arrowable(v) for name, v in zip(value.get_field_names(), value)}
        return tuple(_arrowable(v) for v in value)
    if isinstance(value, tuple):
        return tuple(_arrowable(v) for v in value)
    if isinstance(value, list):
        return [_arrowable(v) for v in value]
    return value


def _pickled(record: Any) -> bytes:
    """``record`` pickled; by value (cloudpickle, as PyFlink pickles) when pickle cannot name its class,
    e.g. a class defined in the user's ``__main__``, which is not this process's ``__main__``."""
    try:
        return pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, AttributeError, TypeError):
        return cloudpickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)


def _pickled_or_none(value: Any) -> bytes | None:
    return None if value is None else _pickled(value)


def _encode(record: Any, kind: str) -> dict:
    if kind == RecordKind.NAMED_ROW:
        return _arrowable(record)
    if kind == RecordKind.VALUE:
        return {"f0": record}
    return {f"f{i}": value for i, value in enumerate(record)}


class RowsConverter:
    """Turns lists of records (dicts, Rows, tuples, values) into RecordBatches of one fixed schema."""

    __slots__ = (
        "_big_dec",
        "_declared",
        "_declared_kind",
        "_field_set",
        "_names",
        "_nested",
        "_pickle_undeclared",
        "schema",
        "stream_name",
    )

    def __init__(self, schema: pa.Schema | None, *, stream_name: str, pickle_undeclared: bool = True) -> None:
        """``pickle_undeclared=False``: undeclared Rows and tuples become columns (for a columnar sink)."""
        self.stream_name = stream_name
        self._pickle_undeclared = pickle_undeclared
        self.schema: pa.Schema | None = None
        self._names: list[str] = []
        self._field_set: frozenset[str] = frozenset()
        self._nested = False
        self._big_dec: list[tuple[str, Callable[[Any], Any]]] = []
        self._declared_kind = declared_kind(schema)
        self._declared = schema is not None
        if schema is not None:
            self._fix(schema)

    def _fix(self, schema: pa.Schema) -> None:
        # The record kind is the records' (in each batch's metadata), not the declared schema's.
        self.schema = schema.remove_metadata() if schema.metadata else schema
        self._names = list(schema.names)
        self._field_set = frozenset(self._names)
        # Rows nested in a declared ROW / TUPLE field go to Arrow as dicts or tuples.
        self._nested = any(pa.types.is_struct(field.type) for field in schema)
        # BIG_DEC values (at any depth) go to Arrow as their exact text, as PyFlink's coder writes them;
        # values of a PICKLED_BYTE_ARRAY field pickled.
        encoders = ((field.name, _big_dec_encoder(field)) for field in schema)
        self._big_dec = [(name, encode) for name, encode in encoders if encode is not None]

    def to_batch(self, rows: list[Any]) -> pa.RecordBatch:
        """Convert ``rows`` (all or nothing): dicts, Rows, tuples, or values on a stream declared so.

        Raises:
            SchemaMismatchError: a row has missing or extra fields, or a value
                that does not fit its field's type, or records of different kinds.
        """
        first = rows[0]
        if self._declared_kind == RecordKind.PICKLED:
            batch = self._dicts_to_batch([{"f0": _pickled(r)} for r in rows])
            return batch.replace_schema_metadata({RECORD_KIND_KEY: RecordKind.PICKLED.encode()})
        if type(first) is dict:
            return self._dicts_to_batch(rows)
        kind = _kind_of(first)
        if kind != RecordKind.DICT and self.schema is None and (self._pickle_undeclared or kind is None):
            # An undeclared stream of anything but dicts (plain values, objects, tuples, Rows) is
            # pickled, as PyFlink does (Types.PICKLED_BYTE_ARRAY semantics): the next function gets
            # an equal object of the same kind (a positional Row stays positional, tuples of any
            # length and field types stay tuples). Declared types keep the columnar fast path.
            self._declared_kind = RecordKind.PICKLED
            return self.to_batch(rows)
        if kind is None and self._declared_kind == RecordKind.VALUE:
            kind = RecordKind.VALUE
        if kind is None:
            self._raise_not_dict(rows)
        if kind == RecordKind.DICT:
            return self._dicts_to_batch(rows)
        mixed = False
        for record in rows:
            other = _kind_of(record) if kind != RecordKind.VALUE else RecordKind.VALUE
            if other != kind and self._declared and kind in _ROWLIKE and other in _ROWLIKE:
                mixed = True  # as in PyFlink, a declared ROW / TUPLE stream takes Rows and tuples alike
            elif other != kind:
                raise SchemaMismatchError(
                    f"stream {self.stream_name!r}: record {_short(record)} is not a {kind} like the batch's first "
                    f"record {_short(first)}; a stream's records are all dicts, all Rows or all tuples"
                )
        if mixed:
            kind = self._declared_kind if self._declared_kind in _POSITIONAL else RecordKind.NAMED_ROW
            dicts = [_arrowable(r) if _kind_of(r) == RecordKind.NAMED_ROW else self._by_position(r) for r in rows]
        elif kind in (RecordKind.TUPLE, RecordKind.POSITIONAL_ROW) and self._declared:
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
        if self._nested:
            return dict(zip(self._names, map(_arrowable, record)))
        return dict(zip(self._names, record))

    def _dicts_to_batch(self, rows: list[dict]) -> pa.RecordBatch:
        if self.schema is None:
            try:
                batch = pa.RecordBatch.from_pylist(rows)
            except UnicodeEncodeError as exc:
                raise SchemaMismatchError(self._describe_unencodable(rows, exc)) from exc
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
        if self._big_dec:
            rows = self._with_big_dec_text(rows)
        # Arrow converts Python values to a given type leniently (0.99 into an int64 field
        # becomes 0; a dict's extra keys in a struct are dropped), so the values' own Arrow
        # types are inferred first and then fitted to the stream's type by safe casts only.
        # Inference costs what a conversion with the schema costs.
        try:
            inferred: pa.RecordBatch | None = pa.RecordBatch.from_pylist(rows)
        except _CONVERSION_ERRORS:
            inferred = None  # e.g. ints and strs in one field: the per-field conversion names the value
        if inferred is not None and inferred.schema.names == self._names and inferred.schema.equals(self.schema):
            return pa.RecordBatch.from_arrays(inferred.columns, schema=self.schema)
        columns = [
            self._fit(field, None if inferred is None else inferred.column(field.name), rows) for field in self.schema
        ]
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)

    def _with_big_dec_text(self, rows: list[dict]) -> list[dict]:
        """``rows`` (copied: records may be the user's objects) with their BIG_DEC values as text and their
        PICKLED_BYTE_ARRAY values pickled."""
        encoded = []
        for row in rows:
            copy = dict(row)
            for name, encode in self._big_dec:
                try:
                    copy[name] = encode(row[name])
                except _NotADecimal as exc:
                    raise SchemaMismatchError(
                        f"stream {self.stream_name!r}: field {name!r} of record {_short(row)} has value "
                        f"{exc.value!r} ({type(exc.value).__name__}), which is not a BIG_DEC value: a "
                        f"finite Decimal, int or float (schema [{_schema_text(self.schema)}])"
                    ) from None
            encoded.append(copy)
        return encoded

    def _fit(self, field: pa.Field, column: pa.Array | None, rows: list[dict]) -> pa.Array:
        """``column`` (the inferred values of ``field``) as ``field.type``, or SchemaMismatchError: never lossy."""
        if column is not None:
            if column.type == field.type:
                return column
            if pa.types.is_struct(column.type) and pa.types.is_struct(field.type):
                self._check_struct(field, rows)
                try:  # nested numbers are fitted safely too; a cast Arrow lacks falls back below
                    return column.cast(field.type, safe=True)
                except pa.ArrowInvalid as exc:
                    raise SchemaMismatchError(self._describe_value(field, rows, exc)) from exc
                except pa.ArrowNotImplementedError:
                    pass
            elif _safely_castable(column.type, field.type):
                try:
                    return column.cast(field.type, safe=True)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                    raise SchemaMismatchError(self._describe_value(field, rows, exc)) from exc
        try:
            return pa.array([row[field.name] for row in rows], type=field.type)
        except UnicodeEncodeError as exc:
            raise SchemaMismatchError(self._describe_unencodable(rows, exc)) from exc
        except _CONVERSION_ERRORS as exc:
            raise SchemaMismatchError(self._describe_value(field, rows, exc)) from exc

    def _check_struct(self, field: pa.Field, rows: list[dict]) -> None:
        names = {child.name for child in field.type}
        for row in rows:
            value = row[field.name]
            if isinstance(value, dict) and not value.keys() <= names:
                raise SchemaMismatchError(
                    f"stream {self.stream_name!r}: field {field.name!r} of record {_short(row)} has value "
                    f"{_short(value)} with fields {sorted(value.keys() - names)} that the stream's type "
                    f"{field.type} does not have (schema [{_schema_text(self.schema)}])"
                )

    def _describe_unencodable(self, rows: list[dict], exc: UnicodeEncodeError) -> str:
        """Name the field and value holding a str that UTF-8 cannot encode (a lone surrogate)."""
        for row in rows:
            for name, value in row.items():
                try:
                    _check_encodable(value)
                except UnicodeEncodeError:
                    return (
                        f"stream {self.stream_name!r}: field {name!r} of record {_short(row)} has value {value!r}, "
                        f"which is not valid Unicode text ({exc.reason} at position {exc.start}: "
                        f"{exc.object[exc.start : exc.end]!r}); strings must be encodable as UTF-8 "
                        f"(decode bytes with errors='replace', or send them as bytes)"
                    )
        return f"stream {self.stream_name!r}: a string is not valid Unicode text: {exc}"

    def _describe_value(self, field: pa.Field, rows: list[dict], exc: Exception) -> str:
        """Name the first value of ``field`` that does not fit its type (each value checked alone)."""
        for row in rows:
            value = row[field.name]
            try:
                alone = pa.array([value])
                both_structs = pa.types.is_struct(alone.type) and pa.types.is_struct(field.type)
                if both_structs or _safely_castable(alone.type, field.type):
                    try:
                        alone.cast(field.type, safe=True)
                        continue
                    except pa.ArrowNotImplementedError:
                        pass
                pa.array([value], type=field.type)
            except (*_CONVERSION_ERRORS, pa.ArrowNotImplementedError):
                return (
                    f"stream {self.stream_name!r}: field {field.name!r} of record {_short(row)} has value "
                    f"{value!r} ({type(value).__name__}), which does not fit the stream's type {field.type} "
                    f"(schema [{_schema_text(self.schema)}])"
                )
        return f"stream {self.stream_name!r}: field {field.name!r} does not fit type {field.type}: {exc}"

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


class _NotADecimal(Exception):  # noqa: N818 - internal signal, turned into a SchemaMismatchError
    def __init__(self, value: Any) -> None:
        super().__init__(repr(value))
        self.value = value


def _big_dec_text(value: Any) -> str | None:
    """A BIG_DEC value as PyFlink's coder writes it (``str(value)``); only finite decimal numbers."""
    if value is None:
        return None
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise _NotADecimal(value)
        return str(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        text = str(value)
        try:
            if Decimal(text).is_finite():
                return text
        except InvalidOperation:
            pass
    raise _NotADecimal(value)


def _own_encoder(field: pa.Field) -> Callable[[Any], Any] | None:
    if field.metadata and BIG_DEC_KEY in field.metadata:
        return _big_dec_text
    if field.metadata and PICKLED_FIELD_KEY in field.metadata:
        return _pickled_or_none
    return None


def _struct_encoder(field: pa.Field, children: list[tuple[int, str, Callable[[Any], Any]]]):
    return functools.partial(_encode_struct, children) if children else None


def _big_dec_encoder(field: pa.Field) -> Callable[[Any], Any] | None:
    """What turns a Python value of ``field`` into one with its BIG_DEC values (at any depth) as text;
    None when ``field`` holds no BIG_DEC value. Values of a PICKLED_BYTE_ARRAY field are pickled likewise."""
    return nested_function(field, leaf=_own_encoder, struct=_struct_encoder, sequence=_encode_list, mapping=_encode_map)


def _encode_struct(children: list[tuple[int, str, Callable[[Any], Any]]], value: Any) -> Any:
    if isinstance(value, Row):
        value = _arrowable(value)
    if isinstance(value, dict):  # a named Row or a dict, by name
        value = dict(value)
        for _, name, encode in children:
            if name in value:
                value[name] = encode(value[name])
        return value
    if isinstance(value, (tuple, list)):  # a tuple or positional Row, by position
        value = list(value)
        for i, _, encode in children:
            if i < len(value):
                value[i] = encode(value[i])
        return tuple(value)
    return value  # None, or a value Arrow refuses with its own message


def _encode_list(element: Callable[[Any], Any], value: Any) -> Any:
    return [element(item) for item in value] if isinstance(value, (list, tuple)) else value


def _encode_map(key: Callable[[Any], Any], item: Callable[[Any], Any], value: Any) -> Any:
    if isinstance(value, dict):
        return {key(k): item(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [(key(k), item(v)) for k, v in value]
    return value


def _check_encodable(value: Any) -> None:
    """Raise UnicodeEncodeError if ``value`` holds (also nested) a str that UTF-8 cannot encode."""
    if isinstance(value, str):
        value.encode("utf-8")
    elif isinstance(value, dict):
        for item in value.values():
            _check_encodable(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _check_encodable(item)


def _safely_castable(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether a safe Arrow cast from ``source`` to ``target`` keeps every value or fails (never coerces).

    Numbers to numbers (a safe cast refuses truncation and overflow) and
    decimals, and timestamps of one time zone; strings to numbers, numbers to
    strings and other kinds are left to the strict per-value conversion.
    """
    t = pa.types
    if t.is_integer(source) or t.is_floating(source) or t.is_decimal(source):
        return t.is_integer(target) or t.is_floating(target) or t.is_decimal(target)
    if t.is_timestamp(source) and t.is_timestamp(target):
        return source.tz == target.tz
    return (t.is_date(source) and t.is_date(target)) or (t.is_null(source) and not t.is_null(target))


def _schema_text(schema: pa.Schema | None) -> str:
    return ", ".join(f"{f.name}: {f.type}" for f in schema) if schema is not None else "?"


def _short(row: object) -> str:
    text = repr(row)
    return text if len(text) <= 200 else text[:197] + "..."
