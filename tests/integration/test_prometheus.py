"""A Prometheus scrape of a running job returns Flink's task, checkpoint, restart and user metrics.

The reporter is configured with Flink's keys; the scrape is parsed with
prometheus_client's own text parser, as a Prometheus server would read it.
"""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from connectors import CollectSink, SequenceSource
from flinklike_spark import MapFunction, StreamExecutionEnvironment, WatermarkStrategy
from flinklike_spark._runtime.network.ports import free_port
from flinklike_spark.config import PROMETHEUS_REPORTER_FACTORY
from flinklike_spark.errors import JobCancelledError
from tests.support.rest_helpers import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

TASK_METRICS = ["numRecordsIn", "numRecordsOut", "numRecordsInPerSecond", "numRecordsOutPerSecond", "numBytesIn",
                "numBytesInPerSecond", "numBytesOutPerSecond", "busyTimeMsPerSecond", "backPressuredTimeMsPerSecond",
                "idleTimeMsPerSecond", "currentInputWatermark"]  # fmt: skip
JOB_METRICS = ["lastCheckpointDuration", "lastCheckpointSize", "numberOfCompletedCheckpoints",
               "numberOfFailedCheckpoints", "numRestarts"]  # fmt: skip


class Parsed(MapFunction):
    def open(self, runtime_context):
        self.records = runtime_context.get_metrics_group().add_group("parse").counter("records")

    def map(self, value):
        self.records.inc()
        return value


def _scrape(port: int) -> dict[str, list]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def test_scrape_of_a_running_job(tmp_path):
    port = free_port()
    env = StreamExecutionEnvironment.get_execution_environment({
        "parallelism.default": 2,
        "local.number-taskmanager": 2,
        "rest.port": 0,
        "metrics.fetcher.update-interval": "100ms",
        "execution.checkpointing.interval": "200ms",
        "execution.checkpointing.dir": f"file://{tmp_path}/chk",
        "metrics.reporter.prom.factory.class": PROMETHEUS_REPORTER_FACTORY,
        "metrics.reporter.prom.port": str(port),
    })  # fmt: skip
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner("seq")
    (
        env.from_source(SequenceSource(num_keys=4, records_per_key=None, rows_per_second=400), strategy, "seq")
        .key_by("key").map(Parsed()).name("parsed")
        .sink_to(CollectSink("out"))
    )  # fmt: skip
    client = env.execute_async("prometheus")
    try:

        def ready():
            families = _scrape(port)
            completed = families.get("flink_jobmanager_job_numberOfCompletedCheckpoints", [])
            records = families.get("flink_taskmanager_job_task_numRecordsIn", [])
            return (
                completed
                and completed[0].value >= 2
                and len(records) == 4
                and all(s.value > 0 for s in records)
                and families
            )

        families = wait_for("a scrape with two checkpoints and records on every subtask", ready)
    finally:
        client.cancel()
    with pytest.raises(JobCancelledError):
        client.wait(60)
    for name in TASK_METRICS:
        samples = families[f"flink_taskmanager_job_task_{name}"]
        if name == "currentInputWatermark":  # only tasks with network inputs have one
            assert {s.labels["task_name"] for s in samples} == {"parsed -> Sink: CollectSink"}
            continue
        assert len(samples) == 4, name  # two vertices of two subtasks
        for sample in samples:
            assert sample.labels["job_id"] == client.job_id and sample.labels["job_name"] == "prometheus"
            assert sample.labels["subtask_index"] in ("0", "1") and sample.labels["tm_id"].startswith("taskmanager-")
    for name in JOB_METRICS:
        (sample,) = families[f"flink_jobmanager_job_{name}"]
        assert sample.labels == {"job_id": client.job_id, "job_name": "prometheus"}
    values = {name: families[f"flink_jobmanager_job_{name}"][0].value for name in JOB_METRICS}
    assert values["numRestarts"] == 0 and values["numberOfFailedCheckpoints"] == 0
    assert values["lastCheckpointSize"] > 0 and values["lastCheckpointDuration"] >= 0
    busy = families["flink_taskmanager_job_task_busyTimeMsPerSecond"]
    assert all(0 <= s.value <= 1000 for s in busy)
    user = families["flink_taskmanager_job_task_operator_parse_records"]
    assert {s.labels["operator_name"] for s in user} == {"parsed"} and sum(s.value for s in user) > 0
