"""KafkaRecordSerializationSchema: a whole batch serializes to the Kafka records that one record at a time gives."""

from __future__ import annotations

from types import SimpleNamespace

import pyarrow as pa
import pytest

from connectors.kafka.serialization import FlinkFixedPartitioner, KafkaPartitioner, KafkaRecordSerializationSchema
from flinklike_spark.common.serialization import SimpleStringSchema
from flinklike_spark.common.typeinfo import Types
from flinklike_spark.common.types import records_of
from flinklike_spark.datastream.formats.json import JsonRowSerializationSchema
from flinklike_spark.errors import FunctionResultError

CONTEXT = SimpleNamespace(subtask_index=3, parallelism=4)
PARTITIONS = [0, 1, 2]


def partitions_of(topic: str) -> list[int]:
    return PARTITIONS


class FirstChar:
    """A user's key schema: ``serialize`` only."""

    def serialize(self, value: str) -> bytes:
        return value[:1].encode()


class TopicNamed:
    """A schema-registry-like schema: its bytes depend on the topic."""

    def serialize(self, value):  # pragma: no cover - serialize_for_topic is preferred
        raise AssertionError("serialize_for_topic must be called")

    def serialize_for_topic(self, value, topic: str, *, is_key: bool) -> bytes:
        return f"{topic}/{'key' if is_key else 'value'}/{value}".encode()


class Modulo(KafkaPartitioner):
    def partition(self, record, key, value, target_topic, partitions):
        return partitions[len(value) % len(partitions)]


def per_record(schema: KafkaRecordSerializationSchema, batch: pa.RecordBatch) -> list[tuple]:
    return [schema.serialize_record(record, partitions_of, CONTEXT) for record in records_of(batch)]


def as_records(serialized) -> list[tuple]:
    keys = serialized.keys or [None] * len(serialized.values)
    return [(serialized.topic, k, v, serialized.partition) for k, v in zip(keys, serialized.values, strict=True)]


STRINGS = SimpleStringSchema().deserialize_batch([b"apple", b"banana", "\u00e9clair".encode()])


@pytest.mark.parametrize(
    "build",
    [
        lambda b: b.set_value_serialization_schema(SimpleStringSchema()),
        lambda b: b.set_value_serialization_schema(SimpleStringSchema()).set_key_serialization_schema(FirstChar()),
        lambda b: b.set_value_serialization_schema(SimpleStringSchema()).set_partitioner(FlinkFixedPartitioner()),
        lambda b: b.set_value_serialization_schema(TopicNamed()).set_key_serialization_schema(TopicNamed()),
    ],
    ids=["vectorized value", "user key schema", "fixed partitioner", "topic-aware schemas"],
)
def test_a_batch_serializes_to_the_records_one_by_one_gives(build):
    schema = build(KafkaRecordSerializationSchema.builder().set_topic("out")).build()
    serialized = schema.serialize_batch(STRINGS, partitions_of, CONTEXT)
    assert serialized is not None
    assert as_records(serialized) == per_record(schema, STRINGS)


def test_json_rows_serialize_as_a_batch_through_their_per_record_schema():
    row = Types.ROW_NAMED(["k", "n"], [Types.STRING(), Types.INT()])
    schema = (
        KafkaRecordSerializationSchema.builder()
        .set_topic("out")
        .set_value_serialization_schema(JsonRowSerializationSchema.builder().with_type_info(row).build())
        .build()
    )
    batch = pa.RecordBatch.from_pylist([{"k": "a", "n": 1}, {"k": "b", "n": None}])
    assert as_records(schema.serialize_batch(batch, partitions_of, CONTEXT)) == per_record(schema, batch)


@pytest.mark.parametrize(
    "build",
    [
        lambda b: b.set_topic_selector(lambda value: f"topic-{value[0]}"),
        lambda b: b.set_topic("out").set_partitioner(Modulo()),
    ],
    ids=["topic selector", "user partitioner"],
)
def test_a_per_record_choice_is_served_record_by_record(build):
    schema = build(KafkaRecordSerializationSchema.builder()).set_value_serialization_schema(SimpleStringSchema())
    assert schema.build().serialize_batch(STRINGS, partitions_of, CONTEXT) is None


def test_a_serialize_batch_that_returns_the_wrong_count_is_named():
    class Short(SimpleStringSchema):
        def serialize_batch(self, batch):
            return [b"only one"]

    schema = KafkaRecordSerializationSchema.builder().set_topic("out").set_value_serialization_schema(Short()).build()
    with pytest.raises(FunctionResultError, match="returned 1 values for 3 records"):
        schema.serialize_batch(STRINGS, partitions_of, CONTEXT)
