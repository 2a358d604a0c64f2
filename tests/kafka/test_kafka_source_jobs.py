"""KafkaSource in real jobs on a real broker: exactly once through bounded reads, a killed TaskExecutor,
a resume at another parallelism; offsets committed to the group; partition discovery."""

from __future__ import annotations

import contextlib
import signal

import pytest

pytest.importorskip("confluent_kafka")

from flinklike_spark import StreamExecutionEnvironment  # noqa: E402
from flinklike_spark.common.watermark_strategy import WatermarkStrategy  # noqa: E402
from tests.kafka.kafka_jobs import (  # noqa: E402
    CheckedSequence,
    assert_each_once_in_order,
    produce_sequences,
    source,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

NUM_KEYS = 8
PER_KEY = 500


def test_bounded_read_of_four_partitions_is_exactly_once_and_in_order(kafka_broker, kafka_topic):
    topic = kafka_topic(partitions=4)
    produce_sequences(kafka_broker.bootstrap_servers, topic, num_keys=NUM_KEYS, per_key=PER_KEY, partitions=4)
    env = StreamExecutionEnvironment.get_execution_environment({"parallelism.default": 2})
    rows = (
        env.from_source(
            source(kafka_broker.bootstrap_servers, topic, bounded=True), WatermarkStrategy.no_watermarks(), "kafka"
        )  # fmt: skip
        .key_by(lambda r: r["key"])
        .process(CheckedSequence())
        .execute_and_collect("bounded kafka read")
    )
    assert_each_once_in_order(list(rows), num_keys=NUM_KEYS, per_key=PER_KEY)


def _config(directory, parallelism: int = 2, **extra) -> dict:
    from tests.support.checkpoint_jobs import checkpoint_config

    return checkpoint_config(str(directory), "aligned", parallelism) | extra


def _collect_until_complete(rows_iterator, *, num_keys: int, per_key: int) -> list[dict]:
    """Rows until every key's last ``seq`` arrived (then the job is cancelled)."""
    rows, done = [], set()
    with rows_iterator:
        for row in rows_iterator:
            rows.append(row)
            if row["seq"] == per_key - 1:
                done.add(row["key"])
                if len(done) == num_keys:
                    break
    return rows


def test_unbounded_job_survives_a_sigkilled_task_executor_exactly_once(kafka_broker, kafka_topic, tmp_path):
    import threading

    from checkpointing import list_completed_checkpoints
    from tests.support.failover_jobs import task_executor_processes, wait_for

    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=4)
    half = PER_KEY // 2
    produce_sequences(bootstrap, topic, num_keys=NUM_KEYS, per_key=half, partitions=4)
    directory = tmp_path / "checkpoints"
    config = _config(directory, **{
        "restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.attempts": 3,
        "restart-strategy.fixed-delay.delay": "0 ms",
    })  # fmt: skip
    env = StreamExecutionEnvironment.get_execution_environment(config)
    rows = (
        env.from_source(source(bootstrap, topic, bounded=False), WatermarkStrategy.no_watermarks(), "kafka")
        .uid("kafka")
        .key_by(lambda r: r["key"])
        .process(CheckedSequence(seconds_per_record=0.001))
        .uid("check")
        .execute_and_collect("kafka through a killed TaskExecutor")
    )
    killed: list[int] = []
    failures: list[BaseException] = []

    def kill_after_a_checkpoint() -> None:
        try:
            wait_for(lambda: list_completed_checkpoints(str(directory)), "a completed checkpoint")
            victim = task_executor_processes()[0]
            victim.send_signal(signal.SIGKILL)
            killed.append(victim.pid)
            produce_sequences(bootstrap, topic, num_keys=NUM_KEYS, per_key=PER_KEY - half, partitions=4,
                              first_seq=half)  # fmt: skip
        except BaseException as e:  # reported by the test thread
            failures.append(e)

    killer = threading.Thread(target=kill_after_a_checkpoint, daemon=True)
    killer.start()
    collected = _collect_until_complete(rows, num_keys=NUM_KEYS, per_key=PER_KEY)
    killer.join(30)
    assert not failures, failures
    assert killed, "no TaskExecutor was killed"
    assert_each_once_in_order(collected, num_keys=NUM_KEYS, per_key=PER_KEY)


