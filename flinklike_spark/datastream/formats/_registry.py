"""Shared by the schema-registry formats (``avro_confluent``, ``json_confluent``): Confluent's wire format and
a connection to a registry of Confluent's REST API through ``confluent_kafka``'s ``SchemaRegistryClient``.

A message in the wire format is the magic byte ``0``, the writer schema's registry id (4 bytes, big-endian),
then the record in the schema's own encoding (Avro binary, JSON text).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from flinklike_spark.errors import ConfigurationError, MalformedRecordError, SchemaRegistryError

__all__ = ["MAGIC_BYTE", "RegistryConnection", "frame", "registry_module", "unframe"]

MAGIC_BYTE = 0
"""The first byte of every message in Confluent's wire format."""

_HEADER_SIZE = 5  # the magic byte and the 4-byte schema id
_T = TypeVar("_T")


def registry_module():
    try:
        import confluent_kafka.schema_registry as schema_registry
    except ImportError as e:  # pragma: no cover - the extra is installed with [test]
        raise ConfigurationError(
            "the schema-registry formats need confluent-kafka's schema registry client: "
            f'pip install "flinklike-spark[kafka]" (or pip install "confluent-kafka[schemaregistry]"): {e}'
        ) from e
    return schema_registry


def frame(schema_id: int, body: bytes) -> bytes:
    """``body`` in the wire format, written with schema ``schema_id``."""
    return bytes([MAGIC_BYTE]) + schema_id.to_bytes(4, "big") + body


def unframe(where: str, message: bytes, *, plain_reader: str) -> tuple[int, bytes]:
    """The schema id and the body of ``message``.

    Raises:
        MalformedRecordError: ``message`` is not in the wire format (``plain_reader`` names the schema that
            reads such messages without the framing).
    """
    message = bytes(message)
    if len(message) < _HEADER_SIZE or message[0] != MAGIC_BYTE:
        raise MalformedRecordError(
            f"{where}: {message[:40]!r} is not in Confluent's wire format: it must start with the magic "
            f"byte 0x00 and a 4-byte schema id (a message without them is read with {plain_reader})"
        )
    return int.from_bytes(message[1:_HEADER_SIZE], "big"), message[_HEADER_SIZE:]


class RegistryConnection:
    """A registry's URL and client settings, the ids this process registered, and a client made on first use
    (a client does not pickle: every process that unpickles a schema makes its own)."""

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
        self._ids: dict[str, int] = {}
        self.client()  # checks the settings now, at the job's definition, not in the first task

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_client": None}

    def client(self):
        if self._client is None:
            try:
                self._client = registry_module().SchemaRegistryClient({"url": self.url, **self.configs})
            except (ValueError, TypeError) as e:
                raise ConfigurationError(
                    f"{self.where}: registry_configs {sorted(self.configs)} are not valid settings of "
                    f"confluent_kafka's SchemaRegistryClient ({e})"
                ) from e
        return self._client

    def register(self, subject: str, schema_str: str, schema_type: str, name: str) -> int:
        """The id of the schema ``schema_str`` (of ``schema_type``: ``AVRO``, ``JSON``; ``name`` for messages)
        under ``subject``, registering it on the first call for ``subject``.

        Raises:
            SchemaRegistryError: the registry is unreachable or refused the schema (e.g. it breaks the
                subject's compatibility rule).
        """
        schema_id = self._ids.get(subject)
        if schema_id is None:
            schema = registry_module().Schema(schema_str, schema_type)
            schema_id = self._call(
                f"registering the schema {name} under subject {subject!r}",
                lambda client: client.register_schema(subject, schema),
            )
            self._ids[subject] = schema_id
        return schema_id

    def writer_schema(self, schema_id: int, schema_type: str) -> str:
        """The text of schema ``schema_id``, which must be of ``schema_type``.

        Raises:
            MalformedRecordError: the registry has no such id, or it is a schema of another type.
            SchemaRegistryError: the registry is unreachable or answered with another error.
        """
        try:
            schema = self._call(f"schema id {schema_id}", lambda client: client.get_schema(schema_id), not_found=True)
        except registry_module().SchemaRegistryError as e:  # 404: the registry has no such id
            raise MalformedRecordError(
                f"{self.where}: the message names schema id {schema_id}, which the schema registry at "
                f"{self.url} does not have ({e.error_message}); was it written against another registry? "
                f"The registry's subjects are at {self.url}/subjects"
            ) from e
        found = schema.schema_type or "AVRO"  # Confluent's API leaves the type out for Avro
        if found != schema_type:
            raise MalformedRecordError(
                f"{self.where}: schema id {schema_id} of the schema registry at {self.url} is a schema of type "
                f"{found}, not {schema_type}"
            )
        return schema.schema_str

    def _call(self, request: str, function: Callable[[Any], _T], *, not_found: bool = False) -> _T:
        """``function(client)``; a registry that is unreachable or answers with an error raises
        :class:`SchemaRegistryError` naming ``request``, except a 404 with ``not_found`` (the client's own
        ``SchemaRegistryError``, for the caller)."""
        schema_registry = registry_module()
        try:
            return function(self.client())
        except schema_registry.SchemaRegistryError as e:
            if e.http_status_code == 404 and not_found:
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
