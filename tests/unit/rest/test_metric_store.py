"""Flink's task metric names and rates from two successive raw reports; the store ignores late reports."""

from __future__ import annotations

import pytest

from flinklike_spark._runtime.rest.metric_store import MetricStore, flink_task_metrics


def raw(uptime, records_in, records_out, idle, backpressured, **extra):
    return {"records_in": records_in, "records_out": records_out, "bytes_in": records_in * 8,
            "bytes_out": records_out * 8, "idle_seconds": idle, "backpressured_seconds": backpressured,
            "uptime_seconds": uptime, **extra}  # fmt: skip


def test_rates_are_over_the_interval_between_two_reports():
    first = raw(10.0, 1000, 2000, idle=5.0, backpressured=1.0)
    second = raw(12.0, 1400, 2200, idle=5.5, backpressured=2.0, input_watermark=42)
    metrics = flink_task_metrics(second, first)
    assert metrics["numRecordsIn"] == 1400 and metrics["numRecordsOut"] == 2200
    assert metrics["numRecordsInPerSecond"] == pytest.approx(200.0)
    assert metrics["numRecordsOutPerSecond"] == pytest.approx(100.0)
    assert metrics["numBytesInPerSecond"] == pytest.approx(1600.0)
    assert metrics["idleTimeMsPerSecond"] == pytest.approx(250.0)
    assert metrics["backPressuredTimeMsPerSecond"] == pytest.approx(500.0)
    assert metrics["busyTimeMsPerSecond"] == pytest.approx(250.0)
    assert metrics["accumulatedBusyTimeMs"] == pytest.approx(12_000 - 5_500 - 2_000)
    assert metrics["currentInputWatermark"] == 42


def test_the_first_report_gives_averages_since_the_start_and_user_metrics_keep_their_names():
    metrics = flink_task_metrics(raw(4.0, 400, 0, idle=4.0, backpressured=0.0, **{"map.parse.bad": 3}), None)
    assert metrics["numRecordsInPerSecond"] == pytest.approx(100.0)
    assert metrics["idleTimeMsPerSecond"] == pytest.approx(1000.0) and metrics["busyTimeMsPerSecond"] == 0.0
    assert metrics["map.parse.bad"] == 3
    assert "currentInputWatermark" not in metrics  # a source task has no input watermark


def test_time_shares_never_exceed_a_second_per_second():
    # racy reads of the task's counters may add up to slightly more than the wall time
    metrics = flink_task_metrics(
        raw(2.0, 0, 0, idle=1.6, backpressured=0.6), raw(1.0, 0, 0, idle=0.5, backpressured=0.0)
    )
    assert metrics["idleTimeMsPerSecond"] == pytest.approx(1000.0)
    assert metrics["backPressuredTimeMsPerSecond"] == 0.0 and metrics["busyTimeMsPerSecond"] == 0.0


def test_the_store_keeps_the_newest_report_and_refreshes_only_stale_values():
    now = [100.0]
    store = MetricStore(clock=lambda: now[0])
    assert store.task("a") is None and store.age() == float("inf")
    store.add_task_metrics({"a": raw(2.0, 200, 0, 0.0, 0.0)})
    store.add_task_metrics({"a": raw(4.0, 600, 0, 0.0, 0.0)})
    store.add_task_metrics({"a": raw(3.0, 300, 0, 0.0, 0.0)})  # late: ignored
    assert store.task("a")["numRecordsIn"] == 600 and store.task("a")["numRecordsInPerSecond"] == pytest.approx(200)
    fetched = []
    store.refresh_if_older(1.0, lambda: fetched.append(1) or {})
    assert fetched == []
    now[0] += 2.0
    store.refresh_if_older(1.0, lambda: fetched.append(1) or {"b": raw(1.0, 5, 5, 0.0, 0.0)})
    assert fetched == [1] and store.task("b")["numRecordsOut"] == 5
    store.forget(lambda execution_id: execution_id == "b")
    assert store.task("a") is None and store.task("b") is not None
