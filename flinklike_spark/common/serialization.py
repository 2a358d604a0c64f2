"""PyFlink's ``pyflink.common.serialization``: record (de)serialization schemas and the file sink's :class:`Encoder`.

A :class:`DeserializationSchema` turns the bytes of a message (a Kafka record's
value or key) into a record of the stream it declares with
:meth:`~DeserializationSchema.produced_schema` (an Arrow schema, as ``Types``
declare them: ``Types.STRING()`` gives plain ``str`` records, ``Types.ROW_NAMED``
named rows, ...). Sources call :meth:`~DeserializationSchema.deserialize_batch`
with many messages at once; a message that decodes to None is skipped, as in
Flink. A :class:`SerializationSchema` turns a record back into bytes.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from flinklike_spark.common.types import RECORD_KIND_KEY, RecordKind, Row, records_of
from flinklike_spark.errors import ConfigurationError

__all__ = [
    "ByteArraySchema",
    "DeserializationSchema",
    "Encoder",
    "RowFieldExtractorSchema",
    "SerializationSchema",
    "SimpleStringSchema",
    "records_to_batch",
]


def _check_charset(where: str, charset: str) -> str:
    if not isinstance(charset, str) or charset.replace("-", "").upper() != "UTF8":
        raise ConfigurationError(f"{where}: charset {charset!r} is not supported; use 'UTF-8'")
    return "utf-8"


def _value_schema(arrow_type: pa.DataType) -> pa.Schema:
    return pa.schema([("f0", arrow_type)], metadata={RECORD_KIND_KEY: RecordKind.VALUE})


def _value_column(batch: pa.RecordBatch, accepts: Callable[[pa.DataType], bool]) -> pa.Array | None:
    """The one column of a batch of plain values when its type passes ``accepts`` and it has no null, else None."""
    metadata = batch.schema.metadata
    if not metadata or metadata.get(RECORD_KIND_KEY) != RecordKind.VALUE.encode() or batch.num_columns != 1:
        return None
    column = batch.column(0)
    return column if accepts(column.type) and column.null_count == 0 else None


class DeserializationSchema(abc.ABC):
    """Bytes -> records (Flink's ``DeserializationSchema``). Picklable; shipped to every reader."""

    @abc.abstractmethod
    def produced_schema(self) -> pa.Schema:
        """The Arrow schema of the records (the stream's schema)."""

    @abc.abstractmethod
    def deserialize(self, message: bytes) -> Any:
        """One record from ``message``, or None to skip it.

        Raises:
            MalformedRecordError: ``message`` cannot be decoded (and the schema does not ignore errors).
        """

    def deserialize_batch(self, messages: list[bytes]) -> pa.RecordBatch:
        """The records of ``messages`` (None results left out) as one batch of :meth:`produced_schema`."""
        records = [record for record in map(self.deserialize, messages) if record is not None]
        return records_to_batch(records, self.produced_schema())


class SerializationSchema(abc.ABC):
    """Records -> bytes (Flink's ``SerializationSchema``). Picklable; shipped to every writer."""

    @abc.abstractmethod
    def serialize(self, element: Any) -> bytes:
        """The bytes of one record (a value, ``Row``, tuple or dict as the stream carries it)."""

    def serialize_batch(self, batch: pa.RecordBatch) -> list[bytes]:
        """The bytes of every record of ``batch`` (a batch without the timestamp column), in order."""
        return [self.serialize(record) for record in records_of(batch)]


def records_to_batch(records: list[Any], schema: pa.Schema) -> pa.RecordBatch:
    """``records`` (plain values for a value schema; Rows, tuples or dicts otherwise) as a batch of ``schema``."""
    kind = schema.metadata.get(RECORD_KIND_KEY) if schema.metadata else None
    if kind == RecordKind.VALUE.encode():
        return pa.RecordBatch.from_arrays([pa.array(records, type=schema.field(0).type)], schema=schema)
    columns: list[list[Any]] = [[] for _ in schema.names]
    names = schema.names
    for record in records:
        if isinstance(record, dict):
            values = [record.get(name) for name in names]
        elif isinstance(record, Row) and record.get_field_names() is not None:
            values = [record[name] for name in names]
        else:  # tuples, positional Rows: by position
            values = list(record)
        for column, value in zip(columns, values, strict=True):
            column.append(value)
    return pa.RecordBatch.from_arrays(
        [pa.array(column, type=field.type) for column, field in zip(columns, schema, strict=True)], schema=schema
    )


class SimpleStringSchema(SerializationSchema, DeserializationSchema):
    """Strings as UTF-8 bytes, both ways (Flink's ``SimpleStringSchema``); records are ``str``."""

    def __init__(self, charset: str = "UTF-8") -> None:
        self.charset = _check_charset("SimpleStringSchema", charset)

    def __repr__(self) -> str:
        return "SimpleStringSchema()"

    def __eq__(self, other: object) -> bool:
        return type(other) is SimpleStringSchema

    def __hash__(self) -> int:
        return hash(SimpleStringSchema)

    def produced_schema(self) -> pa.Schema:
        return _value_schema(pa.string())

    def deserialize(self, message: bytes) -> str:
        return message.decode(self.charset)

    def deserialize_batch(self, messages: list[bytes]) -> pa.RecordBatch:
        # vectorized: Arrow validates the UTF-8 of the whole column at once
        array = pa.array(messages, type=pa.binary()).cast(pa.string())
        return pa.RecordBatch.from_arrays([array], schema=self.produced_schema())

    def serialize(self, element: Any) -> bytes:
        return str(element).encode(self.charset)

    def serialize_batch(self, batch: pa.RecordBatch) -> list[bytes]:
        # vectorized for a column of strings (UTF-8 already): its bytes as they are
        column = _value_column(batch, lambda t: pa.types.is_string(t) or pa.types.is_large_string(t))
        if column is None:
            return super().serialize_batch(batch)
        return column.cast(pa.large_binary() if pa.types.is_large_string(column.type) else pa.binary()).to_pylist()


class ByteArraySchema(SerializationSchema, DeserializationSchema):
    """Raw bytes, both ways (PyFlink's ``ByteArraySchema``); records are ``bytes``."""

    def __repr__(self) -> str:
        return "ByteArraySchema()"

    def __eq__(self, other: object) -> bool:
        return type(other) is ByteArraySchema

    def __hash__(self) -> int:
        return hash(ByteArraySchema)

    def produced_schema(self) -> pa.Schema:
        return _value_schema(pa.binary())

    def deserialize(self, message: bytes) -> bytes:
        return bytes(message)

    def deserialize_batch(self, messages: list[bytes]) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays([pa.array(messages, type=pa.binary())], schema=self.produced_schema())

    def serialize(self, element: Any) -> bytes:
        if not isinstance(element, bytes | bytearray | memoryview):
            raise ConfigurationError(
                f"ByteArraySchema serializes bytes records, got {type(element).__name__} {element!r:.80}"
            )
        return bytes(element)

    def serialize_batch(self, batch: pa.RecordBatch) -> list[bytes]:
        column = _value_column(batch, lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t))
        return super().serialize_batch(batch) if column is None else column.to_pylist()


