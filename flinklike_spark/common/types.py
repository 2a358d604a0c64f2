"""PyFlink's ``Row`` (``pyflink.common.types.Row``) and ``RowKind``, as records of a stream.

``Row(name="Alice", age=11)`` is a named row (its fields in the order given, as
in PyFlink 2.x); ``Row("Alice", 11)`` a positional one; ``Person = Row("name", "age")``
makes a row "class" whose call ``Person("Alice", 11)`` gives a named row.
Fields are read as attributes (``row.name``), by name (``row["name"]``) or by
position (``row[0]``). On the data plane a named row is the Arrow columns of
its names, a positional one ``f0``, ``f1``, ...; consumers get ``Row`` objects
back: a batch of records that are not dicts names their kind in its schema
metadata (:data:`RECORD_KIND_KEY`), and :func:`records_of` turns a batch back
into the records its producer emitted (the encoding side is
``_runtime/operators/rows.py``).
"""

from __future__ import annotations

import copy
import enum
import functools
import pickle
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pyarrow as pa

__all__ = [
    "BIG_DEC_KEY",
    "PICKLED_FIELD_KEY",
    "RECORD_KIND_KEY",
    "RecordKind",
    "Row",
    "RowKind",
    "copy_record",
    "declared_kind",
    "nested_function",
    "pickled_field_values",
    "plain_values_cause",
    "records_of",
]


class RowKind(enum.Enum):
    """The change a row stands for (PyFlink's ``RowKind``); DataStream rows are ``INSERT``."""

    INSERT = 0
    UPDATE_BEFORE = 1
    UPDATE_AFTER = 2
    DELETE = 3

    def __str__(self) -> str:
        """PyFlink's (and Flink's) short form: ``+I``, ``-U``, ``+U``, ``-D``."""
        return ("+I", "-U", "+U", "-D")[self.value]


_ROW_KINDS = tuple(RowKind)


def _rebuild(fields: list[str] | None, values: tuple, row_kind: RowKind | int) -> Row:
    """A Row of ``fields`` (None: positional) and ``values``; what a pickled Row calls (``row_kind`` is
    pickled as its int, which is cheaper to unpickle than the enum; older pickles hold the enum)."""
    row = object.__new__(Row)
    setattr_ = object.__setattr__
    setattr_(row, "_fields", None if fields is None else list(fields))
    setattr_(row, "_values", list(values))
    setattr_(row, "_row_kind", _ROW_KINDS[row_kind] if type(row_kind) is int else row_kind)
    return row


class Row:
    """A record of named or positional fields, with PyFlink's semantics (see the module docstring)."""

    __slots__ = ("_fields", "_row_kind", "_values")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if args and kwargs:
            raise ValueError("Row takes positional values or named values, not both")
        fields = None
        if kwargs:
            fields = list(kwargs)  # in the order given, as PyFlink 2.x keeps them (its docstring says sorted)
            values = [kwargs[name] for name in fields]
        else:
            values = list(args)
        object.__setattr__(self, "_fields", fields)
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_row_kind", RowKind.INSERT)

    # -- PyFlink's methods ------------------------------------------------------------------------

    def as_dict(self, recursive: bool = False) -> dict[str, Any]:
        """The fields as a dict (nested rows too with ``recursive``); a positional row has no names."""
        if self._fields is None:
            raise TypeError(f"cannot convert a Row without field names into a dict: {self!r}")
        if not recursive:
            return dict(zip(self._fields, self._values))

        def convert(value: Any) -> Any:
            if isinstance(value, Row):
                return value.as_dict(True)
            if isinstance(value, list):
                return [convert(v) for v in value]
            if isinstance(value, dict):
                return {k: convert(v) for k, v in value.items()}
            return value

        return {name: convert(value) for name, value in zip(self._fields, self._values)}

    def get_row_kind(self) -> RowKind:
        return self._row_kind

    def set_row_kind(self, row_kind: RowKind) -> None:
        object.__setattr__(self, "_row_kind", row_kind)

    def set_field_names(self, field_names: list[str]) -> None:
        object.__setattr__(self, "_fields", list(field_names))

    def get_field_names(self) -> list[str] | None:
        return None if self._fields is None else list(self._fields)

    def __call__(self, *args: Any) -> Row:
        """``Row("name", "age")("Alice", 11)``: a row named by this row's values."""
        if len(args) > len(self._values):
            raise ValueError(f"{self!r} has {len(self._values)} fields, got {len(args)} values: {args!r}")
        return _rebuild([str(v) for v in self._values], args, self._row_kind)

    # -- access -----------------------------------------------------------------------------------

    def _index(self, name: str) -> int:
        if self._fields is None or name not in self._fields:
            raise KeyError(f"Row has no field {name!r}; its fields are {self._fields}")
        return self._fields.index(name)

    def __getitem__(self, item: Any) -> Any:
        if isinstance(item, (int, slice)):
            return self._values[item]
        return self._values[self._index(item)]

    def __setitem__(self, key: Any, value: Any) -> None:
        if isinstance(key, (int, slice)):
            self._values[key] = value
        else:
            self._values[self._index(key)] = value

    def __getattr__(self, item: str) -> Any:
        if item.startswith("_"):
            raise AttributeError(item)
        try:
            return self._values[self._index(item)]
        except KeyError:
            raise AttributeError(f"Row has no field {item!r}; its fields are {self._fields}") from None

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"Row fields are set with row[{key!r}] = value, not as attributes")

    def __contains__(self, item: Any) -> bool:
        return item in self._values

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Row):
            return NotImplemented
        if self._row_kind != other._row_kind or (self._fields is None) != (other._fields is None):
            return False
        if self._fields is None or self._fields == other._fields:
            return self._values == other._values
        # As in PyFlink, named rows with the same fields in another order are equal field by field.
        if sorted(self._fields) != sorted(other._fields):
            return False
        return all(self[name] == other[name] for name in self._fields)

    def __hash__(self) -> int:
        return hash(tuple(self._values))

    def __reduce__(self):
        return _rebuild, (self._fields, tuple(self._values), self._row_kind.value)

    def __repr__(self) -> str:
        if self._fields is not None:
            return "Row(" + ", ".join(f"{name}={value!r}" for name, value in zip(self._fields, self._values)) + ")"
        return "<Row(" + ", ".join(repr(v) for v in self._values) + ")>"


