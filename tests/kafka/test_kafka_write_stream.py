"""``df.writeStream.format("flinklike")`` into an exactly-once ``KafkaSink``, through a Spark query restart.

Spark's rate-micro-batch source (values 0..N-1 over 2 partitions) -> the engine job
``tests.spark.pipelines:fed_count_to_kafka`` (key ``value % 4``, keyed running
count, ``KafkaSink`` EXACTLY_ONCE). The query is stopped and started again from
its checkpointLocation while rows flow; a ``read_committed`` consumer must then
see every value once, in order per key, with the running count unbroken.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.kafka.kafka_jobs import assert_each_key_exactly_once_in_order, read_committed
from tests.spark.bridge_helpers import start_fed_query, wait_for
from tests.spark.pipelines import FED_KEYS

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]

TOTAL = 2400  # 600 per key
ROWS_PER_BATCH = 200


def start_query(spark, job_dir: Path, checkpoint: Path, servers: str, topic: str):
    return start_fed_query(
        spark, total=TOTAL, rows_per_batch=ROWS_PER_BATCH, pipeline="tests.spark.pipelines:fed_count_to_kafka",
        job_dir=job_dir, checkpoint=checkpoint, query_id="to-kafka",
        **{"pipeline.args": json.dumps({"servers": servers, "topic": topic})},
    )  # fmt: skip


def test_a_write_stream_query_feeds_an_exactly_once_kafka_sink_across_a_restart(
    spark, kafka_broker, kafka_topic, tmp_path
):
    servers, topic = kafka_broker.bootstrap_servers, kafka_topic(partitions=2)
    job_dir, checkpoint = tmp_path / "job", tmp_path / "spark-checkpoint"

    def committed() -> int:
        return len(read_committed(servers, topic, timeout=30))

    first = start_query(spark, job_dir, checkpoint, servers, topic)
    wait_for(lambda: committed() >= 400, timeout=400, what="output of the first run", query=first)
    first.stop()
    stopped_at = committed()
    assert stopped_at < TOTAL, "the first run wrote everything: nothing is left to test the restart with"

    second = start_query(spark, job_dir, checkpoint, servers, topic)
    wait_for(lambda: committed() >= TOTAL, timeout=600, what=f"all {TOTAL} lines", query=second)
    second.stop()
    assert_each_key_exactly_once_in_order(read_committed(servers, topic), FED_KEYS, TOTAL // FED_KEYS)
