"""CheckpointStatsTracker: the statistics of a job's checkpoints, as Flink's REST API reports them.

The :class:`~flinklike_spark._runtime.jobmaster.checkpoint_coordinator.CheckpointCoordinator`
reports every checkpoint's life (triggered, acknowledged per subtask,
completed or failed) here; the REST API and the metrics read it. All methods
run on the JobMaster's main thread (the coordinator's thread), so nothing is
locked; readers on other threads go through the main thread too.

Sizes are bytes: ``state_size`` is what a checkpoint wrote (operator state
plus in-flight data), ``persisted_data`` the in-flight (channel state) bytes
of unaligned checkpoints. The history keeps the newest
:data:`HISTORY_SIZE` checkpoints (Flink's ``web.checkpoints.history``).
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from enum import StrEnum

from checkpointing.schemas import CheckpointKind, SnapshotAlignment
from flinklike_spark._runtime.checkpoint_messages import CheckpointAck

__all__ = [
    "HISTORY_SIZE",
    "CheckpointStats",
    "CheckpointStatsStatus",
    "CheckpointStatsTracker",
    "RestoredCheckpointStats",
    "SubtaskCheckpointStats",
]

HISTORY_SIZE = 10


class CheckpointStatsStatus(StrEnum):
    """Where a checkpoint is in its life (Flink's ``CheckpointStatsStatus``; the REST API shows the value)."""

    IN_PROGRESS = "IN_PROGRESS"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"


@dataclasses.dataclass(kw_only=True)
class SubtaskCheckpointStats:
    """One subtask's acknowledgement of a checkpoint."""

    vertex_id: str
    subtask: int
    ack_time: datetime
    state_size: int
    persisted_data: int
    alignment: timedelta
    mode: SnapshotAlignment


@dataclasses.dataclass(kw_only=True)
class CheckpointStats:
    """One checkpoint or savepoint: IN_PROGRESS, then COMPLETED or FAILED."""

    checkpoint_id: int
    kind: CheckpointKind
    trigger_time: datetime
    num_subtasks: int
    unaligned: bool
    status: CheckpointStatsStatus = CheckpointStatsStatus.IN_PROGRESS
    subtasks: list[SubtaskCheckpointStats] = dataclasses.field(default_factory=list)
    duration: timedelta | None = None
    external_path: str | None = None
    failure_time: datetime | None = None
    failure_message: str | None = None

    @property
    def state_size(self) -> int:
        return sum(s.state_size for s in self.subtasks)

    @property
    def persisted_data(self) -> int:
        return sum(s.persisted_data for s in self.subtasks)

    @property
    def latest_ack_time(self) -> datetime | None:
        return max((s.ack_time for s in self.subtasks), default=None)

    @property
    def max_alignment(self) -> timedelta:
        return max((s.alignment for s in self.subtasks), default=timedelta(0))


@dataclasses.dataclass(frozen=True, kw_only=True)
class RestoredCheckpointStats:
    """A restore of the job's tasks from a checkpoint (Flink's ``RestoredCheckpointStats``).

    Attributes:
        checkpoint_id: the checkpoint restored.
        restore_time: when the tasks were deployed from it.
        external_path: ``<dir>/<job-id>/chk-<id>``.
        job_id: the job that wrote it (another one's when a job resumes from it).
        is_savepoint: whether it is a savepoint.
    """

    checkpoint_id: int
    restore_time: datetime
    external_path: str
    job_id: str
    is_savepoint: bool


class CheckpointStatsTracker:
    """Counts and history of one job's checkpoints, and its restores (main thread only)."""

    def __init__(self, *, history_size: int = HISTORY_SIZE) -> None:
        self._history_size = history_size
        self._by_id: dict[int, CheckpointStats] = {}
        self.num_completed = 0
        self.num_failed = 0
        self.latest_completed: CheckpointStats | None = None
        self.latest_savepoint: CheckpointStats | None = None
        self.latest_failed: CheckpointStats | None = None
        self.latest_restored: RestoredCheckpointStats | None = None
        self.num_restored = 0
        self.completed_sizes: list[int] = []  # every completed checkpoint's state size, for the summary
        self.completed_durations: list[float] = []  # seconds
        self.completed_persisted: list[int] = []

    def report_pending(
        self, checkpoint_id: int, kind: CheckpointKind, trigger_time: datetime, num_subtasks: int, *, unaligned: bool
    ) -> None:
        self._by_id[checkpoint_id] = CheckpointStats(
            checkpoint_id=checkpoint_id, kind=kind, trigger_time=trigger_time, num_subtasks=num_subtasks,
            unaligned=unaligned,
        )  # fmt: skip
        for old in sorted(self._by_id)[: max(0, len(self._by_id) - self._history_size)]:
            if self._by_id[old].status is not CheckpointStatsStatus.IN_PROGRESS:
                del self._by_id[old]

    def report_ack(
        self, checkpoint_id: int, vertex_id: str, subtask: int, ack: CheckpointAck, ack_time: datetime
    ) -> None:
        stats = self._by_id.get(checkpoint_id)
        if stats is None:
            return
        stats.subtasks.append(
            SubtaskCheckpointStats(
                vertex_id=vertex_id,
                subtask=subtask,
                ack_time=ack_time,
                state_size=sum(h.state_bytes + h.channel_state_bytes for h in ack.handles),
                persisted_data=sum(h.channel_state_bytes for h in ack.handles),
                alignment=ack.alignment,
                mode=ack.mode,
            )
        )

    def report_completed(self, checkpoint_id: int, duration: timedelta, external_path: str) -> None:
        stats = self._by_id.get(checkpoint_id)
        if stats is None:
            return
        stats.status, stats.duration, stats.external_path = CheckpointStatsStatus.COMPLETED, duration, external_path
        self.num_completed += 1
        self.completed_sizes.append(stats.state_size)
        self.completed_durations.append(duration.total_seconds())
        self.completed_persisted.append(stats.persisted_data)
        if stats.kind is CheckpointKind.SAVEPOINT:
            self.latest_savepoint = stats
        else:
            self.latest_completed = stats

    def report_failed(self, checkpoint_id: int, failure_time: datetime, message: str) -> None:
        stats = self._by_id.get(checkpoint_id)
        if stats is None or stats.status is not CheckpointStatsStatus.IN_PROGRESS:
            return
        stats.status, stats.failure_time, stats.failure_message = CheckpointStatsStatus.FAILED, failure_time, message
        self.num_failed += 1
        self.latest_failed = stats

    def checkpoint(self, checkpoint_id: int) -> CheckpointStats | None:
        """The statistics of ``checkpoint_id`` while it is in the history."""
        return self._by_id.get(checkpoint_id)

    def report_restored(self, restored: RestoredCheckpointStats) -> None:
        self.latest_restored = restored
        self.num_restored += 1

    @property
    def num_in_progress(self) -> int:
        return sum(1 for s in self._by_id.values() if s.status is CheckpointStatsStatus.IN_PROGRESS)

    def history(self) -> list[CheckpointStats]:
        """The newest checkpoints first."""
        return [self._by_id[c] for c in sorted(self._by_id, reverse=True)]

    def get(self, checkpoint_id: int) -> CheckpointStats | None:
        return self._by_id.get(checkpoint_id)
