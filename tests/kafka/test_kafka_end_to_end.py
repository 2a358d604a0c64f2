"""Kafka -> keyed state -> Kafka, exactly once, written with PyFlink's API (only the import prefix differs).

The job reads a 4-partition topic of ``{"key", "seq"}`` JSON records, keeps a
count per key in a ``ValueState`` (raising if a key's ``seq`` ever skips or
repeats), and writes ``"key,seq,count"`` with an EXACTLY_ONCE ``KafkaSink``.
It survives a SIGKILLed TaskExecutor, is cancelled, and is resumed from its
latest checkpoint at parallelism 3 while more input arrives; a
``read_committed`` consumer must then see every input record's result exactly
once, per key in order. The broker-restart test stops the broker under a
running job instead.
"""

from __future__ import annotations

import contextlib
import signal
import time

import pytest

pytest.importorskip("confluent_kafka")

from flinklike_spark.common import Configuration, Types, WatermarkStrategy  # noqa: E402
from flinklike_spark.common.serialization import SimpleStringSchema  # noqa: E402
from flinklike_spark.datastream import StreamExecutionEnvironment  # noqa: E402
from flinklike_spark.datastream.connectors.kafka import (  # noqa: E402
    DeliveryGuarantee,
    KafkaOffsetsInitializer,
    KafkaRecordSerializationSchema,
    KafkaSink,
    KafkaSource,
)
from flinklike_spark.datastream.formats.json import JsonRowDeserializationSchema  # noqa: E402
from flinklike_spark.datastream.functions import KeyedProcessFunction, RuntimeContext  # noqa: E402
from flinklike_spark.datastream.state import ValueStateDescriptor  # noqa: E402
from flinklike_spark.errors import JobCancelledError  # noqa: E402
from tests.kafka.kafka_jobs import (  # noqa: E402
    KeyOfLine,
    assert_each_key_exactly_once_in_order,
    produce_sequences,
    read_committed,
)
from tests.support.failover_jobs import task_executor_processes, wait_for  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

NUM_KEYS = 8
PER_KEY = 600  # per half of the input


class CountPerKey(KeyedProcessFunction):
    def open(self, runtime_context: RuntimeContext):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx: KeyedProcessFunction.Context):
        seen = self.count.value() or 0
        if value["seq"] != seen:
            raise ValueError(f"key {value['key']}: seq {value['seq']} after {seen} records")
        self.count.update(seen + 1)
        yield f"{value['key']},{value['seq']},{seen + 1}"


def pipeline(servers: str, in_topic: str, out_topic: str, config: Configuration) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.enable_checkpointing(200)
    row = Types.ROW_NAMED(["key", "seq"], [Types.INT(), Types.LONG()])
    source = (
        KafkaSource.builder()
        .set_bootstrap_servers(servers)
        .set_topics(in_topic)
        .set_group_id("end-to-end")
        .set_starting_offsets(KafkaOffsetsInitializer.earliest())
        .set_value_only_deserializer(JsonRowDeserializationSchema.builder().type_info(row).build())
        .build()
    )
    sink = (
        KafkaSink.builder()
        .set_bootstrap_servers(servers)
        .set_record_serializer(
            KafkaRecordSerializationSchema.builder()
            .set_topic(out_topic)
            .set_key_serialization_schema(KeyOfLine())
            .set_value_serialization_schema(SimpleStringSchema())
            .build()
        )
        .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE)
        .set_transactional_id_prefix(f"e2e-{out_topic}")
        .build()
    )
    ds = env.from_source(source, WatermarkStrategy.for_monotonous_timestamps(), "kafka source").uid("source")
    ds.key_by(lambda r: r["key"], key_type=Types.INT()).process(CountPerKey(), output_type=Types.STRING()).uid(
        "count"
    ).sink_to(sink).uid("sink")
    return env


MODE_SETTINGS = {
    "aligned": {},
    "unaligned": {"execution.checkpointing.unaligned.enabled": "true"},
    "aligned-with-timeout": {
        "execution.checkpointing.unaligned.enabled": "true",
        "execution.checkpointing.aligned-checkpoint-timeout": "5 ms",
    },
}


