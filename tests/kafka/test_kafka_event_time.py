"""Event time of KafkaSource: Kafka's record timestamps, per-partition watermarks, idle partitions."""

from __future__ import annotations

from datetime import timedelta

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from flinklike_spark import KeyedProcessFunction, StreamExecutionEnvironment  # noqa: E402
from flinklike_spark.common.serialization import SimpleStringSchema  # noqa: E402
from flinklike_spark.common.watermark_strategy import WatermarkStrategy  # noqa: E402
from flinklike_spark.datastream.connectors.kafka import KafkaOffsetsInitializer, KafkaSource  # noqa: E402
from flinklike_spark.datastream.functions import WindowFunction  # noqa: E402
from flinklike_spark.datastream.window import Time, TumblingEventTimeWindows  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

BASE_TS = 1_700_000_000_000


def _produce(bootstrap: str, topic: str, records: list[tuple[int, str, int]]) -> None:
    """``(partition, value, timestamp)`` records, in order."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for partition, value, timestamp in records:
        producer.produce(topic, value.encode(), partition=partition, timestamp=timestamp)
        producer.poll(0)
    assert producer.flush(60) == 0


def _source(bootstrap: str, topic: str, *, bounded: bool) -> KafkaSource:
    builder = (
        KafkaSource.builder()
        .set_bootstrap_servers(bootstrap)
        .set_topics(topic)
        .set_starting_offsets(KafkaOffsetsInitializer.earliest())
        .set_value_only_deserializer(SimpleStringSchema())
    )
    if bounded:
        builder.set_bounded(KafkaOffsetsInitializer.latest())
    return builder.build()


class TimestampAndWatermark(KeyedProcessFunction):
    def process_element(self, value, ctx):
        yield {"value": value, "ts": ctx.timestamp(), "watermark": ctx.timer_service().current_watermark()}


def test_record_timestamps_are_event_time_and_watermarks_are_per_partition(kafka_broker, kafka_topic):
    # Partition 1 lags partition 0 by 5 s of event time. With one watermark over both partitions,
    # reading ahead in partition 0 would make partition 1's records late; per partition, none is.
    topic = kafka_topic(partitions=2)
    n = 2_000
    records = []
    for i in range(n):
        records.append((0, f"p0-{i}", BASE_TS + 10 * i))
        records.append((1, f"p1-{i}", BASE_TS + 10 * i - 5_000))
    _produce(kafka_broker.bootstrap_servers, topic, records)
    # small buffers: polls of 256 records, so batches of both partitions alternate
    env = StreamExecutionEnvironment.get_execution_environment(
        {"parallelism.default": 1, "taskmanager.memory.segment-size": "2kb"}
    )
    rows = list(
        env.from_source(
            _source(kafka_broker.bootstrap_servers, topic, bounded=True),
            WatermarkStrategy.for_monotonous_timestamps(),
            "kafka",
        )  # fmt: skip
        .key_by(lambda value: 0)
        .process(TimestampAndWatermark())
        .execute_and_collect("per-partition watermarks")
    )
    assert len(rows) == 2 * n
    expected_ts = {value: ts for _, value, ts in records}
    assert all(row["ts"] == expected_ts[row["value"]] for row in rows)  # Kafka's timestamps, no assigner
    late = [row for row in rows if row["ts"] <= row["watermark"]]
    assert late == []
    # the watermark did advance (to partition 1's timestamps, the slower one) while reading
    assert max(row["watermark"] for row in rows) >= BASE_TS + 10 * (n // 2) - 5_000


class CountPerWindow(WindowFunction):
    def apply(self, key, window, inputs):
        yield {"start": window.start, "count": sum(1 for _ in inputs)}


def test_an_idle_partition_does_not_hold_back_event_time(kafka_broker, kafka_topic):
    # Partition 1 never gets a record. Without with_idleness it would hold the watermark at its
    # minimum for ever, and no window would fire while the job runs.
    topic = kafka_topic(partitions=2)
    _produce(kafka_broker.bootstrap_servers, topic, [(0, f"r{i}", BASE_TS + 100 * i) for i in range(60)])
    env = StreamExecutionEnvironment.get_execution_environment({"parallelism.default": 1})
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_idleness(timedelta(milliseconds=500))
    windows = (
        env.from_source(_source(kafka_broker.bootstrap_servers, topic, bounded=False), strategy, "kafka")
        .key_by(lambda value: 0)
        .window(TumblingEventTimeWindows.of(Time.seconds(1)))
        .apply(CountPerWindow())
        .execute_and_collect("idle partition", limit=3)
    )
    window_ms = 1_000
    first = BASE_TS - BASE_TS % window_ms
    assert windows == [
        {"start": first + i * window_ms, "count": sum(1 for r in range(60) if (BASE_TS + 100 * r) // window_ms
                                                      == first // window_ms + i)}
        for i in range(3)
    ]  # fmt: skip


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_bounded_read_ends_at_transaction_markers_and_skips_aborted_records(kafka_broker, kafka_topic, isolation):
    # The last offsets of the partition are a commit marker, then an aborted transaction and its abort
    # marker: no message is returned for them, and the bounded source must still reach its stopping offset.
    topic = kafka_topic(partitions=1)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": kafka_broker.bootstrap_servers, "transactional.id": f"tx-{topic}"}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, f"committed-{i}".encode(), partition=0)
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, b"aborted", partition=0)
    producer.flush(30)
    producer.abort_transaction(30)
    source = (
        KafkaSource.builder()
        .set_bootstrap_servers(kafka_broker.bootstrap_servers)
        .set_topics(topic)
        .set_property("isolation.level", isolation)
        .set_starting_offsets(KafkaOffsetsInitializer.earliest())
        .set_bounded(KafkaOffsetsInitializer.latest())
        .set_value_only_deserializer(SimpleStringSchema())
        .build()
    )
    env = StreamExecutionEnvironment.get_execution_environment({"parallelism.default": 1})
    values = list(env.from_source(source, WatermarkStrategy.no_watermarks(), "tx").execute_and_collect("tx"))
    expected = [f"committed-{i}" for i in range(5)]
    assert values == (expected if isolation == "read_committed" else [*expected, "aborted"])
