"""Shared by the Kafka job tests: per-key sequence input, an order-checking keyed function, job builders."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))  # checkpoint_jobs, failover_jobs

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
