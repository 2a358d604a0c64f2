"""How a KafkaSink turns a record into a Kafka record: PyFlink's ``KafkaRecordSerializationSchema``.

A schema names the target topic (fixed, or chosen per record by a
:class:`KafkaTopicSelector` or a function), the value's serialization schema,
optionally the key's, and optionally a :class:`KafkaPartitioner` (Flink's
``FlinkKafkaPartitioner``; without one Kafka's default partitioner places the
record: by key hash, or sticky for records without a key).

A serialization schema is any object with ``serialize(value) -> bytes``
(``SimpleStringSchema``, ``JsonRowSerializationSchema``,
``CsvRowSerializationSchema``, ``ByteArraySchema``...). A schema that also has
``serialize_for_topic(value, topic, *, is_key) -> bytes`` is called with the
record's topic instead, as Kafka's own ``Serializer.serialize(topic, data)`` is:
the schema-registry formats (``ConfluentRegistryAvroSerializationSchema``) name
their subject after it (``<topic>-value``, ``<topic>-key``).

A sink serializes a whole batch at once (:meth:`KafkaRecordSerializationSchema.serialize_batch`)
when its topic is fixed and its partitioner is none or Flink's fixed one: each
schema's ``serialize_batch(batch) -> list[bytes]`` (vectorized for the built-in
string and bytes schemas; one ``serialize`` per record otherwise) and one
``produce_batch`` per batch. A topic selector, another partitioner or a
schema without ``serialize_batch`` is served record by record; both give the
same Kafka records.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from flinklike_spark.common.types import records_of
from flinklike_spark.errors import ConfigurationError, FunctionResultError

__all__ = [
    "FlinkFixedPartitioner",
    "KafkaPartitioner",
    "KafkaRecordSerializationSchema",
    "KafkaRecordSerializationSchemaBuilder",
    "KafkaTopicSelector",
    "SerializedBatch",
]


class KafkaTopicSelector(abc.ABC):
    """Chooses the topic of each record (PyFlink's ``KafkaTopicSelector``)."""

    @abc.abstractmethod
    def apply(self, data: Any) -> str:
        """The topic ``data`` goes to."""


class _FunctionTopicSelector(KafkaTopicSelector):
    def __init__(self, function: Callable[[Any], str]) -> None:
        self.function = function

    def apply(self, data: Any) -> str:
        return self.function(data)


class KafkaPartitioner(abc.ABC):
    """Chooses the partition of each record (Flink's ``FlinkKafkaPartitioner``)."""

    def open(self, parallel_instance_id: int, parallel_instances: int) -> None:  # noqa: B027 - optional hook
        """Called once per sink subtask before the first ``partition`` call."""

    @abc.abstractmethod
    def partition(
        self, record: Any, key: bytes | None, value: bytes | None, target_topic: str, partitions: list[int]
    ) -> int:
        """One of ``partitions`` (the topic's partition ids, sorted)."""


class FlinkFixedPartitioner(KafkaPartitioner):
    """Each sink subtask writes to one partition: ``partitions[subtask % len(partitions)]`` (Flink's)."""

    def __init__(self) -> None:
        self._subtask = 0

    def open(self, parallel_instance_id: int, parallel_instances: int) -> None:
        self._subtask = parallel_instance_id

    def partition(self, record, key, value, target_topic, partitions):
        return partitions[self._subtask % len(partitions)]


def _check_schema(schema: Any, what: str) -> Any:
    if not callable(getattr(schema, "serialize", None)):
        raise ConfigurationError(
            f"{what} must be a serialization schema with serialize(value) -> bytes "
            f"(e.g. SimpleStringSchema(), JsonRowSerializationSchema...), got {schema!r}"
        )
    return schema


def _serialize(schema: Any, record: Any, topic: str, *, is_key: bool) -> bytes:
    for_topic = getattr(schema, "serialize_for_topic", None)
    return schema.serialize(record) if for_topic is None else for_topic(record, topic, is_key=is_key)


@dataclasses.dataclass(frozen=True)
class SerializedBatch:
    """A batch's Kafka records for one topic: ``values[i]`` (and ``keys[i]``) is the batch's ``i``-th record."""

    topic: str
    values: list[bytes | None]
    #: None: no key schema (every record without a key)
    keys: list[bytes | None] | None
    #: the partition of every record (None: Kafka's default partitioner places each)
    partition: int | None


class _Records:
    """A batch's records, converted once and only if a schema without ``serialize_batch`` needs them."""

    def __init__(self, batch: pa.RecordBatch) -> None:
        self._batch = batch
        self._records: list[Any] | None = None

    def get(self) -> list[Any]:
        if self._records is None:
            self._records = records_of(self._batch)
        return self._records


def _serialize_all(schema: Any, batch: pa.RecordBatch, records: _Records, topic: str, *, is_key: bool) -> list:
    for_topic = getattr(schema, "serialize_for_topic", None)
    if for_topic is not None:
        return [for_topic(record, topic, is_key=is_key) for record in records.get()]
    serialize_batch = getattr(schema, "serialize_batch", None)
    if serialize_batch is not None:
        serialized = serialize_batch(batch)
        if len(serialized) != batch.num_rows:
            raise FunctionResultError(
                f"KafkaSink: {schema!r}.serialize_batch returned {len(serialized)} values for {batch.num_rows} records"
            )
        return serialized
    return [schema.serialize(record) for record in records.get()]


class KafkaRecordSerializationSchema:
    """Turns records into (topic, key, value, partition); build one with :meth:`builder`."""

    def __init__(
        self,
        *,
        topic: str | None,
        topic_selector: KafkaTopicSelector | None,
        value_schema: Any,
        key_schema: Any = None,
        partitioner: KafkaPartitioner | None = None,
    ) -> None:
        self.topic = topic
        self.topic_selector = topic_selector
        self.value_schema = value_schema
        self.key_schema = key_schema
        self.partitioner = partitioner
        self._opened_for: tuple[int, int] | None = None

    @staticmethod
    def builder() -> KafkaRecordSerializationSchemaBuilder:
        return KafkaRecordSerializationSchemaBuilder()

    def serialize_record(self, record: Any, partitions_of: Callable[[str], list[int]], context) -> tuple:
        """``(topic, key bytes or None, value bytes, partition or None)`` of one record."""
        topic = self.topic if self.topic_selector is None else self.topic_selector.apply(record)
        if not isinstance(topic, str) or not topic:
            raise FunctionResultError(
                f"KafkaSink: the topic selector returned {topic!r} for {record!r}; "
                f"it must return a topic name (a non-empty str)"
            )
        key = _serialize(self.key_schema, record, topic, is_key=True) if self.key_schema is not None else None
        value = _serialize(self.value_schema, record, topic, is_key=False)
        partition = None
        if self.partitioner is not None:
            instance = (context.subtask_index, context.parallelism)
            if self._opened_for != instance:
                self.partitioner.open(*instance)
                self._opened_for = instance
            partition = self.partitioner.partition(record, key, value, topic, partitions_of(topic))
        return topic, key, value, partition

    def serialize_batch(
        self, batch: pa.RecordBatch, partitions_of: Callable[[str], list[int]], context
    ) -> SerializedBatch | None:
        """Every record of ``batch`` (no timestamp column) at once, or None when they must go one by one
        (:meth:`serialize_record`): a topic selector, or a partitioner other than :class:`FlinkFixedPartitioner`."""
        if self.topic_selector is not None or self.topic is None:
            return None
        if self.partitioner is not None and type(self.partitioner) is not FlinkFixedPartitioner:
            return None
        topic = self.topic
        records = _Records(batch)
        values = _serialize_all(self.value_schema, batch, records, topic, is_key=False)
        keys = None
        if self.key_schema is not None:
            keys = _serialize_all(self.key_schema, batch, records, topic, is_key=True)
        partition = None
        if self.partitioner is not None:
            partitions = partitions_of(topic)
            partition = partitions[context.subtask_index % len(partitions)]
        return SerializedBatch(topic=topic, values=values, keys=keys, partition=partition)


class KafkaRecordSerializationSchemaBuilder:
    """PyFlink's builder: a topic (or topic selector) and a value serialization schema are required."""

    def __init__(self) -> None:
        self._topic: str | None = None
        self._topic_selector: KafkaTopicSelector | None = None
        self._value_schema: Any = None
        self._key_schema: Any = None
        self._partitioner: KafkaPartitioner | None = None

    def set_topic(self, topic: str) -> KafkaRecordSerializationSchemaBuilder:
        if not isinstance(topic, str) or not topic:
            raise ConfigurationError(f"set_topic needs a topic name (a non-empty str), got {topic!r}")
        if self._topic_selector is not None:
            raise ConfigurationError("set_topic: a topic selector is already set; use one or the other")
        self._topic = topic
        return self

    def set_topic_selector(
        self, topic_selector: KafkaTopicSelector | Callable[[Any], str]
    ) -> KafkaRecordSerializationSchemaBuilder:
        if self._topic is not None:
            raise ConfigurationError("set_topic_selector: a topic is already set; use one or the other")
        if isinstance(topic_selector, KafkaTopicSelector):
            self._topic_selector = topic_selector
        elif callable(topic_selector):
            self._topic_selector = _FunctionTopicSelector(topic_selector)
        else:
            raise ConfigurationError(
                f"set_topic_selector needs a KafkaTopicSelector or a function record -> topic, got {topic_selector!r}"
            )
        return self

    def set_key_serialization_schema(self, key_serialization_schema: Any) -> KafkaRecordSerializationSchemaBuilder:
        self._key_schema = _check_schema(key_serialization_schema, "set_key_serialization_schema")
        return self

    def set_value_serialization_schema(self, value_serialization_schema: Any) -> KafkaRecordSerializationSchemaBuilder:
        self._value_schema = _check_schema(value_serialization_schema, "set_value_serialization_schema")
        return self

    def set_partitioner(self, partitioner: KafkaPartitioner) -> KafkaRecordSerializationSchemaBuilder:
        if not isinstance(partitioner, KafkaPartitioner):
            raise ConfigurationError(
                f"set_partitioner needs a KafkaPartitioner (e.g. FlinkFixedPartitioner()), got {partitioner!r}"
            )
        self._partitioner = partitioner
        return self

    def build(self) -> KafkaRecordSerializationSchema:
        if self._topic is None and self._topic_selector is None:
            raise ConfigurationError(
                "KafkaRecordSerializationSchema: set_topic(...) or set_topic_selector(...) is required"
            )
        if self._value_schema is None:
            raise ConfigurationError("KafkaRecordSerializationSchema: set_value_serialization_schema(...) is required")
        return KafkaRecordSerializationSchema(
            topic=self._topic,
            topic_selector=self._topic_selector,
            value_schema=self._value_schema,
            key_schema=self._key_schema,
            partitioner=self._partitioner,
        )
