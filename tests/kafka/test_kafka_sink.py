"""KafkaSink against a real broker: delivery guarantees, transactions across failures, settings checked at submission.

Every exactly-once test reads the topic back as a ``read_committed`` consumer
and asserts per key: each ``seq`` once, in order, with the keyed state's chain
unbroken (see ``kafka_jobs.NumberPerKey``). A transaction left open by a crashed
attempt would hold the consumer back, so reading to the end of every partition
also shows that no lingering transaction survived the restore.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import time
from pathlib import Path

import pytest

from connectors import SequenceSource
from connectors.kafka.transaction_admin import TransactionAdmin
from flinklike_spark import StreamExecutionEnvironment
from flinklike_spark._runtime.network.ports import free_port
from flinklike_spark.common.serialization import SimpleStringSchema
from flinklike_spark.datastream.connectors.kafka import (
    DeliveryGuarantee,
    KafkaRecordSerializationSchema,
    KafkaSink,
)
from flinklike_spark.errors import ConfigurationError, JobCancelledError, JobExecutionError
from tests.kafka.kafka_jobs import KeyOfLine, NumberPerKey, assert_each_key_exactly_once_in_order, read_committed
from tests.support.checkpoint_jobs import MODES, checkpoint_config, run_and_cancel
from tests.support.failover_jobs import task_executor_processes, wait_for

NUM_KEYS = 8
RECORDS_PER_KEY = 1_000


def kafka_sink(
    bootstrap_servers: str, topic: str, guarantee: DeliveryGuarantee, *, prefix: str | None = None, **properties: str
) -> KafkaSink:
    builder = (
        KafkaSink.builder()
        .set_bootstrap_servers(bootstrap_servers)
        .set_record_serializer(
            KafkaRecordSerializationSchema.builder()
            .set_topic(topic)
            .set_key_serialization_schema(KeyOfLine())
            .set_value_serialization_schema(SimpleStringSchema())
            .build()
        )
        .set_delivery_guarantee(guarantee)
    )
    if prefix is not None:
        builder.set_transactional_id_prefix(prefix)
    for key, value in properties.items():
        builder.set_property(key.replace("_", "."), value)
    return builder.build()


def build(
    config: dict,
    sink: KafkaSink,
    *,
    records_per_key: int = RECORDS_PER_KEY,
    seconds_per_record: float = 0.0,
    rows_per_second: float | None = None,
) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment(config)
    source = SequenceSource(
        num_keys=NUM_KEYS, records_per_key=records_per_key, rows_per_second=rows_per_second, batch_size=64
    )
    (
        env.from_source(source, name="seq")
        .uid("seq")
        .key_by("key")
        .process(NumberPerKey(seconds_per_record))
        .uid("number")
        .sink_to(sink)
        .uid("kafka")
    )
    return env


def open_transactions(bootstrap_servers: str, port: int) -> list[str]:
    admin = TransactionAdmin(bootstrap_servers)
    try:
        return [t.transactional_id for t in admin.list_open([("127.0.0.1", port)])]
    finally:
        admin.close()


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("guarantee", list(DeliveryGuarantee), ids=lambda g: g.name)
def test_a_bounded_job_writes_every_record_once(kafka_broker, kafka_topic, guarantee):
    topic = kafka_topic(partitions=3)
    config = {"parallelism.default": 2, "local.number-taskmanager": 2}
    build(config, kafka_sink(kafka_broker.bootstrap_servers, topic, guarantee)).execute("bounded kafka")
    # EXACTLY_ONCE: the last transaction is committed before execute() returns (read_committed sees it all).
    records = read_committed(kafka_broker.bootstrap_servers, topic, timeout=30)
    assert_each_key_exactly_once_in_order(records, NUM_KEYS, RECORDS_PER_KEY)
    assert open_transactions(kafka_broker.bootstrap_servers, kafka_broker.port) == []


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_producer_queue_smaller_than_a_batch_keeps_every_key_in_order(kafka_broker, kafka_topic):
    """A batch is produced in one call: records that do not fit the producer's queue wait for room, in order."""
    topic = kafka_topic(partitions=3)
    config = {"parallelism.default": 2, "local.number-taskmanager": 2}
    sink = kafka_sink(
        kafka_broker.bootstrap_servers, topic, DeliveryGuarantee.EXACTLY_ONCE, queue_buffering_max_messages="20"
    )
    build(config, sink).execute("a small producer queue")
    assert_each_key_exactly_once_in_order(read_committed(kafka_broker.bootstrap_servers, topic, timeout=30),
                                          NUM_KEYS, RECORDS_PER_KEY)  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_transaction_timeout_above_the_brokers_maximum_fails_at_submission(kafka_broker, kafka_topic):
    topic = kafka_topic()
    sink = kafka_sink(
        kafka_broker.bootstrap_servers, topic, DeliveryGuarantee.EXACTLY_ONCE, transaction_timeout_ms="3600000"
    )
    started = time.monotonic()
    with pytest.raises(ConfigurationError) as raised:
        build({"parallelism.default": 1}, sink).execute("too long a timeout")
    message = str(raised.value)
    assert "transaction.timeout.ms=3600000" in message
    assert "transaction.max.timeout.ms=900000" in message  # Kafka's default maximum: 15 minutes
    assert time.monotonic() - started < 30


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_unreachable_brokers_fail_at_submission():
    closed_port = free_port()
    sink = kafka_sink(f"127.0.0.1:{closed_port}", "t", DeliveryGuarantee.EXACTLY_ONCE)
    with pytest.raises(ConfigurationError, match=f"cannot reach the Kafka brokers '127.0.0.1:{closed_port}'"):
        build({"parallelism.default": 1}, sink).execute("no broker")


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("mode", "resume_parallelism"),
    [("aligned", 2), ("unaligned", 2), ("aligned-with-timeout", 2), ("aligned", 3)],
    ids=["aligned", "unaligned", "aligned-with-timeout", "aligned-rescaled-2-to-3"],
)
def test_exactly_once_across_cancel_and_resume(kafka_broker, kafka_topic, tmp_path, mode, resume_parallelism):
    assert mode in MODES
    topic = kafka_topic(partitions=4)
    servers = kafka_broker.bootstrap_servers
    directory = str(tmp_path / "checkpoints")
    sink = kafka_sink(servers, topic, DeliveryGuarantee.EXACTLY_ONCE)
    run_and_cancel(build(checkpoint_config(directory, mode), sink, rows_per_second=1500), directory, checkpoints=3)
    config = checkpoint_config(directory, mode, resume_parallelism) | {"execution.state-recovery.path": directory}
    build(config, sink).execute("resume kafka")
    assert_each_key_exactly_once_in_order(read_committed(servers, topic), NUM_KEYS, RECORDS_PER_KEY)
    assert open_transactions(servers, kafka_broker.port) == []


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_savepoint_resumed_against_a_recreated_broker_names_the_cause_and_the_way_out(kafka_cache_dir, tmp_path):
    """Was: INVALID_PRODUCER_ID_MAPPING "... Is transaction.timeout.ms (900000) shorter than a checkpoint plus a
    restart?", which names the wrong cause: the savepoint's transactions are unknown to the new cluster."""
    from checkpointing import list_completed_checkpoints
    from connectors.kafka.testing import LocalKafkaBroker
    from flinklike_spark.state_processor import SavepointWriter

    directory = str(tmp_path / "checkpoints")
    with LocalKafkaBroker(cache_dir=kafka_cache_dir, data_dir=tmp_path / "broker") as broker:
        port, servers = broker.port, broker.bootstrap_servers
        sink = kafka_sink(servers, broker.create_topic("out", partitions=2), DeliveryGuarantee.EXACTLY_ONCE)
        client = build(checkpoint_config(directory, "aligned"), sink, rows_per_second=400).execute_async("before")
        wait_for(lambda: client.job_id and len(list_completed_checkpoints(directory, client.job_id)) >= 2,
                 "two checkpoints")  # fmt: skip
        savepoint = client.stop_with_savepoint(60)
        with contextlib.suppress(JobCancelledError):
            client.wait(60)
    shutil.rmtree(tmp_path / "broker")  # the cluster and its data are gone; a new one serves the same address
    with LocalKafkaBroker(cache_dir=kafka_cache_dir, data_dir=tmp_path / "broker-2", port=port) as broker:
        topic = broker.create_topic("out", partitions=2)
        resumed = checkpoint_config(directory, "aligned") | {"execution.state-recovery.path": savepoint.path}
        with pytest.raises(JobExecutionError) as raised:
            build(resumed, sink).execute("resumed against another cluster")
        message = str(raised.value)
        assert f"of the restored checkpoint or savepoint is unknown to the Kafka cluster at '{servers}'" in message
        assert "KafkaTransactionUnknownError" in message and "transaction.timeout.ms" not in message
        # The way out the message names first: the savepoint without the sink's pending transactions.
        trimmed = SavepointWriter.from_existing_savepoint(savepoint.path).remove_operator("kafka").write(
            str(tmp_path / "trimmed"))  # fmt: skip
        config = checkpoint_config(str(tmp_path / "after"), "aligned") | {"execution.state-recovery.path": trimmed}
        build(config, sink).execute("resumed without the sink's transactions")
        seqs: dict[int, list[int]] = {}
        for _key, value, _partition in read_committed(servers, topic, timeout=30):
            key, seq, count = (int(part) for part in value.decode().split(","))
            assert count == seq + 1  # the keyed state was restored
            seqs.setdefault(key, []).append(seq)
        assert sorted(seqs) == list(range(NUM_KEYS))
        for key, got in seqs.items():  # each key continues where the savepoint left off, to its end
            assert got[0] > 0 and got == list(range(got[0], RECORDS_PER_KEY)), key


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_exactly_once_through_a_killed_task_executor(kafka_broker, kafka_topic, tmp_path):
    """A SIGKILLed TaskExecutor leaves an open transaction; the restored job aborts it and loses nothing."""
    topic = kafka_topic(partitions=4)
    servers = kafka_broker.bootstrap_servers
    directory = str(tmp_path / "checkpoints")
    config = checkpoint_config(directory, "aligned") | {
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": 3,
        "restart-strategy.fixed-delay.delay": "0 ms",
    }
    from checkpointing import list_completed_checkpoints

    env = build(config, kafka_sink(servers, topic, DeliveryGuarantee.EXACTLY_ONCE), rows_per_second=1500)
    client = env.execute_async("kafka through a kill")
    try:
        wait_for(
            lambda: client.job_id and len(list_completed_checkpoints(directory, client.job_id)) >= 2, "two checkpoints"
        )
        task_executor_processes()[0].send_signal(signal.SIGKILL)
        client.wait(timeout=240)
    except BaseException:
        with contextlib.suppress(Exception):
            client.cancel()
        raise
    assert client.num_restarts >= 1
    assert_each_key_exactly_once_in_order(read_committed(servers, topic), NUM_KEYS, RECORDS_PER_KEY)
    assert open_transactions(servers, kafka_broker.port) == []


