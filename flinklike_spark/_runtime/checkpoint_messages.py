"""What a task tells the JobMaster about a checkpoint (Flink's ``AcknowledgeCheckpoint``, ``DeclineCheckpoint``).

Both sides import these: the task side (``tasks/subtask_checkpoint.py``)
builds them, the JobMaster side (``jobmaster/checkpoint_coordinator.py``)
consumes them, and the gateways carry them, each in a message of its own
(``AcknowledgeCheckpoint`` / ``DeclineCheckpoint``), so nobody tells the two
apart by type. A task reports through a :class:`CheckpointResponder` (Flink's
``CheckpointResponder``); the TaskExecutor's is the JobMaster gateway.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Protocol

from checkpointing import StateHandle
from checkpointing.schemas import SnapshotAlignment
from flinklike_spark.errors import CheckpointDeclineReason

__all__ = ["CheckpointAck", "CheckpointDecline", "CheckpointResponder"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointAck:
    """A subtask's acknowledgement: its state handles and how its snapshot was taken."""

    job_id: str
    execution_id: str
    checkpoint_id: int
    handles: tuple[StateHandle, ...]
    mode: SnapshotAlignment
    alignment: timedelta


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointDecline:
    """A subtask declined a checkpoint (it will never acknowledge it)."""

    job_id: str
    execution_id: str
    checkpoint_id: int
    reason: CheckpointDeclineReason
    message: str


class CheckpointResponder(Protocol):
    """Where a task sends its acknowledgements and declines; both may be called from any thread.

    Each checkpoint of a subtask gets at most one of the two. Neither raises:
    a report that cannot be delivered is lost, and the JobMaster's checkpoint
    timeout aborts the checkpoint.
    """

    def acknowledge_checkpoint(self, ack: CheckpointAck) -> None: ...

    def decline_checkpoint(self, decline: CheckpointDecline) -> None: ...
