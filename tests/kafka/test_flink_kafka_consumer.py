"""PyFlink's deprecated FlinkKafkaConsumer + env.add_source, as PyFlink's Kafka example programs use them."""

from __future__ import annotations

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from flinklike_spark.common import Types  # noqa: E402
from flinklike_spark.datastream import StreamExecutionEnvironment  # noqa: E402
from flinklike_spark.datastream.connectors.kafka import FlinkKafkaConsumer  # noqa: E402
from flinklike_spark.datastream.formats.csv import CsvRowDeserializationSchema, CsvRowSerializationSchema  # noqa: E402
from flinklike_spark.datastream.formats.json import (  # noqa: E402
    JsonRowDeserializationSchema,
    JsonRowSerializationSchema,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

ROWS = [(1, "hi"), (2, "hello"), (3, "hi"), (4, "hello"), (5, "hi"), (6, "hello"), (6, "hello")]


def _write(bootstrap: str, topic: str, serialization_schema) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    for row in ROWS:
        producer.produce(topic, serialization_schema.serialize(row))
    assert producer.flush(30) == 0


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_read_from_kafka_as_pyflinks_example_programs_do(kafka_broker, kafka_topic, fmt):
    topic = kafka_topic(partitions=1)
    type_info = Types.ROW([Types.INT(), Types.STRING()])
    if fmt == "json":
        _write(kafka_broker.bootstrap_servers, topic,
               JsonRowSerializationSchema.Builder().with_type_info(type_info).build())  # fmt: skip
        deserialization_schema = JsonRowDeserializationSchema.Builder().type_info(type_info).build()
    else:
        _write(kafka_broker.bootstrap_servers, topic, CsvRowSerializationSchema.Builder(type_info).build())
        deserialization_schema = CsvRowDeserializationSchema.Builder(type_info).build()
    # PyFlink's examples/datastream/connectors/kafka_{json,csv}_format.py, read_from_kafka():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.add_jars("file:///path/to/flink-sql-connector-kafka-1.15.0.jar")
    kafka_consumer = FlinkKafkaConsumer(
        topics=topic,
        deserialization_schema=deserialization_schema,
        properties={"bootstrap.servers": kafka_broker.bootstrap_servers, "group.id": "test_group_1"},
    )
    kafka_consumer.set_start_from_earliest()
    rows = env.add_source(kafka_consumer).execute_and_collect("read_from_kafka", limit=len(ROWS))  # .print() there
    assert [tuple(row) for row in rows] == ROWS


def test_without_a_start_setting_it_starts_at_the_groups_committed_offsets_else_latest(kafka_broker, kafka_topic):
    from connectors.kafka.offsets import OffsetsInitializerKind

    consumer = FlinkKafkaConsumer("t", JsonRowDeserializationSchema.builder().type_info(
        Types.ROW([Types.INT()])).build(), {"bootstrap.servers": kafka_broker.bootstrap_servers, "group.id": "g"})  # fmt: skip
    assert consumer.options.starting_offsets.kind is OffsetsInitializerKind.COMMITTED
    assert consumer.options.commit_offsets_on_checkpoint
    assert consumer.set_commit_offsets_on_checkpoints(False).options.commit_offsets_on_checkpoint is False
    with pytest.raises(TypeError, match="add_source expects"):
        StreamExecutionEnvironment.get_execution_environment().add_source(lambda ctx: None)
