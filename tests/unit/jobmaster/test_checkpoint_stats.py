"""The checkpoint statistics tell checkpoints from savepoints, and alignments, by their enums."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from checkpointing.schemas import CheckpointKind, SnapshotAlignment
from flinklike_spark._runtime.checkpoint_messages import CheckpointAck
from flinklike_spark._runtime.jobmaster.checkpoint_stats import (
    CheckpointStatsStatus,
    CheckpointStatsTracker,
    RestoredCheckpointStats,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def ack(checkpoint_id: int, mode: SnapshotAlignment) -> CheckpointAck:
    return CheckpointAck(job_id="j", execution_id="e", checkpoint_id=checkpoint_id, handles=(), mode=mode,
                         alignment=timedelta(0))  # fmt: skip


def test_a_savepoint_and_a_checkpoint_complete_into_their_own_latest():
    tracker = CheckpointStatsTracker()
    tracker.report_pending(1, CheckpointKind.CHECKPOINT, NOW, 1, unaligned=False)
    tracker.report_pending(2, CheckpointKind.SAVEPOINT, NOW, 1, unaligned=False)
    tracker.report_ack(2, "v", 0, ack(2, SnapshotAlignment.ALIGNED), NOW)
    tracker.report_completed(2, timedelta(seconds=1), "/sp")
    assert tracker.latest_savepoint is not None and tracker.latest_savepoint.checkpoint_id == 2
    assert tracker.latest_completed is None and tracker.num_in_progress == 1
    tracker.report_completed(1, timedelta(seconds=1), "/cp")
    assert tracker.latest_completed is not None and tracker.latest_completed.checkpoint_id == 1
    assert [s.status for s in tracker.history()] == [CheckpointStatsStatus.COMPLETED] * 2


def test_a_failed_checkpoint_stays_failed_and_keeps_its_subtask_alignment():
    tracker = CheckpointStatsTracker()
    tracker.report_pending(1, CheckpointKind.CHECKPOINT, NOW, 2, unaligned=True)
    tracker.report_ack(1, "v", 0, ack(1, SnapshotAlignment.SWITCHED), NOW)
    tracker.report_failed(1, NOW, "timed out")
    [stats] = tracker.history()
    assert stats.status is CheckpointStatsStatus.FAILED and tracker.num_failed == 1
    assert [s.mode for s in stats.subtasks] == [SnapshotAlignment.SWITCHED]


def test_restores_are_counted_and_the_latest_is_kept():
    tracker = CheckpointStatsTracker()
    assert tracker.latest_restored is None and tracker.num_restored == 0
    for checkpoint_id in (3, 7):
        tracker.report_restored(
            RestoredCheckpointStats(checkpoint_id=checkpoint_id, restore_time=NOW, external_path=f"/d/j/chk-{checkpoint_id}",
                                    job_id="j", is_savepoint=False)
        )  # fmt: skip
    assert tracker.num_restored == 2 and tracker.latest_restored.checkpoint_id == 7
