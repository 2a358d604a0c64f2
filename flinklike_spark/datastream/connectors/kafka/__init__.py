"""PyFlink's ``pyflink.datastream.connectors.kafka`` (on librdkafka, ``pip install flinklike-spark[kafka]``),
and :class:`LocalKafkaBroker`, a real single-node broker for tests and examples (see docs/kafka.md)."""

from flinklike_spark.datastream.connectors.base import DeliveryGuarantee
from flinklike_spark.datastream.connectors.kafka.legacy import FlinkKafkaConsumer
from flinklike_spark.datastream.connectors.kafka.local_broker import LocalKafkaBroker, LocalKafkaBrokerConfig
from flinklike_spark.datastream.connectors.kafka.offsets import (
    KafkaOffsetResetStrategy,
    KafkaOffsetsInitializer,
    KafkaTopicPartition,
)
from flinklike_spark.datastream.connectors.kafka.serialization import (
    FlinkFixedPartitioner,
    KafkaPartitioner,
    KafkaRecordSerializationSchema,
    KafkaRecordSerializationSchemaBuilder,
    KafkaTopicSelector,
)
from flinklike_spark.datastream.connectors.kafka.sink import KafkaSink, KafkaSinkBuilder
from flinklike_spark.datastream.connectors.kafka.source import (
    KafkaPartitionSplit,
    KafkaRecordDeserializationSchema,
    KafkaSource,
    KafkaSourceBuilder,
)

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
    "LocalKafkaBroker",
    "LocalKafkaBrokerConfig",
]
