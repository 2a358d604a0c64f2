"""User metrics from runtime_context.get_metrics_group() reach JobClient.task_metrics() while the job runs."""

from __future__ import annotations

import time

import pytest

from connectors import CollectSink, SequenceSource
from flinklike_spark import MapFunction, StreamExecutionEnvironment
from flinklike_spark.errors import JobCancelledError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


class Measured(MapFunction):
    def open(self, runtime_context):
        group = runtime_context.get_metrics_group().add_group("parse")
        self.records = group.counter("records")
        self.even = group.counter("even")
        self.sizes = group.distribution("seq")
        self.rate = group.meter("events", time_span_in_seconds=5)
        group.gauge("constant", lambda: 42)

    def map(self, value):
        self.records.inc()
        if value["seq"] % 2 == 0:
            self.even.inc()
        self.sizes.update(value["seq"])
        self.rate.mark_event()
        return value


def test_counters_gauges_meters_and_distributions_are_reported_per_task():
    env = StreamExecutionEnvironment.get_execution_environment(
        {"parallelism.default": 2, "local.number-taskmanager": 2}
    )
    (
        env.from_source(SequenceSource(num_keys=4, records_per_key=None, rows_per_second=400), name="seq")
        .map(Measured())
        .name("measured")
        .sink_to(CollectSink("out"))
    )
    client = env.execute_async("metrics")
    try:
        deadline = time.monotonic() + 60
        while True:
            metrics = client.task_metrics()
            user = {name: values for name, values in metrics.items() if "measured.parse.records" in values}
            if len(user) == 2 and all(v["measured.parse.records"] > 100 for v in user.values()):
                break
            assert time.monotonic() < deadline, f"no user metrics reported: {metrics}"
            time.sleep(0.2)
    finally:
        client.cancel()
        with pytest.raises(JobCancelledError):
            client.wait(60)
    for values in user.values():
        assert 0 < values["measured.parse.even"] <= values["measured.parse.records"]
        assert values["measured.parse.constant"] == 42
        assert values["measured.parse.seq.count"] == pytest.approx(values["measured.parse.records"], rel=0.2)
        assert values["measured.parse.seq.min"] >= 0
        assert values["measured.parse.events.rate"] > 0
