"""The JSON Schema registry formats (flinklike_spark.datastream.formats.json_confluent) where no registry is
needed: the JSON Schema and the settings checked when the schema is made, records that break the schema and
messages not in the wire format refused before the registry is asked, pickling. With a real registry:
tests/kafka/test_kafka_schema_registry.py."""

from __future__ import annotations

import pickle
import socket

import pytest

pytest.importorskip("jsonschema", reason="jsonschema is part of the kafka and test extras")
pytest.importorskip("confluent_kafka.schema_registry", reason="confluent-kafka[schemaregistry] is part of [test]")

from flinklike_spark.common import Row  # noqa: E402
from flinklike_spark.common.typeinfo import Types  # noqa: E402
from flinklike_spark.datastream.formats.json_confluent import (  # noqa: E402
    ConfluentRegistryJsonSchemaDeserializationSchema,
    ConfluentRegistryJsonSchemaSerializationSchema,
)
from flinklike_spark.errors import ConfigurationError, MalformedRecordError  # noqa: E402

pytestmark = pytest.mark.timeout(30)

SCHEMA = {
    "type": "object",
    "properties": {"id": {"type": "integer", "minimum": 1}, "item": {"type": "string"}},
    "required": ["id", "item"],
}
ROW = Types.ROW_NAMED(["id", "item"], [Types.LONG(), Types.STRING()])


@pytest.fixture
def nothing_listening() -> str:
    """The URL of a loopback port that nothing listens on (bound, never listened: connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{s.getsockname()[1]}/apis/ccompat/v7"


def test_the_json_schema_and_the_type_are_checked_when_the_schema_is_made(nothing_listening):
    make = ConfluentRegistryJsonSchemaSerializationSchema.for_generic
    with pytest.raises(ConfigurationError, match=r"not a valid JSON Schema: .* \(at \['type'\]\)"):
        make(None, {"type": "nope"}, nothing_listening, type_info=ROW)
    with pytest.raises(ConfigurationError, match="the JSON Schema is not JSON"):
        make(None, "{type: object", nothing_listening, type_info=ROW)
    with pytest.raises(ConfigurationError, match="json_schema must be the schema's JSON text or a dict, got int"):
        make(None, 3, nothing_listening, type_info=ROW)
    with pytest.raises(ConfigurationError, match=r"type_info must be Types.ROW"):
        make(None, SCHEMA, nothing_listening, type_info=Types.STRING())
    with pytest.raises(ConfigurationError, match=r"http:// or https:// URL"):
        ConfluentRegistryJsonSchemaDeserializationSchema.for_generic("registry:8081", type_info=ROW)


def test_a_record_that_breaks_the_schema_is_refused_naming_the_field(nothing_listening):
    serializer = ConfluentRegistryJsonSchemaSerializationSchema.for_generic(
        "orders-value", SCHEMA, nothing_listening, type_info=ROW
    )
    with pytest.raises(MalformedRecordError, match=r"Row\(id=0, item='tea'\) does not fit .* at id: 0 is less than"):
        serializer.serialize(Row(id=0, item="tea"))
    with pytest.raises(MalformedRecordError, match=r"at item: None is not of type 'string'"):
        serializer.serialize({"id": 1})


def test_a_message_not_in_the_wire_format_is_refused_without_asking_the_registry(nothing_listening):
    deserializer = ConfluentRegistryJsonSchemaDeserializationSchema.for_generic(nothing_listening, type_info=ROW)
    with pytest.raises(MalformedRecordError, match="not in Confluent's wire format.*JsonRowDeserializationSchema"):
        deserializer.deserialize(b'{"id": 1, "item": "tea"}')
    assert deserializer.produced_schema().names == ["id", "item"]


def test_the_schemas_pickle(nothing_listening):
    serializer = ConfluentRegistryJsonSchemaSerializationSchema.for_generic(
        None, SCHEMA, nothing_listening, type_info=ROW
    )
    with pytest.raises(MalformedRecordError):  # builds its validator
        serializer.serialize_for_topic({"id": 0, "item": "x"}, "orders")
    copy = pickle.loads(pickle.dumps(serializer))
    assert repr(copy) == repr(serializer)
    with pytest.raises(MalformedRecordError, match="at id: 0 is less than"):
        copy.serialize_for_topic({"id": 0, "item": "x"}, "orders")
    deserializer = ConfluentRegistryJsonSchemaDeserializationSchema.for_generic(nothing_listening, type_info=ROW)
    assert pickle.loads(pickle.dumps(deserializer)).produced_schema() == deserializer.produced_schema()