def test_resume_at_another_parallelism_reads_no_partition_twice_and_skips_none(kafka_broker, kafka_topic, tmp_path):
    from checkpointing import list_completed_checkpoints
    from connectors import CollectSink
    from tests.support.checkpoint_jobs import run_and_cancel

    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=4)
    half = PER_KEY // 2  # the second half is written after the first job stopped: every key has rows left
    produce_sequences(bootstrap, topic, num_keys=NUM_KEYS, per_key=half, partitions=4)
    directory = tmp_path / "checkpoints"

    def pipeline(env):  # discovery on: a restored split given to a non-owner would be read again by its owner
        return (
            env.from_source(
                source(bootstrap, topic, bounded=False, **{"partition.discovery.interval.ms": "200"}),
                WatermarkStrategy.no_watermarks(),
                "kafka",
            )  # fmt: skip
            .uid("kafka")
            .key_by(lambda r: r["key"])
            .process(CheckedSequence(seconds_per_record=0.002))
            .uid("check")
        )

    first = StreamExecutionEnvironment.get_execution_environment(_config(directory, 2))
    pipeline(first).sink_to(CollectSink("first"))
    job_id = run_and_cancel(first, str(directory), checkpoints=3)
    restored = list_completed_checkpoints(str(directory), job_id)[-1]
    produce_sequences(bootstrap, topic, num_keys=NUM_KEYS, per_key=PER_KEY - half, partitions=4, first_seq=half)

    resumed = StreamExecutionEnvironment.get_execution_environment(
        _config(directory, 3, **{"execution.state-recovery.path": str(directory)})
    )
    rows = _collect_until_complete(pipeline(resumed).execute_and_collect("resumed at 3"), num_keys=NUM_KEYS,
                                   per_key=PER_KEY)  # fmt: skip
    first_seen: dict[int, int] = {}
    for row in rows:
        first_seen.setdefault(row["key"], row["seq"])
    # CheckedSequence's restored state makes every key continue exactly where the checkpoint left it
    # (it raises otherwise); the resumed job started past the beginning and read to the end, once.
    assert restored.checkpoint_id >= 3
    assert sorted(first_seen) == list(range(NUM_KEYS))
    assert any(seq > 0 for seq in first_seen.values()), f"the resumed job started from scratch: {first_seen}"
    for key, start in first_seen.items():
        seqs = [r["seq"] for r in rows if r["key"] == key]
        assert seqs == list(range(start, PER_KEY)), f"key {key}: not each of {start}..{PER_KEY - 1} once, in order"


def test_offsets_are_in_the_checkpoint_and_committed_to_the_group_on_completion(kafka_broker, kafka_topic, tmp_path):
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    from checkpointing import decode_operator_state, list_completed_checkpoints, read_operator_state
    from connectors import CollectSink
    from tests.support.failover_jobs import wait_for

    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=4)
    total = produce_sequences(bootstrap, topic, num_keys=NUM_KEYS, per_key=50, partitions=4)
    group = f"group-{topic}"
    directory = tmp_path / "checkpoints"
    env = StreamExecutionEnvironment.get_execution_environment(_config(directory, 2))
    (
        env.from_source(
            source(bootstrap, topic, bounded=False, group_id=group), WatermarkStrategy.no_watermarks(), "kafka"
        )  # fmt: skip
        .uid("kafka")
        .sink_to(CollectSink("rows"))
    )
    client = env.execute_async("commits offsets")
    checker = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    partitions = [TopicPartition(topic, p) for p in range(4)]
    try:

        def all_committed() -> bool:
            try:
                return sum(max(tp.offset, 0) for tp in checker.committed(partitions, timeout=10)) == total
            except KafkaException as e:  # the group coordinator is still loading: ask again
                assert e.args[0].retriable() or e.args[0].code() == KafkaError.NOT_COORDINATOR, e
                return False

        wait_for(all_committed, "the group's committed offsets to reach the end of every partition", timeout=120)
        checkpoint = list_completed_checkpoints(str(directory), client.job_id)[-1]
    finally:
        checker.close()
        with contextlib.suppress(Exception):
            client.cancel()
            client.wait(60)
    # the offsets are source reader state in the checkpoint, readable like any other operator state
    table = read_operator_state(str(directory), client.job_id, checkpoint.checkpoint_id, "kafka",
                                state_name="source_splits")  # fmt: skip
    splits = {entry.key: entry.value for entry in decode_operator_state(table)}
    assert sorted(splits) == [f"{topic}-{p}" for p in range(4)]
    assert sum(split.next_offset for split in splits.values()) == total


