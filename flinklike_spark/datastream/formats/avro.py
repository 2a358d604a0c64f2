"""PyFlink's ``pyflink.datastream.formats.avro``: rows as Avro records, both ways, on ``fastavro``.

``AvroRowSerializationSchema(avro_schema_string=...)`` writes a record (``Row``, tuple or dict) as the Avro
binary encoding of one record of that schema (no container header, no schema id: Flink's
``AvroRowSerializationSchema``); ``AvroRowDeserializationSchema(avro_schema_string=...)`` reads such a message
into a ``Row`` named by the schema's fields. ``AvroSchema.parse_string`` / ``parse_file`` check and hold a
schema. Avro types map to the stream's types as Flink's Avro format maps them: ``int``/``long`` -> INT/LONG,
``float``/``double``, ``boolean``, ``string`` and ``enum`` -> STRING, ``bytes``/``fixed`` -> bytes, a record
-> a nested ROW, ``array`` -> a list, ``map`` -> a map of strings; ``["null", T]`` is a nullable T; the logical
types ``date``, ``timestamp-millis``/``-micros`` and ``decimal`` -> DATE, TIMESTAMP, DECIMAL. A Java
``record_class`` (a generated ``SpecificRecord``) cannot be loaded here: pass its schema string instead.

Needs the ``avro`` extra (``pip install "flinklike-spark[avro]"``: fastavro).
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa

from flinklike_spark.common.serialization import DeserializationSchema, SerializationSchema
from flinklike_spark.common.types import RECORD_KIND_KEY, RecordKind, Row
from flinklike_spark.datastream.formats._rows import row_values
from flinklike_spark.errors import ConfigurationError, MalformedRecordError

__all__ = ["AvroRowDeserializationSchema", "AvroRowSerializationSchema", "AvroSchema"]

_PRIMITIVES = {
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "string": pa.string(),
    "bytes": pa.binary(),
}


def _fastavro():
    try:
        import fastavro
    except ImportError as e:  # pragma: no cover - the extra is installed with [test]
        raise ConfigurationError(
            'the Avro formats need fastavro: pip install "flinklike-spark[avro]" (or pip install fastavro)'
        ) from e
    return fastavro


class AvroSchema:
    """A parsed, checked Avro schema (PyFlink's ``AvroSchema``). ``str()`` gives its JSON."""

    def __init__(self, schema: dict | str) -> None:
        self._json = schema if isinstance(schema, dict) else _loads(schema)
        try:
            self.parsed = _fastavro().parse_schema(self._json)
        except Exception as e:  # fastavro raises SchemaParseException, KeyError, TypeError...
            raise ConfigurationError(f"not a valid Avro schema ({type(e).__name__}: {e}): {str(self)[:200]}") from e

    def __str__(self) -> str:
        return json.dumps(self._json)

    @staticmethod
    def parse_string(json_schema: str) -> AvroSchema:
        return AvroSchema(json_schema)

    @staticmethod
    def parse_file(file_path: str) -> AvroSchema:
        return AvroSchema(Path(file_path).read_text())


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as e:
        raise ConfigurationError(f"the Avro schema is not JSON ({e}): {text.strip()[:200]!r}") from e


def _record_schema(where: str, record_class: str | None, avro_schema_string: str | None) -> AvroSchema:
    if record_class is not None:
        raise ConfigurationError(
            f"{where}: record_class={record_class!r} names a Java SpecificRecord class, which cannot be loaded "
            "here; pass avro_schema_string= with its schema (the class's SCHEMA$) instead"
        )
    if avro_schema_string is None:
        raise ConfigurationError(f"{where}: avro_schema_string is required (the record's Avro schema as JSON)")
    schema = AvroSchema(avro_schema_string)
    if not isinstance(schema.parsed, dict) or schema.parsed.get("type") != "record":
        raise ConfigurationError(f"{where}: the Avro schema must be a record, got {str(schema)[:200]}")
    return schema


def _arrow_type(avro: Any, where: str) -> tuple[pa.DataType, bool]:
    """The Arrow type of an Avro type, and whether it is nullable."""
    if isinstance(avro, list):
        branches = [branch for branch in avro if branch != "null"]
        if len(branches) != 1:
            raise ConfigurationError(f"{where}: only unions of null and one type are supported, got {avro}")
        return _arrow_type(branches[0], where)[0], "null" in avro
    if isinstance(avro, str):
        if avro in _PRIMITIVES:
            return _PRIMITIVES[avro], False
        raise ConfigurationError(f"{where}: Avro type {avro!r} is not supported (named types: inline them)")
    logical, kind = avro.get("logicalType"), avro.get("type")
    if logical == "date":
        return pa.date32(), False
    if logical in ("timestamp-millis", "local-timestamp-millis"):
        return pa.timestamp("ms"), False
    if logical in ("timestamp-micros", "local-timestamp-micros"):
        return pa.timestamp("us"), False
    if logical == "decimal":
        return pa.decimal128(avro["precision"], avro.get("scale", 0)), False
    if kind == "record":
        return pa.struct([_arrow_field(f, where) for f in avro["fields"]]), False
    if kind == "array":
        return pa.list_(_arrow_type(avro["items"], where)[0]), False
    if kind == "map":
        return pa.map_(pa.string(), _arrow_type(avro["values"], where)[0]), False
    if kind == "enum":
        return pa.string(), False
    if kind == "fixed":
        return pa.binary(), False
    return _arrow_type(kind, where)


def _arrow_field(field: dict, where: str) -> pa.Field:
    arrow, nullable = _arrow_type(field["type"], f"{where}: field {field['name']!r}")
    return pa.field(field["name"], arrow, nullable=nullable)


class AvroRowDeserializationSchema(DeserializationSchema):
    """An Avro binary record per message -> a ``Row`` of the schema's fields (Flink's
    ``AvroRowDeserializationSchema``)."""

    def __init__(self, record_class: str | None = None, avro_schema_string: str | None = None) -> None:
        self._schema = _record_schema("AvroRowDeserializationSchema", record_class, avro_schema_string)
        fields = [_arrow_field(f, "AvroRowDeserializationSchema") for f in self._schema.parsed["fields"]]
        self._arrow = pa.schema(fields, metadata={RECORD_KIND_KEY: RecordKind.NAMED_ROW})

    def produced_schema(self) -> pa.Schema:
        return self._arrow

    def deserialize(self, message: bytes) -> dict:
        """One record as a dict of the schema's fields (the stream hands it on as a ``Row``)."""
        try:
            return _fastavro().schemaless_reader(io.BytesIO(message), self._schema.parsed, None)
        except Exception as e:  # EOFError, UnicodeDecodeError, struct errors...: not this schema's record
            raise MalformedRecordError(
                f"AvroRowDeserializationSchema: cannot read {bytes(message)[:100]!r} as a record of "
                f"{self._schema.parsed.get('name')} ({type(e).__name__}: {e})"
            ) from e


class AvroRowSerializationSchema(SerializationSchema):
    """A record (``Row``, tuple or dict) -> its Avro binary encoding (Flink's ``AvroRowSerializationSchema``).

    A dict, or a ``Row`` named as the schema's fields, is read by name; a tuple, or a ``Row`` of ``Types.ROW``
    (fields ``f0``, ``f1``...), by position, as Flink does."""

    def __init__(self, record_class: str | None = None, avro_schema_string: str | None = None) -> None:
        self._schema = _record_schema("AvroRowSerializationSchema", record_class, avro_schema_string)
        self._names = [f["name"] for f in self._schema.parsed["fields"]]

    def serialize(self, element: Any) -> bytes:
        return _encode_record("AvroRowSerializationSchema", self._schema, self._names, element)


def _encode_record(where: str, schema: AvroSchema, names: list[str], element: Any) -> bytes:
    """The Avro binary encoding of ``element`` (a dict, a ``Row`` or a tuple) as a record of ``schema``
    (whose field names are ``names``).

    Raises:
        MalformedRecordError: ``element`` does not fit the schema (named: the record, the schema, its fields).
    """
    element_names = element.get_field_names() if isinstance(element, Row) else None
    if element_names is not None and set(element_names) != set(names):  # Types.ROW's f0, f1...: by position
        element = tuple(element)
    values = row_values(where, element, names)
    out = io.BytesIO()
    try:
        _fastavro().schemaless_writer(out, schema.parsed, dict(zip(names, values, strict=True)))
    except (ValueError, TypeError, AttributeError) as e:
        raise MalformedRecordError(
            f"{where}: the record {element!r:.200} does not fit the Avro schema "
            f"{schema.parsed.get('name')} with fields {names} ({type(e).__name__}: {e})"
        ) from e
    return out.getvalue()
