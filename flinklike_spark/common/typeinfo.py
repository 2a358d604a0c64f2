"""PyFlink's ``Types`` as declared stream schemas: ``output_type=`` / ``type_info=``.

A stream here has an Arrow schema: ``Types.ROW_NAMED(names, types)`` becomes
``pyarrow.schema([(name, arrow type), ...])`` (records are dicts or named
``Row``s); ``Types.ROW([...])`` and ``Types.TUPLE([...])`` become columns
``f0``, ``f1``, ... (records are positional ``Row``s or tuples); a basic type
(``Types.STRING()``, ``Types.LONG()``, ...) makes a stream of plain values in
one column ``f0``. The basic types map to their Arrow equivalents
(``Types.LONG()`` -> ``int64``, ``Types.SQL_TIMESTAMP()`` -> ``timestamp[ms]``,
...); lists, maps and nested rows are supported. ``PICKLED_BYTE_ARRAY`` makes
a stream of any picklable objects (pickled into one binary column ``f0``); as a
field of a row or tuple, an element of a list or a key or value of a map it is
a binary field whose values are pickled, as PyFlink's coder pickles them.

A type's ``repr`` is the ``Types`` call that makes it (``Types.MAP(Types.STRING(),
Types.LONG())``), and :func:`parse_type_info` turns that text back into the type:
checkpoints store the declared types of states in this form.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Any

import pyarrow as pa

from flinklike_spark.common.types import BIG_DEC_KEY, PICKLED_FIELD_KEY
from flinklike_spark.common.types import RECORD_KIND_KEY as _RECORD_KIND_KEY
from flinklike_spark.errors import ConfigurationError

__all__ = ["TypeInformation", "Types", "parse_type_info", "to_arrow_schema"]


@dataclasses.dataclass(frozen=True)
class TypeInformation:
    """A PyFlink type: its name and Arrow type (None for types without one here)."""

    name: str
    arrow_type: Any = None
    field_names: tuple[str, ...] | None = None
    #: the kind of records of a stream of this type (``rows.RecordKind``); None: dicts or named Rows
    record_kind: str | None = None
    #: the types it is made of: the field types of a row or tuple, the element type of an
    #: array or list, the key and value types of a map; empty for basic types
    components: tuple[TypeInformation, ...] = ()

    def __repr__(self) -> str:
        """The ``Types`` call that makes this type, e.g. ``Types.ROW_NAMED(['a'], [Types.LONG()])``."""
        parts = ", ".join(map(repr, self.components))
        if self.name in ("ROW", "TUPLE"):
            return f"Types.{self.name}([{parts}])"
        if self.name == "ROW_NAMED":
            return f"Types.ROW_NAMED({list(self.field_names or ())!r}, [{parts}])"
        return f"Types.{self.name}({parts})"

    def to_arrow(self) -> pa.DataType:
        if self.arrow_type is None:
            raise ConfigurationError(
                f"Types.{self.name} has no Arrow equivalent for a stream field: "
                f"use Types.ROW_NAMED([...names], [...types]) with basic, list, map or named row types"
            )
        return self.arrow_type


def _basic(name: str, arrow_type: pa.DataType):
    return staticmethod(lambda: TypeInformation(name, arrow_type))


class Types:
    """The PyFlink ``Types`` factory (the subset that maps to Arrow)."""

    STRING = _basic("STRING", pa.string())
    BYTE = _basic("BYTE", pa.int8())
    BOOLEAN = _basic("BOOLEAN", pa.bool_())
    SHORT = _basic("SHORT", pa.int16())
    INT = _basic("INT", pa.int32())
    LONG = _basic("LONG", pa.int64())
    FLOAT = _basic("FLOAT", pa.float32())
    DOUBLE = _basic("DOUBLE", pa.float64())
    CHAR = _basic("CHAR", pa.string())
    BIG_INT = _basic("BIG_INT", pa.int64())
    #: Exact text (PyFlink's coder writes ``str(value)``): a value keeps its scale, 1.50 stays 1.50.
    BIG_DEC = _basic("BIG_DEC", pa.string())
    SQL_DATE = _basic("SQL_DATE", pa.date32())
    SQL_TIME = _basic("SQL_TIME", pa.time64("us"))
    SQL_TIMESTAMP = _basic("SQL_TIMESTAMP", pa.timestamp("ms"))
    INSTANT = _basic("INSTANT", pa.timestamp("ms", tz="UTC"))

    @staticmethod
    def PICKLED_BYTE_ARRAY() -> TypeInformation:  # noqa: N802
        """Any picklable Python object, as a stream's type (not as a field of a row)."""
        return TypeInformation("PICKLED_BYTE_ARRAY", None, None, "pickled")

    @staticmethod
    def ROW_NAMED(field_names: list[str], field_types: list[TypeInformation]) -> TypeInformation:  # noqa: N802
        if len(field_names) != len(field_types):
            raise ConfigurationError(
                f"Types.ROW_NAMED needs as many names as types, got {len(field_names)} and {len(field_types)}"
            )
        arrow = pa.struct([_field(name, t) for name, t in zip(field_names, field_types, strict=True)])
        return TypeInformation("ROW_NAMED", arrow, tuple(field_names), "row", tuple(field_types))

    @staticmethod
    def ROW(field_types: list[TypeInformation]) -> TypeInformation:  # noqa: N802
        return TypeInformation("ROW", _positional(field_types), None, "positional-row", tuple(field_types))

    @staticmethod
    def TUPLE(field_types: list[TypeInformation]) -> TypeInformation:  # noqa: N802
        return TypeInformation("TUPLE", _positional(field_types), None, "tuple", tuple(field_types))

    @staticmethod
    def BASIC_ARRAY(element_type: TypeInformation) -> TypeInformation:  # noqa: N802
        return TypeInformation("BASIC_ARRAY", pa.list_(_field("item", element_type)), components=(element_type,))

    @staticmethod
    def PRIMITIVE_ARRAY(element_type: TypeInformation) -> TypeInformation:  # noqa: N802
        """An array of a primitive type; ``PRIMITIVE_ARRAY(BYTE())`` is Python ``bytes`` (Arrow binary), as in PyFlink."""
        arrow = pa.binary() if element_type.name == "BYTE" else pa.list_(_field("item", element_type))
        return TypeInformation("PRIMITIVE_ARRAY", arrow, components=(element_type,))

    @staticmethod
    def LIST(element_type_info: TypeInformation) -> TypeInformation:  # noqa: N802
        return TypeInformation("LIST", pa.list_(_field("item", element_type_info)), components=(element_type_info,))

    @staticmethod
    def MAP(key_type_info: TypeInformation, value_type_info: TypeInformation) -> TypeInformation:  # noqa: N802
        key = _field("key", key_type_info).with_nullable(False)  # Arrow's map keys are never null
        arrow = pa.map_(key, _field("value", value_type_info))
        return TypeInformation("MAP", arrow, components=(key_type_info, value_type_info))


