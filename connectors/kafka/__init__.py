"""The Kafka connector (on librdkafka, ``pip install flinklike-spark[kafka]``): PyFlink's ``KafkaSource``
and exactly-once ``KafkaSink``, which PyFlink programs import from their path
``flinklike_spark.datastream.connectors.kafka`` (a face of this package). The broker for tests and
examples is :mod:`connectors.kafka.testing` (see docs/kafka.md)."""

from connectors.kafka.legacy import FlinkKafkaConsumer
from connectors.kafka.offsets import (
    KafkaOffsetResetStrategy,
    KafkaOffsetsInitializer,
    KafkaTopicPartition,
)
from connectors.kafka.serialization import (
    FlinkFixedPartitioner,
    KafkaPartitioner,
    KafkaRecordSerializationSchema,
    KafkaRecordSerializationSchemaBuilder,
    KafkaTopicSelector,
)
from connectors.kafka.sink import KafkaSink, KafkaSinkBuilder
from connectors.kafka.source import (
    KafkaPartitionSplit,
    KafkaRecordDeserializationSchema,
    KafkaSource,
    KafkaSourceBuilder,
)
from flinklike_spark.datastream.connectors.base import DeliveryGuarantee

__all__ = [
    "DeliveryGuarantee",
    "FlinkFixedPartitioner",
    "FlinkKafkaConsumer",
    "KafkaOffsetResetStrategy",
    "KafkaOffsetsInitializer",
    "KafkaPartitionSplit",
    "KafkaPartitioner",
    "KafkaRecordDeserializationSchema",
    "KafkaRecordSerializationSchema",
    "KafkaRecordSerializationSchemaBuilder",
    "KafkaSink",
    "KafkaSinkBuilder",
    "KafkaSource",
    "KafkaSourceBuilder",
    "KafkaTopicPartition",
    "KafkaTopicSelector",
]
