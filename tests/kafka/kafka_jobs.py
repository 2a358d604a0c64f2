"""Helpers of the Kafka tests: reading a topic as a ``read_committed`` consumer, checking exactly-once output."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, TopicPartition

from flinklike_spark import KeyedProcessFunction, ValueStateDescriptor


def read_committed(bootstrap_servers: str, topic: str, *, timeout: float = 60.0) -> list[tuple[bytes, bytes, int]]:
    """Every committed record of ``topic`` as ``(key, value, partition)``, in offset order per partition.

    Reads each partition up to its end as a ``read_committed`` consumer sees it
    (the last stable offset). An open transaction holds that offset back, so a
    lingering transaction makes this time out instead of returning too little.
    """
    consumer = Consumer({
        "bootstrap.servers": bootstrap_servers,
        "group.id": f"check-{uuid.uuid4().hex[:8]}",
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    })
    try:
        metadata = consumer.list_topics(topic, timeout=30).topics[topic]
        partitions = [TopicPartition(topic, p, 0) for p in sorted(metadata.partitions)]
        ends = {}
        for tp in partitions:
            low, high = consumer.get_watermark_offsets(tp, timeout=30)
            ends[tp.partition] = high
        consumer.assign(partitions)
        positions = {p: 0 for p in ends}
        records: list[tuple[bytes, bytes, int]] = []
        deadline = time.monotonic() + timeout
        while True:
            done = all(_position(consumer, topic, p) >= end for p, end in ends.items() if end > 0)
            if done:
                return records
            if time.monotonic() > deadline:
                missing = {p: (_position(consumer, topic, p), end) for p, end in ends.items()}
                raise AssertionError(
                    f"read_committed consumer of {topic} did not reach the end of every partition in {timeout} s "
                    f"(position, end offset per partition: {missing}): a transaction is still open"
                )
            message = consumer.poll(0.2)
            if message is None or message.error() is not None:
                continue
            positions[message.partition()] = message.offset() + 1
            records.append((message.key(), message.value(), message.partition()))
    finally:
        consumer.close()


def _position(consumer: Consumer, topic: str, partition: int) -> int:
    (tp,) = consumer.position([TopicPartition(topic, partition)])
    return max(tp.offset, 0)


class NumberPerKey(KeyedProcessFunction):
    """Checks and continues each key's chain: the n-th record of a key (0-based) must have ``seq == n``.

    Emits ``"key,seq,count"`` strings; a lost, duplicated or reordered input
    record breaks the chain (the function raises, and the test sees the job fail).
    """

    def __init__(self, seconds_per_record: float = 0.0) -> None:
        self.seconds_per_record = seconds_per_record

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        seen = self.count.value() or 0
        if value["seq"] != seen:
            raise AssertionError(f"key {value['key']}: got seq {value['seq']} after {seen} records")
        self.count.update(seen + 1)
        if self.seconds_per_record:
            time.sleep(self.seconds_per_record)
        yield f"{value['key']},{value['seq']},{seen + 1}"


def assert_each_key_exactly_once_in_order(records: list[tuple[bytes, bytes, int]], num_keys: int,
                                          records_per_key: int) -> None:
    """Per key, the values read are ``seq`` 0..records_per_key-1 exactly once, in order, with the state chain intact."""
    per_key: dict[int, list[int]] = {}
    for _key, value, _partition in records:
        key, seq, count = (int(part) for part in value.decode().split(","))
        assert count == seq + 1, f"key {key}: seq {seq} carried count {count} (state chain broken)"
        per_key.setdefault(key, []).append(seq)
    assert sorted(per_key) == list(range(num_keys)), f"keys seen: {sorted(per_key)}"
    for key, seqs in sorted(per_key.items()):
        if seqs != list(range(records_per_key)):
            duplicated = len(seqs) - len(set(seqs))
            missing = sorted(set(range(records_per_key)) - set(seqs))[:5]
            raise AssertionError(
                f"key {key}: {len(seqs)} records, {duplicated} duplicated, first missing {missing}, "
                f"in order: {seqs == sorted(seqs)}"
            )