class _KillBeforeFirstCommit:
    """Wraps a committer: the first commit in a TaskExecutor of the first attempt SIGKILLs that process instead.

    The kill comes after the checkpoint completed (its transactions are
    pre-committed and recorded) and before any of them is committed: the restored
    job must commit them from the checkpoint, or their records are lost.
    """

    def __init__(self, inner, marker: Path) -> None:
        self.inner, self.marker = inner, marker

    def commit(self, committables):
        import os

        import psutil

        from tests.support.processes import is_task_executor

        if committables and is_task_executor(psutil.Process()) and not self.marker.exists():
            self.marker.write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        self.inner.commit(committables)

    def close(self):
        self.inner.close()


class KillingKafkaSink(KafkaSink):
    marker: Path

    def create_committer_with(self, context):
        return _KillBeforeFirstCommit(super().create_committer_with(context), self.marker)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_task_executor_killed_between_pre_commit_and_commit_loses_nothing(kafka_broker, kafka_topic, tmp_path):
    topic = kafka_topic(partitions=2)
    servers = kafka_broker.bootstrap_servers
    base = kafka_sink(servers, topic, DeliveryGuarantee.EXACTLY_ONCE)
    sink = KillingKafkaSink(
        bootstrap_servers=servers,
        record_serializer=base.record_serializer,
        delivery_guarantee=DeliveryGuarantee.EXACTLY_ONCE,
    )
    sink.marker = tmp_path / "killed"
    directory = str(tmp_path / "checkpoints")
    config = checkpoint_config(directory, "aligned") | {
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": 3,
        "restart-strategy.fixed-delay.delay": "0 ms",
    }
    client = build(config, sink, rows_per_second=1500).execute_async("kill before commit")
    try:
        client.wait(timeout=240)
    except BaseException:
        with contextlib.suppress(Exception):
            client.cancel()
        raise
    assert sink.marker.exists(), "no TaskExecutor was killed before a commit"
    assert client.num_restarts >= 1
    assert_each_key_exactly_once_in_order(read_committed(servers, topic), NUM_KEYS, RECORDS_PER_KEY)
    assert open_transactions(servers, kafka_broker.port) == []


