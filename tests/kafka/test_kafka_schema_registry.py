"""Avro in Confluent's wire format through a real schema registry (Apicurio Registry's Confluent API) and a real
broker: ``ConfluentRegistryAvroSerializationSchema`` in an exactly-once KafkaSink, and
``ConfluentRegistryAvroDeserializationSchema`` in a KafkaSource, in jobs.

Every test reads the registry back through its REST API (``GET <url>/subjects/...``), not through the
formats under test.
"""

from __future__ import annotations

import json
import math
import urllib.request

import pytest

pytest.importorskip("confluent_kafka")
pytest.importorskip("fastavro")

from confluent_kafka import Producer  # noqa: E402

from flinklike_spark import StreamExecutionEnvironment  # noqa: E402
from flinklike_spark.common.typeinfo import Types  # noqa: E402
from flinklike_spark.common.watermark_strategy import WatermarkStrategy  # noqa: E402
from flinklike_spark.datastream.connectors.kafka import (  # noqa: E402
    DeliveryGuarantee,
    KafkaOffsetsInitializer,
    KafkaRecordSerializationSchema,
    KafkaSink,
    KafkaSource,
)
from flinklike_spark.datastream.formats.avro_confluent import (  # noqa: E402
    ConfluentRegistryAvroDeserializationSchema,
    ConfluentRegistryAvroSerializationSchema,
)
from flinklike_spark.datastream.formats.json_confluent import (  # noqa: E402
    ConfluentRegistryJsonSchemaDeserializationSchema,
    ConfluentRegistryJsonSchemaSerializationSchema,
)
from flinklike_spark.errors import JobExecutionError, MalformedRecordError, SchemaRegistryError  # noqa: E402
from tests.kafka.kafka_jobs import read_committed  # noqa: E402
from tests.support.checkpoint_jobs import checkpoint_config  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

PAYMENT = {
    "type": "record",
    "name": "Payment",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "user", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
# PAYMENT evolved: a field added with a default (BACKWARD compatible: it reads PAYMENT's records).
PAYMENT_V2 = {**PAYMENT, "fields": [*PAYMENT["fields"], {"name": "currency", "type": "string", "default": "EUR"}]}
NUM_ROWS = 3_000


def payments(count: int, first_id: int = 0) -> list[dict]:
    return [
        {"id": i, "user": f"u{i % 17}", "amount": i * 0.25, "note": None if i % 3 else f"note {i}"}
        for i in range(first_id, first_id + count)
    ]


def registry_get(url: str) -> object:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.loads(answer.read())


def registry_put(url: str, body: dict) -> object:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="PUT",
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())


def registry_sink(servers: str, topic: str, registry_url: str, schema: dict, *, value_schema=None) -> KafkaSink:
    value_schema = value_schema or ConfluentRegistryAvroSerializationSchema.for_generic(None, schema, registry_url)
    return (
        KafkaSink.builder()
        .set_bootstrap_servers(servers)
        .set_record_serializer(
            KafkaRecordSerializationSchema.builder()
            .set_topic(topic)
            .set_value_serialization_schema(value_schema)
            .build()
        )
        .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE)
        .build()
    )


def read_back(servers: str, topic: str, registry_url: str, reader_schema: dict, *, deserializer=None) -> list[dict]:
    """Every record of ``topic`` (a bounded job, read_committed), as rows of ``reader_schema``, by ``id``."""
    deserializer = deserializer or ConfluentRegistryAvroDeserializationSchema.for_generic(
        json.dumps(reader_schema), registry_url
    )
    source = (
        KafkaSource.builder()
        .set_bootstrap_servers(servers)
        .set_topics(topic)
        .set_starting_offsets(KafkaOffsetsInitializer.earliest())
        .set_bounded(KafkaOffsetsInitializer.latest())
        .set_property("isolation.level", "read_committed")
        .set_value_only_deserializer(deserializer)
        .build()
    )
    env = StreamExecutionEnvironment.get_execution_environment({"parallelism.default": 2})
    stream = env.from_source(source, WatermarkStrategy.no_watermarks(), "payments")
    rows = [row.as_dict() for row in stream.execute_and_collect("read")]
    return sorted(rows, key=lambda row: row["id"])


