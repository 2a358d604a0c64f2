"""Watermark alignment of KafkaSource (FLIP-182 across subtasks, FLIP-217 across the splits of one reader).

Partition 0 holds 20 s of event time, all written before the job starts.
Partition 1 has one record at the start of that time and gets the rest only
later: 5 s after the job's first output with alignment, or (the control
without it) once the job emitted all of partition 0. Without alignment the
reader runs through partition 0 while partition 1 stands at its start; with
``with_watermark_alignment(group, 2 s)`` partition 0 may run only a little
beyond partition 1's watermark (the drift, plus what one fetch and one update
interval bring: alignment is best effort in Flink too).
"""

from __future__ import annotations

import threading
import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from flinklike_spark import KeyedProcessFunction, StreamExecutionEnvironment  # noqa: E402
from flinklike_spark.common.serialization import SimpleStringSchema  # noqa: E402
from flinklike_spark.common.time import Duration  # noqa: E402
from flinklike_spark.common.watermark_strategy import WatermarkStrategy  # noqa: E402
from flinklike_spark.datastream.connectors.kafka import (  # noqa: E402
    KafkaOffsetsInitializer,
    KafkaSource,
    KafkaTopicPartition,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

BASE_TS = 1_700_000_000_000
FAST = 4_000  # partition 0: one record every 5 ms of event time, 20 s
SLOW = 31  # partition 1: one record per second of event time, 30 s
DRIFT_MS = 2_000


class Arrival(KeyedProcessFunction):
    """Each record with its event time and the wall-clock time it reached this function."""

    def process_element(self, value, ctx):
        kind, index = value.split(",")
        yield {"kind": kind, "index": int(index), "ts": ctx.timestamp(), "wall": time.time()}


def _producer(bootstrap: str):
    # small record batches: a fetch brings a fraction of a second of partition 0's event time
    return confluent_kafka.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "batch.size": 1024})


def _produce(producer, topic: str, kind: str, partition: int, indices: range, step_ms: int) -> None:
    for i in indices:
        producer.produce(topic, f"{kind},{i}".encode(), partition=partition, timestamp=BASE_TS + step_ms * i)
        producer.poll(0)
    assert producer.flush(60) == 0


def _write_rest_of_slow_partition(
    bootstrap: str, topic: str, started: threading.Event, fast_done: threading.Event, hold_s: float
) -> None:
    started.wait(120)
    fast_done.wait(hold_s)
    producer = _producer(bootstrap)
    for j in range(1, SLOW):
        _produce(producer, topic, "slow", 1, range(j, j + 1), 1_000)
        time.sleep(0.1)


def _run(bootstrap: str, topic: str, *, parallelism: int, aligned: bool) -> list[dict]:
    producer = _producer(bootstrap)
    _produce(producer, topic, "fast", 0, range(FAST), 5)
    _produce(producer, topic, "slow", 1, range(1), 1_000)
    source = (
        KafkaSource.builder()
        .set_bootstrap_servers(bootstrap)
        .set_topics(topic)
        .set_starting_offsets(KafkaOffsetsInitializer.earliest())
        .set_bounded(
            KafkaOffsetsInitializer.offsets({KafkaTopicPartition(topic, 0): FAST, KafkaTopicPartition(topic, 1): SLOW})
        )
        .set_value_only_deserializer(SimpleStringSchema())
        # a short prefetch queue, as a job that reads far ahead would configure it
        .set_property("queued.min.messages", "100")
        .set_property("max.partition.fetch.bytes", "4096")
        .build()
    )
    strategy = WatermarkStrategy.for_monotonous_timestamps()
    if aligned:
        strategy = strategy.with_watermark_alignment("kafka", Duration.of_millis(DRIFT_MS), Duration.of_millis(50))
    env = StreamExecutionEnvironment.get_execution_environment({"parallelism.default": parallelism})
    stream = env.from_source(source, strategy, "kafka").key_by(lambda value: value.partition(",")[0])
    started, fast_done = threading.Event(), threading.Event()
    writer = threading.Thread(
        target=_write_rest_of_slow_partition,
        args=(bootstrap, topic, started, fast_done, 5 if aligned else 60),
        daemon=True,
    )
    writer.start()
    rows = []
    for row in stream.process(Arrival()).execute_and_collect("watermark alignment"):
        started.set()
        if row["kind"] == "fast" and row["index"] == FAST - 1:
            fast_done.set()
        rows.append(row)
    writer.join(30)
    return rows


def _max_lead_ms(rows: list[dict]) -> int:
    """How far partition 0's event time ran ahead of partition 1's, at worst, before partition 1 was read to its end.

    Before its first record partition 1 stands at its first timestamp (``BASE_TS``).
    """
    slow_seen, lead = BASE_TS, 0
    for row in sorted(rows, key=lambda r: r["wall"]):
        if row["kind"] == "slow":
            slow_seen = row["ts"]
        elif slow_seen < BASE_TS + 1_000 * (SLOW - 1):
            lead = max(lead, row["ts"] - slow_seen)
    return lead


def _assert_every_record_once(rows: list[dict]) -> None:
    for kind, n in (("fast", FAST), ("slow", SLOW)):
        indices = [row["index"] for row in rows if row["kind"] == kind]
        assert indices == list(range(n)), f"{kind}: {len(indices)} records, not each of {n} once in order"


@pytest.mark.parametrize("parallelism", [1, 2], ids=["splits-of-one-reader", "across-subtasks"])
def test_a_partition_far_ahead_waits_for_the_group(kafka_broker, kafka_topic, parallelism):
    topic = kafka_topic(partitions=2)
    rows = _run(kafka_broker.bootstrap_servers, topic, parallelism=parallelism, aligned=True)
    _assert_every_record_once(rows)
    lead = _max_lead_ms(rows)
    # the drift, plus what was fetched before the first answer and one fetch of partition 0 (~1 s each)
    assert lead < DRIFT_MS + 4_000, f"partition 0 ran {lead} ms of event time ahead of partition 1"


def test_without_alignment_the_partition_runs_ahead(kafka_broker, kafka_topic):
    """The control: the same job without alignment runs through all of partition 0's 20 s at once."""
    topic = kafka_topic(partitions=2)
    rows = _run(kafka_broker.bootstrap_servers, topic, parallelism=1, aligned=False)
    _assert_every_record_once(rows)
    assert _max_lead_ms(rows) == 5 * (FAST - 1)
