"""JSON Schema with a schema registry, in Confluent's wire format: the rows of ``JsonRowSerializationSchema``
framed as Confluent's ``KafkaJsonSchemaSerializer`` writes them.

A message is the magic byte ``0``, the writer schema's registry id (4 bytes, big-endian), then one JSON object
(UTF-8). Flink has no DataStream schema for this format; the two here follow the Avro ones
(:mod:`~flinklike_spark.datastream.formats.avro_confluent`) and PyFlink's JSON row formats:

- :class:`ConfluentRegistryJsonSchemaSerializationSchema` turns a record (``Row``, tuple or dict) into the JSON
  object of its ``type_info``'s fields (as ``JsonRowSerializationSchema``), checks it against the JSON Schema
  (``jsonschema``: a record that breaks it is refused before anything is written), registers the schema as
  type ``JSON`` under the subject on first use (None: ``<topic>-value`` / ``<topic>-key``, Confluent's
  ``TopicNameStrategy``) and frames the object with its id.
- :class:`ConfluentRegistryJsonSchemaDeserializationSchema` reads such messages into ``Row`` s of
  ``type_info`` (as ``JsonRowDeserializationSchema``: a field missing from the object is null), after checking
  that the message's schema id is a JSON schema of the registry.

Errors are those of the Avro schemas: :class:`~flinklike_spark.errors.MalformedRecordError` for a record or
message that does not fit, :class:`~flinklike_spark.errors.SchemaRegistryError` for the registry.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from flinklike_spark.common.serialization import DeserializationSchema, SerializationSchema
from flinklike_spark.datastream.formats._registry import RegistryConnection, frame, unframe
from flinklike_spark.datastream.formats._rows import row_schema, row_values, to_json_value
from flinklike_spark.datastream.formats.json import JsonRowDeserializationSchema
from flinklike_spark.errors import ConfigurationError, MalformedRecordError

__all__ = ["ConfluentRegistryJsonSchemaDeserializationSchema", "ConfluentRegistryJsonSchemaSerializationSchema"]


def _jsonschema():
    try:
        import jsonschema
    except ImportError as e:  # pragma: no cover - installed with the kafka and test extras
        raise ConfigurationError(
            f'the JSON Schema registry format needs jsonschema: pip install "flinklike-spark[kafka]" ({e})'
        ) from e
    return jsonschema


class ConfluentRegistryJsonSchemaSerializationSchema(SerializationSchema):
    """Records -> JSON objects checked against a JSON Schema, in Confluent's wire format with the schema's
    registry id. Build one with :meth:`for_generic`; without a subject it registers under ``<topic>-value``
    or ``<topic>-key`` of each Kafka record."""

    def __init__(
        self,
        subject: str | None,
        json_schema: str | Mapping,
        schema_registry_url: str,
        *,
        type_info: Any,
        registry_configs: Mapping[str, Any] | None = None,
    ) -> None:
        where = "ConfluentRegistryJsonSchemaSerializationSchema"
        if subject is not None and (not isinstance(subject, str) or not subject):
            raise ConfigurationError(
                f"{where}: subject must be a non-empty str, or None for '<topic>-value' (TopicNameStrategy), "
                f"got {subject!r}"
            )
        self.subject = subject
        self._schema = _checked_json_schema(where, json_schema)
        self._schema_text = json.dumps(self._schema)
        self._names = row_schema(where, type_info).names
        self._registry = RegistryConnection(where, schema_registry_url, registry_configs)
        self._validator = None

    @staticmethod
    def for_generic(
        subject: str | None,
        json_schema: str | Mapping,
        schema_registry_url: str,
        *,
        type_info: Any,
        registry_configs: Mapping[str, Any] | None = None,
    ) -> ConfluentRegistryJsonSchemaSerializationSchema:
        """A serialization schema of ``type_info``'s rows, checked against and registered as ``json_schema``.

        Args:
            subject: the subject to register the schema under; None: ``<topic>-value`` / ``<topic>-key`` of the
                Kafka record (Confluent's ``TopicNameStrategy``).
            json_schema: the JSON Schema of the objects (its text or a dict; ``$schema`` picks the draft,
                the newest by default).
            schema_registry_url: the registry's base URL (for Apicurio: ``http://host:port/apis/ccompat/v7``).
            type_info: ``Types.ROW_NAMED([...], [...])``: the fields written, and how (as
                ``JsonRowSerializationSchema``).
            registry_configs: settings of ``confluent_kafka``'s ``SchemaRegistryClient`` (auth, TLS, timeouts).
        """
        return ConfluentRegistryJsonSchemaSerializationSchema(
            subject, json_schema, schema_registry_url, type_info=type_info, registry_configs=registry_configs
        )

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_validator": None}  # made again where it is used

    def __repr__(self) -> str:
        subject = self.subject or "<topic>-value"
        return f"ConfluentRegistryJsonSchemaSerializationSchema(subject={subject!r}, registry={self._registry.url!r})"

    def schema_id(self, subject: str) -> int:
        """The registry's id of the JSON Schema under ``subject``, registering it on first use.

        Raises:
            SchemaRegistryError: the registry is unreachable or refused the schema.
        """
        name = self._schema.get("title", "(untitled)") if isinstance(self._schema, dict) else "(boolean)"
        return self._registry.register(subject, self._schema_text, "JSON", name)

    def serialize(self, element: Any) -> bytes:
        if self.subject is None:
            raise ConfigurationError(
                "ConfluentRegistryJsonSchemaSerializationSchema: no subject to register the schema under: give "
                "one, or use the schema in a KafkaRecordSerializationSchema, where the subject is "
                "'<topic>-value' or '<topic>-key'"
            )
        return self._frame(self.subject, element)

    def serialize_for_topic(self, element: Any, topic: str, *, is_key: bool = False) -> bytes:
        """What a ``KafkaRecordSerializationSchema`` calls: the subject is this schema's, or
        ``<topic>-key`` / ``<topic>-value``."""
        return self._frame(self.subject or f"{topic}-{'key' if is_key else 'value'}", element)

    def _frame(self, subject: str, element: Any) -> bytes:
        where = "ConfluentRegistryJsonSchemaSerializationSchema"
        values = row_values(where, element, self._names)
        document = {name: to_json_value(value) for name, value in zip(self._names, values, strict=True)}
        if self._validator is None:
            self._validator = _jsonschema().validators.validator_for(self._schema)(self._schema)
        error = _jsonschema().exceptions.best_match(self._validator.iter_errors(document))
        if error is not None:
            where_in = "/".join(str(p) for p in error.absolute_path) or "(the object)"
            raise MalformedRecordError(
                f"{where}: the record {element!r:.200} does not fit the JSON Schema: at {where_in}: {error.message}"
            )
        body = json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()
        return frame(self.schema_id(subject), body)


class ConfluentRegistryJsonSchemaDeserializationSchema(DeserializationSchema):
    """Confluent's wire format with a JSON Schema id -> ``Row`` s of ``type_info``. Build one with
    :meth:`for_generic`."""

    def __init__(
        self, schema_registry_url: str, *, type_info: Any, registry_configs: Mapping[str, Any] | None = None
    ) -> None:
        where = "ConfluentRegistryJsonSchemaDeserializationSchema"
        self._rows = JsonRowDeserializationSchema(type_info=type_info)
        self._registry = RegistryConnection(where, schema_registry_url, registry_configs)
        self._known_ids: set[int] = set()

    @staticmethod
    def for_generic(
        schema_registry_url: str, *, type_info: Any, registry_configs: Mapping[str, Any] | None = None
    ) -> ConfluentRegistryJsonSchemaDeserializationSchema:
        """A deserialization schema of ``type_info``'s rows (``Types.ROW_NAMED([...], [...])``) from messages
        written with any JSON Schema of the registry at ``schema_registry_url``."""
        return ConfluentRegistryJsonSchemaDeserializationSchema(
            schema_registry_url, type_info=type_info, registry_configs=registry_configs
        )

    def __repr__(self) -> str:
        return (
            f"ConfluentRegistryJsonSchemaDeserializationSchema(fields={self._rows.produced_schema().names}, "
            f"registry={self._registry.url!r})"
        )

    def produced_schema(self) -> pa.Schema:
        return self._rows.produced_schema()

    def deserialize(self, message: bytes) -> dict | None:
        """One record as a dict of the type's fields (the stream hands it on as a ``Row``).

        Raises:
            MalformedRecordError: ``message`` is not in the wire format, names a schema id the registry does
                not have (or one that is not a JSON Schema), or its object does not read as a row of the type.
            SchemaRegistryError: the registry is unreachable or answered with an error.
        """
        where = "ConfluentRegistryJsonSchemaDeserializationSchema"
        schema_id, body = unframe(where, message, plain_reader="JsonRowDeserializationSchema")
        if schema_id not in self._known_ids:
            self._registry.writer_schema(schema_id, "JSON")
            self._known_ids.add(schema_id)
        try:
            return self._rows.deserialize(body)
        except MalformedRecordError as e:  # its cause says why: not an object, a field of the wrong type...
            raise MalformedRecordError(
                f"{where}: cannot read {body[:200]!r} (schema id {schema_id}) as a row of "
                f"{self.produced_schema().names}: {e.__cause__}"
            ) from e


def _checked_json_schema(where: str, json_schema: str | Mapping) -> Any:
    if isinstance(json_schema, str):
        try:
            json_schema = json.loads(json_schema)
        except ValueError as e:
            raise ConfigurationError(
                f"{where}: the JSON Schema is not JSON ({e}): {json_schema.strip()[:200]!r}"
            ) from e
    elif isinstance(json_schema, Mapping):
        json_schema = dict(json_schema)
    else:
        raise ConfigurationError(
            f"{where}: json_schema must be the schema's JSON text or a dict, got {type(json_schema).__name__}"
        )
    jsonschema = _jsonschema()
    try:
        jsonschema.validators.validator_for(json_schema).check_schema(json_schema)
    except jsonschema.exceptions.SchemaError as e:
        raise ConfigurationError(f"{where}: not a valid JSON Schema: {e.message} (at {list(e.path)})") from e
    return json_schema