def _positional(field_types: list[TypeInformation]) -> pa.DataType:
    """Flink's tuple and unnamed row fields are named ``f0``, ``f1``, ..."""
    return pa.struct([_field(f"f{i}", t) for i, t in enumerate(field_types)])


def _field(name: str, type_info: TypeInformation) -> pa.Field:
    """A struct, list element, map or schema field; one of a nested ROW / TUPLE type names its record kind
    in its metadata, so that its values come back as Rows or tuples (as in PyFlink), not dicts; one of
    BIG_DEC is tagged so that its text comes back as a ``Decimal``."""
    if type_info.record_kind == "pickled":  # any object: pickled into a binary value, as PyFlink's coder does
        return pa.field(name, pa.binary(), metadata={PICKLED_FIELD_KEY: b"1"})
    arrow = type_info.to_arrow()
    if pa.types.is_struct(arrow) and type_info.record_kind is not None:
        return pa.field(name, arrow, metadata={_RECORD_KIND_KEY: type_info.record_kind})
    if type_info.name == "BIG_DEC":
        return pa.field(name, arrow, metadata={BIG_DEC_KEY: b"1"})
    return pa.field(name, arrow)


def to_arrow_schema(output_type: Any) -> pa.Schema | None:
    """``output_type=`` as a stream schema: a ``pyarrow.Schema`` as is, ``Types.*`` converted.

    The schema of ``Types.ROW`` / ``TUPLE`` / a basic type names the kind of
    its records in its metadata (``rows.RECORD_KIND_KEY``).
    """
    if output_type is None or isinstance(output_type, pa.Schema):
        return output_type
    if isinstance(output_type, TypeInformation):
        if output_type.record_kind == "pickled":
            return pa.schema([("f0", pa.binary())], metadata={_RECORD_KIND_KEY: "pickled"})
        arrow = output_type.to_arrow()
        if output_type.field_names is not None:
            return pa.schema(list(arrow))
        if output_type.record_kind is not None:
            return pa.schema(list(arrow), metadata={_RECORD_KIND_KEY: output_type.record_kind})
        if pa.types.is_struct(arrow):  # pragma: no cover - every struct type is named or positional
            raise ConfigurationError(f"Types.{output_type.name} cannot describe a stream")
        return pa.schema([_field("f0", output_type)], metadata={_RECORD_KIND_KEY: "value"})
    raise ConfigurationError(f"output_type must be a pyarrow.Schema or a Types.* type information, got {output_type!r}")


def parse_type_info(text: str) -> TypeInformation:
    """The type whose ``repr`` is ``text`` (``"Types.LIST(Types.LONG())"``); nothing is evaluated.

    Raises:
        ConfigurationError: ``text`` is not a ``Types`` call of names, lists of names and types.
    """
    try:
        return _parsed(ast.parse(text, mode="eval").body, text)
    except SyntaxError:
        raise ConfigurationError(f"not a Types.* type: {text!r}") from None


def _parsed(node: ast.expr, text: str) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.List):
        return [_parsed(item, text) for item in node.elts]
    if (
        isinstance(node, ast.Call)
        and not node.keywords
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "Types"
        and node.func.attr.isupper()
        and hasattr(Types, node.func.attr)
    ):
        return getattr(Types, node.func.attr)(*(_parsed(arg, text) for arg in node.args))
    raise ConfigurationError(f"not a Types.* type: {text!r} (at {ast.unparse(node)!r})")
