"""The barrier handler's declarations: its modes, its states and their transitions, its per-checkpoint results.

:data:`BARRIER_HANDLER_TRANSITIONS` is the machine
:class:`~flinklike_spark._runtime.io.barrier_handler.SingleCheckpointBarrierHandler`
moves along (one comment per edge); any other move raises
:class:`~flinklike_spark.errors.IllegalStateTransition`.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping
from datetime import timedelta
from enum import Enum

from checkpointing.schemas import SnapshotAlignment
from flinklike_spark.errors import CheckpointDeclineReason

__all__ = [
    "ALIGNED_STATES",
    "BARRIER_HANDLER_TRANSITIONS",
    "WAITING_STATE_OF_MODE",
    "BarrierHandlerMode",
    "BarrierHandlerState",
    "CheckpointBarrierResult",
    "CheckpointStatus",
]


class BarrierHandlerMode(Enum):
    """Which family of states a handler uses (fixed for its lifetime)."""

    ALIGNED = "aligned"
    """Every barrier aligned; UNALIGNED barriers are rejected (a configuration bug)."""
    UNALIGNED = "unaligned"
    """Every checkpoint barrier unaligned; savepoints and FORCED_ALIGNED barriers are rejected."""
    ALTERNATING = "alternating"
    """Per-barrier: unaligned barriers unaligned, timeoutable ones aligned until their timeout."""


class BarrierHandlerState(Enum):
    """Position of the handler in Flink's ``BarrierHandlerState`` machine, plus CLOSED."""

    WAITING_FOR_FIRST_BARRIER = "waiting_for_first_barrier"
    COLLECTING_BARRIERS = "collecting_barriers"
    WAITING_FOR_FIRST_BARRIER_UNALIGNED = "waiting_for_first_barrier_unaligned"
    COLLECTING_BARRIERS_UNALIGNED = "collecting_barriers_unaligned"
    ALTERNATING_WAITING_FOR_FIRST_BARRIER = "alternating_waiting_for_first_barrier"
    ALTERNATING_COLLECTING_BARRIERS = "alternating_collecting_barriers"
    ALTERNATING_WAITING_FOR_FIRST_BARRIER_UNALIGNED = "alternating_waiting_for_first_barrier_unaligned"
    ALTERNATING_COLLECTING_BARRIERS_UNALIGNED = "alternating_collecting_barriers_unaligned"
    CLOSED = "closed"


_B = BarrierHandlerState

