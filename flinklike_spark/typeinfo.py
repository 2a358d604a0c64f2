"""PyFlink's ``Types`` as declared stream schemas: ``output_type=Types.ROW_NAMED([...], [...])``.

A stream here has an Arrow schema and rows are dicts, so only *named* row
types describe a stream: ``Types.ROW_NAMED(names, types)`` becomes
``pyarrow.schema([(name, arrow type), ...])``. The basic types map to their
Arrow equivalents (``Types.LONG()`` -> ``int64``, ``Types.STRING()`` ->
``string``, ``Types.SQL_TIMESTAMP()`` -> ``timestamp[ms]``, ...); lists,
maps and nested named rows are supported. ``Types.ROW([...])`` without names,
``TUPLE`` and ``PICKLED_BYTE_ARRAY`` cannot name fields and are refused with
a message saying what to use instead.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pyarrow as pa

from flinklike_spark.errors import ConfigurationError

__all__ = ["TypeInformation", "Types", "to_arrow_schema"]


@dataclasses.dataclass(frozen=True)
class TypeInformation:
    """A PyFlink type: its name and Arrow type (None for types without one here)."""

    name: str
    arrow_type: Any = None
    field_names: tuple[str, ...] | None = None

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
    BIG_DEC = _basic("BIG_DEC", pa.decimal128(38, 18))
    SQL_DATE = _basic("SQL_DATE", pa.date32())
    SQL_TIME = _basic("SQL_TIME", pa.time64("us"))
    SQL_TIMESTAMP = _basic("SQL_TIMESTAMP", pa.timestamp("ms"))
    INSTANT = _basic("INSTANT", pa.timestamp("ms", tz="UTC"))

    @staticmethod
    def PICKLED_BYTE_ARRAY() -> TypeInformation:  # noqa: N802
        return TypeInformation("PICKLED_BYTE_ARRAY")

    @staticmethod
    def ROW_NAMED(field_names: list[str], field_types: list[TypeInformation]) -> TypeInformation:  # noqa: N802
        if len(field_names) != len(field_types):
            raise ConfigurationError(
                f"Types.ROW_NAMED needs as many names as types, got {len(field_names)} and {len(field_types)}"
            )
        arrow = pa.struct([(name, t.to_arrow()) for name, t in zip(field_names, field_types, strict=True)])
        return TypeInformation("ROW_NAMED", arrow, tuple(field_names))

    @staticmethod
    def ROW(field_types: list[TypeInformation]) -> TypeInformation:  # noqa: N802
        return TypeInformation("ROW")  # no names: cannot describe dict rows

    @staticmethod
    def TUPLE(field_types: list[TypeInformation]) -> TypeInformation:  # noqa: N802
        return TypeInformation("TUPLE")

    @staticmethod
    def BASIC_ARRAY(element_type: TypeInformation) -> TypeInformation:  # noqa: N802
        return TypeInformation("BASIC_ARRAY", pa.list_(element_type.to_arrow()))

    @staticmethod
    def PRIMITIVE_ARRAY(element_type: TypeInformation) -> TypeInformation:  # noqa: N802
        return TypeInformation("PRIMITIVE_ARRAY", pa.list_(element_type.to_arrow()))

    @staticmethod
    def LIST(element_type_info: TypeInformation) -> TypeInformation:  # noqa: N802
        return TypeInformation("LIST", pa.list_(element_type_info.to_arrow()))

    @staticmethod
    def MAP(key_type_info: TypeInformation, value_type_info: TypeInformation) -> TypeInformation:  # noqa: N802
        return TypeInformation("MAP", pa.map_(key_type_info.to_arrow(), value_type_info.to_arrow()))


def to_arrow_schema(output_type: Any) -> pa.Schema | None:
    """``output_type=`` as a stream schema: a ``pyarrow.Schema`` as is, ``Types.ROW_NAMED`` converted."""
    if output_type is None or isinstance(output_type, pa.Schema):
        return output_type
    if isinstance(output_type, TypeInformation):
        if output_type.field_names is None:
            raise ConfigurationError(
                f"output_type=Types.{output_type.name}(...) cannot describe a stream of dict rows: "
                f"use Types.ROW_NAMED([...names], [...types]) or a pyarrow.schema"
            )
        return pa.schema(list(output_type.arrow_type))
    raise ConfigurationError(f"output_type must be a pyarrow.Schema or Types.ROW_NAMED(...), got {output_type!r}")
