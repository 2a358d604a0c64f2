"""KafkaSource without a broker: the split owner function (Flink's), the builder's checks, offsets initializers."""

from __future__ import annotations

import pytest

from connectors.kafka.splits import _java_string_hash, split_owner
from flinklike_spark.common.serialization import SimpleStringSchema
from flinklike_spark.connector_api import Boundedness
from flinklike_spark.datastream.connectors.kafka import (
    KafkaOffsetResetStrategy,
    KafkaOffsetsInitializer,
    KafkaPartitionSplit,
    KafkaRecordDeserializationSchema,
    KafkaSource,
    KafkaTopicPartition,
)
from flinklike_spark.errors import ConfigurationError


def test_java_string_hash_matches_java():
    # values of java.lang.String.hashCode()
    assert _java_string_hash("") == 0
    assert _java_string_hash("hello") == 99162322
    assert _java_string_hash("orders") == -1008770331
    assert _java_string_hash("a-topic-with-a-long-name-0123456789") == _java_string_hash(
        "a-topic-with-a-long-name-0123456789"
    )


def test_split_owner_is_flinks_round_robin_from_a_topic_start_index():
    start = ((_java_string_hash("orders") * 31) & 0x7FFFFFFF) % 3
    assert [split_owner("orders", p, 3) for p in range(6)] == [(start + p) % 3 for p in range(6)]
    assert sorted(split_owner("orders", p, 4) for p in range(4)) == [0, 1, 2, 3]  # one partition each


def _builder():
    return KafkaSource.builder().set_bootstrap_servers("127.0.0.1:9").set_topics("t")


def test_assign_splits_gives_every_split_to_its_owner_at_any_parallelism():
    source = _builder().set_value_only_deserializer(SimpleStringSchema()).build()
    splits = [KafkaPartitionSplit(split_id=f"t-{p}", topic="t", partition=p, next_offset=p) for p in range(7)]
    for parallelism in (1, 2, 3, 5):
        per_subtask = source.assign_splits(splits, parallelism)
        assert len(per_subtask) == parallelism
        assert sorted(s.split_id for share in per_subtask for s in share) == sorted(s.split_id for s in splits)
        for subtask, share in enumerate(per_subtask):
            assert all(split_owner("t", s.partition, parallelism) == subtask for s in share)


def test_builder_requires_servers_topics_and_a_deserializer():
    with pytest.raises(ConfigurationError, match="set_bootstrap_servers"):
        KafkaSource.builder().set_topics("t").set_value_only_deserializer(SimpleStringSchema()).build()
    with pytest.raises(ConfigurationError, match="set_topics, set_topic_pattern or set_partitions"):
        KafkaSource.builder().set_bootstrap_servers("h:1").set_value_only_deserializer(SimpleStringSchema()).build()
    with pytest.raises(ConfigurationError, match="deserializer is required"):
        _builder().build()
    with pytest.raises(ConfigurationError, match="needs a consumer group"):
        _builder().set_value_only_deserializer(SimpleStringSchema()).set_property(
            "commit.offsets.on.checkpoint", "true"
        ).build()
    with pytest.raises(ConfigurationError, match="not a regular expression"):
        KafkaSource.builder().set_topic_pattern("(")
    with pytest.raises(ConfigurationError, match="partition.discovery.interval.ms"):
        _builder().set_value_only_deserializer(SimpleStringSchema()).set_property(
            "partition.discovery.interval.ms", "soon"
        ).build()


def test_builder_options_and_pyflink_forms():
    source = (
        _builder()
        .set_group_id("g")
        .set_deserializer(KafkaRecordDeserializationSchema.value_only(SimpleStringSchema()))
        .set_starting_offsets(KafkaOffsetsInitializer.committed_offsets(KafkaOffsetResetStrategy.EARLIEST))
        .set_bounded(KafkaOffsetsInitializer.latest())
        .set_properties({"partition.discovery.interval.ms": "1000", "isolation.level": "read_committed"})
        .build()
    )
    assert source.boundedness is Boundedness.BOUNDED
    assert source.options.discovery_interval is None  # bounded: no discovery, as in Flink
    assert source.options.commit_offsets_on_checkpoint
    config = source.consumer_config()
    assert config["group.id"] == "g" and config["isolation.level"] == "read_committed"
    assert "partition.discovery.interval.ms" not in config and config["enable.auto.commit"] is False
    assert source.output_schema().names == ["f0"]

    unbounded = _builder().set_value_only_deserializer(SimpleStringSchema()).build()
    assert unbounded.boundedness is Boundedness.CONTINUOUS_UNBOUNDED
    assert unbounded.options.discovery_interval.total_seconds() == 300
    assert not unbounded.options.commit_offsets_on_checkpoint  # no group id: nothing to commit to

    pattern = KafkaSource.builder().set_bootstrap_servers("h:1").set_topic_pattern("orders-.*")
    pattern = pattern.set_value_only_deserializer(SimpleStringSchema()).build()
    assert pattern.matches("orders-eu") and not pattern.matches("x-orders-eu")
    fixed = KafkaSource.builder().set_bootstrap_servers("h:1").set_partitions({KafkaTopicPartition("a", 1)})
    fixed = fixed.set_value_only_deserializer(SimpleStringSchema()).build()
    assert fixed.select_partitions([KafkaTopicPartition("a", 0), KafkaTopicPartition("a", 1)]) == [
        KafkaTopicPartition("a", 1)
    ]


def test_offsets_initializers_check_their_arguments():
    with pytest.raises(ConfigurationError, match="epoch ms"):
        KafkaOffsetsInitializer.timestamp(-1)
    with pytest.raises(ConfigurationError, match="KafkaTopicPartition"):
        KafkaOffsetsInitializer.offsets({("t", 0): 5})
    with pytest.raises(ConfigurationError, match="KafkaOffsetResetStrategy"):
        KafkaOffsetsInitializer.committed_offsets("earliest")
    with pytest.raises(ConfigurationError, match="partition must be an int >= 0"):
        KafkaTopicPartition("t", -1)
