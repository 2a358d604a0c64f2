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
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import pyarrow as pa

from flinklike_spark.common.serialization import DeserializationSchema, SerializationSchema
from flinklike_spark.common.types import RECORD_KIND_KEY, RecordKind
from flinklike_spark.datastream.formats.avro import (
    AvroSchema,
    _arrow_field,
    _encode_record,
    _fastavro,
    _record_schema,
)
from flinklike_spark.errors import ConfigurationError, MalformedRecordError, SchemaRegistryError

__all__ = ["ConfluentRegistryAvroDeserializationSchema", "ConfluentRegistryAvroSerializationSchema"]

MAGIC_BYTE = 0
"""The first byte of every message in Confluent's wire format."""

_HEADER_SIZE = 5  # the magic byte and the 4-byte schema id
_T = TypeVar("_T")


def _registry_module():
    try:
        import confluent_kafka.schema_registry as schema_registry
    except ImportError as e:  # pragma: no cover - the extra is installed with [test]
        raise ConfigurationError(
            "the schema-registry formats need confluent-kafka's schema registry client: "
            f'pip install "flinklike-spark[kafka]" (or pip install "confluent-kafka[schemaregistry]"): {e}'
        ) from e
    return schema_registry


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


class _Registry:
    """A registry's URL and client settings, and a client made on first use (clients do not pickle: every
    process that unpickles a schema makes its own)."""

    def __init__(self, where: str, url: str, configs: Mapping[str, Any] | None) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ConfigurationError(
                f"{where}: schema_registry_url must be the registry's http:// or https:// URL, got {url!r}"
            )
        configs = dict(configs or {})
        if "url" in configs:
            raise ConfigurationError(f"{where}: registry_configs must not set 'url'; pass schema_registry_url")
        self.where, self.url, self.configs = where, url.rstrip("/"), configs
        self._client = None
        self.client()  # checks the settings now, at the job's definition, not in the first task

    def client(self):
        if self._client is None:
            try:
                self._client = _registry_module().SchemaRegistryClient({"url": self.url, **self.configs})
            except (ValueError, TypeError) as e:
                raise ConfigurationError(
                    f"{self.where}: registry_configs {sorted(self.configs)} are not valid settings of "
                    f"confluent_kafka's SchemaRegistryClient ({e})"
                ) from e
        return self._client

    def call(self, request: str, function: Callable[[Any], _T], *, not_found_is_mine: bool = False) -> _T:
        """``function(client)``; a registry that is unreachable or answers with an error raises
        :class:`SchemaRegistryError` naming ``request``, but with ``not_found_is_mine`` a 404 (the client's
        ``SchemaRegistryError``) is the caller's to handle."""
        schema_registry = _registry_module()
        try:
            return function(self.client())
        except schema_registry.SchemaRegistryError as e:
            if e.http_status_code == 404 and not_found_is_mine:
                raise
            raise SchemaRegistryError(
                f"{self.where}: the schema registry at {self.url} refused {request}: HTTP {e.http_status_code}, "
                f"error code {e.error_code}: {e.error_message}"
            ) from e
        except Exception as e:  # httpx's transport errors (connection refused, timeouts, TLS): not reachable
            raise SchemaRegistryError(
                f"{self.where}: cannot reach the schema registry at {self.url} for {request} "
                f"({type(e).__name__}: {e}); is schema_registry_url right and the registry running?"
            ) from e

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_client": None}


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
        self._registry = _Registry(where, schema_registry_url, registry_configs)
        self._ids: dict[str, int] = {}

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
        schema_id = self._ids.get(subject)
        if schema_id is None:
            schema = _registry_module().Schema(str(self._schema), "AVRO")
            schema_id = self._registry.call(
                f"registering the schema {self._schema.parsed.get('name')} under subject {subject!r}",
                lambda client: client.register_schema(subject, schema),
            )
            self._ids[subject] = schema_id
        return schema_id

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
        return bytes([MAGIC_BYTE]) + self.schema_id(subject).to_bytes(4, "big") + body


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
        self._registry = _Registry(where, schema_registry_url, registry_configs)
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
        message = bytes(message)
        if len(message) < _HEADER_SIZE or message[0] != MAGIC_BYTE:
            raise MalformedRecordError(
                f"{where}: {message[:40]!r} is not in Confluent's wire format: it must start with the magic "
                f"byte 0x00 and a 4-byte schema id (a plain Avro record is read with AvroRowDeserializationSchema)"
            )
        schema_id = int.from_bytes(message[1:_HEADER_SIZE], "big")
        writer = self._writer(schema_id)
        try:
            return _fastavro().schemaless_reader(io.BytesIO(message[_HEADER_SIZE:]), writer, self._reader.parsed)
        except Exception as e:  # SchemaResolutionError, EOFError, UnicodeDecodeError...: not readable as such
            raise MalformedRecordError(
                f"{where}: cannot read {message[:100]!r} as a record of schema id {schema_id} "
                f"({writer.get('name') if isinstance(writer, dict) else writer}) resolved to the reader schema "
                f"{self._reader.parsed.get('name')} with fields {self._arrow.names} ({type(e).__name__}: {e})"
            ) from e

    def _writer(self, schema_id: int) -> Any:
        writer = self._writers.get(schema_id)
        if writer is not None:
            return writer
        where = "ConfluentRegistryAvroDeserializationSchema"
        try:
            schema = self._registry.call(
                f"schema id {schema_id}", lambda client: client.get_schema(schema_id), not_found_is_mine=True
            )
        except _registry_module().SchemaRegistryError as e:  # 404: the registry has no such id
            raise MalformedRecordError(
                f"{where}: the message names schema id {schema_id}, which the schema registry at "
                f"{self._registry.url} does not have ({e.error_message}); was it written against another "
                f"registry? The registry's subjects are at {self._registry.url}/subjects"
            ) from e
        if schema.schema_type not in (None, "AVRO"):
            raise MalformedRecordError(
                f"{where}: schema id {schema_id} of the schema registry at {self._registry.url} is a "
                f"{schema.schema_type} schema, not Avro"
            )
        try:
            writer = _fastavro().parse_schema(json.loads(schema.schema_str))
        except Exception as e:  # the registry holds it, but fastavro cannot parse it (e.g. references)
            raise MalformedRecordError(
                f"{where}: schema id {schema_id} of the schema registry at {self._registry.url} cannot be parsed "
                f"({type(e).__name__}: {e}): {schema.schema_str[:200]}"
            ) from e
        self._writers[schema_id] = writer
        return writer
