"""flinklike_spark.metrics: PyFlink's metric types with an injected clock."""

from __future__ import annotations

import pytest

from flinklike_spark.metrics import Meter, MetricGroup, MetricRegistry

pytestmark = pytest.mark.timeout(30)


def test_groups_name_metrics_and_a_name_keeps_its_metric():
    registry = MetricRegistry()
    group = MetricGroup(registry, ("op",)).add_group("user", "alice")
    counter = group.counter("hits")
    counter.inc(3)
    counter.dec()
    assert group.counter("hits") is counter
    assert registry.snapshot() == {"op.user.alice.hits": 2}
    with pytest.raises(ValueError, match="is a Counter"):
        group.distribution("hits")
    with pytest.raises(ValueError, match="metric name"):
        group.counter("")


def test_meter_rate_over_its_time_span():
    now = [100.0]
    meter = Meter(10, clock=lambda: now[0])
    for second in range(20):
        now[0] = 100.0 + second
        meter.mark_event(2)
    assert meter.get_count() == 40
    assert meter.get_rate() == pytest.approx(2.0)
    now[0] += 30
    assert meter.get_rate() == 0.0


def test_distribution_and_gauges():
    registry = MetricRegistry()
    group = MetricGroup(registry, ("op",))
    latency = group.distribution("latency")
    for value in (3, 1, 2):
        latency.update(value)
    group.gauge("queue", lambda: 7)
    group.gauge("broken", lambda: 1 / 0)
    snapshot = registry.snapshot()
    assert snapshot["op.latency.count"] == 3 and snapshot["op.latency.mean"] == 2
    assert snapshot["op.latency.min"] == 1 and snapshot["op.latency.max"] == 3
    assert snapshot["op.queue"] == 7 and "op.broken" not in snapshot
