"""The local Kafka broker the Kafka tests run against: start, serve, restart on the same data, fetch."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")


def _produce(bootstrap: str, topic: str, values: list[bytes], partitions: int) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i, value in enumerate(values):
        producer.produce(topic, value, partition=i % partitions)
    assert producer.flush(30) == 0


def _consume_all(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 30.0) -> list[bytes]:
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"check-{topic}", "enable.auto.commit": False}
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                         for p in range(partitions)])  # fmt: skip
        got: list[bytes] = []
        deadline = time.monotonic() + timeout
        while len(got) < expected and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value())
        return got
    finally:
        consumer.close()


@pytest.mark.slow  # a broker JVM
def test_session_broker_serves_a_topic(kafka_broker, kafka_topic):
    topic = kafka_topic(partitions=3)
    values = [str(i).encode() for i in range(30)]
    _produce(kafka_broker.bootstrap_servers, topic, values, 3)
    assert sorted(_consume_all(kafka_broker.bootstrap_servers, topic, 3, 30)) == sorted(values)
    assert kafka_broker.bootstrap_servers.startswith("127.0.0.1:")


def _commit_when_the_coordinator_is_ready(consumer, offset, timeout: float = 60.0) -> None:
    """Commit ``offset``: a fresh broker's group coordinator answers "load in progress" (retriable) while it
    loads ``__consumer_offsets``, which a busy machine can stretch past librdkafka's own commit retries."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            consumer.commit(offsets=[offset], asynchronous=False)
            return
        except confluent_kafka.KafkaException as exc:
            if not exc.args[0].retriable() or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_restart_keeps_port_topics_records_and_committed_offsets(kafka_cache_dir, tmp_path):
    from connectors.kafka.testing import LocalKafkaBroker

    with LocalKafkaBroker(cache_dir=kafka_cache_dir, data_dir=tmp_path / "data") as broker:
        bootstrap = broker.bootstrap_servers
        broker.create_topic("kept", partitions=2)
        _produce(bootstrap, "kept", [b"a", b"b", b"c", b"d"], 2)
        consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "g"})
        _commit_when_the_coordinator_is_ready(consumer, confluent_kafka.TopicPartition("kept", 0, 2))
        consumer.close()
        first_pid = broker.pid

        broker.restart()
        assert broker.bootstrap_servers == bootstrap and broker.pid != first_pid
        assert sorted(_consume_all(bootstrap, "kept", 2, 4)) == [b"a", b"b", b"c", b"d"]
        consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "g"})
        [committed] = consumer.committed([confluent_kafka.TopicPartition("kept", 0)], timeout=30)
        consumer.close()
        assert committed.offset == 2

        broker.kill()  # a crash: flushed records survive it too (the producer waited for the acks)
        assert not broker.running
        broker.start()
        assert sorted(_consume_all(bootstrap, "kept", 2, 4)) == [b"a", b"b", b"c", b"d"]
    assert not broker.running and (tmp_path / "data").exists()  # a given data dir is kept


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_concurrent_jar_fetches_are_safe(tmp_path):
    import shutil

    if shutil.which("mvn") is None:
        pytest.skip("needs Maven ('mvn' is not on PATH)")
    code = "import sys; from connectors.kafka.testing import fetch_kafka_jars;print(fetch_kafka_jars(sys.argv[1]))"
    runs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
            for _ in range(2)]  # fmt: skip
    outputs = [run.communicate(timeout=280)[0].strip() for run in runs]
    assert [run.returncode for run in runs] == [0, 0]
    from connectors.kafka.testing import KAFKA_VERSION, _jar_dir

    target = _jar_dir(tmp_path, KAFKA_VERSION)
    assert outputs[0] == outputs[1] == str(target)
    assert any(target.glob(f"kafka_2.13-{KAFKA_VERSION}.jar"))
    # nothing half-fetched is left behind
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name, f"{target.name}.lock"]


def test_random_cluster_ids_never_look_like_an_option():
    # Regression: an id starting with "-" made kafka.tools.StorageTool format fail ("expected one argument").
    from connectors.kafka.testing import _random_cluster_id

    ids = [_random_cluster_id() for _ in range(3000)]
    assert not [i for i in ids if i.startswith("-")]
    assert all(len(i) == 22 for i in ids) and len(set(ids)) == len(ids)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_records_with_old_timestamps_are_kept(kafka_cache_dir, tmp_path):
    # Regression: Kafka's default 7-day retention, judged by record timestamps, deleted the tests'
    # records with fixed 2023 timestamps a few minutes into the session (a resumed job then found its
    # offsets out of range). Retention is checked every 0.5 s here instead of every 5 minutes.
    from connectors.kafka.testing import LocalKafkaBroker

    often = {"log.retention.check.interval.ms": "500", "log.initial.task.delay.ms": "0"}
    with LocalKafkaBroker(cache_dir=kafka_cache_dir, data_dir=tmp_path / "data", extra_properties=often) as broker:
        broker.create_topic("old", partitions=1)
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers})
        for i in range(10):
            producer.produce("old", str(i).encode(), timestamp=1_700_000_000_000 + i)
        assert producer.flush(30) == 0
        time.sleep(4)  # several retention checks
        consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "g"})
        low, high = consumer.get_watermark_offsets(confluent_kafka.TopicPartition("old", 0), timeout=30)
        consumer.close()
        assert (low, high) == (0, 10)
