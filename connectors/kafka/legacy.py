"""PyFlink's deprecated ``FlinkKafkaConsumer`` (``env.add_source(...)``), as a :class:`KafkaSource`.

PyFlink's Kafka example programs still use it. It reads like the new source
(partitions as splits, offsets in checkpoints, committed to the group on
checkpoint completion); only its configuration API differs: the consumer
``properties`` carry ``bootstrap.servers`` and ``group.id``, and it starts
from the group's committed offsets unless told otherwise (falling back to
``auto.offset.reset``, ``latest`` by default), as Flink's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from connectors.kafka.offsets import KafkaOffsetResetStrategy, KafkaOffsetsInitializer
from connectors.kafka.source import KafkaSource
from flinklike_spark.common.serialization import DeserializationSchema
from flinklike_spark.errors import ConfigurationError

__all__ = ["FlinkKafkaConsumer"]


class FlinkKafkaConsumer(KafkaSource):
    """``FlinkKafkaConsumer(topics, deserialization_schema, properties)``; use with ``env.add_source``."""

    def __init__(
        self, topics: str | list[str], deserialization_schema: DeserializationSchema, properties: Mapping[str, Any]
    ) -> None:
        properties = {str(k): str(v) for k, v in dict(properties).items()}
        if "bootstrap.servers" not in properties:
            raise ConfigurationError("FlinkKafkaConsumer: properties must contain 'bootstrap.servers'")
        reset = properties.get("auto.offset.reset", "latest").lower()
        if reset not in ("earliest", "latest", "none"):
            raise ConfigurationError(
                f"FlinkKafkaConsumer: auto.offset.reset must be 'earliest', 'latest' or 'none', got {reset!r}"
            )
        strategy = KafkaOffsetResetStrategy[reset.upper()]
        builder = (
            KafkaSource.builder()
            .set_bootstrap_servers(properties["bootstrap.servers"])
            .set_topics(*([topics] if isinstance(topics, str) else topics))
            .set_value_only_deserializer(deserialization_schema)
            .set_properties(
                {k: v for k, v in properties.items() if k not in ("bootstrap.servers", "auto.offset.reset")}
            )
        )
        group_id = properties.get("group.id")
        if group_id:
            builder.set_starting_offsets(KafkaOffsetsInitializer.committed_offsets(strategy))
        else:
            builder.set_starting_offsets(
                KafkaOffsetsInitializer.earliest() if strategy is KafkaOffsetResetStrategy.EARLIEST
                else KafkaOffsetsInitializer.latest()
            )  # fmt: skip
        super().__init__(builder.build().options)

    def _replace(self, **changes: Any) -> FlinkKafkaConsumer:
        self.options = dataclasses.replace(self.options, **changes)
        return self

    def set_commit_offsets_on_checkpoints(self, commit_on_checkpoints: bool) -> FlinkKafkaConsumer:
        return self._replace(commit_offsets_on_checkpoint=bool(commit_on_checkpoints) and bool(self.options.group_id))

    def set_start_from_earliest(self) -> FlinkKafkaConsumer:
        return self._replace(starting_offsets=KafkaOffsetsInitializer.earliest())

    def set_start_from_latest(self) -> FlinkKafkaConsumer:
        return self._replace(starting_offsets=KafkaOffsetsInitializer.latest())

    def set_start_from_timestamp(self, startup_offsets_timestamp: int) -> FlinkKafkaConsumer:
        return self._replace(starting_offsets=KafkaOffsetsInitializer.timestamp(startup_offsets_timestamp))

    def set_start_from_group_offsets(self) -> FlinkKafkaConsumer:
        if not self.options.group_id:
            raise ConfigurationError("FlinkKafkaConsumer.set_start_from_group_offsets needs 'group.id' in properties")
        return self._replace(
            starting_offsets=KafkaOffsetsInitializer.committed_offsets(KafkaOffsetResetStrategy.LATEST)
        )

    def disable_filter_restored_partitions_with_subscribed_topics(self) -> FlinkKafkaConsumer:
        return self  # restored partitions are always those of the subscribed topics here

    def get_produced_type(self) -> Any:
        return self.output_schema()