def configuration(directory: str, parallelism: int, **extra: str) -> Configuration:
    return Configuration(
        {
            "parallelism.default": str(parallelism),
            "local.number-taskmanager": "2",
            "execution.checkpointing.dir": directory,
            "restart-strategy.type": "fixed-delay",
            "restart-strategy.fixed-delay.attempts": "5",
            "restart-strategy.fixed-delay.delay": "200 ms",
            **extra,
        }
    )


def committed_lines(servers: str, topic: str) -> int:
    return len(read_committed(servers, topic, timeout=30))


@pytest.mark.parametrize("mode", list(MODE_SETTINGS))
def test_kafka_to_kafka_exactly_once_through_a_kill_and_a_resume_at_parallelism_3(
    kafka_broker, kafka_topic, tmp_path, mode
):
    servers = kafka_broker.bootstrap_servers
    in_topic, out_topic = kafka_topic(partitions=4), kafka_topic(partitions=4)
    directory = str(tmp_path / "checkpoints")
    produce_sequences(servers, in_topic, num_keys=NUM_KEYS, per_key=PER_KEY, partitions=4)

    config = configuration(directory, 2, **MODE_SETTINGS[mode])
    client = pipeline(servers, in_topic, out_topic, config).execute_async("e2e")
    try:
        wait_for(lambda: committed_lines(servers, out_topic) > NUM_KEYS * PER_KEY // 4, "output before the kill", 120)
        task_executor_processes()[0].send_signal(signal.SIGKILL)
        wait_for(lambda: client.num_restarts >= 1, "the restart", 60)
        wait_for(lambda: committed_lines(servers, out_topic) == NUM_KEYS * PER_KEY, "the first half's output", 180)
        client.cancel()
        with pytest.raises(JobCancelledError):
            client.wait(60)
    except BaseException:
        with contextlib.suppress(Exception):
            client.cancel()
        raise

    produce_sequences(servers, in_topic, num_keys=NUM_KEYS, per_key=PER_KEY, partitions=4, first_seq=PER_KEY)
    config = configuration(
        str(tmp_path / "checkpoints-2"), 3, **MODE_SETTINGS[mode], **{"execution.state-recovery.path": directory}
    )
    client = pipeline(servers, in_topic, out_topic, config).execute_async("e2e resumed at parallelism 3")
    try:
        wait_for(lambda: committed_lines(servers, out_topic) >= 2 * NUM_KEYS * PER_KEY, "all output", 180)
        time.sleep(1.0)  # a duplicate would be committed by now
    finally:
        client.cancel()
        with contextlib.suppress(JobCancelledError):
            client.wait(60)
    assert_each_key_exactly_once_in_order(read_committed(servers, out_topic), NUM_KEYS, 2 * PER_KEY)


def test_the_job_recovers_when_the_broker_restarts_under_it(kafka_cache_dir, tmp_path):
    """The broker is stopped mid-job and started again: the job fails over under its restart strategy."""
    from connectors.kafka.testing import LocalKafkaBroker

    with LocalKafkaBroker(cache_dir=kafka_cache_dir, data_dir=tmp_path / "broker") as broker:
        servers = broker.bootstrap_servers
        in_topic, out_topic = broker.create_topic("in", partitions=4), broker.create_topic("out", partitions=4)
        produce_sequences(servers, in_topic, num_keys=NUM_KEYS, per_key=PER_KEY, partitions=4)
        config = configuration(
            str(tmp_path / "checkpoints"),
            2,
            **{
                "restart-strategy.fixed-delay.attempts": "30",
                "restart-strategy.fixed-delay.delay": "1 s",
            },
        )
        client = pipeline(servers, in_topic, out_topic, config).execute_async("broker restart")
        try:
            wait_for(lambda: committed_lines(servers, out_topic) > 0, "output before the broker stops", 120)
            broker.stop()
            time.sleep(3)
            broker.start()
            produce_sequences(servers, in_topic, num_keys=NUM_KEYS, per_key=PER_KEY, partitions=4, first_seq=PER_KEY)
            wait_for(lambda: committed_lines(servers, out_topic) >= 2 * NUM_KEYS * PER_KEY, "all output", 240)
            time.sleep(1.0)
        finally:
            client.cancel()
            with contextlib.suppress(JobCancelledError):
                client.wait(120)
        assert_each_key_exactly_once_in_order(read_committed(servers, out_topic), NUM_KEYS, 2 * PER_KEY)


def test_a_job_whose_broker_is_gone_is_cancelled_promptly(kafka_cache_dir, tmp_path):
    """Offset commits queued for a group coordinator that is gone must not hold the cancel: librdkafka's
    consumer close waits for them (seen: a job cancelled after a broker restart did not end in 120 s)."""
    from connectors.kafka.testing import LocalKafkaBroker

    with LocalKafkaBroker(cache_dir=kafka_cache_dir, data_dir=tmp_path / "broker") as broker:
        servers = broker.bootstrap_servers
        in_topic, out_topic = broker.create_topic("in", partitions=4), broker.create_topic("out", partitions=4)
        produce_sequences(servers, in_topic, num_keys=NUM_KEYS, per_key=PER_KEY, partitions=4)
        config = configuration(str(tmp_path / "checkpoints"), 2, **{"restart-strategy.type": "none"})
        client = pipeline(servers, in_topic, out_topic, config).execute_async("broker gone")
        try:
            wait_for(lambda: committed_lines(servers, out_topic) > 0, "output before the broker stops", 120)
            broker.stop()
            time.sleep(3.0)  # checkpoints go on: their offset commits queue up for the coordinator
            client.cancel()
            started = time.monotonic()
            with pytest.raises(JobCancelledError):
                client.wait(60)
            assert time.monotonic() - started < 40  # 45 s before the fix (librdkafka gave up then); 10-20 s now
        finally:
            if not client.done():
                client.cancel()


def test_the_kafka_example_runs_as_documented(kafka_cache_dir, tmp_path):
    """``python examples/kafka_exactly_once.py`` starts its own broker and checks its output exactly once."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = os.environ | {"PYTHONPATH": str(root), "FLINKLIKE_CACHE": str(kafka_cache_dir)}
    done = subprocess.run(
        [sys.executable, str(root / "examples" / "kafka_exactly_once.py"), "--work-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=360,
        env=env,
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr[-3000:]}"
    assert "stopped with savepoint" in done.stdout
    assert "10000 totals" in done.stdout and "exactly once (read_committed): True" in done.stdout


@pytest.mark.timeout(180)
def test_a_commit_to_a_broker_that_is_gone_gives_way_to_a_cancel(kafka_cache_dir, tmp_path):
    """The committer's wait for ``commit_transaction`` (up to 120 s) looks for its task's cancel: a
    cancelled task leaves the pre-committed transaction open for the next restore and ends at once."""
    import confluent_kafka

    from connectors.kafka import sink as kafka_sink
    from connectors.kafka.testing import LocalKafkaBroker
    from flinklike_spark.connector_api import CommitterContext
    from flinklike_spark.errors import CancelTaskError

    with LocalKafkaBroker(cache_dir=kafka_cache_dir, data_dir=tmp_path / "broker") as broker:
        servers = broker.bootstrap_servers
        topic = broker.create_topic("out", partitions=1)
        producer = confluent_kafka.Producer({"bootstrap.servers": servers, "transactional.id": "gone-0"})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(topic, value=b"pre-committed")
        assert producer.flush(30) == 0
        sink = KafkaSink.builder().set_bootstrap_servers(servers).set_record_serializer(
            KafkaRecordSerializationSchema.builder().set_topic(topic).set_value_serialization_schema(
                SimpleStringSchema()).build()
        ).set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE).build()  # fmt: skip
        cancel_at = [float("inf")]
        committer = sink.create_committer_with(CommitterContext(cancelled=lambda: time.monotonic() >= cancel_at[0]))
        committable = kafka_sink.KafkaCommittable(transactional_id="gone-0", producer_id=0, producer_epoch=0)
        with kafka_sink._AWAITING_LOCK:
            kafka_sink._AWAITING_COMMIT["gone-0"] = producer
        broker.stop()
        cancel_at[0] = time.monotonic() + 3.0
        with pytest.raises(CancelTaskError, match="gone-0"):
            committer.commit([committable])
        assert time.monotonic() - cancel_at[0] < 2.0  # it was waiting for the broker, and gave way within a slice
        assert "gone-0" not in kafka_sink._AWAITING_COMMIT
        committer.close()
