"""PyFlink's ``pyflink.datastream.connectors.kafka``: a face of :mod:`connectors.kafka`, where the Kafka
connector lives (on librdkafka, ``pip install flinklike-spark[kafka]``; see docs/kafka.md).

:class:`LocalKafkaBroker` (a real single-node broker for tests and examples) is
also named here, as earlier versions did; its home is :mod:`connectors.kafka.testing`.
"""

from connectors.kafka import (
    DeliveryGuarantee,
    FlinkFixedPartitioner,
    FlinkKafkaConsumer,
    KafkaOffsetResetStrategy,
    KafkaOffsetsInitializer,
    KafkaPartitioner,
    KafkaPartitionSplit,
    KafkaRecordDeserializationSchema,
    KafkaRecordSerializationSchema,
    KafkaRecordSerializationSchemaBuilder,
    KafkaSink,
    KafkaSinkBuilder,
    KafkaSource,
    KafkaSourceBuilder,
    KafkaTopicPartition,
    KafkaTopicSelector,
)
from connectors.kafka.testing import LocalKafkaBroker, LocalKafkaBrokerConfig

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
