"""Declared state types: the check of every value written to typed state, and restoring across a type change.

A state descriptor may declare ``Types.*`` type information
(``ValueStateDescriptor("count", Types.LONG())``, ``MapStateDescriptor(name,
key_type, value_type)``, ...). PyFlink serializes state with a coder made from
that type, so a value the coder cannot write fails the job; here values are
pickled whatever they are, so the type is checked instead, by the state handle,
on every write. :class:`DeclaredStateType` compiles a descriptor's types once,
when the state is registered, into plain predicates, and gives the handle a
subclass whose writing methods call them; undeclared state (no type, or
``Types.PICKLED_BYTE_ARRAY()``) keeps the plain handle and accepts any value.

What a type accepts (PyFlink 2.3's coders, checked by encoding values with
``pyflink.fn_execution.coders.from_type_info(t).get_impl().encode``; PyFlink
also converts some values silently and lossily, which is refused here because
the value would be stored as given):

* ``BYTE``/``SHORT``/``INT``/``LONG``/``BIG_INT``: an int (bool and numpy
  integers included) in the type's range (``BIG_INT`` is 64 bits, as PyFlink's
  coder); PyFlink also truncates floats and Decimals into them;
* ``FLOAT``/``DOUBLE``: a float or an int (bool included), as PyFlink;
* ``STRING``/``CHAR``: a str; ``BOOLEAN``: a bool (PyFlink also takes ints and
  floats as their truth value); ``BIG_DEC``: a Decimal or an int (PyFlink also
  takes floats and strings);
* ``SQL_DATE``: a date that is not a datetime (PyFlink drops the time);
  ``SQL_TIME``: a time; ``SQL_TIMESTAMP``/``INSTANT``: a datetime;
* ``ROW_NAMED``: a Row with exactly the declared fields (named, in any order,
  or positional); ``ROW``: a positional Row of as many fields; ``TUPLE``: a
  tuple of as many elements (PyFlink drops extra fields and elements); fields
  may be None;
* ``LIST``/``BASIC_ARRAY``: a list (not a tuple) whose elements are None or of
  the element type; ``PRIMITIVE_ARRAY``: a list without None elements, of
  ``BYTE``: bytes or bytearray; ``MAP``: a dict with keys of the key type (never
  None) and values None or of the value type.

A list state's elements and a map state's keys and values are checked one by
one; None is never a valid element of a typed list state (PyFlink's coder
refuses it). Reducing state checks the added values and the reduce function's
results; aggregating state's type is its accumulator's, checked where
``add``/``merge`` return it.

Restore: checkpoints store the declared type of each typed state (the type's
``repr``, see :func:`declared_type_parts`); a state registered after a restore
with another type is refused with :class:`IncompatibleStateTypeError`, unless a
``ROW_NAMED`` type gained fields at its end, in which case the restored rows are
extended with None (Flink's schema evolution of POJO and Avro state).
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from checkpointing.schemas import StateKind, truncated_repr
from checkpointing.state_snapshots import OperatorStateSnapshot
from flinklike_spark.common.typeinfo import TypeInformation, Types, parse_type_info
from flinklike_spark.common.types import Row
from flinklike_spark.datastream.state import (
    AggregatingStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    TtlValue,
)
from flinklike_spark.errors import ConfigurationError, IncompatibleStateTypeError, StateTypeError

__all__ = ["DeclaredStateType", "declared_type_parts", "value_check"]

Check = Callable[[Any], bool]

_INT_BITS = {"BYTE": 8, "SHORT": 16, "INT": 32, "LONG": 64, "BIG_INT": 64}
_INTEGRAL = (int, np.integer)
_REAL = (float, int, np.floating, np.integer)

#: Where the State Processor API's recipe for changing a state's type is documented.
MIGRATE_RECIPE = "docs/state-processor.md, 'When a state's declared type changes'"


# -- predicates -------------------------------------------------------------------------------


def _int_range(bits: int) -> tuple[int, int]:
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def _int_check(bits: int) -> Check:
    low, high = _int_range(bits)

    def check(value: Any) -> bool:
        return isinstance(value, _INTEGRAL) and low <= value <= high

    return check


def _instance_check(types: type | tuple[type, ...]) -> Check:
    def check(value: Any) -> bool:
        return isinstance(value, types)

    return check


def _date(value: Any) -> bool:
    return isinstance(value, datetime.date) and not isinstance(value, datetime.datetime)


_BASIC_CHECKS: dict[str, Check] = {
    **{name: _int_check(bits) for name, bits in _INT_BITS.items()},
    "FLOAT": _instance_check(_REAL),
    "DOUBLE": _instance_check(_REAL),
    "STRING": _instance_check(str),
    "CHAR": _instance_check(str),
    "BOOLEAN": _instance_check((bool, np.bool_)),
    "BIG_DEC": _instance_check((decimal.Decimal, int)),
    "SQL_DATE": _date,
    "SQL_TIME": _instance_check(datetime.time),
    "SQL_TIMESTAMP": _instance_check(datetime.datetime),
    "INSTANT": _instance_check(datetime.datetime),
}


#: The class whose instances a basic type always accepts (ints: within range), tested inline by value handles.
_EXACT_CLASS: dict[str, type] = {
    **dict.fromkeys(_INT_BITS, int),
    "FLOAT": float,
    "DOUBLE": float,
    "STRING": str,
    "CHAR": str,
    "BOOLEAN": bool,
}


def _anything(value: Any) -> bool:
    return True


def _nullable(check: Check) -> Check:
    if check is _anything:
        return check
    return lambda value: value is None or check(value)


def _row_check(type_info: TypeInformation, checks: list[Check]) -> Check:
    """A Row of exactly the declared fields: by name (any order) for a named type, else positional."""
    count = len(checks)
    names = list(type_info.field_names) if type_info.field_names is not None else None
    positional_names = [f"f{i}" for i in range(count)]
    name_set = frozenset(names or ())
    by_name = dict(zip(names or (), checks, strict=False))

    def check(value: Any) -> bool:
        if not isinstance(value, Row) or len(value) != count:
            return False
        fields = value.get_field_names()
        if fields is None or fields == names or (names is None and fields == positional_names):
            return all(c(v) for c, v in zip(checks, value))
        if names is None or frozenset(fields) != name_set:
            return False
        return all(by_name[name](v) for name, v in zip(fields, value))

    return check


def _compile(type_info: TypeInformation) -> Check:
    """The predicate of ``type_info`` (:func:`_anything` for a pickled type)."""
    name = type_info.name
    basic = _BASIC_CHECKS.get(name)
    if basic is not None:
        return basic
    if type_info.record_kind == "pickled":
        return _anything
    parts = [_compile(t) for t in type_info.components]
    if name in ("ROW_NAMED", "ROW"):
        return _row_check(type_info, [_nullable(p) for p in parts])
    if name == "TUPLE":
        fields = [_nullable(p) for p in parts]
        return lambda value: (
            isinstance(value, tuple) and len(value) == len(fields) and all(c(v) for c, v in zip(fields, value))
        )
    if name in ("LIST", "BASIC_ARRAY"):
        element = _nullable(parts[0])
        return lambda value: isinstance(value, list) and all(map(element, value))
    if name == "PRIMITIVE_ARRAY":
        if type_info.components[0].name == "BYTE":
            return _instance_check((bytes, bytearray))
        element = parts[0]
        return lambda value: isinstance(value, list) and all(map(element, value))
    if name == "MAP":
        key, item = parts[0], _nullable(parts[1])
        return lambda value: (
            isinstance(value, dict) and all(k is not None and key(k) and item(v) for k, v in value.items())
        )
    raise ConfigurationError(f"{type_info!r} cannot be checked: not a type Types.* makes")


def value_check(type_info: Any, what: str) -> Check | None:
    """The predicate a value of ``type_info`` passes; None when any value goes (no type, or pickled).

    Raises:
        ConfigurationError: ``type_info`` is not a ``Types.*`` type (``what`` names where it was given).
    """
    if type_info is None:
        return None
    if not isinstance(type_info, TypeInformation):
        raise ConfigurationError(
            f"{what}: type information must be a Types.* type such as Types.LONG() (note the call), or None "
            f"for any picklable value; got {type_info!r}"
        )
    check = _compile(type_info)
    return None if check is _anything else check


# -- what a type accepts, in words ------------------------------------------------------------


def _valid(type_info: TypeInformation) -> str:
    name = type_info.name
    if name in _INT_BITS:
        bits = _INT_BITS[name]
        return f"an int in [-2**{bits - 1}, 2**{bits - 1} - 1] (bool counts as int)"
    words = {
        "FLOAT": "a float or an int",
        "DOUBLE": "a float or an int",
        "STRING": "a str",
        "CHAR": "a str",
        "BOOLEAN": "a bool",
        "BIG_DEC": "a decimal.Decimal or an int",
        "SQL_DATE": "a datetime.date (not a datetime)",
        "SQL_TIME": "a datetime.time",
        "SQL_TIMESTAMP": "a datetime.datetime",
        "INSTANT": "a datetime.datetime",
    }
    if name in words:
        return words[name]
    parts = type_info.components
    if name == "ROW_NAMED":
        return (
            f"a Row with the fields {list(type_info.field_names or ())} (by name or position), each None or of its type"
        )
    if name == "ROW":
        return f"a positional Row of {len(parts)} fields, each None or of its type"
    if name == "TUPLE":
        return f"a tuple of {len(parts)} elements, each None or of its type"
    if name in ("LIST", "BASIC_ARRAY"):
        return f"a list whose elements are None or {_valid(parts[0])}"
    if name == "PRIMITIVE_ARRAY":
        return "bytes or a bytearray" if parts[0].name == "BYTE" else f"a list of {_valid(parts[0])} (no None)"
    if name == "MAP":
        return f"a dict with keys {_valid(parts[0])} (not None) and values None or {_valid(parts[1])}"
    return "any picklable value"


def _mismatch(type_info: TypeInformation, value: Any, path: str) -> str:
    """Where ``value`` (which fails ``type_info``) goes wrong first, for the error message."""
    parts = type_info.components
    name = type_info.name
    inner: tuple[TypeInformation, Any, str] | None = None
    if name in ("LIST", "BASIC_ARRAY", "PRIMITIVE_ARRAY") and isinstance(value, list):
        element = _compile(parts[0])
        bad = next(
            (i for i, v in enumerate(value) if not ((v is None and name != "PRIMITIVE_ARRAY") or element(v))), None
        )
        if bad is not None:
            inner = (parts[0], value[bad], f"{path}[{bad}]")
    elif name == "MAP" and isinstance(value, dict):
        key, item = _compile(parts[0]), _compile(parts[1])
        for k, v in value.items():
            if k is None or not key(k):
                inner = (parts[0], k, f"a key of {path}")
                break
            if v is not None and not item(v):
                inner = (parts[1], v, f"{path}[{k!r}]")
                break
    elif name in ("ROW_NAMED", "ROW", "TUPLE") and isinstance(value, (Row, tuple)) and len(value) == len(parts):
        names = type_info.field_names or [f"f{i}" for i in range(len(parts))]
        fields = value.get_field_names() if isinstance(value, Row) else None
        pairs = zip(names, parts, value) if not fields or fields == list(names) else (
            (n, parts[list(names).index(n)], v) for n, v in zip(fields, value) if n in names
        )  # fmt: skip
        for field, field_type, v in pairs:
            if v is not None and not _compile(field_type)(v):
                inner = (field_type, v, f"{path}.{field}")
                break
    if inner is not None:
        return _mismatch(*inner)
    return f"{path} is {type(value).__name__} {truncated_repr(value, 120)}, but {type_info!r} takes {_valid(type_info)}"


# -- typed handles ----------------------------------------------------------------------------


class DeclaredStateType:
    """The compiled checks of one state descriptor's declared types, for one backend.

    Create it with :meth:`of` when the state is registered (None: nothing to
    check); :meth:`wrap_args` checks the results of the descriptor's reduce or
    aggregate function, :meth:`typed_handle_class` gives the handle's writing
    methods the checks (also of broadcast state, a map handle without a key), :meth:`check_entry`
    checks a whole entry written without a handle. ``backend`` is what errors name: its
    ``owner`` and ``current_key`` (None: no key).
    """

    def __init__(self, descriptor: StateDescriptor, backend: Any, value: Check | None, key: Check | None) -> None:
        self.descriptor = descriptor
        self._backend = backend
        self.value = value
        self.key = key

    @classmethod
    def of(cls, descriptor: StateDescriptor, backend: Any) -> DeclaredStateType | None:
        what = f"state {descriptor.name!r}"
        if isinstance(descriptor, MapStateDescriptor):
            key = value_check(descriptor.key_type_info, what)
            value = value_check(descriptor.value_type_info, what)
        else:
            key, value = None, value_check(descriptor.type_info, what)
        return None if key is None and value is None else cls(descriptor, backend, value, key)

    @property
    def declared(self) -> TypeInformation:
        """The type of the state's values (of a map's values)."""
        descriptor = self.descriptor
        return descriptor.value_type_info if isinstance(descriptor, MapStateDescriptor) else descriptor.type_info

    def fail(self, value: Any, what: str, type_info: TypeInformation | None = None) -> None:
        """Raise the :class:`StateTypeError` of ``value`` (``what`` it is: the value, an element, a map key...)."""
        backend = self._backend
        descriptor = self.descriptor
        type_info = type_info if type_info is not None else self.declared
        declares = _type_text(descriptor)
        key = backend.current_key
        where = "" if key is None else f"for key {truncated_repr(key, 120)}, "  # None: broadcast state, no key
        raise StateTypeError(
            f"{backend.owner}: state {descriptor.name!r} ({type(descriptor).__name__}) declares {declares}; "
            f"{where}{_mismatch(type_info, value, what)}. "
            f"Write a value of the declared type, or declare the type the state holds "
            f"(Types.PICKLED_BYTE_ARRAY() or no type: any picklable value)"
        )

    def _check_elements(self, values: list) -> list:
        check = self.value
        for value in values:
            if not check(value):
                self.fail(value, "an element written")
        return values

    def _check_entries(self, entries: dict) -> dict:
        key, value = self.key, self.value
        for k, v in entries.items():
            if key is not None and (k is None or not key(k)):
                self.fail(k, "a map key", self.descriptor.key_type_info)
            if value is not None and v is not None and not value(v):
                self.fail(v, f"the value of map key {truncated_repr(k, 60)}")
        return entries

    def check_entry(self, entry: Any) -> None:
        """Check the current key's whole entry: a value, a list of elements, a dict of a map state."""
        kind = StateKind(self.descriptor.kind)
        if kind == StateKind.LIST:
            self._check_elements(list(entry))
        elif kind == StateKind.MAP:
            self._check_entries(entry)
        elif entry is not None and not self.value(entry):
            self.fail(entry, "the value written")

    def wrap_args(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """The handle's function arguments, with the values they return (what gets stored) checked."""
        check = self.value
        if check is None or not args:
            return args
        if isinstance(self.descriptor, ReducingStateDescriptor):
            (reduce,) = args

            def checked_reduce(a: Any, b: Any) -> Any:
                result = reduce(a, b)
                if not check(result):
                    self.fail(result, "the reduce function's result")
                return result

            return (checked_reduce,)
        if isinstance(self.descriptor, AggregatingStateDescriptor):
            return (_CheckedAggregate(args[0], check, self.fail),)
        return args

    def typed_handle_class(self, handle_class: type) -> type:
        """A subclass of ``handle_class`` whose writing methods check values first (same layout, no slots)."""
        kind = StateKind(self.descriptor.kind)
        check = self.value
        namespace: dict[str, Any] = {"__slots__": (), "__module__": handle_class.__module__}
        if kind == StateKind.VALUE:
            namespace["update"] = self._value_update(handle_class.update)
        elif kind == StateKind.LIST:
            namespace.update(self._list_methods(handle_class))
        elif kind == StateKind.MAP:
            base_put, base_put_all = handle_class.put, handle_class.put_all

            def put(handle: Any, key: Any, value: Any) -> None:
                self._check_entries({key: value})
                base_put(handle, key, value)

            def put_all(handle: Any, entries: dict) -> None:
                base_put_all(handle, self._check_entries(entries))

            namespace.update(put=put, put_all=put_all)
        elif kind == StateKind.REDUCING and check is not None:
            base_add = handle_class.add

            def add(handle: Any, value: Any) -> None:
                if not check(value):
                    self.fail(value, "the value added")
                base_add(handle, value)

            namespace["add"] = add
        return type(f"Typed{handle_class.__name__}", (handle_class,), namespace)

    def _value_update(self, base_update: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
        """``update`` that checks first; a basic type's own class is tested inline (no call on the hot path)."""
        check = self.value
        fail = self.fail
        exact = _EXACT_CLASS.get(self.declared.name)
        if exact is int:
            low, high = _int_range(_INT_BITS[self.declared.name])

            def update(handle: Any, value: Any) -> None:
                if (value.__class__ is not int or not low <= value <= high) and value is not None and not check(value):
                    fail(value, "the value written")
                base_update(handle, value)

        elif exact is not None:

            def update(handle: Any, value: Any) -> None:
                if value.__class__ is not exact and value is not None and not check(value):
                    fail(value, "the value written")
                base_update(handle, value)

        else:

            def update(handle: Any, value: Any) -> None:
                if value is not None and not check(value):
                    fail(value, "the value written")
                base_update(handle, value)

        return update

    def _list_methods(self, handle_class: type) -> dict[str, Any]:
        check = self.value
        base_add, base_add_all, base_update = handle_class.add, handle_class.add_all, handle_class.update

        def add(handle: Any, value: Any) -> None:
            if not check(value):
                self.fail(value, "the element added")
            base_add(handle, value)

        def add_all(handle: Any, values: Iterable[Any]) -> None:
            base_add_all(handle, self._check_elements(list(values)))

        def update(handle: Any, values: Iterable[Any]) -> None:
            base_update(handle, self._check_elements(list(values)))

        return {"add": add, "add_all": add_all, "update": update}

    # -- restore --------------------------------------------------------------------------------

    def restored_from(self, written: str, table: Any, keys: list) -> None:
        """Make the restored entries of ``table`` (under ``keys``) readable as the declared type.

        ``written`` is the text of the type the checkpoint was written with (see
        :func:`declared_type_parts`).

        Raises:
            IncompatibleStateTypeError: the declared type cannot read them (anything but a named
                row gaining fields at its end; a map's key type never changes).
        """
        declared = _type_text(self.descriptor)
        if written == declared:
            return
        old, new = parse_type_info(written), parse_type_info(declared)
        if isinstance(self.descriptor, MapStateDescriptor):
            added = (
                _appended_fields(old.components[1], new.components[1])
                if old.components[0] == new.components[0]
                else None
            )
        else:
            added = _appended_fields(old, new)
        if added is None:
            raise IncompatibleStateTypeError(
                f"{self._backend.owner}: state {self.descriptor.name!r} was written as {written} and is now "
                f"declared as {declared}; a restore can only add fields at the end of a Types.ROW_NAMED "
                f"(filled with None). Keep the old type, or migrate the savepoint with the State Processor API "
                f"(read the state with SavepointReader, convert it, write it with SavepointWriter: {MIGRATE_RECIPE})"
            )
        kind = StateKind(self.descriptor.kind)
        for key in keys:
            table[key] = _map_stored(kind, table[key], lambda row: _extend(row, added))


def _appended_fields(old: TypeInformation, new: TypeInformation) -> list[str] | None:
    """The names of the fields ``new`` adds at the end of ``old`` (two ROW_NAMED types), else None."""
    if old.name != "ROW_NAMED" or new.name != "ROW_NAMED":
        return None
    old_names, new_names = list(old.field_names or ()), list(new.field_names or ())
    n = len(old_names)
    if len(new_names) <= n or new_names[:n] != old_names or new.components[:n] != old.components:
        return None
    return new_names[n:]


def _extend(row: Any, added: list[str]) -> Any:
    if not isinstance(row, Row):
        return row
    fields = row.get_field_names()
    values = [*row, *([None] * len(added))]
    return Row(*values) if fields is None else Row(**dict(zip([*fields, *added], values, strict=True)))


def _map_stored(kind: StateKind, stored: Any, convert: Callable[[Any], Any]) -> Any:
    """``stored`` (a table value) with ``convert`` applied to every user value in it (TTL pairs kept)."""

    def one(value: Any) -> Any:
        if isinstance(value, TtlValue):
            return TtlValue(convert(value.value), value.timestamp)
        return None if value is None else convert(value)

    if kind == StateKind.LIST:
        return [one(v) for v in stored]
    if kind == StateKind.MAP:
        return {k: one(v) for k, v in stored.items()}
    return one(stored)


class _CheckedAggregate:
    """An AggregateFunction whose accumulators (what aggregating state stores) are checked."""

    def __init__(self, function: Any, check: Check, fail: Callable[[Any, str], None]) -> None:
        self._function = function
        self._check = check
        self._fail = fail

    def create_accumulator(self) -> Any:
        return self._function.create_accumulator()

    def add(self, value: Any, accumulator: Any) -> Any:
        result = self._function.add(value, accumulator)
        if not self._check(result):
            self._fail(result, "the accumulator add() returned")
        return result

    def get_result(self, accumulator: Any) -> Any:
        return self._function.get_result(accumulator)

    def merge(self, a: Any, b: Any) -> Any:
        result = self._function.merge(a, b)
        if not self._check(result):
            self._fail(result, "the accumulator merge() returned")
        return result


def declared_type_parts(descriptors: Iterable[StateDescriptor], restored: dict[str, str], prefix: str = "") -> list:
    """The snapshot parts that record each typed state's declared type (key group -1: every subtask reads them).

    One :class:`OperatorStateSnapshot` of kind ``type_info`` per state, named as the
    state (with ``prefix``), holding ``(None, repr(type))``; a map state's type is
    ``Types.MAP(key type, value type)`` (``PICKLED_BYTE_ARRAY`` for an undeclared one).
    States restored but not registered keep the type they were restored with.
    """
    types = dict(restored)
    for descriptor in descriptors:
        declared = _type_text(descriptor)
        if declared is not None:
            types[descriptor.name] = declared
        else:
            types.pop(descriptor.name, None)
    return [
        OperatorStateSnapshot(name=prefix + name, kind=StateKind.TYPE_INFO, entries=[(None, text)])
        for name, text in sorted(types.items())
    ]


def _type_text(descriptor: StateDescriptor) -> str | None:
    """The text checkpoints store for the declared type of ``descriptor`` (None: undeclared)."""
    if isinstance(descriptor, MapStateDescriptor):
        key, value = descriptor.key_type_info, descriptor.value_type_info
        if key is None and value is None:
            return None
        return repr(Types.MAP(key or Types.PICKLED_BYTE_ARRAY(), value or Types.PICKLED_BYTE_ARRAY()))
    return None if descriptor.type_info is None else repr(descriptor.type_info)
