"""PyFlink's ``pyflink.datastream.formats.json``: rows as JSON objects, both ways.

``JsonRowDeserializationSchema.builder().type_info(Types.ROW_NAMED([...], [...])).build()``
reads each message as one JSON object into a ``Row`` of the given fields
(a field missing from the object is null, unless ``fail_on_missing_field()``;
fields of ``Types.ROW([...])`` are named ``f0``, ``f1``, ... as in Flink).
``JsonRowSerializationSchema.builder().with_type_info(...).build()`` writes a
record (``Row``, tuple or dict) as a compact JSON object of the type's fields.
Timestamps are RFC 3339 strings in UTC, bytes base64, as Flink's JSON format.
A batch of records is written by Arrow kernels at once when that cannot differ
from writing each record (string, integer and boolean fields, no string that
needs an escape); otherwise record by record.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from flinklike_spark.common.serialization import DeserializationSchema, SerializationSchema
from flinklike_spark.datastream.formats._rows import batch_columns, from_text, row_schema, row_values, to_json_value
from flinklike_spark.errors import ConfigurationError, MalformedRecordError

__all__ = ["JsonRowDeserializationSchema", "JsonRowSerializationSchema"]

#: the characters ``json.dumps(..., ensure_ascii=False)`` escapes in a string (RE2 syntax)
_ESCAPED = r'["\\\x00-\x1f]'


class JsonRowDeserializationSchema(DeserializationSchema):
    """A JSON object per message -> a ``Row`` (Flink's ``JsonRowDeserializationSchema``). Build with :meth:`builder`."""

    def __init__(self, *, type_info: Any, fail_on_missing_field: bool = False, ignore_parse_errors: bool = False):
        if fail_on_missing_field and ignore_parse_errors:
            raise ConfigurationError(
                "JsonRowDeserializationSchema: fail_on_missing_field and ignore_parse_errors exclude each other"
            )
        self._schema = row_schema("JsonRowDeserializationSchema", type_info)
        self.fail_on_missing_field = fail_on_missing_field
        self.ignore_parse_errors = ignore_parse_errors

    @staticmethod
    def builder() -> JsonRowDeserializationSchema.Builder:
        return JsonRowDeserializationSchema.Builder()

    class Builder:
        """PyFlink's builder: ``type_info(...)`` (required), ``fail_on_missing_field()``, ``ignore_parse_errors()``."""

        def __init__(self) -> None:
            self._type_info = None
            self._fail_on_missing_field = False
            self._ignore_parse_errors = False

        def type_info(self, type_info: Any) -> JsonRowDeserializationSchema.Builder:
            self._type_info = type_info
            return self

        def json_schema(self, json_schema: str) -> JsonRowDeserializationSchema.Builder:
            raise ConfigurationError(
                "JsonRowDeserializationSchema.Builder.json_schema is not supported; declare the fields with "
                "type_info(Types.ROW_NAMED([...], [...]))"
            )

        def fail_on_missing_field(self) -> JsonRowDeserializationSchema.Builder:
            self._fail_on_missing_field = True
            return self

        def ignore_parse_errors(self) -> JsonRowDeserializationSchema.Builder:
            self._ignore_parse_errors = True
            return self

        def build(self) -> JsonRowDeserializationSchema:
            if self._type_info is None:
                raise ConfigurationError("JsonRowDeserializationSchema.Builder: call type_info(...) before build()")
            return JsonRowDeserializationSchema(
                type_info=self._type_info,
                fail_on_missing_field=self._fail_on_missing_field,
                ignore_parse_errors=self._ignore_parse_errors,
            )

    def produced_schema(self) -> pa.Schema:
        return self._schema

    def deserialize(self, message: bytes) -> dict | None:
        """One record as a dict of the type's fields (the stream hands it on as a ``Row``)."""
        try:
            parsed = json.loads(message)
            if not isinstance(parsed, dict):
                raise ValueError(f"not a JSON object but {type(parsed).__name__}")
            record = {}
            for field in self._schema:
                if field.name not in parsed and self.fail_on_missing_field:
                    raise ValueError(f"field {field.name!r} is missing")
                try:
                    record[field.name] = from_text(parsed.get(field.name), field.type)
                except (ValueError, TypeError, ArithmeticError) as e:
                    raise ValueError(f"field {field.name!r} ({field.type}): {e}") from e
            return record
        except (ValueError, TypeError) as e:
            if self.ignore_parse_errors:
                return None
            raise MalformedRecordError(
                f"JsonRowDeserializationSchema: cannot read {bytes(message)[:200]!r} as a row of "
                f"{self._schema.names}: {e} (ignore_parse_errors() skips such messages)"
            ) from e


class JsonRowSerializationSchema(SerializationSchema):
    """A record -> a JSON object (Flink's ``JsonRowSerializationSchema``). Build with :meth:`builder`."""

    def __init__(self, *, type_info: Any) -> None:
        self._names = row_schema("JsonRowSerializationSchema", type_info).names

    @staticmethod
    def builder() -> JsonRowSerializationSchema.Builder:
        return JsonRowSerializationSchema.Builder()

    class Builder:
        """PyFlink's builder: ``with_type_info(...)`` (required)."""

        def __init__(self) -> None:
            self._type_info = None

        def with_type_info(self, type_info: Any) -> JsonRowSerializationSchema.Builder:
            self._type_info = type_info
            return self

        def build(self) -> JsonRowSerializationSchema:
            if self._type_info is None:
                raise ConfigurationError("JsonRowSerializationSchema.Builder: call with_type_info(...) before build()")
            return JsonRowSerializationSchema(type_info=self._type_info)

    def serialize(self, element: Any) -> bytes:
        values = row_values("JsonRowSerializationSchema", element, self._names)
        document = {name: to_json_value(value) for name, value in zip(self._names, values, strict=True)}
        return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()

    def serialize_batch(self, batch: pa.RecordBatch) -> list[bytes]:
        columns = batch_columns(batch, self._names) if self._names else None
        texts = None if columns is None else [_json_texts(column) for column in columns]
        if texts is None or any(text is None for text in texts):
            return super().serialize_batch(batch)
        pieces: list = []
        for i, (name, text) in enumerate(zip(self._names, texts, strict=True)):
            pieces += [("{" if i == 0 else ",") + json.dumps(name, ensure_ascii=False) + ":", text]
        return pc.binary_join_element_wise(*pieces, "}", "").cast(pa.binary()).to_pylist()


def _json_texts(column: pa.Array) -> pa.Array | None:
    """Each value of ``column`` as ``json.dumps`` writes it (null as ``null``), or None if Arrow cannot match it:
    a type other than string, integer or boolean, or a string that needs an escape."""
    if pa.types.is_string(column.type):
        if pc.any(pc.match_substring_regex(column, _ESCAPED)).as_py():
            return None
        texts = pc.binary_join_element_wise('"', column, '"', "")
    elif pa.types.is_integer(column.type) or pa.types.is_boolean(column.type):
        texts = column.cast(pa.string())
    else:
        return None
    return texts.fill_null("null") if column.null_count else texts
