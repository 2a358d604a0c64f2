"""PyFlink's ``pyflink.datastream.connectors.kafka``, and a local broker for tests and examples."""

from flinklike_spark.datastream.connectors.base import DeliveryGuarantee
from flinklike_spark.datastream.connectors.kafka.local_broker import LocalKafkaBroker, LocalKafkaBrokerConfig
from flinklike_spark.datastream.connectors.kafka.serialization import (
    FlinkFixedPartitioner,
    KafkaPartitioner,
    KafkaRecordSerializationSchema,
    KafkaRecordSerializationSchemaBuilder,
    KafkaTopicSelector,
)
from flinklike_spark.datastream.connectors.kafka.sink import KafkaSink, KafkaSinkBuilder

__all__ = [
    "DeliveryGuarantee",
    "FlinkFixedPartitioner",
    "KafkaPartitioner",
    "KafkaRecordSerializationSchema",
    "KafkaRecordSerializationSchemaBuilder",
    "KafkaSink",
    "KafkaSinkBuilder",
    "KafkaTopicSelector",
    "LocalKafkaBroker",
    "LocalKafkaBrokerConfig",
]
