"""The schema-registry Avro formats (flinklike_spark.datastream.formats.avro_confluent) where no registry is
needed: settings checked when the schema is made, messages refused before the registry is asked, a registry
that is not there, pickling, and the KafkaSink's topic hook. With a real registry: tests/kafka/
test_kafka_schema_registry.py."""

from __future__ import annotations

import pickle
import socket

import pytest

pytest.importorskip("fastavro", reason="the avro extra (fastavro) is part of [test]")
pytest.importorskip("confluent_kafka.schema_registry", reason="confluent-kafka[schemaregistry] is part of [test]")

from connectors.kafka.serialization import KafkaRecordSerializationSchema  # noqa: E402
from flinklike_spark.common import Row  # noqa: E402
from flinklike_spark.datastream.formats.avro import AvroSchema  # noqa: E402
from flinklike_spark.datastream.formats.avro_confluent import (  # noqa: E402
    ConfluentRegistryAvroDeserializationSchema,
    ConfluentRegistryAvroSerializationSchema,
)
from flinklike_spark.errors import ConfigurationError, MalformedRecordError, SchemaRegistryError  # noqa: E402

pytestmark = pytest.mark.timeout(30)

SCHEMA = {
    "type": "record",
    "name": "Order",
    "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}],
}


@pytest.fixture
def nothing_listening() -> str:
    """The URL of a loopback port that nothing listens on (bound, never listened: connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{s.getsockname()[1]}/apis/ccompat/v7"


def test_settings_are_checked_when_the_schema_is_made():
    url = "http://127.0.0.1:1"
    with pytest.raises(ConfigurationError, match=r"registry_configs \['bogus.setting'\] are not valid settings"):
        ConfluentRegistryAvroDeserializationSchema.for_generic(SCHEMA, url, {"bogus.setting": "1"})
    with pytest.raises(ConfigurationError, match="must not set 'url'"):
        ConfluentRegistryAvroSerializationSchema.for_generic("s", SCHEMA, url, {"url": url})
    with pytest.raises(ConfigurationError, match=r"http:// or https:// URL, got 'localhost:8081'"):
        ConfluentRegistryAvroSerializationSchema.for_generic("s", SCHEMA, "localhost:8081")
    with pytest.raises(ConfigurationError, match=r"subject must be a non-empty str, or None .* got ''"):
        ConfluentRegistryAvroSerializationSchema.for_generic("", SCHEMA, url)
    with pytest.raises(ConfigurationError, match="must be a record"):
        ConfluentRegistryAvroDeserializationSchema.for_generic('"string"', url)
    with pytest.raises(ConfigurationError, match="schema must be an AvroSchema, the schema's JSON text or a dict"):
        ConfluentRegistryAvroDeserializationSchema.for_generic(42, url)
    # an AvroSchema, its JSON text and a dict are the same schema
    for schema in (AvroSchema(SCHEMA), str(AvroSchema(SCHEMA)), SCHEMA):
        produced = ConfluentRegistryAvroDeserializationSchema.for_generic(schema, url).produced_schema()
        assert produced.names == ["id", "item"]


def test_a_message_not_in_the_wire_format_is_refused_without_asking_the_registry(nothing_listening):
    deserializer = ConfluentRegistryAvroDeserializationSchema.for_generic(SCHEMA, nothing_listening)
    for message in (b'{"id": 1}', b"\x00\x00\x01", b""):
        with pytest.raises(MalformedRecordError, match="is not in Confluent's wire format: it must start with"):
            deserializer.deserialize(message)


def test_a_record_that_does_not_fit_is_refused_naming_it_and_the_fields(nothing_listening):
    serializer = ConfluentRegistryAvroSerializationSchema.for_generic("orders-value", SCHEMA, nothing_listening)
    with pytest.raises(MalformedRecordError) as refused:
        serializer.serialize(Row(id="seven", item="tea"))
    assert "Row(id='seven', item='tea')" in str(refused.value) and "['id', 'item']" in str(refused.value)


def test_an_unreachable_registry_is_named_with_the_request(nothing_listening):
    fast = {"max.retries": 0}
    serializer = ConfluentRegistryAvroSerializationSchema.for_generic(None, SCHEMA, nothing_listening, fast)
    with pytest.raises(SchemaRegistryError) as unreachable:
        serializer.serialize_for_topic({"id": 1, "item": "tea"}, "orders")
    message = str(unreachable.value)
    assert f"cannot reach the schema registry at {nothing_listening}" in message
    assert "registering the schema Order under subject 'orders-value'" in message
    deserializer = ConfluentRegistryAvroDeserializationSchema.for_generic(SCHEMA, nothing_listening, fast)
    with pytest.raises(SchemaRegistryError, match=r"cannot reach the schema registry at .* for schema id 7"):
        deserializer.deserialize(b"\x00\x00\x00\x00\x07\x02\x06tea")
    assert isinstance(pickle.loads(pickle.dumps(unreachable.value)), SchemaRegistryError)


def test_without_a_subject_only_a_kafka_record_names_one(nothing_listening):
    serializer = ConfluentRegistryAvroSerializationSchema.for_generic(None, SCHEMA, nothing_listening)
    with pytest.raises(ConfigurationError, match="no subject to register the schema under"):
        serializer.serialize({"id": 1, "item": "tea"})


def test_the_schemas_pickle_without_their_client(nothing_listening):
    serializer = ConfluentRegistryAvroSerializationSchema.for_generic(None, SCHEMA, nothing_listening)
    deserializer = ConfluentRegistryAvroDeserializationSchema.for_generic(SCHEMA, nothing_listening)
    for schema in (serializer, deserializer):
        copy = pickle.loads(pickle.dumps(schema))
        assert repr(copy) == repr(schema)
    assert pickle.loads(pickle.dumps(deserializer)).produced_schema() == deserializer.produced_schema()


class _TopicEcho:
    """A user's schema with the topic hook: what it is called with is what it returns."""

    def serialize(self, element) -> bytes:
        raise AssertionError("serialize_for_topic is called instead")

    def serialize_for_topic(self, element, topic, *, is_key=False) -> bytes:
        return f"{topic}/{'key' if is_key else 'value'}/{element}".encode()


def test_a_kafka_record_serializer_gives_its_topic_to_schemas_that_take_it():
    schema = (
        KafkaRecordSerializationSchema.builder()
        .set_topic_selector(lambda record: f"t{record % 2}")
        .set_key_serialization_schema(_TopicEcho())
        .set_value_serialization_schema(_TopicEcho())
        .build()
    )
    assert schema.serialize_record(3, lambda topic: [0], None) == ("t1", b"t1/key/3", b"t1/value/3", None)
