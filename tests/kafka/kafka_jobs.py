"""Shared by the Kafka job tests: per-key sequence input, order-checking keyed functions, job builders, and a
``read_committed`` reader of a topic that checks exactly-once output."""

from __future__ import annotations

import json
import time
import uuid

from confluent_kafka import Consumer, TopicPartition  # noqa: E402

from flinklike_spark import KeyedProcessFunction, ValueStateDescriptor  # noqa: E402
from flinklike_spark.common.typeinfo import Types  # noqa: E402
from flinklike_spark.datastream.connectors.kafka import (  # noqa: E402
    KafkaOffsetsInitializer,
    KafkaSource,
)
from flinklike_spark.datastream.formats.json import JsonRowDeserializationSchema  # noqa: E402

END_OF_TIME = 2**62
ROW = Types.ROW_NAMED(["key", "seq"], [Types.INT(), Types.LONG()])
BASE_TS = 1_700_000_000_000


def produce_sequences(
    bootstrap: str, topic: str, *, num_keys: int, per_key: int, partitions: int, first_seq: int = 0
) -> int:
    """Key ``k`` gets ``seq`` ``first_seq .. first_seq + per_key - 1`` in partition ``k % partitions``, in order;
    record timestamps ``BASE_TS + seq``. Returns the number of records written."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for seq in range(first_seq, first_seq + per_key):
        for key in range(num_keys):
            value = json.dumps({"key": key, "seq": seq}).encode()
            producer.produce(topic, value, partition=key % partitions, timestamp=BASE_TS + seq)
        producer.poll(0)
    assert producer.flush(60) == 0
    return num_keys * per_key


def source(bootstrap: str, topic: str, *, bounded: bool, group_id: str | None = None, **properties) -> KafkaSource:
    builder = (
        KafkaSource.builder()
        .set_bootstrap_servers(bootstrap)
        .set_topics(topic)
        .set_starting_offsets(KafkaOffsetsInitializer.earliest())
        .set_value_only_deserializer(JsonRowDeserializationSchema.builder().type_info(ROW).build())
        .set_properties(properties)
    )
    if group_id is not None:
        builder.set_group_id(group_id)
    if bounded:
        builder.set_bounded(KafkaOffsetsInitializer.latest())
    return builder.build()


class CheckedSequence(KeyedProcessFunction):
    """Per key: raises on a lost, duplicated or reordered ``seq`` (state survives restores).

    ``emit="each"`` yields every record; ``emit="count"`` yields the count per key at the end of input.
    """

    def __init__(self, *, emit: str = "each", seconds_per_record: float = 0.0) -> None:
        self.emit = emit
        self.seconds_per_record = seconds_per_record

    def open(self, runtime_context):
        self.next_seq = runtime_context.get_state(ValueStateDescriptor("next_seq", Types.LONG()))

    def process_element(self, value, ctx):
        expected = self.next_seq.value() or 0
        if value["seq"] != expected:
            raise AssertionError(f"key {value['key']}: got seq {value['seq']}, expected {expected}")
        if expected == 0 and self.emit == "count":
            ctx.timer_service().register_event_time_timer(END_OF_TIME)
        self.next_seq.update(expected + 1)
        if self.seconds_per_record:
            time.sleep(self.seconds_per_record)
        if self.emit == "each":
            yield {"key": value["key"], "seq": value["seq"]}

    def on_timer(self, timestamp, ctx):
        yield {"key": ctx.get_current_key(), "count": self.next_seq.value()}


def assert_each_once_in_order(rows, *, num_keys: int, per_key: int) -> None:
    per_key_seqs: dict[int, list[int]] = {}
    for row in rows:
        per_key_seqs.setdefault(row["key"], []).append(row["seq"])
    assert sorted(per_key_seqs) == list(range(num_keys))
    for key, seqs in sorted(per_key_seqs.items()):
        assert seqs == list(range(per_key)), (
            f"key {key}: {len(seqs)} rows, {len(seqs) - len(set(seqs))} duplicated, "
            f"missing {sorted(set(range(per_key)) - set(seqs))[:5]}"
        )


def read_committed(bootstrap_servers: str, topic: str, *, timeout: float = 60.0) -> list[tuple[bytes, bytes, int]]:
    """Every committed record of ``topic`` as ``(key, value, partition)``, in offset order per partition.

    Reads each partition up to its last stable offset as a ``read_committed``
    consumer sees it now. An open transaction holds that offset back: records
    committed after a lingering transaction are not returned, so exactly-once
    checks on the result also catch a transaction that a restore failed to abort.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": f"check-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
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
                    f"(position, end offset per partition: {missing})"
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


class KeyOfLine:
    """The key of a ``"key,seq,count"`` line (``NumberPerKey``'s output) as the Kafka key: one key's lines
    go to one partition, in order."""

    def serialize(self, element: str) -> bytes:
        return element.partition(",")[0].encode()


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


def assert_each_key_exactly_once_in_order(
    records: list[tuple[bytes, bytes, int]], num_keys: int, records_per_key: int
) -> None:
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
