"""What a Kafka job finds out when it is submitted: unreachable brokers and missing topics, with the values named;
and librdkafka's log lines in Python logging, rate-limited, instead of on stderr."""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path

import pytest

pytest.importorskip("confluent_kafka")

from flinklike_spark.datastream.connectors.kafka.clients import RateLimitedLibrdkafkaLog  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
        log.log(logging.WARNING, "%s [%s] %s", "GETPID", "rdkafka#producer-3",
                "Broker: Coordinator load in progress: retrying")  # fmt: skip
    assert [r.levelno for r in caplog.records] == [logging.DEBUG]
