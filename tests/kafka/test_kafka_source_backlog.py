"""A Kafka reader's backlog (Flink's ``pendingRecords``, the autoscaler's lag) on a real broker."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("confluent_kafka")

from flinklike_spark.connector_api import SourceReaderContext  # noqa: E402
from tests.kafka.kafka_jobs import produce_sequences, source  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _read(reader, rows: int, timeout: float = 30.0) -> int:
    read, deadline = 0, time.monotonic() + timeout
    while read < rows and time.monotonic() < deadline:
        result = reader.poll_next(min(100, rows - read))
        read += result.batch.num_rows if result.batch is not None else 0
        if result.batch is None:
            time.sleep(0.02)
    return read


def test_a_reader_reports_the_lag_of_its_partitions_as_pending_records(kafka_broker, kafka_topic):
    topic = kafka_topic(partitions=2)
    total = produce_sequences(kafka_broker.bootstrap_servers, topic, num_keys=4, per_key=250, partitions=2)
    kafka = source(kafka_broker.bootstrap_servers, topic, bounded=False)
    reader = kafka.create_reader(SourceReaderContext(subtask_index=0, parallelism=1))
    reader.add_splits(kafka.create_splits(1))
    reader.open()
    try:
        # None until a fetch told a high watermark; librdkafka may have fetched in the background since open()
        assert reader.pending_records() in (None, total)
        read = _read(reader, 300)
        assert read == 300
        assert reader.pending_records() == total - read  # rows fetched and not returned are lag too
        read += _read(reader, total - read)
        assert read == total and reader.pending_records() == 0
        produce_sequences(kafka_broker.bootstrap_servers, topic, num_keys=4, per_key=10, partitions=2, first_seq=250)
        deadline = time.monotonic() + 30
        while reader.pending_records() != 40 and time.monotonic() < deadline:
            time.sleep(0.05)  # librdkafka fetches in the background: a fetch tells the new end
        assert reader.pending_records() == 40  # nothing returned meanwhile: the new records are all lag
    finally:
        reader.close()


def _reader_that_read_everything(kafka_broker, topic: str):
    """A reader of ``topic``'s 2 partitions that returned the 100 records produced to them."""
    produced = produce_sequences(kafka_broker.bootstrap_servers, topic, num_keys=4, per_key=25, partitions=2)
    kafka = source(kafka_broker.bootstrap_servers, topic, bounded=False)
    reader = kafka.create_reader(SourceReaderContext(subtask_index=0, parallelism=1))
    reader.add_splits(kafka.create_splits(1))
    reader.open()
    assert _read(reader, produced) == produced
    return reader


def test_a_reader_whose_consumer_stopped_fetching_replaces_it_and_reads_on(kafka_broker, kafka_topic, monkeypatch):
    """librdkafka's fetcher can stall after a broker restart (confluentinc/librdkafka#5153): stand-in, the
    partitions paused behind the reader's back; the reader sees nothing fetched while the broker has records."""
    from confluent_kafka import TopicPartition

    from connectors.kafka import source_reader

    monkeypatch.setattr(source_reader, "_STALL_TIMEOUT_S", 1.0)
    topic = kafka_topic(partitions=2)
    reader = _reader_that_read_everything(kafka_broker, topic)
    try:
        stalled = reader._consumer
        stalled.pause([TopicPartition(topic, p) for p in (0, 1)])
        more = produce_sequences(kafka_broker.bootstrap_servers, topic, num_keys=4, per_key=10, partitions=2,
                                 first_seq=25)  # fmt: skip
        assert _read(reader, more, timeout=30) == more  # read by the replacement
        assert reader._consumer is not stalled
        assert reader.pending_records() == 0
        assert _read(reader, 1, timeout=3) == 0  # nothing twice
    finally:
        reader.close()


def test_a_reader_at_the_end_of_its_partitions_keeps_its_consumer(kafka_broker, kafka_topic, monkeypatch):
    from connectors.kafka import source_reader

    monkeypatch.setattr(source_reader, "_STALL_TIMEOUT_S", 0.5)
    reader = _reader_that_read_everything(kafka_broker, kafka_topic(partitions=2))
    try:
        consumer = reader._consumer
        assert _read(reader, 1, timeout=4) == 0  # idle for several stall timeouts, nothing to read
        assert reader._consumer is consumer
    finally:
        reader.close()
