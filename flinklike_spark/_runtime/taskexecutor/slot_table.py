"""TaskSlotTable: the TaskExecutor's bookkeeping of slots and the tasks in them.

A re-implementation of Flink's ``TaskSlotTableImpl``. The table holds
``number_of_slots`` static slots (indices ``0 .. number_of_slots - 1``) plus any
number of dynamic slots (requested with a negative index; they get fresh
indices ``number_of_slots, number_of_slots + 1, ...`` that are never reused).
It keeps indices by slot index, allocation id, job id and execution attempt id
so that every query is a dictionary look-up.

Life of a slot (one :class:`TaskSlot` object per allocation)::

    (index FREE) --allocate_slot--> ALLOCATED <--mark_slot_active / mark_slot_inactive--> ACTIVE
    ALLOCATED | ACTIVE --free_slot--> RELEASING --(last task removed, free_slot)--> FREE

* An ALLOCATED slot is not used by its job yet (or no longer); it carries a
  timeout. When the timeout fires the table calls
  ``slot_actions.timeout_slot(allocation_id, ticket)``; the TaskExecutor then
  asks :meth:`TaskSlotTable.is_valid_timeout` (the slot may have been marked
  active meanwhile) and frees the slot if the ticket is still current.
* Tasks can only be added to an ACTIVE slot of their own job.
* ``free_slot`` on an empty slot frees it at once and returns its index. On a
  slot with tasks it moves the slot to RELEASING, fails every task externally
  and returns -1; once the last task is removed the table calls
  ``slot_actions.free_slot(allocation_id)``, and the TaskExecutor's call back
  into :meth:`TaskSlotTable.free_slot` finally frees it.

Life of the table::

    CREATED --start--> RUNNING --close--> CLOSING --(every slot free)--> CLOSED
    CREATED --close--> CLOSED

Threading contract: the TaskExecutor's main thread owns the table and is the
only caller of the allocation-side methods (``allocate_slot``,
``mark_slot_active``, ``mark_slot_inactive``, ``close``). Tasks report their own
completion from their threads and timeouts fire on the timer thread, so every
method takes one internal lock: ``add_task``, ``remove_task``, ``free_slot``
and the queries are safe from any thread. Callbacks (``task.fail_externally``,
``slot_actions.free_slot`` / ``timeout_slot``, the close future's callbacks)
always run *without* that lock held, so they may call back into the table.
"""

from __future__ import annotations

import enum
import itertools
import logging
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import timedelta

from flinklike_spark._runtime.state_machine import StateMachine
from flinklike_spark._runtime.taskexecutor.task_slot import (
    DEFAULT_SLOT_TIMEOUT,
    AllocationID,
    ExecutionAttemptID,
    JobID,
    SlotActions,
    SlotReport,
    SlotStatus,
    SlotTask,
    TaskSlot,
    TaskSlotState,
)
from flinklike_spark._runtime.taskexecutor.timer_service import TimeoutTicket, TimerService
from flinklike_spark.errors import FlinklikeError, SlotAllocationError, SlotNotFoundError

__all__ = [
    "TASK_SLOT_TABLE_TRANSITIONS",
    "TaskSlotTable",
    "TaskSlotTableState",
]

log = logging.getLogger(__name__)


class TaskSlotTableState(enum.Enum):
    """State of the table itself."""

    CREATED = "created"
    RUNNING = "running"
    CLOSING = "closing"
    CLOSED = "closed"


TASK_SLOT_TABLE_TRANSITIONS: Mapping[TaskSlotTableState, frozenset[TaskSlotTableState]] = {
    TaskSlotTableState.CREATED: frozenset(
        {
            TaskSlotTableState.RUNNING,  # start(slot_actions)
            TaskSlotTableState.CLOSED,  # close() before start(): nothing to free
        }
    ),
    TaskSlotTableState.RUNNING: frozenset({TaskSlotTableState.CLOSING}),  # close(): free every slot
    TaskSlotTableState.CLOSING: frozenset({TaskSlotTableState.CLOSED}),  # the last slot became free
    TaskSlotTableState.CLOSED: frozenset(),  # terminal
}


@dataclass(frozen=True)
class _SlotTimeoutKey:
    # The table id keeps two tables sharing one TimerService apart.
    table_id: int
    allocation_id: AllocationID


_table_ids = itertools.count()