#: Records that no consumer can change: handed on as they are.
_IMMUTABLE = (int, float, complex, str, bytes, bool, type(None), tuple, frozenset, Decimal)


def copy_record(record: Any) -> Any:
    """A copy of ``record`` for one of several consumers, so that one changing it cannot change another's.

    Dicts and lists are copied (shallow, as before records could be anything), a Row keeps its kind and
    field names; immutable values (numbers, strings, tuples, None) are handed on as they are; any other
    object is copied with :func:`copy.copy`, or handed on as it is when it cannot be copied.
    """
    if type(record) is dict:
        return dict(record)
    if isinstance(record, _IMMUTABLE):
        return record
    if isinstance(record, Row):
        return _rebuild(record.get_field_names(), tuple(record), record.get_row_kind())
    if isinstance(record, list):
        return list(record)
    try:
        return copy.copy(record)
    except (TypeError, copy.Error, pickle.PicklingError):
        return record


#: Schema metadata key naming the kind of the records of a batch (absent: dicts).
RECORD_KIND_KEY = b"flinklike.record"
#: Field metadata key of a ``Types.BIG_DEC()`` field (also of a list's element or a map's key or value field).
#: As in PyFlink (whose coder writes ``str(value)``), a BIG_DEC value travels as its exact text in an
#: Arrow string column, so that it keeps its scale (Java's BigDecimal: ``1.50`` stays ``1.50``);
#: :func:`records_of` turns the text back into a ``Decimal``.
BIG_DEC_KEY = b"flinklike.big-dec"
#: Field metadata key of a ``Types.PICKLED_BYTE_ARRAY()`` field of a ROW / TUPLE / LIST / MAP: its values
#: travel pickled in an Arrow binary column (as PyFlink's pickled-bytes coder writes them) and
#: :func:`records_of` unpickles them.
PICKLED_FIELD_KEY = b"flinklike.pickled"


class RecordKind:
    """The kinds of records (values of :data:`RECORD_KIND_KEY`)."""

    DICT = "dict"
    NAMED_ROW = "row"
    POSITIONAL_ROW = "positional-row"
    TUPLE = "tuple"
    VALUE = "value"
    PICKLED = "pickled"  # Types.PICKLED_BYTE_ARRAY(): any picklable object, one binary column f0


def declared_kind(schema: pa.Schema | None) -> str | None:
    """The record kind a declared schema names in its metadata (``Types.TUPLE``, ``Types.STRING()``...)."""
    if schema is None or not schema.metadata:
        return None
    kind = schema.metadata.get(RECORD_KIND_KEY)
    return kind.decode() if kind is not None else None


def _big_dec(text: str | None) -> Decimal | None:
    return None if text is None else Decimal(text)


