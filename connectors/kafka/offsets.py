"""Where a Kafka source starts and stops reading each partition (PyFlink's ``KafkaOffsetsInitializer``).

Initializers are resolved to concrete offsets once, in the JobMaster, when the
job's splits are created (:func:`resolve_offsets`), so that every restart of
the job without a checkpoint starts from the same offsets. Partitions that
readers discover later start at the earliest offset, as in Flink.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping
from typing import Any

from connectors.kafka.clients import LIBRDKAFKA_LOG, admin_client
from flinklike_spark.errors import ConfigurationError

__all__ = [
    "EARLIEST_OFFSET",
    "KafkaOffsetResetStrategy",
    "KafkaOffsetsInitializer",
    "KafkaTopicPartition",
    "OffsetsInitializerKind",
    "resolve_offsets",
]

#: librdkafka's logical offset "the beginning of the partition" (a split's position before its first record).
EARLIEST_OFFSET = -2


@dataclasses.dataclass(frozen=True, order=True)
class KafkaTopicPartition:
    """A topic partition (Java's ``TopicPartition``): ``KafkaTopicPartition('orders', 0)``."""

    topic: str
    partition: int

    def __post_init__(self) -> None:
        if not isinstance(self.topic, str) or not self.topic:
            raise ConfigurationError(f"KafkaTopicPartition: topic must be a non-empty string, got {self.topic!r}")
        if isinstance(self.partition, bool) or not isinstance(self.partition, int) or self.partition < 0:
            raise ConfigurationError(f"KafkaTopicPartition: partition must be an int >= 0, got {self.partition!r}")

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class KafkaOffsetResetStrategy(enum.Enum):
    """What to do where there is no committed or specified offset (Java's ``OffsetResetStrategy``)."""

    LATEST = 0
    EARLIEST = 1
    NONE = 2


class OffsetsInitializerKind(enum.Enum):
    EARLIEST = "earliest"
    LATEST = "latest"
    COMMITTED = "committed"
    TIMESTAMP = "timestamp"
    SPECIFIED = "specified"


@dataclasses.dataclass(frozen=True, kw_only=True)
class KafkaOffsetsInitializer:
    """A starting or stopping position per partition. Build with the static methods (PyFlink's API)."""

    kind: OffsetsInitializerKind
    reset_strategy: KafkaOffsetResetStrategy = KafkaOffsetResetStrategy.EARLIEST
    timestamp_ms: int | None = None
    specified: tuple[tuple[KafkaTopicPartition, int], ...] = ()

    @staticmethod
    def earliest() -> KafkaOffsetsInitializer:
        """The earliest offset of each partition."""
        return KafkaOffsetsInitializer(kind=OffsetsInitializerKind.EARLIEST)

    @staticmethod
    def latest() -> KafkaOffsetsInitializer:
        """The end of each partition when the job starts (its last stable offset for ``read_committed``)."""
        return KafkaOffsetsInitializer(kind=OffsetsInitializerKind.LATEST)

    @staticmethod
    def committed_offsets(
        offset_reset_strategy: KafkaOffsetResetStrategy = KafkaOffsetResetStrategy.NONE,
    ) -> KafkaOffsetsInitializer:
        """The consumer group's committed offsets; ``offset_reset_strategy`` where a partition has none
        (``NONE``: the job fails to start, naming the partition)."""
        _check_reset("committed_offsets", offset_reset_strategy)
        return KafkaOffsetsInitializer(kind=OffsetsInitializerKind.COMMITTED, reset_strategy=offset_reset_strategy)

    @staticmethod
    def timestamp(timestamp: int) -> KafkaOffsetsInitializer:
        """The first record whose timestamp is >= ``timestamp`` (epoch ms); the end where there is none."""
        if isinstance(timestamp, bool) or not isinstance(timestamp, int) or timestamp < 0:
            raise ConfigurationError(f"KafkaOffsetsInitializer.timestamp: expects epoch ms >= 0, got {timestamp!r}")
        return KafkaOffsetsInitializer(kind=OffsetsInitializerKind.TIMESTAMP, timestamp_ms=timestamp)

    @staticmethod
    def offsets(
        offsets: Mapping[KafkaTopicPartition, int],
        offset_reset_strategy: KafkaOffsetResetStrategy = KafkaOffsetResetStrategy.EARLIEST,
    ) -> KafkaOffsetsInitializer:
        """The given offset per partition; other partitions start at their committed offset, else by
        ``offset_reset_strategy``."""
        _check_reset("offsets", offset_reset_strategy)
        checked = []
        for tp, offset in dict(offsets).items():
            if not isinstance(tp, KafkaTopicPartition):
                raise ConfigurationError(
                    f"KafkaOffsetsInitializer.offsets: keys must be KafkaTopicPartition, got {tp!r}"
                )
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                raise ConfigurationError(
                    f"KafkaOffsetsInitializer.offsets: offset of {tp} must be an int >= 0, got {offset!r}"
                )
            checked.append((tp, offset))
        return KafkaOffsetsInitializer(
            kind=OffsetsInitializerKind.SPECIFIED,
            reset_strategy=offset_reset_strategy,
            specified=tuple(sorted(checked)),
        )


def _check_reset(where: str, strategy: Any) -> None:
    if not isinstance(strategy, KafkaOffsetResetStrategy):
        raise ConfigurationError(
            f"KafkaOffsetsInitializer.{where}: expects a KafkaOffsetResetStrategy "
            f"({', '.join(s.name for s in KafkaOffsetResetStrategy)}), got {strategy!r}"
        )


def resolve_offsets(
    initializer: KafkaOffsetsInitializer,
    partitions: Iterable[KafkaTopicPartition],
    consumer_config: Mapping[str, Any],
    *,
    timeout: float = 30.0,
) -> dict[KafkaTopicPartition, int]:
    """Concrete offsets of ``partitions`` for ``initializer`` (``latest`` honours ``isolation.level``).

    Raises:
        ConfigurationError: ``committed_offsets(NONE)`` and a partition without a committed offset.
        confluent_kafka.KafkaException: the broker did not answer within ``timeout``.
    """
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    partitions = sorted(set(partitions))
    if not partitions:
        return {}
    admin = admin_client(consumer_config["bootstrap.servers"], consumer_config)
    isolation = (
        IsolationLevel.READ_COMMITTED
        if str(consumer_config.get("isolation.level", "read_uncommitted")) == "read_committed"
        else IsolationLevel.READ_UNCOMMITTED
    )

    def listed(spec_of) -> dict[KafkaTopicPartition, int]:
        requests = {TopicPartition(tp.topic, tp.partition): spec_of(tp) for tp in partitions}
        futures = admin.list_offsets(requests, isolation_level=isolation, request_timeout=timeout)
        try:
            return {KafkaTopicPartition(k.topic, k.partition): f.result(timeout).offset for k, f in futures.items()}
        finally:
            admin.poll(0)  # the client's log lines, to logging

    kind = initializer.kind
    if kind is OffsetsInitializerKind.EARLIEST:
        return listed(lambda tp: OffsetSpec.earliest())
    if kind is OffsetsInitializerKind.LATEST:
        return listed(lambda tp: OffsetSpec.latest())
    if kind is OffsetsInitializerKind.TIMESTAMP:
        found = listed(lambda tp: OffsetSpec.for_timestamp(initializer.timestamp_ms))
        missing = [tp for tp, offset in found.items() if offset < 0]
        if missing:  # no record at or after the timestamp: the end of the partition
            found.update(resolve_offsets(KafkaOffsetsInitializer.latest(), missing, consumer_config, timeout=timeout))
        return found
    specified = dict(initializer.specified) if kind is OffsetsInitializerKind.SPECIFIED else {}
    result = {tp: specified[tp] for tp in partitions if tp in specified}
    rest = [tp for tp in partitions if tp not in specified]
    if rest and consumer_config.get("group.id"):
        result.update(_committed(rest, consumer_config, timeout))
    unresolved = [tp for tp in rest if tp not in result]
    if unresolved:
        if initializer.reset_strategy is KafkaOffsetResetStrategy.NONE:
            raise ConfigurationError(
                f"KafkaOffsetsInitializer.committed_offsets(NONE): consumer group "
                f"{consumer_config.get('group.id')!r} has no committed offset for {', '.join(map(str, unresolved))}; "
                "pass KafkaOffsetResetStrategy.EARLIEST or LATEST to start there instead"
            )
        fallback = (
            KafkaOffsetsInitializer.earliest()
            if initializer.reset_strategy is KafkaOffsetResetStrategy.EARLIEST
            else KafkaOffsetsInitializer.latest()
        )
        result.update(resolve_offsets(fallback, unresolved, consumer_config, timeout=timeout))
    return result


def _committed(
    partitions: list[KafkaTopicPartition], consumer_config: Mapping[str, Any], timeout: float
) -> dict[KafkaTopicPartition, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**consumer_config, "enable.auto.commit": False, "logger": LIBRDKAFKA_LOG})
    try:
        committed = consumer.committed([TopicPartition(tp.topic, tp.partition) for tp in partitions], timeout=timeout)
    finally:
        consumer.close()
    return {KafkaTopicPartition(c.topic, c.partition): c.offset for c in committed if c.offset >= 0}
