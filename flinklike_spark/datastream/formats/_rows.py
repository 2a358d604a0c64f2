"""Shared by the JSON and CSV row formats: a ``Types.ROW`` / ``ROW_NAMED`` type as a stream schema, and
text <-> Python value conversions per Arrow type (timestamps, dates, decimals, bytes)."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
from typing import Any

import pyarrow as pa

from flinklike_spark.common.typeinfo import TypeInformation, to_arrow_schema
from flinklike_spark.common.types import RECORD_KIND_KEY, RecordKind, Row, declared_kind
from flinklike_spark.errors import ConfigurationError

__all__ = ["batch_columns", "from_text", "row_schema", "row_values", "to_json_value", "to_text"]


def row_schema(where: str, type_info: Any) -> pa.Schema:
    """The stream schema of a ``Types.ROW`` / ``Types.ROW_NAMED`` type (records are ``Row`` s, as in PyFlink).

    Raises:
        ConfigurationError: ``type_info`` is not a row type.
    """
    if not isinstance(type_info, TypeInformation) or type_info.name not in ("ROW", "ROW_NAMED"):
        raise ConfigurationError(
            f"{where}: type_info must be Types.ROW([...]) or Types.ROW_NAMED([...], [...]), got {type_info!r}"
        )
    schema = to_arrow_schema(type_info)
    if type_info.name == "ROW_NAMED":
        schema = schema.with_metadata({RECORD_KIND_KEY: RecordKind.NAMED_ROW})
    return schema


def row_values(where: str, element: Any, names: list[str]) -> list[Any]:
    """The field values of one record (a Row, tuple or dict), in the order of ``names``."""
    if isinstance(element, dict):
        return [element.get(name) for name in names]
    if isinstance(element, Row) and element.get_field_names() is not None:
        return [element[name] for name in names]
    if isinstance(element, Row | tuple | list):
        values = list(element)
        if len(values) != len(names):
            raise ConfigurationError(
                f"{where}: a record with {len(values)} fields does not fit the type's {len(names)} fields {names}: "
                f"{element!r:.200}"
            )
        return values
    raise ConfigurationError(f"{where}: expects Row, tuple or dict records, got {type(element).__name__}")


def batch_columns(batch: pa.RecordBatch, names: list[str]) -> list[pa.Array] | None:
    """The columns :func:`row_values` reads from each record of ``batch``, in the order of ``names``: by name for
    dict and named-Row records that hold every field, by position for tuples of exactly ``len(names)`` fields.

    None where a batch path cannot follow :func:`row_values` (another record kind, a missing or repeated
    field, a column whose metadata converts its values to another Python type, e.g. ``BIG_DEC``)."""
    schema = batch.schema
    kind = declared_kind(schema)
    if kind in (None, RecordKind.DICT, RecordKind.NAMED_ROW):
        if len(set(schema.names)) != len(schema.names) or not set(names) <= set(schema.names):
            return None
        indices = [schema.get_field_index(name) for name in names]
    elif kind == RecordKind.TUPLE and len(schema.names) == len(names):
        indices = list(range(len(names)))
    else:
        return None
    if any(schema.field(index).metadata for index in indices):
        return None
    return [batch.column(index) for index in indices]


def _timestamp(value: Any) -> dt.datetime:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return dt.datetime.fromtimestamp(value / 1000, dt.UTC).replace(tzinfo=None)
    parsed = dt.datetime.fromisoformat(str(value).strip().replace(" ", "T"))
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(dt.UTC).replace(tzinfo=None)
    return parsed


def from_text(value: Any, arrow_type: pa.DataType) -> Any:
    """A JSON value or CSV field (None = null) as the Python value of ``arrow_type``.

    Raises:
        ValueError / TypeError: the value does not fit the type.
    """
    if value is None:
        return None
    t = arrow_type
    if pa.types.is_string(t):
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, dict | list):
            import json

            return json.dumps(value, separators=(",", ":"))
        return str(value)
    if pa.types.is_boolean(t):
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text not in ("true", "false"):
            raise ValueError(f"{value!r} is not a boolean")
        return text == "true"
    if pa.types.is_integer(t):
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError(f"{value!r} is not an integer")
        return int(value) if not isinstance(value, str) else int(value.strip())
    if pa.types.is_floating(t):
        if isinstance(value, bool):
            raise ValueError(f"{value!r} is not a number")
        return float(value)
    if pa.types.is_decimal(t):
        return decimal.Decimal(str(value).strip())
    if pa.types.is_timestamp(t):
        return _timestamp(value)
    if pa.types.is_date(t):
        return dt.date.fromisoformat(str(value).strip())
    if pa.types.is_time(t):
        return dt.time.fromisoformat(str(value).strip())
    if pa.types.is_binary(t):
        return base64.b64decode(value) if isinstance(value, str) else bytes(value)
    if pa.types.is_list(t):
        return [from_text(v, t.value_type) for v in value]
    if pa.types.is_map(t):
        return [(k, from_text(v, t.item_type)) for k, v in dict(value).items()]
    if pa.types.is_struct(t):
        if not isinstance(value, dict):
            raise ValueError(f"{value!r:.80} is not an object")
        return {f.name: from_text(value.get(f.name), f.type) for f in t}
    raise ValueError(f"no conversion to {t}")


def to_json_value(value: Any) -> Any:
    """A Python record value as JSON (timestamps as RFC 3339 UTC, bytes as base64, nested rows as objects)."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value.isoformat(timespec="milliseconds") + "Z"
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, Row):
        names = value.get_field_names()
        if names is None:
            return [to_json_value(v) for v in value]
        return {name: to_json_value(value[name]) for name in names}
    if isinstance(value, dict):
        return {str(k): to_json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json_value(v) for v in value]
    raise TypeError(f"cannot write {type(value).__name__} {value!r:.80} as JSON")


def to_text(value: Any, array_delimiter: str) -> str | None:
    """A Python record value as one CSV field (None stays None: the null literal is the caller's)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return array_delimiter.join("" if v is None else str(to_text(v, array_delimiter)) for v in value)
    converted = to_json_value(value)
    return str(converted)
