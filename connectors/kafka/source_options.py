"""The checked configuration of a KafkaSource and how its records are deserialized (what its readers use)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pyarrow as pa

from connectors.kafka.offsets import KafkaOffsetsInitializer, KafkaTopicPartition
from flinklike_spark.common.serialization import DeserializationSchema
from flinklike_spark.connector_api import Boundedness
from flinklike_spark.errors import ConfigurationError

__all__ = ["DEFAULT_DISCOVERY_INTERVAL", "KafkaRecordDeserializationSchema", "KafkaSourceOptions"]

DEFAULT_DISCOVERY_INTERVAL = timedelta(minutes=5)


class KafkaRecordDeserializationSchema:
    """How a Kafka record becomes a stream record (Flink's ``KafkaRecordDeserializationSchema``).

    Only ``value_only`` is offered: the value's bytes go through a
    :class:`DeserializationSchema`; records whose value is null (tombstones)
    or deserializes to None are skipped.
    """

    def __init__(self, value_schema: DeserializationSchema) -> None:
        if not isinstance(value_schema, DeserializationSchema):
            raise ConfigurationError(
                "KafkaRecordDeserializationSchema.value_only expects a DeserializationSchema "
                f"(SimpleStringSchema, JsonRowDeserializationSchema, ...), got {value_schema!r}"
            )
        self.value_schema = value_schema

    @staticmethod
    def value_only(value_deserialization_schema: DeserializationSchema) -> KafkaRecordDeserializationSchema:
        return KafkaRecordDeserializationSchema(value_deserialization_schema)

    def produced_schema(self) -> pa.Schema:
        return self.value_schema.produced_schema()

    def deserialize(self, values: list[bytes | None]) -> tuple[pa.RecordBatch, list[int] | None]:
        """The records of ``values`` and, if some were skipped, the indices of those kept (None: all kept)."""
        kept_indices = None
        if any(v is None for v in values):
            kept_indices = [i for i, v in enumerate(values) if v is not None]
            values = [values[i] for i in kept_indices]
        batch = self.value_schema.deserialize_batch(values)
        if batch.num_rows != len(values):  # the schema skipped some: find which, one by one
            survivors = [i for i, v in enumerate(values) if self.value_schema.deserialize(v) is not None]
            kept_indices = survivors if kept_indices is None else [kept_indices[i] for i in survivors]
        return batch, kept_indices


@dataclasses.dataclass(frozen=True, kw_only=True)
class KafkaSourceOptions:
    """The checked configuration of a :class:`KafkaSource` (what the builder builds)."""

    bootstrap_servers: str
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    partitions: tuple[KafkaTopicPartition, ...] = ()
    group_id: str | None = None
    client_id_prefix: str = ""
    properties: tuple[tuple[str, str], ...] = ()
    starting_offsets: KafkaOffsetsInitializer = KafkaOffsetsInitializer.earliest()
    stopping_offsets: KafkaOffsetsInitializer | None = None
    boundedness: Boundedness = Boundedness.CONTINUOUS_UNBOUNDED
    deserializer: KafkaRecordDeserializationSchema
    discovery_interval: timedelta | None = DEFAULT_DISCOVERY_INTERVAL
    commit_offsets_on_checkpoint: bool = True