def produce(servers: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": servers, "enable.idempotence": True})
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(30) == 0


def test_a_job_writes_registry_framed_avro_exactly_once_and_another_reads_every_row(
    kafka_broker, kafka_topic, schema_registry, tmp_path
):
    servers, url = kafka_broker.bootstrap_servers, schema_registry.url
    topic = kafka_topic(partitions=3)
    expected = payments(NUM_ROWS)
    env = StreamExecutionEnvironment.get_execution_environment(checkpoint_config(str(tmp_path / "cp"), "aligned"))
    env.from_collection(expected, batch_size=100).rebalance().sink_to(registry_sink(servers, topic, url, PAYMENT)).uid(
        "kafka"
    )
    env.execute("write payments")

    # registered under TopicNameStrategy's subject, as the schema given
    assert registry_get(f"{url}/subjects") == [f"{topic}-value"]
    latest = registry_get(f"{url}/subjects/{topic}-value/versions/latest")
    assert latest["version"] == 1 and json.loads(latest["schema"]) == PAYMENT
    # every committed message: magic byte 0, that schema's id, the Avro record
    messages = [value for _key, value, _partition in read_committed(servers, topic, timeout=60)]
    assert len(messages) == NUM_ROWS
    assert {message[:5] for message in messages} == {b"\x00" + latest["id"].to_bytes(4, "big")}

    rows = read_back(servers, topic, url, PAYMENT)
    assert len(rows) == NUM_ROWS
    for row, want in zip(rows, expected, strict=True):
        assert row == want, f"read {row}, wrote {want}"


def test_an_evolved_reader_schema_reads_records_of_both_versions(kafka_broker, kafka_topic, schema_registry):
    servers, url = kafka_broker.bootstrap_servers, schema_registry.url
    topic = kafka_topic()
    v1 = ConfluentRegistryAvroSerializationSchema.for_generic(None, PAYMENT, url)
    produce(servers, topic, [v1.serialize_for_topic(row, topic) for row in payments(100)])
    # the subject only accepts schemas that read its earlier versions: V2 (a field with a default) is one
    assert registry_put(f"{url}/config/{topic}-value", {"compatibility": "BACKWARD"}) == {"compatibility": "BACKWARD"}
    v2 = ConfluentRegistryAvroSerializationSchema.for_generic(None, PAYMENT_V2, url)
    newer = [{**row, "currency": "NOK"} for row in payments(100, first_id=100)]
    produce(servers, topic, [v2.serialize_for_topic(row, topic) for row in newer])
    versions = registry_get(f"{url}/subjects/{topic}-value/versions")
    assert versions == [1, 2]

    rows = read_back(servers, topic, url, PAYMENT_V2)
    assert rows == [{**row, "currency": "EUR"} for row in payments(100)] + newer
    # and the old reader schema reads the new records, leaving the added field out
    assert read_back(servers, topic, url, PAYMENT) == payments(200)

    # a schema that breaks the rule is refused by the registry, named with the subject
    incompatible = {**PAYMENT, "fields": [{"name": "id", "type": "string"}, *PAYMENT["fields"][1:]]}
    v3 = ConfluentRegistryAvroSerializationSchema.for_generic(None, incompatible, url)
    with pytest.raises(SchemaRegistryError) as refused:
        v3.serialize_for_topic({**payments(1)[0], "id": "one"}, topic)
    message = str(refused.value)
    assert f"subject '{topic}-value'" in message and "409" in message and url in message


def test_a_message_with_an_unknown_schema_id_fails_the_job_naming_the_id(kafka_broker, kafka_topic, schema_registry):
    servers, url = kafka_broker.bootstrap_servers, schema_registry.url
    topic = kafka_topic()
    good = ConfluentRegistryAvroSerializationSchema.for_generic(None, PAYMENT, url).serialize_for_topic(
        payments(1)[0], topic
    )
    unknown_id = 987_654
    produce(servers, topic, [good, b"\x00" + unknown_id.to_bytes(4, "big") + good[5:]])
    with pytest.raises(JobExecutionError) as failed:
        read_back(servers, topic, url, PAYMENT)
    message = str(failed.value) + "".join(str(cause) for cause in _causes(failed.value))
    assert f"schema id {unknown_id}" in message and url in message, message
    assert f"{topic}-0, offsets" in message, message  # which record: its partition and offsets


def _causes(error: BaseException):
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def test_doubles_survive_the_round_trip_exactly(kafka_broker, kafka_topic, schema_registry):
    # Avro's double is IEEE 754 binary64: what is written is what is read, NaN and infinities included
    servers, url = kafka_broker.bootstrap_servers, schema_registry.url
    topic = kafka_topic()
    amounts = [0.1, -0.0, 1e308, 5e-324, math.inf, -math.inf, math.nan]
    serializer = ConfluentRegistryAvroSerializationSchema.for_generic(f"{topic}-value", PAYMENT, url)
    produce(servers, topic, [serializer.serialize({"id": i, "user": "u", "amount": a}) for i, a in enumerate(amounts)])
    rows = read_back(servers, topic, url, PAYMENT)
    assert [row["amount"].hex() for row in rows] == [a.hex() for a in amounts]


PAYMENT_JSON_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Payment",
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "user": {"type": "string"},
        "amount": {"type": "number", "minimum": 0},
        "note": {"type": ["string", "null"]},
    },
    "required": ["id", "user", "amount"],
}
PAYMENT_ROW = Types.ROW_NAMED(
    ["id", "user", "amount", "note"], [Types.LONG(), Types.STRING(), Types.DOUBLE(), Types.STRING()]
)


