"""Watermark alignment's two halves: the JobMaster's coordinator and a source subtask's reporter."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest

from flinklike_spark._runtime.watermark_alignment import (
    AlignmentReporter,
    WatermarkAlignmentCoordinator,
    WatermarkReport,
)
from flinklike_spark.common.time import Duration
from flinklike_spark.common.watermark_strategy import MAX_WATERMARK, WatermarkAlignment, WatermarkStrategy
from flinklike_spark.errors import ConfigurationError

pytestmark = pytest.mark.timeout(30)


def report(reporter: str, watermark: int, *, group: str = "g", attempt: int = 0, drift: int = 1_000):
    return WatermarkReport(
        job_id="job", group=group, reporter=reporter, attempt=attempt, watermark=watermark, max_drift_ms=drift
    )


def test_the_bound_is_the_groups_lowest_watermark_plus_the_reporters_own_drift():
    coordinator = WatermarkAlignmentCoordinator()
    assert coordinator.report(report("v/0", 10_000)) == 11_000  # alone in its group
    assert coordinator.report(report("v/1", 4_000)) == 5_000
    assert coordinator.report(report("v/0", 12_000, drift=500)) == 4_500  # its own drift
    assert coordinator.report(report("w/0", 0, group="other")) == 1_000  # groups are apart
    assert coordinator.group_watermarks() == {"g": 4_000, "other": 0}


def test_idle_and_finished_subtasks_do_not_hold_the_group_back():
    coordinator = WatermarkAlignmentCoordinator()
    coordinator.report(report("v/0", 7_000))
    assert coordinator.report(report("v/1", MAX_WATERMARK)) == 8_000
    assert coordinator.report(report("v/0", MAX_WATERMARK)) == MAX_WATERMARK  # the whole group idle: no bound


def test_a_newer_attempt_replaces_an_older_ones_report_and_a_late_older_one_is_ignored():
    coordinator = WatermarkAlignmentCoordinator()
    coordinator.report(report("v/0", 50_000, attempt=0))
    coordinator.report(report("v/1", 60_000))
    assert coordinator.report(report("v/0", 20_000, attempt=1)) == 21_000  # restored further back
    assert coordinator.report(report("v/0", 55_000, attempt=0)) == 21_000  # the failed attempt, late


def test_the_strategy_checks_its_alignment_arguments():
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_watermark_alignment("g", Duration.of_seconds(2))
    assert strategy.alignment == WatermarkAlignment(
        watermark_group="g", max_allowed_watermark_drift=timedelta(seconds=2), update_interval=timedelta(seconds=1)
    )
    with pytest.raises(ConfigurationError, match="watermark_group must be a non-empty string, got ''"):
        strategy.with_watermark_alignment("", Duration.of_seconds(1))
    with pytest.raises(ConfigurationError, match="max_allowed_watermark_drift .* zero or more, got 5"):
        strategy.with_watermark_alignment("g", 5)
    with pytest.raises(ConfigurationError, match=r"update_interval must be a positive .*got datetime.timedelta\(0\)"):
        strategy.with_watermark_alignment("g", Duration.of_seconds(1), timedelta(0))


def test_the_reporter_reports_on_its_own_thread_and_keeps_the_last_bound_while_the_jobmaster_is_away():
    coordinator = WatermarkAlignmentCoordinator()
    coordinator.report(report("v/1", 3_000))
    away = threading.Event()
    sent: list[WatermarkReport] = []

    def send(r: WatermarkReport) -> int:
        if away.is_set():
            raise ConnectionError("JobMaster unreachable")
        sent.append(r)
        return coordinator.report(r)

    alignment = WatermarkAlignment(
        watermark_group="g",
        max_allowed_watermark_drift=timedelta(seconds=1),
        update_interval=timedelta(milliseconds=20),
    )
    reporter = AlignmentReporter(alignment, send, job_id="job", reporter="v/0", attempt=0, initial_watermark=9_000)
    assert reporter.max_allowed == MAX_WATERMARK  # nothing held back before the first answer
    reporter.start()
    _wait_for(lambda: reporter.max_allowed == 4_000)
    reporter.set_watermark(2_000)
    _wait_for(lambda: reporter.max_allowed == 3_000)
    away.set()
    time.sleep(0.1)
    assert reporter.max_allowed == 3_000
    away.clear()
    reports = len(sent)
    _wait_for(lambda: len(sent) > reports)  # reporting works again
    reporter.close()
    assert sent[-1].watermark == MAX_WATERMARK  # finished: the group no longer waits for it
    assert coordinator.group_watermarks() == {"g": 3_000}


def _wait_for(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)
