"""A KafkaSource's splits (one per topic partition) and which reader subtask owns each.

Each topic partition is one :class:`KafkaPartitionSplit` (topic, partition,
next offset, stopping offset). Its reader subtask is fixed by Flink's
``KafkaSourceEnumerator.getSplitOwner`` (:func:`split_owner`), so a job restored
at another parallelism hands each restored split to its new owner.
"""

from __future__ import annotations

import dataclasses

from connectors.kafka.offsets import KafkaTopicPartition
from flinklike_spark.connector_api import SourceSplit

__all__ = ["NO_STOPPING_OFFSET", "KafkaPartitionSplit", "split_owner"]

#: no stopping offset (an unbounded split)
NO_STOPPING_OFFSET = -1


def _java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, 32-bit wrap-around)."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def split_owner(topic: str, partition: int, parallelism: int) -> int:
    """The reader subtask of ``topic``'s ``partition``: Flink's ``KafkaSourceEnumerator.getSplitOwner``.

    Partitions of one topic go round-robin from a start index derived from the
    topic name, so several topics spread evenly.
    """
    start = ((_java_string_hash(topic) * 31) & 0x7FFFFFFF) % parallelism
    return (start + partition) % parallelism


@dataclasses.dataclass(frozen=True, kw_only=True)
class KafkaPartitionSplit(SourceSplit):
    """One topic partition, positioned at ``next_offset``.

    Attributes:
        topic, partition: the partition (``split_id`` is ``"<topic>-<partition>"``).
        next_offset: the offset of the next record to return (``EARLIEST_OFFSET``
            = -2 before the first record of a partition discovered at run time).
        stopping_offset: reading ends before this offset (-1: never, unbounded).
    """

    topic: str
    partition: int
    next_offset: int
    stopping_offset: int = NO_STOPPING_OFFSET

    @property
    def topic_partition(self) -> KafkaTopicPartition:
        return KafkaTopicPartition(self.topic, self.partition)

    @property
    def finished(self) -> bool:
        return self.stopping_offset != NO_STOPPING_OFFSET and self.next_offset >= self.stopping_offset