BARRIER_HANDLER_TRANSITIONS: Mapping[BarrierHandlerState, frozenset[BarrierHandlerState]] = types.MappingProxyType(
    {
        _B.WAITING_FOR_FIRST_BARRIER: frozenset(
            {
                # first barrier of a multi-channel checkpoint: its channel is blocked.
                _B.COLLECTING_BARRIERS,
                # close() of the task.
                _B.CLOSED,
            }
        ),
        _B.COLLECTING_BARRIERS: frozenset(
            {
                # last barrier (or end of partition) arrived: snapshot, resume all; or abort.
                _B.WAITING_FOR_FIRST_BARRIER,
                # close() of the task.
                _B.CLOSED,
            }
        ),
        _B.WAITING_FOR_FIRST_BARRIER_UNALIGNED: frozenset(
            {
                # first barrier: snapshot at once, inputs record until the remaining barriers.
                _B.COLLECTING_BARRIERS_UNALIGNED,
                # close() of the task.
                _B.CLOSED,
            }
        ),
        _B.COLLECTING_BARRIERS_UNALIGNED: frozenset(
            {
                # last barrier arrived (recording stops) or the checkpoint was aborted.
                _B.WAITING_FOR_FIRST_BARRIER_UNALIGNED,
                # close() of the task.
                _B.CLOSED,
            }
        ),
        _B.ALTERNATING_WAITING_FOR_FIRST_BARRIER: frozenset(
            {
                # first aligned barrier of a multi-channel checkpoint, still within its timeout.
                _B.ALTERNATING_COLLECTING_BARRIERS,
                # alignment timeout after an announcement but before any barrier: announced barriers prioritized.
                _B.ALTERNATING_WAITING_FOR_FIRST_BARRIER_UNALIGNED,
                # first barrier is unaligned or already timed out: snapshot unaligned, others outstanding.
                _B.ALTERNATING_COLLECTING_BARRIERS_UNALIGNED,
                # close() of the task.
                _B.CLOSED,
            }
        ),
        _B.ALTERNATING_COLLECTING_BARRIERS: frozenset(
            {
                # last aligned barrier arrived: aligned snapshot, resume all; or abort.
                _B.ALTERNATING_WAITING_FOR_FIRST_BARRIER,
                # alignment timed out (timer, late barrier, late end of partition): switch to unaligned snapshot.
                _B.ALTERNATING_COLLECTING_BARRIERS_UNALIGNED,
                # close() of the task.
                _B.CLOSED,
            }
        ),
        _B.ALTERNATING_WAITING_FOR_FIRST_BARRIER_UNALIGNED: frozenset(
            {
                # first barrier after the switch, others outstanding: snapshot unaligned.
                _B.ALTERNATING_COLLECTING_BARRIERS_UNALIGNED,
                # first barrier was also the last, or the checkpoint was aborted: back to aligned.
                _B.ALTERNATING_WAITING_FOR_FIRST_BARRIER,
                # close() of the task.
                _B.CLOSED,
            }
        ),
        _B.ALTERNATING_COLLECTING_BARRIERS_UNALIGNED: frozenset(
            {
                # last barrier arrived or the checkpoint was aborted: the next checkpoint starts aligned.
                _B.ALTERNATING_WAITING_FOR_FIRST_BARRIER,
                # close() of the task.
                _B.CLOSED,
            }
        ),
        # Terminal: the task is shutting down; no further checkpoint events are accepted.
        _B.CLOSED: frozenset(),
    }
)

#: The state a handler of each mode waits for a checkpoint in.
WAITING_STATE_OF_MODE: Mapping[BarrierHandlerMode, BarrierHandlerState] = types.MappingProxyType({
    BarrierHandlerMode.ALIGNED: _B.WAITING_FOR_FIRST_BARRIER,
    BarrierHandlerMode.UNALIGNED: _B.WAITING_FOR_FIRST_BARRIER_UNALIGNED,
    BarrierHandlerMode.ALTERNATING: _B.ALTERNATING_WAITING_FOR_FIRST_BARRIER,
})  # fmt: skip
#: The states of an aligned checkpoint (channels block at their barrier).
ALIGNED_STATES: frozenset[BarrierHandlerState] = frozenset(
    {
        _B.WAITING_FOR_FIRST_BARRIER,
        _B.COLLECTING_BARRIERS,
        _B.ALTERNATING_WAITING_FOR_FIRST_BARRIER,
        _B.ALTERNATING_COLLECTING_BARRIERS,
    }
)


class CheckpointStatus(Enum):
    """Progress of one checkpoint in this handler."""

    PENDING = "pending"
    COMPLETED = "completed"
    """Every open channel delivered its barrier (or ended)."""
    ABORTED = "aborted"


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointBarrierResult:
    """What the handler did with one checkpoint.

    Attributes:
        checkpoint_id: the checkpoint.
        status: pending, completed or aborted.
        alignment: how the snapshot was taken; None if no snapshot was triggered
            (e.g. aborted while aligning, or cancelled before any barrier).
        alignment_duration: time from the first to the last barrier, for
            completed checkpoints (zero for a single channel); else None.
        decline_reason: for aborted checkpoints, why.
    """

    checkpoint_id: int
    status: CheckpointStatus
    alignment: SnapshotAlignment | None
    alignment_duration: timedelta | None
    decline_reason: CheckpointDeclineReason | None