def _unpickled(data: bytes | None) -> Any:
    return None if data is None else pickle.loads(data)


def nested_function(
    field: pa.Field,
    *,
    leaf: Callable[[pa.Field], Callable[[Any], Any] | None],
    struct: Callable[[pa.Field, list[tuple[int, str, Callable[[Any], Any]]]], Callable[[Any], Any] | None],
    sequence: Callable[[Callable[[Any], Any], Any], Any],
    mapping: Callable[[Callable[[Any], Any], Callable[[Any], Any], Any], Any],
) -> Callable[[Any], Any] | None:
    """A function over Python values of ``field``, composed along its nesting; None if no part needs one.

    ``leaf(field)`` gives a field's own function (e.g. by its metadata), or None to look inside it: a struct
    becomes ``struct(field, children)`` of its children that have one (``(index, name, function)``), a list
    ``partial(sequence, element)``, a map ``partial(mapping, key, item)`` (a missing one: the identity).
    The one walker of both directions: :func:`records_of`'s conversions and the row encoder's.
    """
    own = leaf(field)
    if own is not None:
        return own
    arrow = field.type

    def inner(child: pa.Field) -> Callable[[Any], Any] | None:
        return nested_function(child, leaf=leaf, struct=struct, sequence=sequence, mapping=mapping)

    if pa.types.is_struct(arrow):
        children = [(i, child.name, inner(child)) for i, child in enumerate(arrow)]
        return struct(field, [(i, name, function) for i, name, function in children if function is not None])
    if pa.types.is_list(arrow) or pa.types.is_large_list(arrow) or pa.types.is_fixed_size_list(arrow):
        element = inner(arrow.value_field)
        return None if element is None else functools.partial(sequence, element)
    if pa.types.is_map(arrow):
        key, item = inner(arrow.key_field), inner(arrow.item_field)
        if key is None and item is None:
            return None
        return functools.partial(mapping, key or _same, item or _same)
    return None


def _own_converter(field: pa.Field) -> Callable[[Any], Any] | None:
    metadata = field.metadata or {}
    if BIG_DEC_KEY in metadata:
        return _big_dec
    if PICKLED_FIELD_KEY in metadata:
        return _unpickled
    return None


def _struct_converter(field: pa.Field, children: list[tuple[int, str, Callable[[Any], Any]]]):
    kind = (field.metadata or {}).get(RECORD_KIND_KEY)
    if kind is None and not children:
        return None
    kind = kind.decode() if kind is not None else RecordKind.DICT
    return functools.partial(_struct_value, [(name, convert) for _, name, convert in children], kind)


def _converter(field: pa.Field) -> Callable[[Any], Any] | None:
    """What turns a Python value of ``field`` (from ``to_pylist``) into the value its producer emitted:
    BIG_DEC text into a ``Decimal``, a nested ROW / TUPLE struct into a Row / tuple, at any depth
    (struct fields, list elements, map keys and values). None when the value stays as Arrow gives it."""
    return nested_function(
        field, leaf=_own_converter, struct=_struct_converter, sequence=_list_value, mapping=_map_value
    )


def _same(value: Any) -> Any:
    return value


def _struct_value(children: list[tuple[str, Callable[[Any], Any]]], kind: str, value: dict | None) -> Any:
    if value is None:
        return None
    for name, convert in children:
        value[name] = convert(value[name])
    if kind == RecordKind.DICT:
        return value
    if kind == RecordKind.TUPLE:
        return tuple(value.values())
    return _rebuild(list(value), tuple(value.values()), RowKind.INSERT)


def _list_value(element: Callable[[Any], Any], value: list | None) -> list | None:
    return None if value is None else [element(item) for item in value]


def _map_value(key: Callable[[Any], Any], item: Callable[[Any], Any], value: list | None) -> list | None:
    return None if value is None else [(key(k), item(v)) for k, v in value]


def _column_converters(schema: pa.Schema) -> list[tuple[int, Callable[[Any], Any]]]:
    """The columns of ``schema`` whose Python values need converting, with their converters."""
    converters = []
    for index, field in enumerate(schema):
        if field.metadata is None and not pa.types.is_nested(field.type):
            continue  # the common case, checked cheaply
        convert = _converter(field)
        if convert is not None:
            converters.append((index, convert))
    return converters


