"""A TaskExecutor slot and what the slot table reports (Flink's ``TaskSlot``, ``SlotStatus``, ``SlotReport``).

One :class:`TaskSlot` object per allocation; its life is the
``TASK_SLOT_TRANSITIONS`` table (see :mod:`.slot_table` for who drives it).
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol, TypeAlias, runtime_checkable

from flinklike_spark._runtime.state_machine import StateMachine
from flinklike_spark._runtime.taskexecutor.timer_service import TimeoutTicket

__all__ = [
    "DEFAULT_SLOT_TIMEOUT",
    "TASK_SLOT_TRANSITIONS",
    "AllocationID",
    "ExecutionAttemptID",
    "JobID",
    "SlotActions",
    "SlotReport",
    "SlotStatus",
    "SlotTask",
    "TaskSlot",
    "TaskSlotState",
]

AllocationID: TypeAlias = Hashable
"""Identifies one slot allocation (a string in the TaskExecutor)."""
ExecutionAttemptID: TypeAlias = Hashable
"""Identifies one execution attempt of a subtask."""
JobID: TypeAlias = Hashable
"""Identifies a job."""

DEFAULT_SLOT_TIMEOUT = timedelta(seconds=10)


class TaskSlotState(enum.Enum):
    """State of one slot. ``FREE`` is also what an unallocated index reports."""

    FREE = "free"
    ALLOCATED = "allocated"
    ACTIVE = "active"
    RELEASING = "releasing"


TASK_SLOT_TRANSITIONS: Mapping[TaskSlotState, frozenset[TaskSlotState]] = {
    # A TaskSlot object is born ALLOCATED (allocate_slot) and never leaves FREE:
    # re-allocating the index creates a new TaskSlot.
    TaskSlotState.ALLOCATED: frozenset(
        {
            TaskSlotState.ACTIVE,  # mark_slot_active / try_mark_slot_active: the job uses it
            TaskSlotState.RELEASING,  # free_slot (timeout, JobMaster request, close)
        }
    ),
    TaskSlotState.ACTIVE: frozenset(
        {
            TaskSlotState.ALLOCATED,  # mark_slot_inactive (only when it holds no task)
            TaskSlotState.RELEASING,  # free_slot: its tasks, if any, are failed
        }
    ),
    TaskSlotState.RELEASING: frozenset({TaskSlotState.FREE}),  # empty (at once, or after the last remove_task)
    TaskSlotState.FREE: frozenset(),  # terminal for this object
}


@runtime_checkable
class SlotTask(Protocol):
    """What the table needs from a task (the TaskExecutor's ``Task``).

    ``fail_externally`` must not block: it asks the task to fail, and the task
    later reports its final state, upon which the TaskExecutor calls
    :meth:`TaskSlotTable.remove_task`.
    """

    execution_id: ExecutionAttemptID
    job_id: JobID
    allocation_id: AllocationID

    def fail_externally(self, cause: BaseException) -> None: ...


@runtime_checkable
class SlotActions(Protocol):
    """Callbacks from the table to its owner (implemented by the TaskExecutor)."""

    def free_slot(self, allocation_id: AllocationID) -> None:
        """A RELEASING slot lost its last task; the owner should call ``TaskSlotTable.free_slot``."""

    def timeout_slot(self, allocation_id: AllocationID, ticket: TimeoutTicket) -> None:
        """The timeout of an inactive slot fired; valid only if ``is_valid_timeout`` says so."""


@dataclass(frozen=True, kw_only=True)
class SlotStatus:
    """One line of a :class:`SlotReport`.

    Attributes:
        slot_index: the slot's index (static: below ``number_of_slots``).
        allocation_id: the allocation holding the slot, None when it is free.
        job_id: the job owning the allocation, None when the slot is free.
    """

    slot_index: int
    allocation_id: AllocationID | None = None
    job_id: JobID | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.slot_index, int) or isinstance(self.slot_index, bool) or self.slot_index < 0:
            raise ValueError(f"slot_index must be a non-negative int, got {self.slot_index!r}")
        if (self.allocation_id is None) != (self.job_id is None):
            raise ValueError(
                f"slot {self.slot_index}: allocation_id and job_id must both be set (allocated) "
                f"or both be None (free), got allocation_id={self.allocation_id!r}, job_id={self.job_id!r}"
            )

    @property
    def is_free(self) -> bool:
        return self.allocation_id is None


@dataclass(frozen=True, kw_only=True)
class SlotReport:
    """What a TaskExecutor tells the resource manager about its slots.

    Always lists every static index (free or not), in index order, followed by
    the dynamic slots in index order.

    Attributes:
        resource_id: the reporting TaskExecutor.
        slot_statuses: one :class:`SlotStatus` per slot (a list is coerced to a tuple).
    """

    resource_id: str
    slot_statuses: tuple[SlotStatus, ...] = ()

    def __post_init__(self) -> None:
        statuses = tuple(self.slot_statuses)
        for status in statuses:
            if not isinstance(status, SlotStatus):
                raise TypeError(f"slot_statuses must hold SlotStatus objects, got {type(status).__name__}")
        indices = [s.slot_index for s in statuses]
        if len(set(indices)) != len(indices):
            raise ValueError(f"slot indices in a SlotReport must be unique, got {indices}")
        object.__setattr__(self, "slot_statuses", statuses)

    def __iter__(self) -> Iterator[SlotStatus]:
        return iter(self.slot_statuses)

    def __len__(self) -> int:
        return len(self.slot_statuses)


class TaskSlot:
    """One allocation of one slot and the tasks running in it.

    Returned by :meth:`TaskSlotTable.get_allocated_slots`; read it through its
    properties. Its mutators are private: only the owning table changes it.

    Args:
        index: the slot index (dynamic slots: ``>= number_of_slots``).
        job_id: the job the slot is allocated to.
        allocation_id: the allocation.
    """

    def __init__(self, index: int, job_id: JobID, allocation_id: AllocationID) -> None:
        self._index = index
        self._job_id = job_id
        self._allocation_id = allocation_id
        self._tasks: dict[ExecutionAttemptID, SlotTask] = {}
        self._state = StateMachine(
            f"TaskSlot {index} ({allocation_id})", TaskSlotState.ALLOCATED, TASK_SLOT_TRANSITIONS
        )

    @property
    def index(self) -> int:
        return self._index

    @property
    def job_id(self) -> JobID:
        return self._job_id

    @property
    def allocation_id(self) -> AllocationID:
        return self._allocation_id

    @property
    def state(self) -> TaskSlotState:
        return self._state.state

    @property
    def history(self) -> list[tuple[float, TaskSlotState]]:
        """(timestamp, state) pairs, ALLOCATED first."""
        return self._state.history

    @property
    def tasks(self) -> Mapping[ExecutionAttemptID, SlotTask]:
        """A snapshot of the tasks in this slot, by execution attempt id."""
        return dict(self._tasks)

    @property
    def is_empty(self) -> bool:
        return not self._tasks

    def is_allocated(self, job_id: JobID, allocation_id: AllocationID) -> bool:
        """True iff this is ``allocation_id`` of ``job_id`` and it is ALLOCATED or ACTIVE (not releasing)."""
        return (
            self._job_id == job_id
            and self._allocation_id == allocation_id
            and self.state in (TaskSlotState.ALLOCATED, TaskSlotState.ACTIVE)
        )

    def is_active(self, job_id: JobID, allocation_id: AllocationID) -> bool:
        """True iff this is ``allocation_id`` of ``job_id`` and it is ACTIVE."""
        return self._job_id == job_id and self._allocation_id == allocation_id and self.state is TaskSlotState.ACTIVE

    # -- mutators: the table calls these with its lock held -----------------------------------

    def _mark_active(self) -> bool:
        if self.state is TaskSlotState.ALLOCATED:
            self._state.transition(TaskSlotState.ACTIVE)
        return self.state is TaskSlotState.ACTIVE

    def _mark_inactive(self) -> bool:
        # Deviation from Flink, which also deactivates a slot holding tasks: an
        # ALLOCATED slot can time out and be freed, and its tasks would then be
        # failed by a timeout instead of by whoever deactivated the slot.
        if self._tasks or self.state not in (TaskSlotState.ACTIVE, TaskSlotState.ALLOCATED):
            return False
        if self.state is TaskSlotState.ACTIVE:
            self._state.transition(TaskSlotState.ALLOCATED)
        return True

    def _add(self, task: SlotTask) -> bool:
        if task.execution_id in self._tasks:
            return False
        self._tasks[task.execution_id] = task
        return True

    def _remove(self, execution_id: ExecutionAttemptID) -> SlotTask | None:
        return self._tasks.pop(execution_id, None)

    def _mark_releasing(self) -> list[SlotTask]:
        """Enter RELEASING; return the tasks to fail (only on the first call)."""
        if self.state is TaskSlotState.RELEASING:
            return []
        self._state.transition(TaskSlotState.RELEASING)
        return list(self._tasks.values())

    def _mark_free(self) -> None:
        self._state.transition(TaskSlotState.FREE, expected=TaskSlotState.RELEASING)

    def __repr__(self) -> str:
        return (
            f"TaskSlot(index={self._index}, state={self.state.name}, job_id={self._job_id!r}, "
            f"allocation_id={self._allocation_id!r}, tasks={len(self._tasks)})"
        )