class RowFieldExtractorSchema(SerializationSchema):
    """One field of a Row, which must already be bytes (PyFlink's ``RowFieldExtractorSchema``).

    Typically a Kafka record's key and value from two fields of one Row:
    ``set_key_serialization_schema(RowFieldExtractorSchema(0))``.

    Raises:
        ValueError: ``field_index`` is negative (as PyFlink).
    """

    def __init__(self, field_index: int) -> None:
        if not isinstance(field_index, int) or isinstance(field_index, bool) or field_index < 0:
            raise ValueError(f"Field index must be non-negative, got: {field_index}")
        self.field_index = field_index

    def __repr__(self) -> str:
        return f"RowFieldExtractorSchema({self.field_index})"

    def serialize(self, element: Any) -> bytes:
        try:
            value = element[self.field_index]
        except (IndexError, KeyError, TypeError) as e:
            raise ConfigurationError(
                f"RowFieldExtractorSchema({self.field_index}): the record {element!r:.80} has no field "
                f"{self.field_index}"
            ) from e
        if value is None:
            return None
        if not isinstance(value, bytes | bytearray | memoryview):
            raise ConfigurationError(
                f"RowFieldExtractorSchema({self.field_index}) needs a bytes field, got "
                f"{type(value).__name__} {value!r:.80} (declare it Types.PRIMITIVE_ARRAY(Types.BYTE()))"
            )
        return bytes(value)


@dataclasses.dataclass(frozen=True)
class Encoder:
    """How a row-format :class:`~flinklike_spark.datastream.connectors.file_system.FileSink` writes a record."""

    charset_name: str = "UTF-8"

    @staticmethod
    def simple_string_encoder(charset_name: str = "UTF-8") -> Encoder:
        """Each record's string form, one per line (Flink's ``SimpleStringEncoder``).

        Raises:
            ConfigurationError: a charset other than UTF-8 (the only one written here).
        """
        if charset_name.replace("-", "").upper() != "UTF8":
            raise ConfigurationError(
                f"Encoder.simple_string_encoder: charset {charset_name!r} is not supported; use 'UTF-8'"
            )
        return Encoder(charset_name)