def _check_timeout(name: str, value: timedelta) -> timedelta:
    if not isinstance(value, timedelta):
        raise TypeError(f"{name} must be a timedelta, got {type(value).__name__} {value!r}")
    if value <= timedelta(0):
        raise ValueError(f"{name} must be positive, got {value}")
    return value


class TaskSlotTable:
    """Container of the TaskExecutor's slots, with indices for fast look-up.

    Call :meth:`start` before anything else and :meth:`close` at the end. See the
    module docstring for the slot and table life cycles and the threading
    contract.

    Args:
        number_of_slots: static slots, at least 1; static indices are
            ``0 .. number_of_slots - 1``.
        timer_service: times out inactive slots. The table only registers and
            unregisters timeouts; its owner starts and closes the service.
        default_slot_timeout: timeout of an inactive slot when the caller gives none.

    Raises:
        ValueError: ``number_of_slots < 1`` or a non-positive timeout.
        TypeError: an argument has the wrong type.
    """

    def __init__(
        self,
        number_of_slots: int,
        *,
        timer_service: TimerService,
        default_slot_timeout: timedelta = DEFAULT_SLOT_TIMEOUT,
    ) -> None:
        if not isinstance(number_of_slots, int) or isinstance(number_of_slots, bool):
            raise TypeError(f"number_of_slots must be an int, got {type(number_of_slots).__name__}")
        if number_of_slots < 1:
            raise ValueError(f"number_of_slots must be at least 1, got {number_of_slots}")
        if not isinstance(timer_service, TimerService):
            raise TypeError(f"timer_service must be a TimerService, got {type(timer_service).__name__}")
        self._number_of_slots = number_of_slots
        self._timer_service = timer_service
        self._default_slot_timeout = _check_timeout("default_slot_timeout", default_slot_timeout)
        self._table_id = next(_table_ids)
        self._lock = threading.RLock()
        self._state = StateMachine("TaskSlotTable", TaskSlotTableState.CREATED, TASK_SLOT_TABLE_TRANSITIONS)
        self._slot_actions: SlotActions | None = None
        self._slots_by_index: dict[int, TaskSlot] = {}
        self._slots_by_allocation: dict[AllocationID, TaskSlot] = {}
        self._slot_of_task: dict[ExecutionAttemptID, TaskSlot] = {}
        self._allocations_per_job: dict[JobID, set[AllocationID]] = {}
        self._next_dynamic_index = number_of_slots
        self._closing_future: Future[None] = Future()
        # RUNNING futures cannot be cancelled by a caller, which would make set_result raise.
        self._closing_future.set_running_or_notify_cancel()

    # -- life cycle ------------------------------------------------------------------------------

    @property
    def state(self) -> TaskSlotTableState:
        return self._state.state

    @property
    def number_of_slots(self) -> int:
        """How many static slots the table has."""
        return self._number_of_slots

    def start(self, slot_actions: SlotActions) -> None:
        """Move CREATED -> RUNNING; ``slot_actions`` receives free/timeout callbacks.

        Raises:
            TypeError: ``slot_actions`` lacks ``free_slot`` or ``timeout_slot``.
            IllegalStateTransition: the table was already started or closed.
        """
        for name in ("free_slot", "timeout_slot"):
            if not callable(getattr(slot_actions, name, None)):
                raise TypeError(
                    f"slot_actions must implement SlotActions (free_slot, timeout_slot); "
                    f"{type(slot_actions).__name__} has no callable {name}"
                )
        with self._lock:
            self._state.transition(TaskSlotTableState.RUNNING, expected=TaskSlotTableState.CREATED)
            self._slot_actions = slot_actions

    def close(self) -> Future[None]:
        """Free every slot and return a future completed once the table is CLOSED.

        From CREATED the table closes at once. From RUNNING it enters CLOSING,
        frees every slot (failing their tasks with a :class:`FlinklikeError`) and
        becomes CLOSED when the last slot is free, i.e. after the last task was
        removed. Idempotent: later calls return the same future.
        """
        with self._lock:
            state = self.state
            if state is TaskSlotTableState.CREATED:
                self._state.transition(TaskSlotTableState.CLOSED)
            elif state is TaskSlotTableState.RUNNING:
                self._state.transition(TaskSlotTableState.CLOSING)
                slots = sorted(self._slots_by_allocation.values(), key=lambda s: s.index)
            else:
                return self._closing_future
        if state is TaskSlotTableState.CREATED:
            self._closing_future.set_result(None)
            return self._closing_future
        cause = FlinklikeError("TaskSlotTable is closing; every slot is freed")
        for slot in slots:
            with self._lock:
                if self._slots_by_allocation.get(slot.allocation_id) is not slot:
                    continue  # freed by another thread since the snapshot
                _, tasks = self._free_locked(slot)
            self._fail_tasks(tasks, cause)
        self._complete_close_if_done()
        return self._closing_future

    # -- allocation ------------------------------------------------------------------------------

    def allocate_slot(
        self,
        index: int,
        job_id: JobID,
        allocation_id: AllocationID,
        *,
        slot_timeout: timedelta | None = None,
    ) -> bool:
        """Allocate slot ``index`` to ``allocation_id`` of ``job_id``; the slot starts ALLOCATED.

        A new allocation registers a timeout (``slot_timeout``, or the default):
        unless marked active before it fires, the slot is reported through
        ``slot_actions.timeout_slot``.

        Args:
            index: a static index in ``[0, number_of_slots)``, or negative for a
                dynamic slot, which gets the next fresh index ``>= number_of_slots``.
            job_id: the job the slot is for.
            allocation_id: unique id of this allocation.
            slot_timeout: how long the slot may stay inactive.

        Returns:
            True if the slot is now allocated as asked: newly, or because this
            exact allocation already holds it (same job; same index, or any
            index if ``index`` is negative) and is not releasing. False if
            ``allocation_id`` is held elsewhere or by another job, or the index
            is taken by another allocation.

        Raises:
            ValueError: ``index >= number_of_slots``.
            SlotAllocationError: the table is not RUNNING.
        """
        if not isinstance(index, int) or isinstance(index, bool):
            raise TypeError(f"index must be an int, got {type(index).__name__} {index!r}")
        if index >= self._number_of_slots:
            raise ValueError(
                f"slot index {index} is out of range: valid are 0..{self._number_of_slots - 1} "
                f"(static slots) or a negative index for a dynamic slot"
            )
        timeout = self._default_slot_timeout if slot_timeout is None else _check_timeout("slot_timeout", slot_timeout)
        with self._lock:
            self._check_running("allocate_slot")
            existing = self._slots_by_allocation.get(allocation_id)
            if existing is not None:
                same_place = index < 0 or existing.index == index
                duplicate = same_place and existing.is_allocated(job_id, allocation_id)
                if not duplicate:
                    log.info("allocation %r is already held by %r; refusing it for slot %d of job %r",
                             allocation_id, existing, index, job_id)  # fmt: skip
                return duplicate
            if index >= 0 and index in self._slots_by_index:
                log.info("slot %d is already held by %r; refusing allocation %r of job %r",
                         index, self._slots_by_index[index], allocation_id, job_id)  # fmt: skip
                return False
            if index < 0:
                index = self._next_dynamic_index
                self._next_dynamic_index += 1
            slot = TaskSlot(index, job_id, allocation_id)
            self._slots_by_index[index] = slot
            self._slots_by_allocation[allocation_id] = slot
            self._allocations_per_job.setdefault(job_id, set()).add(allocation_id)
            self._register_timeout(allocation_id, timeout)
            return True

    def mark_slot_active(self, allocation_id: AllocationID) -> bool:
        """ALLOCATED -> ACTIVE, cancelling the slot's timeout.

        Returns:
            True if the slot is now ACTIVE (also if it already was); False if it
            is RELEASING.

        Raises:
            SlotNotFoundError: no slot holds ``allocation_id``.
            SlotAllocationError: the table is not RUNNING.
        """
        with self._lock:
            self._check_running("mark_slot_active")
            return self._mark_active_locked(self._require_slot(allocation_id))

    def mark_slot_inactive(self, allocation_id: AllocationID, slot_timeout: timedelta | None = None) -> bool:
        """ACTIVE -> ALLOCATED and (re)register the slot's timeout.

        Args:
            allocation_id: the slot to deactivate.
            slot_timeout: how long it may stay inactive; the default if None. A
                slot that already was ALLOCATED gets a fresh timeout (and ticket).

        Returns:
            True if the slot is now ALLOCATED with a new timeout. False if it is
            RELEASING or still holds tasks (remove or fail them first; unlike
            Flink, a slot with tasks never becomes inactive).

        Raises:
            SlotNotFoundError: no slot holds ``allocation_id``.
            SlotAllocationError: the table is not RUNNING.
        """
        timeout = self._default_slot_timeout if slot_timeout is None else _check_timeout("slot_timeout", slot_timeout)
        with self._lock:
            self._check_running("mark_slot_inactive")
            slot = self._require_slot(allocation_id)
            if not slot._mark_inactive():
                return False
            self._register_timeout(allocation_id, timeout)
            return True

    def try_mark_slot_active(self, job_id: JobID, allocation_id: AllocationID) -> bool:
        """Mark the slot ACTIVE if ``allocation_id`` is allocated to ``job_id``; never raises.

        Returns:
            True if the slot is now ACTIVE; False if unknown, of another job, or RELEASING.
        """
        with self._lock:
            slot = self._slots_by_allocation.get(allocation_id)
            if slot is None or not slot.is_allocated(job_id, allocation_id):
                return False
            return self._mark_active_locked(slot)

    def free_slot(self, allocation_id: AllocationID, cause: BaseException | None = None) -> int:
        """Free the slot of ``allocation_id``, or start releasing it if it holds tasks.

        Empty slot: it becomes FREE (its index is free again, its timeout is
        cancelled) and its index is returned. Slot with tasks: it becomes
        RELEASING, every task is failed with ``cause`` via ``fail_externally``
        (only the first time; freeing a RELEASING slot again fails nothing) and
        -1 is returned. The slot is freed when its last task is removed (see
        :meth:`remove_task`).

        Allowed in RUNNING, CLOSING and CLOSED: tasks finishing after ``close``
        still free their slots.

        Args:
            allocation_id: the slot to free.
            cause: handed to the failed tasks; a :class:`FlinklikeError` naming
                the slot if None.

        Returns:
            The freed slot's index, or -1 if it is releasing.

        Raises:
            SlotNotFoundError: no slot holds ``allocation_id``.
            SlotAllocationError: the table was never started.
        """
        with self._lock:
            self._check_started("free_slot")
            slot = self._require_slot(allocation_id)
            result, tasks = self._free_locked(slot)
        if tasks:
            if cause is None:
                cause = FlinklikeError(
                    f"slot {slot.index} (allocation {allocation_id!r} of job {slot.job_id!r}) was freed"
                )
            self._fail_tasks(tasks, cause)
        self._complete_close_if_done()
        return result

    def is_valid_timeout(self, allocation_id: AllocationID, ticket: TimeoutTicket) -> bool:
        """True iff ``ticket`` is the current timeout of the slot (it was not
        re-registered, and the slot was not marked active or freed since)."""
        return self._timer_service.is_valid(self._timeout_key(allocation_id), ticket)

    # -- slot queries ------------------------------------------------------------------------------

    def is_allocated(self, index: int, job_id: JobID, allocation_id: AllocationID) -> bool:
        """True iff slot ``index`` holds ``allocation_id`` of ``job_id``, ALLOCATED or ACTIVE.

        A negative ``index`` asks about a dynamic slot, wherever it is.
        """
        with self._lock:
            if index < 0:
                slot = self._slots_by_allocation.get(allocation_id)
                if slot is None or slot.index < self._number_of_slots:
                    return False
            else:
                slot = self._slots_by_index.get(index)
            return slot is not None and slot.is_allocated(job_id, allocation_id)

    def is_slot_free(self, index: int) -> bool:
        """True iff no allocation (in any state, RELEASING included) holds slot ``index``."""
        with self._lock:
            return index not in self._slots_by_index

    def get_slot_state(self, index: int) -> TaskSlotState:
        """The state of slot ``index``; FREE when no allocation holds it."""
        with self._lock:
            slot = self._slots_by_index.get(index)
            return TaskSlotState.FREE if slot is None else slot.state

    def get_current_allocation(self, index: int) -> AllocationID | None:
        """The allocation holding slot ``index`` (in any state), or None if it is free."""
        with self._lock:
            slot = self._slots_by_index.get(index)
            return None if slot is None else slot.allocation_id

    def get_owning_job(self, allocation_id: AllocationID) -> JobID | None:
        """The job of ``allocation_id``, or None if no slot holds it."""
        with self._lock:
            slot = self._slots_by_allocation.get(allocation_id)
            return None if slot is None else slot.job_id

    def has_allocated_slots(self, job_id: JobID) -> bool:
        """True iff ``job_id`` has a slot in state ALLOCATED (inactive); see :meth:`get_allocated_slots`."""
        return bool(self.get_allocated_slots(job_id))

    def get_allocated_slots(self, job_id: JobID) -> list[TaskSlot]:
        """The slots of ``job_id`` in state ALLOCATED (inactive), by index.

        ACTIVE and RELEASING slots are not included, as in Flink; use
        :meth:`get_allocation_ids_per_job` for every slot of a job.
        """
        return self._slots_of_job(job_id, TaskSlotState.ALLOCATED)

    def get_allocation_ids_per_job(self, job_id: JobID) -> frozenset[AllocationID]:
        """Every allocation of ``job_id``, in any state (RELEASING included)."""
        with self._lock:
            return frozenset(self._allocations_per_job.get(job_id, ()))

    def get_active_task_slot_allocation_ids(self) -> frozenset[AllocationID]:
        """The allocations of all ACTIVE slots."""
        with self._lock:
            return frozenset(a for a, s in self._slots_by_allocation.items() if s.state is TaskSlotState.ACTIVE)

    def get_active_task_slot_allocation_ids_per_job(self, job_id: JobID) -> frozenset[AllocationID]:
        """The allocations of the ACTIVE slots of ``job_id``."""
        return frozenset(s.allocation_id for s in self._slots_of_job(job_id, TaskSlotState.ACTIVE))

    def create_slot_report(self, resource_id: str) -> SlotReport:
        """Report every static slot (free ones too), then the dynamic slots, by index.

        A RELEASING slot is still reported as held by its allocation.
        """
        with self._lock:
            statuses = []
            for index in range(self._number_of_slots):
                slot = self._slots_by_index.get(index)
                if slot is None:
                    statuses.append(SlotStatus(slot_index=index))
                else:
                    statuses.append(SlotStatus(slot_index=index, allocation_id=slot.allocation_id, job_id=slot.job_id))
            for index in sorted(i for i in self._slots_by_index if i >= self._number_of_slots):
                slot = self._slots_by_index[index]
                statuses.append(SlotStatus(slot_index=index, allocation_id=slot.allocation_id, job_id=slot.job_id))
        return SlotReport(resource_id=resource_id, slot_statuses=tuple(statuses))

    # -- tasks ------------------------------------------------------------------------------------

    def add_task(self, task: SlotTask) -> bool:
        """Put ``task`` into the slot of ``task.allocation_id``. Safe from any thread.

        Returns:
            True if added. False if that slot is not ACTIVE, belongs to another
            job than ``task.job_id``, or ``task.execution_id`` is already in the table.

        Raises:
            SlotNotFoundError: no slot holds ``task.allocation_id``.
            SlotAllocationError: the table is not RUNNING.
        """
        with self._lock:
            self._check_running("add_task")
            slot = self._slots_by_allocation.get(task.allocation_id)
            if slot is None:
                raise SlotNotFoundError(
                    f"cannot add task {task.execution_id!r}: no slot holds allocation {task.allocation_id!r}; "
                    f"known allocations: {sorted(map(repr, self._slots_by_allocation))}"
                )
            if not slot.is_active(task.job_id, task.allocation_id):
                log.info("refusing task %r of job %r: %r is not an ACTIVE slot of that job",
                         task.execution_id, task.job_id, slot)  # fmt: skip
                return False
            if task.execution_id in self._slot_of_task or not slot._add(task):
                return False
            self._slot_of_task[task.execution_id] = slot
            return True

    def remove_task(self, execution_id: ExecutionAttemptID) -> SlotTask | None:
        """Remove a task from its slot and return it (None if unknown). Safe from any thread.

        If this empties a RELEASING slot, ``slot_actions.free_slot`` is called
        (on this thread, after the table's lock is released) so that the owner
        frees it. While CLOSING, a slot the owner did not free is freed by the
        table itself, so that ``close`` can complete.

        Raises:
            SlotAllocationError: the table was never started.
        """
        with self._lock:
            self._check_started("remove_task")
            slot = self._slot_of_task.pop(execution_id, None)
            if slot is None:
                return None
            task = slot._remove(execution_id)
            emptied_releasing = slot.state is TaskSlotState.RELEASING and slot.is_empty
            slot_actions = self._slot_actions
        if emptied_releasing:
            assert slot_actions is not None  # started
            slot_actions.free_slot(slot.allocation_id)
            with self._lock:
                if (
                    self.state is TaskSlotTableState.CLOSING
                    and self._slots_by_allocation.get(slot.allocation_id) is slot
                    and slot.is_empty
                ):
                    self._free_locked(slot)
            self._complete_close_if_done()
        return task

    def get_task(self, execution_id: ExecutionAttemptID) -> SlotTask | None:
        """The task with ``execution_id``, or None."""
        with self._lock:
            slot = self._slot_of_task.get(execution_id)
            return None if slot is None else slot._tasks.get(execution_id)

    def get_tasks(self, job_id: JobID) -> list[SlotTask]:
        """Every task of ``job_id``, by slot index then insertion order.

        Unlike Flink's iterator (ACTIVE slots only) this includes the tasks of
        RELEASING slots: they run until they are removed.
        """
        with self._lock:
            slots = sorted(
                (self._slots_by_allocation[a] for a in self._allocations_per_job.get(job_id, ())),
                key=lambda s: s.index,
            )
            return [task for slot in slots for task in slot._tasks.values()]

    # -- internals --------------------------------------------------------------------------------

    def _check_running(self, operation: str) -> None:
        state = self.state
        if state is not TaskSlotTableState.RUNNING:
            hint = "; call start() first" if state is TaskSlotTableState.CREATED else ""
            raise SlotAllocationError(f"TaskSlotTable is {state.name}; {operation} is valid only in RUNNING{hint}")

    def _check_started(self, operation: str) -> None:
        if self.state is TaskSlotTableState.CREATED:
            raise SlotAllocationError(
                f"TaskSlotTable is CREATED; {operation} is valid only in RUNNING, CLOSING or CLOSED; call start() first"
            )

    def _require_slot(self, allocation_id: AllocationID) -> TaskSlot:
        slot = self._slots_by_allocation.get(allocation_id)
        if slot is None:
            raise SlotNotFoundError(
                f"no slot holds allocation {allocation_id!r}; "
                f"known allocations: {sorted(map(repr, self._slots_by_allocation))}"
            )
        return slot

    def _slots_of_job(self, job_id: JobID, state: TaskSlotState) -> list[TaskSlot]:
        with self._lock:
            slots = (self._slots_by_allocation[a] for a in self._allocations_per_job.get(job_id, ()))
            return sorted((s for s in slots if s.state is state), key=lambda s: s.index)

    def _mark_active_locked(self, slot: TaskSlot) -> bool:
        if not slot._mark_active():
            return False
        self._timer_service.unregister_timeout(self._timeout_key(slot.allocation_id))
        return True

    def _free_locked(self, slot: TaskSlot) -> tuple[int, list[SlotTask]]:
        """Enter RELEASING; if empty, drop the slot from every index. Returns (index or -1, tasks to fail)."""
        tasks = slot._mark_releasing()
        self._timer_service.unregister_timeout(self._timeout_key(slot.allocation_id))
        if not slot.is_empty:
            return -1, tasks
        slot._mark_free()
        del self._slots_by_allocation[slot.allocation_id]
        del self._slots_by_index[slot.index]
        job_allocations = self._allocations_per_job[slot.job_id]
        job_allocations.discard(slot.allocation_id)
        if not job_allocations:
            del self._allocations_per_job[slot.job_id]
        return slot.index, tasks

    @staticmethod
    def _fail_tasks(tasks: Sequence[SlotTask], cause: BaseException) -> None:
        for task in tasks:
            try:
                task.fail_externally(cause)
            except Exception:  # noqa: BLE001 - one faulty task must not keep the others running
                log.exception("fail_externally of task %r raised", task.execution_id)

    def _complete_close_if_done(self) -> None:
        with self._lock:
            if self.state is not TaskSlotTableState.CLOSING or self._slots_by_allocation:
                return
            self._state.transition(TaskSlotTableState.CLOSED)
        self._closing_future.set_result(None)

    def _timeout_key(self, allocation_id: AllocationID) -> _SlotTimeoutKey:
        return _SlotTimeoutKey(self._table_id, allocation_id)

    def _register_timeout(self, allocation_id: AllocationID, timeout: timedelta) -> None:
        self._timer_service.register_timeout(self._timeout_key(allocation_id), timeout, self._notify_timeout)

    def _notify_timeout(self, key: _SlotTimeoutKey, ticket: TimeoutTicket) -> None:
        # Runs on the timer thread (or the ManualClock's caller); the lock is not held.
        with self._lock:
            slot_actions = self._slot_actions
            if self.state is TaskSlotTableState.CLOSED or slot_actions is None:
                return
        slot_actions.timeout_slot(key.allocation_id, ticket)

    def __repr__(self) -> str:
        with self._lock:
            return (
                f"TaskSlotTable(state={self.state.name}, slots={self._number_of_slots}, "
                f"allocated={len(self._slots_by_allocation)}, tasks={len(self._slot_of_task)})"
            )
