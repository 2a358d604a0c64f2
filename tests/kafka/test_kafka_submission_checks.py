"""What a Kafka job finds out when it is submitted: unreachable brokers and missing topics, with the values named;
and librdkafka's log lines in Python logging, rate-limited, instead of on stderr."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import time
from datetime import timedelta
from pathlib import Path

import pytest

pytest.importorskip("confluent_kafka")

from connectors.kafka.clients import RateLimitedLibrdkafkaLog  # noqa: E402
from flinklike_spark import StreamExecutionEnvironment  # noqa: E402
from flinklike_spark._runtime.network.ports import free_port  # noqa: E402
from flinklike_spark.common.serialization import SimpleStringSchema  # noqa: E402
from flinklike_spark.common.watermark_strategy import WatermarkStrategy  # noqa: E402
from flinklike_spark.datastream.connectors.kafka import KafkaOffsetsInitializer, KafkaSource  # noqa: E402
from flinklike_spark.errors import ConfigurationError  # noqa: E402
from tests.kafka.kafka_jobs import CheckedSequence, produce_sequences, source  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


# -- librdkafka's log lines ----------------------------------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_librdkafka_lines_are_rate_limited_per_kind_and_coordinator_loading_is_debug(caplog):
    clock = _Clock()
    logger = logging.getLogger("test.librdkafka")
    log = RateLimitedLibrdkafkaLog(logger, interval=timedelta(seconds=10), clock=clock)
    refused = (
        "[thrd:127.0.0.1:1/bootstrap]: 127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused"
    )
    with caplog.at_level(logging.INFO, logger="test.librdkafka"):
        for _ in range(200):  # what librdkafka writes in 10 s of an unreachable broker
            log.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#producer-8", refused)
            clock.now += 0.05
        log.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#producer-9", refused)  # another client
        log.log(logging.WARNING, "%s [%s] %s", "GETPID", "rdkafka#producer-3",
                "[thrd:main]: Failed to acquire transactional PID from broker TxnCoordinator/1: "
                "Broker: Coordinator load in progress: retrying")  # fmt: skip
        clock.now += 0.1
        log.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#producer-8", refused)
    lines = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert lines == [
        (logging.ERROR, f"FAIL [rdkafka#producer-8] {refused}"),
        (logging.ERROR, f"FAIL [rdkafka#producer-9] {refused}"),
        (logging.ERROR, f"FAIL [rdkafka#producer-8] {refused} (and 199 more such lines in the last 10 s)"),
    ]
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="test.librdkafka"):
        for routine in ("Broker: Coordinator load in progress: retrying", "Broker: Not coordinator: retrying"):
            log.log(logging.WARNING, "%s [%s] %s", "GETPID", "rdkafka#producer-3", routine)
    assert [r.levelno for r in caplog.records] == [logging.DEBUG, logging.DEBUG]


# -- unreachable brokers -------------------------------------------------------------------------------------

_UNREACHABLE_JOB = """
import sys
from flinklike_spark import StreamExecutionEnvironment
from flinklike_spark.common.watermark_strategy import WatermarkStrategy
from tests.kafka.kafka_jobs import source

env = StreamExecutionEnvironment.get_execution_environment({"parallelism.default": 1})
env.from_source(source(sys.argv[1], "clicks", bounded=True), WatermarkStrategy.no_watermarks(), "kafka").print()
env.execute("no broker")
"""


@pytest.mark.slow  # a Python process
@pytest.mark.timeout(120)
def test_a_source_on_unreachable_brokers_fails_at_submission_naming_them_and_quietly():
    """Was: 580 raw librdkafka lines on stderr, then after 30 s a KafkaError without the servers."""
    servers = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(_UNREACHABLE_JOB), servers], cwd=ROOT,
                          env=os.environ | {"PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=100)  # fmt: skip
    elapsed = time.monotonic() - started
    assert done.returncode != 0
    assert f"ConfigurationError: KafkaSource: cannot reach the Kafka brokers '{servers}' within 10 s" in done.stderr
    raw = [line for line in done.stderr.splitlines() if line.startswith("%")]
    assert raw == [], f"{len(raw)} raw librdkafka lines on stderr, e.g. {raw[:3]}"
    assert elapsed < 25, f"the submission failed after {elapsed:.0f} s"


# -- missing topics ------------------------------------------------------------------------------------------


def _job(bootstrap: str, kafka_source, parallelism: int = 1) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment({"parallelism.default": parallelism})
    env.from_source(kafka_source, WatermarkStrategy.no_watermarks(), "kafka").print()
    return env


@pytest.mark.slow  # a broker JVM
@pytest.mark.timeout(120)
def test_a_bounded_source_on_a_missing_topic_fails_at_submission_naming_it_and_the_existing_ones(
    kafka_broker, kafka_topic
):
    """Was: the job finished in 0.4 s with 0 records and no warning."""
    servers = kafka_broker.bootstrap_servers
    clicks = kafka_topic()
    typo = clicks[:-3] + "xyz"
    with pytest.raises(ConfigurationError) as raised:
        _job(servers, source(servers, typo, bounded=True)).execute("typo")
    message = str(raised.value)
    assert f"topic '{typo}' does not exist on '{servers}'" in message
    assert repr(clicks) in message  # the topics that exist
    assert "__consumer_offsets" not in message

    pattern = (
        KafkaSource.builder()
        .set_bootstrap_servers(servers)
        .set_topic_pattern("clikcs-.*")
        .set_bounded(KafkaOffsetsInitializer.latest())
        .set_value_only_deserializer(SimpleStringSchema())
        .build()
    )
    with pytest.raises(ConfigurationError, match=r"no topic matches the pattern 'clikcs-\.\*' on '.*' \(its topics: "):
        _job(servers, pattern).execute("pattern typo")


@pytest.mark.slow  # a broker JVM and a job
@pytest.mark.timeout(180)
def test_an_unbounded_source_warns_once_of_a_missing_topic_and_reads_it_once_created(kafka_broker, caplog):
    servers = kafka_broker.bootstrap_servers
    topic = f"later-{time.monotonic_ns()}"
    kafka_source = source(servers, topic, bounded=False, **{"partition.discovery.interval.ms": "300"})
    env = StreamExecutionEnvironment.get_execution_environment({"parallelism.default": 2})
    with caplog.at_level(logging.WARNING, logger="flinklike_spark.datastream.connectors.kafka"):
        rows = (
            env.from_source(kafka_source, WatermarkStrategy.no_watermarks(), "kafka")
            .key_by(lambda r: r["key"])
            .process(CheckedSequence())
            .execute_and_collect("topic created later")
        )
    warnings = [r.getMessage() for r in caplog.records if "does not exist" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert f"topic '{topic}' does not exist on '{servers}'" in warnings[0]
    assert "partition discovery every 0.3 s" in warnings[0]
    kafka_broker.create_topic(topic, partitions=2)
    produce_sequences(servers, topic, num_keys=2, per_key=50, partitions=2)
    collected = []
    with rows:
        for row in rows:
            collected.append((row["key"], row["seq"]))
            if len(collected) == 100:
                break
    assert sorted(collected) == sorted((k, s) for k in range(2) for s in range(50))
