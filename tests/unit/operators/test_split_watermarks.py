"""Per-split watermarks of a source subtask: minimum over active splits, idleness, finished splits."""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa

from flinklike_spark._runtime.operators.split_watermarks import SplitWatermarks
from flinklike_spark.common.watermark_strategy import WatermarkStrategy

BATCH = pa.record_batch([pa.array([1, 2])], names=["v"])


def ts(*values: int) -> pa.Array:
    return pa.array(values, type=pa.int64())


def test_the_watermark_is_the_minimum_over_splits_and_an_empty_split_holds_it_back():
    splits = SplitWatermarks(WatermarkStrategy.for_monotonous_timestamps())
    splits.update_splits({"a", "b"}, now_ms=0)
    assert splits.assign("a", BATCH, ts(100, 200), now_ms=0).to_pylist() == [100, 200]
    assert splits.combined(now_ms=0) == -(2**63)  # "b" has no records yet
    splits.assign("b", BATCH, ts(50, 60), now_ms=0)
    assert splits.combined(now_ms=0) == 59
    splits.assign("b", BATCH, ts(300, 400), now_ms=0)
    assert splits.combined(now_ms=0) == 199


def test_out_of_orderness_and_a_timestamp_assigner_apply_per_split():
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(milliseconds=10)).with_timestamp_assigner(
        lambda row: row["v"] * 1000
    )
    splits = SplitWatermarks(strategy)
    splits.update_splits({"a"}, now_ms=0)
    assert splits.assign("a", BATCH, ts(5, 6), now_ms=0) == [1000, 2000]  # the assigner wins over the source's
    assert splits.combined(now_ms=0) == 2000 - 10 - 1


def test_idle_splits_are_left_out_until_they_have_records_again():
    splits = SplitWatermarks(WatermarkStrategy.for_monotonous_timestamps().with_idleness(timedelta(seconds=1)))
    splits.update_splits({"busy", "quiet"}, now_ms=0)
    splits.assign("busy", BATCH, ts(500, 600), now_ms=900)
    assert splits.combined(now_ms=900) == -(2**63)  # "quiet" is not idle yet
    assert splits.combined(now_ms=1_000) == 599  # now it is
    splits.assign("quiet", BATCH, ts(10, 20), now_ms=1_100)
    assert splits.combined(now_ms=1_100) == 19
    assert splits.combined(now_ms=10_000) == 19  # every split idle: it stays where it got to


def test_a_late_look_sees_the_moment_when_only_the_split_that_went_idle_last_was_active():
    # "empty" is idle from 1000 on, "busy" from 1010 on. A look at 1005 gives busy's watermark; a look
    # that comes only at 5000 (a busy machine) must give it too, not stall the event time until records.
    splits = SplitWatermarks(WatermarkStrategy.for_monotonous_timestamps().with_idleness(timedelta(seconds=1)))
    splits.update_splits({"busy", "empty"}, now_ms=0)
    splits.assign("busy", BATCH, ts(500, 600), now_ms=10)
    assert splits.combined(now_ms=5_000) == 599
    splits.update_splits({"busy", "empty", "late"}, now_ms=6_000)  # a new split starts at the minimum
    assert splits.combined(now_ms=6_000) == -(2**63)


def test_finished_splits_no_longer_count():
    splits = SplitWatermarks(WatermarkStrategy.for_monotonous_timestamps())
    splits.update_splits({"a", "b"}, now_ms=0)
    splits.assign("a", BATCH, ts(100, 200), now_ms=0)
    splits.update_splits({"a"}, now_ms=0)  # "b" finished without records
    assert splits.combined(now_ms=0) == 199
    splits.update_splits(set(), now_ms=0)
    assert splits.combined(now_ms=0) is None