def test_the_sink_refuses_bad_settings():
    record_serializer = (
        KafkaRecordSerializationSchema.builder()
        .set_topic("t")
        .set_value_serialization_schema(SimpleStringSchema())
        .build()
    )
    with pytest.raises(ConfigurationError, match="set_bootstrap_servers"):
        KafkaSink.builder().set_record_serializer(record_serializer).build()
    with pytest.raises(ConfigurationError, match="transactional.id"):
        (
            KafkaSink.builder()
            .set_bootstrap_servers("x:1")
            .set_record_serializer(record_serializer)
            .set_property("transactional.id", "mine")
            .build()
        )
    with pytest.raises(ConfigurationError, match="set_topic"):
        KafkaRecordSerializationSchema.builder().set_value_serialization_schema(SimpleStringSchema()).build()
    with pytest.raises(ConfigurationError, match="serialize"):
        KafkaRecordSerializationSchema.builder().set_topic("t").set_value_serialization_schema(42)
    with pytest.raises(ConfigurationError, match="'not-a-number'"):
        (
            KafkaSink.builder()
            .set_bootstrap_servers("x:1")
            .set_record_serializer(record_serializer)
            .set_property("transaction.timeout.ms", "not-a-number")
            .build()
        )


def test_a_sink_flushing_to_a_stopped_broker_is_cancelled_at_once(kafka_cache_dir, tmp_path):
    """A barrier's flush waits up to 120 s for an unreachable broker; a cancel ends that wait (as Flink interrupts)."""
    from connectors.kafka.testing import LocalKafkaBroker
    from flinklike_spark.errors import JobCancelledError

    with LocalKafkaBroker(cache_dir=kafka_cache_dir, data_dir=tmp_path / "broker") as broker:
        topic = broker.create_topic("out", partitions=1)
        config = checkpoint_config(str(tmp_path / "checkpoints"), "aligned") | {"restart-strategy.type": "none"}
        sink = kafka_sink(broker.bootstrap_servers, topic, DeliveryGuarantee.AT_LEAST_ONCE)
        client = build(config, sink, records_per_key=None, rows_per_second=2_000).execute_async("flush")
        try:
            wait_for(lambda: read_committed(broker.bootstrap_servers, topic, timeout=2.0), "output", 120)
            broker.stop()
            time.sleep(3.0)  # the next barrier's flush now waits for the broker
            assert not client.done()
            client.cancel()
            with pytest.raises(JobCancelledError):
                client.wait(45)  # well below the flush's 120 s
        finally:
            if not client.done():
                client.cancel()