def records_of(batch: pa.RecordBatch) -> list[Any]:
    """The records of ``batch`` (without a timestamp column) as the producer emitted them."""
    metadata = batch.schema.metadata
    kind = metadata.get(RECORD_KIND_KEY) if metadata else None
    if kind is not None and kind.decode() == RecordKind.PICKLED:
        return [pickle.loads(value) for value in batch.column(0).to_pylist()]
    converters = _column_converters(batch.schema)
    if kind is None and not converters:
        return dict_rows(batch)
    columns = [column.to_pylist() for column in batch.columns]
    for index, convert in converters:
        columns[index] = [convert(value) for value in columns[index]]
    if kind is None:
        return _dict_builder(tuple(batch.schema.names))(columns)
    kind = kind.decode()
    if kind == RecordKind.VALUE:
        return columns[0]
    rows = list(zip(*columns)) if columns else [()] * batch.num_rows
    if kind == RecordKind.TUPLE:
        return rows
    # Named rows; as in PyFlink, Types.ROW's positional fields are named f0, f1, ... downstream.
    names = batch.schema.names
    return [_rebuild(names, values, RowKind.INSERT) for values in rows]


def pickled_field_values(batch: pa.RecordBatch, field: str) -> list[Any] | None:
    """The value of ``field`` in each record of a batch of pickled records (dicts or named Rows, e.g. an
    undeclared stream of ``Row(name=...)``), as a keyed operator reads it (``record[field]``); None when
    the batch is not of pickled records or one of them has no such field."""
    if declared_kind(batch.schema) != RecordKind.PICKLED:
        return None
    values = []
    for record in records_of(batch):
        if isinstance(record, dict) and field in record:
            values.append(record[field])
        elif isinstance(record, Row) and field in (record.get_field_names() or ()):
            values.append(record[field])
        else:
            return None
    return values


#: How many records :func:`plain_values_cause` looks at.
_CAUSE_SAMPLE = 100


def plain_values_cause(batch: pa.RecordBatch, field: str, producer: str | None = None) -> str | None:
    """Why ``field`` is not in ``batch``, when the reason is that its records are plain values; else None.

    A stream of plain values (pickled objects, or values of a declared basic
    type) has one column ``f0`` and no named fields, so a field looked up by
    name (``key_by("key")``, a timestamp assigner's column) cannot be there.
    The usual cause is a function that returned something other than a row,
    most often nothing at all: a ``map`` without ``return`` yields ``None``.
    Only the first records are decoded (this runs on the error path alone).

    Args:
        batch: the batch without its timestamp column.
        field: the field that was looked up.
        producer: the operator that emitted the batch, as error messages name it.
    """
    kind = declared_kind(batch.schema)
    if kind not in (RecordKind.VALUE, RecordKind.PICKLED) or batch.num_columns == 0:
        return None
    sample = records_of(batch.slice(0, _CAUSE_SAMPLE).select([0]))
    who = producer or "the operator before it"
    what = "pickled Python objects" if kind == RecordKind.PICKLED else "values of a basic type"
    first = repr(sample[0]) if sample else "?"
    text = (
        f"{who} emitted plain values ({what}, e.g. {first[:80]}), not rows with fields, so there is no field {field!r}"
    )
    nones = sum(value is None for value in sample)
    if sample and nones == len(sample):
        text += (
            "; every record is None: its function returned nothing (a map function without `return`?). "
            "Return the row (a dict or named Row) that has the field"
        )
    elif nones:
        text += f"; {nones} of its first {len(sample)} records are None: its function returned nothing for them"
    else:
        text += (
            "; return dicts or named Rows from it, or declare its output_type (Types.ROW_NAMED([...], [...])), "
            "to use fields by name (tuples and positional Rows have none without a declared type)"
        )
    return text


def dict_rows(batch: pa.RecordBatch) -> list[dict[str, Any]]:
    """``batch.to_pylist()``, about a third faster: the per-record path's way from Arrow to dicts."""
    if batch.num_columns == 0:
        return [{} for _ in range(batch.num_rows)]
    return _dict_builder(tuple(batch.schema.names))([column.to_pylist() for column in batch.columns])


@functools.lru_cache(maxsize=256)
def _dict_builder(names: tuple[str, ...]):
    """A function turning a list of Python columns into a list of ``{name: value}`` dicts.

    Compiled once per field-name tuple so that each row is one dict display
    (``{'key': c0, 'seq': c1}``), cheaper than ``dict(zip(names, values))``;
    the names enter the source only through ``repr`` (string literals). A
    repeated name keeps its last column's value, as ``to_pylist`` does.
    """
    targets = "".join(f"c{i}, " for i in range(len(names)))
    display = ", ".join(f"{name!r}: c{i}" for i, name in enumerate(names))
    return eval(f"lambda columns: [{{{display}}} for {targets}in zip(*columns)]", {"zip": zip})  # noqa: S307
