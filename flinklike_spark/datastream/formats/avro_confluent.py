"""Avro with a schema registry, in Confluent's wire format: Flink's ``ConfluentRegistryAvroSerializationSchema``
and ``ConfluentRegistryAvroDeserializationSchema``.

A message is the magic byte ``0``, the writer schema's registry id (4 bytes, big-endian), then the Avro binary
encoding of one record (what Confluent's ``KafkaAvroSerializer`` writes and Flink's ``avro-confluent`` format
reads).

- :class:`ConfluentRegistryAvroSerializationSchema` registers its schema under a subject on first use (once per
  subject; the id is kept) and writes records of that schema, as :class:`~.avro.AvroRowSerializationSchema`
  does (a ``Row``, tuple or dict). Without a subject, the subject follows Confluent's ``TopicNameStrategy``:
  ``<topic>-value`` for a Kafka record's value, ``<topic>-key`` for its key.
- :class:`ConfluentRegistryAvroDeserializationSchema` reads a message written with any schema of the registry:
  it fetches the writer schema by the message's id (once per id) and resolves it to the reader schema given
  here (Avro's schema resolution: a field the reader added with a default gets the default, a field the
  reader dropped is skipped), producing ``Row`` s of the reader schema's fields.

Both talk to the registry through ``confluent_kafka.schema_registry.SchemaRegistryClient`` (the
``kafka`` extra: ``confluent-kafka[schemaregistry]``); ``registry_configs`` are that client's settings
(``basic.auth.user.info``, ``ssl.ca.location``, ``timeout``...). The registry may be Confluent Schema
Registry or any server of its REST API (Apicurio Registry's ``/apis/ccompat/v7``, Karapace, Redpanda).

Errors: a record that does not fit the schema, a message that is not in the wire format, or a schema id the
registry does not know raise :class:`~flinklike_spark.errors.MalformedRecordError`; a registry that cannot be
reached or refuses to register the schema raises :class:`~flinklike_spark.errors.SchemaRegistryError`.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from flinklike_spark.common.serialization import DeserializationSchema, SerializationSchema
from flinklike_spark.common.types import RECORD_KIND_KEY, RecordKind
from flinklike_spark.datastream.formats._registry import RegistryConnection, frame, unframe
from flinklike_spark.datastream.formats.avro import (
    AvroSchema,
    _arrow_field,
    _encode_record,
    _fastavro,
    _record_schema,
)
from flinklike_spark.errors import ConfigurationError, MalformedRecordError

__all__ = ["ConfluentRegistryAvroDeserializationSchema", "ConfluentRegistryAvroSerializationSchema"]


def _schema_json(where: str, schema: AvroSchema | str | Mapping) -> str:
    if isinstance(schema, AvroSchema):
        return str(schema)
    if isinstance(schema, str):
        return schema
    if isinstance(schema, Mapping):
        return json.dumps(schema)
    raise ConfigurationError(
        f"{where}: schema must be an AvroSchema, the schema's JSON text or a dict, got {type(schema).__name__}"
    )


class ConfluentRegistryAvroSerializationSchema(SerializationSchema):
    """Records -> Confluent's wire format, the schema registered under a subject (Flink's
    ``ConfluentRegistryAvroSerializationSchema``). Build one with :meth:`for_generic`.

    Used in a ``KafkaRecordSerializationSchema`` (``set_value_serialization_schema`` or
    ``set_key_serialization_schema``), a schema without a subject registers under ``<topic>-value`` or
    ``<topic>-key`` of each record's topic (``TopicNameStrategy``); :meth:`serialize` alone needs a subject.
    """

    def __init__(
        self,
        subject: str | None,
        schema: AvroSchema | str | Mapping,
        schema_registry_url: str,
        *,
        registry_configs: Mapping[str, Any] | None = None,
    ) -> None:
        where = "ConfluentRegistryAvroSerializationSchema"
        if subject is not None and (not isinstance(subject, str) or not subject):
            raise ConfigurationError(
                f"{where}: subject must be a non-empty str, or None for '<topic>-value' (TopicNameStrategy), "
                f"got {subject!r}"
            )
        self.subject = subject
        self._schema = _record_schema(where, None, _schema_json(where, schema))
        self._names = [f["name"] for f in self._schema.parsed["fields"]]
        self._registry = RegistryConnection(where, schema_registry_url, registry_configs)

    @staticmethod
    def for_generic(
        subject: str | None,
        schema: AvroSchema | str | Mapping,
        schema_registry_url: str,
        registry_configs: Mapping[str, Any] | None = None,
    ) -> ConfluentRegistryAvroSerializationSchema:
        """Flink's ``forGeneric(subject, schema, schemaRegistryUrl[, registryConfigs])``.

        Args:
            subject: the subject to register the schema under; None: ``<topic>-value`` / ``<topic>-key`` of the
                Kafka record (Confluent's ``TopicNameStrategy``).
            schema: the writer schema, a record (an :class:`AvroSchema`, its JSON text or a dict).
            schema_registry_url: the registry's base URL (for Apicurio: ``http://host:port/apis/ccompat/v7``).
            registry_configs: settings of ``confluent_kafka``'s ``SchemaRegistryClient`` (auth, TLS, timeouts).
        """
        return ConfluentRegistryAvroSerializationSchema(
            subject, schema, schema_registry_url, registry_configs=registry_configs
        )

    def __repr__(self) -> str:
        subject = self.subject or "<topic>-value"
        return f"ConfluentRegistryAvroSerializationSchema(subject={subject!r}, registry={self._registry.url!r})"

    def schema_id(self, subject: str) -> int:
        """The registry's id of this schema under ``subject``, registering it on first use.

        Raises:
            SchemaRegistryError: the registry is unreachable or refused the schema (e.g. it is incompatible
                with the subject's earlier versions under the subject's compatibility rule).
        """
        return self._registry.register(subject, str(self._schema), "AVRO", self._schema.parsed.get("name"))

    def serialize(self, element: Any) -> bytes:
        if self.subject is None:
            raise ConfigurationError(
                "ConfluentRegistryAvroSerializationSchema: no subject to register the schema under: give one "
                "(for_generic('orders-value', ...)), or use the schema in a KafkaRecordSerializationSchema, "
                "where the subject is '<topic>-value' or '<topic>-key'"
            )
        return self._frame(self.subject, element)

    def serialize_for_topic(self, element: Any, topic: str, *, is_key: bool = False) -> bytes:
        """What a ``KafkaRecordSerializationSchema`` calls: the subject is this schema's, or
        ``<topic>-key`` / ``<topic>-value``."""
        subject = self.subject or f"{topic}-{'key' if is_key else 'value'}"
        return self._frame(subject, element)

    def _frame(self, subject: str, element: Any) -> bytes:
        body = _encode_record("ConfluentRegistryAvroSerializationSchema", self._schema, self._names, element)
        return frame(self.schema_id(subject), body)


class ConfluentRegistryAvroDeserializationSchema(DeserializationSchema):
    """Confluent's wire format -> ``Row`` s of a reader schema (Flink's
    ``ConfluentRegistryAvroDeserializationSchema``). Build one with :meth:`for_generic`."""

    def __init__(
        self,
        schema: AvroSchema | str | Mapping,
        schema_registry_url: str,
        *,
        registry_configs: Mapping[str, Any] | None = None,
    ) -> None:
        where = "ConfluentRegistryAvroDeserializationSchema"
        self._reader = _record_schema(where, None, _schema_json(where, schema))
        fields = [_arrow_field(f, where) for f in self._reader.parsed["fields"]]
        self._arrow = pa.schema(fields, metadata={RECORD_KIND_KEY: RecordKind.NAMED_ROW})
        self._registry = RegistryConnection(where, schema_registry_url, registry_configs)
        self._writers: dict[int, Any] = {}

    @staticmethod
    def for_generic(
        schema: AvroSchema | str | Mapping,
        schema_registry_url: str,
        registry_configs: Mapping[str, Any] | None = None,
    ) -> ConfluentRegistryAvroDeserializationSchema:
        """Flink's ``forGeneric(schema, schemaRegistryUrl[, registryConfigs])``.

        Args:
            schema: the reader schema, a record: what the records are read as, whatever schema wrote them.
            schema_registry_url: the registry's base URL (for Apicurio: ``http://host:port/apis/ccompat/v7``).
            registry_configs: settings of ``confluent_kafka``'s ``SchemaRegistryClient`` (auth, TLS, timeouts).
        """
        return ConfluentRegistryAvroDeserializationSchema(
            schema, schema_registry_url, registry_configs=registry_configs
        )

    def __repr__(self) -> str:
        return (
            f"ConfluentRegistryAvroDeserializationSchema(schema={self._reader.parsed.get('name')!r}, "
            f"registry={self._registry.url!r})"
        )

    def produced_schema(self) -> pa.Schema:
        return self._arrow

    def deserialize(self, message: bytes) -> dict:
        """One record as a dict of the reader schema's fields (the stream hands it on as a ``Row``).

        Raises:
            MalformedRecordError: ``message`` is not in the wire format, names a schema id the registry does
                not know (or a schema that is not Avro), or cannot be read as a record of its writer schema or
                resolved to the reader schema.
            SchemaRegistryError: the registry is unreachable or answered with an error.
        """
        where = "ConfluentRegistryAvroDeserializationSchema"
        schema_id, body = unframe(where, message, plain_reader="AvroRowDeserializationSchema")
        writer = self._writer(schema_id)
        try:
            return _fastavro().schemaless_reader(io.BytesIO(body), writer, self._reader.parsed)
        except Exception as e:  # SchemaResolutionError, EOFError, UnicodeDecodeError...: not readable as such
            raise MalformedRecordError(
                f"{where}: cannot read {bytes(message)[:100]!r} as a record of schema id {schema_id} "
                f"({writer.get('name') if isinstance(writer, dict) else writer}) resolved to the reader schema "
                f"{self._reader.parsed.get('name')} with fields {self._arrow.names} ({type(e).__name__}: {e})"
            ) from e

    def _writer(self, schema_id: int) -> Any:
        writer = self._writers.get(schema_id)
        if writer is None:
            text = self._registry.writer_schema(schema_id, "AVRO")
            try:
                writer = _fastavro().parse_schema(json.loads(text))
            except Exception as e:  # the registry holds it, but fastavro cannot parse it (e.g. references)
                raise MalformedRecordError(
                    f"ConfluentRegistryAvroDeserializationSchema: schema id {schema_id} of the schema registry at "
                    f"{self._registry.url} cannot be parsed ({type(e).__name__}: {e}): {text[:200]}"
                ) from e
            self._writers[schema_id] = writer
        return writer