def test_json_schema_rows_written_exactly_once_are_read_back_and_checked_against_the_schema(
    kafka_broker, kafka_topic, schema_registry, tmp_path
):
    servers, url = kafka_broker.bootstrap_servers, schema_registry.url
    topic = kafka_topic(partitions=2)
    expected = payments(1_000)
    serializer = ConfluentRegistryJsonSchemaSerializationSchema.for_generic(
        None, PAYMENT_JSON_SCHEMA, url, type_info=PAYMENT_ROW
    )
    env = StreamExecutionEnvironment.get_execution_environment(checkpoint_config(str(tmp_path / "cp"), "aligned"))
    env.from_collection(expected, batch_size=100).rebalance().sink_to(
        registry_sink(servers, topic, url, {}, value_schema=serializer)
    ).uid("kafka")
    env.execute("write json payments")

    latest = registry_get(f"{url}/subjects/{topic}-value/versions/latest")
    assert latest["schemaType"] == "JSON" and json.loads(latest["schema"]) == PAYMENT_JSON_SCHEMA
    messages = [value for _key, value, _partition in read_committed(servers, topic, timeout=60)]
    assert {message[:5] for message in messages} == {b"\x00" + latest["id"].to_bytes(4, "big")}
    assert json.loads(messages[0][5:]).keys() == {"id", "user", "amount", "note"}  # the JSON object itself

    deserializer = ConfluentRegistryJsonSchemaDeserializationSchema.for_generic(url, type_info=PAYMENT_ROW)
    assert read_back(servers, topic, url, {}, deserializer=deserializer) == expected

    # a record that breaks the schema is refused before anything is written; an Avro message is not read as JSON
    with pytest.raises(MalformedRecordError, match=r"does not fit the JSON Schema: at amount: -1.0 is less than"):
        serializer.serialize_for_topic({"id": 1, "user": "u", "amount": -1.0, "note": None}, topic)
    avro = ConfluentRegistryAvroSerializationSchema.for_generic(f"{topic}-avro", PAYMENT, url)
    with pytest.raises(MalformedRecordError, match=r"is a schema of type AVRO, not JSON"):
        deserializer.deserialize(avro.serialize(payments(1)[0]))