def test_partition_discovery_reads_partitions_added_while_the_job_runs(kafka_broker, kafka_topic):
    from confluent_kafka.admin import AdminClient, NewPartitions

    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=1)
    num_keys = 3  # key k is written to partition k % 3: keys 1 and 2 only once partitions 1 and 2 exist
    produce_sequences(bootstrap, topic, num_keys=1, per_key=100, partitions=1)
    env = StreamExecutionEnvironment.get_execution_environment({"parallelism.default": 2})
    rows = (
        env.from_source(
            source(bootstrap, topic, bounded=False, **{"partition.discovery.interval.ms": "300"}),
            WatermarkStrategy.no_watermarks(),
            "kafka",
        )  # fmt: skip
        .key_by(lambda r: r["key"])
        .process(CheckedSequence())
        .execute_and_collect("discovery")
    )
    collected = []
    with rows:
        for row in rows:
            collected.append(row)
            if len(collected) == 100:  # partition 0 read: add two partitions, write to all three
                admin = AdminClient({"bootstrap.servers": bootstrap})
                admin.create_partitions([NewPartitions(topic, 3)])[topic].result(30)
                produce_sequences(bootstrap, topic, num_keys=1, per_key=100, partitions=1, first_seq=100)
                _produce_to(bootstrap, topic, keys_and_partitions=[(1, 1), (2, 2)], per_key=200)
            if len(collected) == 3 * 200:
                break
    per_key: dict[int, list[int]] = {}
    for row in collected:
        per_key.setdefault(row["key"], []).append(row["seq"])
    assert per_key == {key: list(range(200)) for key in range(num_keys)}


def _produce_to(bootstrap: str, topic: str, *, keys_and_partitions: list[tuple[int, int]], per_key: int) -> None:
    import json

    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for seq in range(per_key):
        for key, partition in keys_and_partitions:
            producer.produce(topic, json.dumps({"key": key, "seq": seq}).encode(), partition=partition)
    assert producer.flush(60) == 0


@pytest.mark.timeout(240)
def test_a_job_reads_on_through_a_broker_restart_exactly_once(kafka_cache_dir, tmp_path):
    from connectors.kafka.testing import LocalKafkaBroker

    with LocalKafkaBroker(cache_dir=kafka_cache_dir, data_dir=tmp_path / "kafka") as broker:
        bootstrap = broker.bootstrap_servers
        topic = broker.create_topic("restarted", partitions=4)
        half = PER_KEY // 2
        produce_sequences(bootstrap, topic, num_keys=NUM_KEYS, per_key=half, partitions=4)
        env = StreamExecutionEnvironment.get_execution_environment(_config(tmp_path / "checkpoints"))
        rows = (
            env.from_source(source(bootstrap, topic, bounded=False), WatermarkStrategy.no_watermarks(), "kafka")
            .key_by(lambda r: r["key"])
            .process(CheckedSequence())
            .execute_and_collect("through a broker restart")
        )
        collected = []
        with rows:
            for row in rows:
                collected.append(row)
                if len(collected) == 100:
                    broker.restart()  # the job's consumers reconnect; records keep their offsets
                    produce_sequences(bootstrap, topic, num_keys=NUM_KEYS, per_key=PER_KEY - half, partitions=4,
                                      first_seq=half)  # fmt: skip
                if len(collected) == NUM_KEYS * PER_KEY:
                    break
    assert_each_once_in_order(collected, num_keys=NUM_KEYS, per_key=PER_KEY)
