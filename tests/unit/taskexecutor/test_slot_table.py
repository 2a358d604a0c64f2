"""Tests of TaskSlotTable (slot and table life cycles, timeouts, reports) and TimerService.

Time is driven by a ManualClock: nothing here sleeps. The one background-mode
timer test waits on an Event that the timer thread sets.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from flinklike_spark._runtime.state_machine import StateMachine, validate_transition_table
from flinklike_spark._runtime.taskexecutor.slot_table import (
    TASK_SLOT_TABLE_TRANSITIONS,
    TaskSlotTable,
    TaskSlotTableState,
)
from flinklike_spark._runtime.taskexecutor.task_slot import (
    TASK_SLOT_TRANSITIONS,
    SlotActions,
    SlotReport,
    SlotStatus,
    SlotTask,
    TaskSlotState,
)
from flinklike_spark._runtime.taskexecutor.timer_service import (
    ManualClock,
    TimeoutTicket,
    TimerService,
    TimerServiceState,
)
from flinklike_spark.errors import (
    FlinklikeError,
    IllegalStateTransition,
    SlotAllocationError,
    SlotNotFoundError,
)

TIMEOUT = timedelta(seconds=10)
JOB = "job-1"
OTHER_JOB = "job-2"


@dataclass(eq=False)
class FakeTask:
    execution_id: str
    job_id: str
    allocation_id: str
    failures: list[BaseException] = field(default_factory=list)

    def fail_externally(self, cause: BaseException) -> None:
        self.failures.append(cause)


class RecordingSlotActions:
    """Records the table's callbacks; with ``table`` set, reacts like the TaskExecutor does."""

    def __init__(self, table: TaskSlotTable | None = None) -> None:
        self.table = table
        self.freed: list[str] = []
        self.timeouts: list[tuple[str, TimeoutTicket]] = []

    def free_slot(self, allocation_id: str) -> None:
        self.freed.append(allocation_id)
        if self.table is not None:
            self.table.free_slot(allocation_id)

    def timeout_slot(self, allocation_id: str, ticket: TimeoutTicket) -> None:
        self.timeouts.append((allocation_id, ticket))
        if self.table is not None and self.table.is_valid_timeout(allocation_id, ticket):
            self.table.free_slot(allocation_id)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def timer(clock: ManualClock) -> TimerService:
    return TimerService(clock=clock)


@pytest.fixture
def table(timer: TimerService) -> TaskSlotTable:
    return TaskSlotTable(2, timer_service=timer, default_slot_timeout=TIMEOUT)


@pytest.fixture
def actions(table: TaskSlotTable) -> RecordingSlotActions:
    """Recording only: the table's callbacks do not free anything."""
    recorder = RecordingSlotActions()
    table.start(recorder)
    return recorder


@pytest.fixture
def forwarding(table: TaskSlotTable) -> RecordingSlotActions:
    """TaskExecutor-like: free_slot and valid timeouts free the slot in the table."""
    recorder = RecordingSlotActions(table)
    table.start(recorder)
    return recorder


def active_slot(table: TaskSlotTable, index: int = 0, job: str = JOB, allocation: str = "a0") -> str:
    assert table.allocate_slot(index, job, allocation)
    assert table.mark_slot_active(allocation)
    return allocation


# -- transition tables ----------------------------------------------------------------------------


def test_transition_tables_cover_every_state_and_have_the_documented_terminals():
    validate_transition_table(TaskSlotState, TASK_SLOT_TRANSITIONS)
    validate_transition_table(TaskSlotTableState, TASK_SLOT_TABLE_TRANSITIONS)
    assert TASK_SLOT_TRANSITIONS[TaskSlotState.FREE] == frozenset()
    assert TASK_SLOT_TRANSITIONS[TaskSlotState.RELEASING] == frozenset({TaskSlotState.FREE})
    assert TASK_SLOT_TABLE_TRANSITIONS[TaskSlotTableState.CLOSED] == frozenset()
    assert TaskSlotTableState.CLOSED in TASK_SLOT_TABLE_TRANSITIONS[TaskSlotTableState.CREATED]


@pytest.mark.parametrize(
    ("source", "target"),
    [
        (TaskSlotState.RELEASING, TaskSlotState.ACTIVE),
        (TaskSlotState.RELEASING, TaskSlotState.ALLOCATED),
        (TaskSlotState.FREE, TaskSlotState.ALLOCATED),
        (TaskSlotState.ALLOCATED, TaskSlotState.FREE),
        (TaskSlotState.ACTIVE, TaskSlotState.FREE),
    ],
)
def test_illegal_slot_transitions_raise(source, target):
    machine = StateMachine("slot", source, TASK_SLOT_TRANSITIONS)
    with pytest.raises(IllegalStateTransition) as info:
        machine.transition(target)
    assert info.value.source is source and info.value.target is target


@pytest.mark.parametrize(
    ("source", "target"),
    [
        (TaskSlotTableState.RUNNING, TaskSlotTableState.CLOSED),
        (TaskSlotTableState.CLOSING, TaskSlotTableState.RUNNING),
        (TaskSlotTableState.CLOSED, TaskSlotTableState.RUNNING),
        (TaskSlotTableState.CREATED, TaskSlotTableState.CLOSING),
    ],
)
def test_illegal_table_transitions_raise(source, target):
    machine = StateMachine("table", source, TASK_SLOT_TABLE_TRANSITIONS)
    with pytest.raises(IllegalStateTransition):
        machine.transition(target)


# -- construction and start ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "fragment"),
    [
        ({"number_of_slots": 0}, ValueError, "at least 1, got 0"),
        ({"number_of_slots": True}, TypeError, "must be an int"),
        ({"default_slot_timeout": timedelta(0)}, ValueError, "must be positive"),
        ({"default_slot_timeout": 10}, TypeError, "must be a timedelta"),
        ({"timer_service": object()}, TypeError, "must be a TimerService"),
    ],
)
def test_constructor_validates_arguments(timer, kwargs, error, fragment):
    arguments = {"number_of_slots": 2, "timer_service": timer, "default_slot_timeout": TIMEOUT} | kwargs
    number = arguments.pop("number_of_slots")
    with pytest.raises(error, match=fragment):
        TaskSlotTable(number, **arguments)


def test_new_table_is_created_and_refuses_operations_until_started(table):
    assert table.state is TaskSlotTableState.CREATED
    assert table.number_of_slots == 2
    with pytest.raises(SlotAllocationError, match=r"CREATED; allocate_slot is valid only in RUNNING; call start"):
        table.allocate_slot(0, JOB, "a0")
    with pytest.raises(SlotAllocationError, match="CREATED; add_task"):
        table.add_task(FakeTask("e", JOB, "a0"))
    with pytest.raises(SlotAllocationError, match="CREATED; free_slot is valid only in RUNNING, CLOSING or CLOSED"):
        table.free_slot("a0")
    with pytest.raises(SlotAllocationError, match="CREATED; remove_task"):
        table.remove_task("e")
    with pytest.raises(SlotAllocationError, match="CREATED; mark_slot_active"):
        table.mark_slot_active("a0")


def test_start_moves_to_running_once(table):
    table.start(RecordingSlotActions())
    assert table.state is TaskSlotTableState.RUNNING
    with pytest.raises(IllegalStateTransition, match="expected state in \\['CREATED'\\]"):
        table.start(RecordingSlotActions())


def test_start_rejects_objects_that_are_not_slot_actions(table):
    with pytest.raises(TypeError, match="has no callable timeout_slot"):
        table.start(type("OnlyFree", (), {"free_slot": lambda self, a: None})())
    assert table.state is TaskSlotTableState.CREATED


def test_fakes_satisfy_the_protocols():
    assert isinstance(FakeTask("e", JOB, "a"), SlotTask)
    assert isinstance(RecordingSlotActions(), SlotActions)
    assert not isinstance(object(), SlotTask)


# -- allocation ------------------------------------------------------------------------------------


def test_allocate_static_slot(table, actions):
    assert table.allocate_slot(1, JOB, "a1")
    assert table.get_slot_state(1) is TaskSlotState.ALLOCATED
    assert table.get_slot_state(0) is TaskSlotState.FREE
    assert table.is_allocated(1, JOB, "a1")
    assert not table.is_allocated(0, JOB, "a1")
    assert not table.is_allocated(1, OTHER_JOB, "a1")
    assert not table.is_slot_free(1) and table.is_slot_free(0)
    assert table.get_current_allocation(1) == "a1" and table.get_current_allocation(0) is None
    assert table.get_owning_job("a1") == JOB and table.get_owning_job("nope") is None
    assert table.get_allocation_ids_per_job(JOB) == frozenset({"a1"})
    assert table.get_allocation_ids_per_job(OTHER_JOB) == frozenset()
    assert table.has_allocated_slots(JOB) and not table.has_allocated_slots(OTHER_JOB)
    [slot] = table.get_allocated_slots(JOB)
    assert (slot.index, slot.job_id, slot.allocation_id, slot.state) == (1, JOB, "a1", TaskSlotState.ALLOCATED)
    assert slot.is_empty and slot.tasks == {}


def test_allocate_index_out_of_range_names_the_valid_range(table, actions):
    with pytest.raises(ValueError, match=r"slot index 2 is out of range: valid are 0\.\.1"):
        table.allocate_slot(2, JOB, "a")


def test_allocate_dynamic_slots_get_fresh_indices_beyond_the_static_ones(table, actions):
    assert table.allocate_slot(-1, JOB, "d1")
    assert table.allocate_slot(-5, OTHER_JOB, "d2")
    assert table.get_current_allocation(2) == "d1" and table.get_current_allocation(3) == "d2"
    assert table.is_allocated(-1, JOB, "d1") and table.is_allocated(2, JOB, "d1")
    assert not table.is_allocated(-1, OTHER_JOB, "d1")
    # Static slots stay free.
    assert table.is_slot_free(0) and table.is_slot_free(1)
    assert table.free_slot("d1") == 2
    assert table.allocate_slot(-1, JOB, "d3")
    assert table.get_current_allocation(4) == "d3", "dynamic indices are never reused"
    assert table.is_slot_free(2)


def test_is_allocated_with_negative_index_ignores_static_slots(table, actions):
    assert table.allocate_slot(0, JOB, "s")
    assert not table.is_allocated(-1, JOB, "s")


def test_reallocating_the_same_allocation_is_idempotent(table, actions, clock):
    assert table.allocate_slot(0, JOB, "a0")
    clock.advance(timedelta(seconds=6))
    assert table.allocate_slot(0, JOB, "a0")
    assert table.allocate_slot(-1, JOB, "a0"), "a negative index matches the allocation wherever it is"
    assert table.get_allocation_ids_per_job(JOB) == frozenset({"a0"})
    assert table.create_slot_report("tm").slot_statuses[0].allocation_id == "a0"
    assert len(table.create_slot_report("tm")) == 2, "no dynamic slot was created"
    # The duplicate request did not restart the timeout: it fires 10 s after the first.
    clock.advance(timedelta(seconds=4))
    assert [a for a, _ in actions.timeouts] == ["a0"]


@pytest.mark.parametrize(
    ("index", "job", "allocation", "why"),
    [
        (1, JOB, "a0", "same allocation at another index"),
        (0, OTHER_JOB, "a0", "same allocation for another job"),
        (-1, OTHER_JOB, "a0", "same allocation, dynamic request, another job"),
        (0, JOB, "b0", "index taken by another allocation of the same job"),
        (0, OTHER_JOB, "b0", "index taken by another job"),
    ],
)
def test_conflicting_allocation_is_refused(table, actions, index, job, allocation, why):
    assert table.allocate_slot(0, JOB, "a0")
    assert not table.allocate_slot(index, job, allocation), why
    assert table.get_current_allocation(0) == "a0"
    assert table.get_owning_job("a0") == JOB
    assert table.get_owning_job("b0") is None
    assert table.is_slot_free(1)


def test_reallocating_a_releasing_allocation_is_refused(table, actions):
    allocation = active_slot(table)
    assert table.add_task(FakeTask("e", JOB, allocation))
    assert table.free_slot(allocation) == -1
    assert not table.allocate_slot(0, JOB, allocation)
    assert not table.is_allocated(0, JOB, allocation)


def test_allocate_rejects_a_bad_timeout(table, actions):
    with pytest.raises(ValueError, match="slot_timeout must be positive"):
        table.allocate_slot(0, JOB, "a", slot_timeout=timedelta(seconds=-1))
    assert table.is_slot_free(0)


# -- active / inactive -----------------------------------------------------------------------------


def test_mark_slot_active_and_inactive(table, actions, clock):
    assert table.allocate_slot(0, JOB, "a0")
    assert table.mark_slot_active("a0")
    assert table.get_slot_state(0) is TaskSlotState.ACTIVE
    assert table.mark_slot_active("a0"), "already active is still success"
    assert table.get_active_task_slot_allocation_ids() == frozenset({"a0"})
    assert table.get_active_task_slot_allocation_ids_per_job(JOB) == frozenset({"a0"})
    assert table.get_active_task_slot_allocation_ids_per_job(OTHER_JOB) == frozenset()
    assert not table.has_allocated_slots(JOB) and table.get_allocated_slots(JOB) == []
    assert table.is_allocated(0, JOB, "a0"), "ACTIVE still counts as allocated"
    clock.advance(TIMEOUT * 2)
    assert actions.timeouts == [], "an active slot has no timeout"

    assert table.mark_slot_inactive("a0", timedelta(seconds=3))
    assert table.get_slot_state(0) is TaskSlotState.ALLOCATED
    assert table.get_active_task_slot_allocation_ids() == frozenset()
    assert table.has_allocated_slots(JOB)
    clock.advance(timedelta(seconds=2.9))
    assert actions.timeouts == []
    clock.advance(timedelta(seconds=0.1))
    assert [a for a, _ in actions.timeouts] == ["a0"]


def test_mark_inactive_uses_the_default_timeout(table, actions, clock):
    active_slot(table)
    assert table.mark_slot_inactive("a0")
    clock.advance(TIMEOUT - timedelta(milliseconds=1))
    assert actions.timeouts == []
    clock.advance(timedelta(milliseconds=1))
    assert len(actions.timeouts) == 1


def test_mark_unknown_slot_raises_slot_not_found(table, actions):
    with pytest.raises(SlotNotFoundError, match="no slot holds allocation 'ghost'"):
        table.mark_slot_active("ghost")
    with pytest.raises(SlotNotFoundError, match="'ghost'"):
        table.mark_slot_inactive("ghost")


def test_slot_with_tasks_cannot_become_inactive(table, actions):
    allocation = active_slot(table)
    assert table.add_task(FakeTask("e", JOB, allocation))
    assert not table.mark_slot_inactive(allocation)
    assert table.get_slot_state(0) is TaskSlotState.ACTIVE


def test_releasing_slot_cannot_be_marked_active_or_inactive(table, actions):
    allocation = active_slot(table)
    assert table.add_task(FakeTask("e", JOB, allocation))
    table.free_slot(allocation)
    assert not table.mark_slot_active(allocation)
    assert not table.try_mark_slot_active(JOB, allocation)
    assert not table.mark_slot_inactive(allocation)
    assert table.get_slot_state(0) is TaskSlotState.RELEASING


def test_try_mark_slot_active(table, actions, clock):
    assert table.allocate_slot(0, JOB, "a0")
    assert not table.try_mark_slot_active(OTHER_JOB, "a0")
    assert not table.try_mark_slot_active(JOB, "ghost")
    assert table.get_slot_state(0) is TaskSlotState.ALLOCATED
    assert table.try_mark_slot_active(JOB, "a0")
    assert table.get_slot_state(0) is TaskSlotState.ACTIVE
    clock.advance(TIMEOUT)
    assert actions.timeouts == [], "try_mark_slot_active cancels the timeout"


# -- timeouts --------------------------------------------------------------------------------------


def test_timeout_of_an_inactive_slot_calls_timeout_slot_with_a_valid_ticket(table, actions, clock):
    assert table.allocate_slot(0, JOB, "a0", slot_timeout=timedelta(seconds=5))
    clock.advance(timedelta(seconds=4.999))
    assert actions.timeouts == []
    clock.advance(timedelta(milliseconds=1))
    [(allocation, ticket)] = actions.timeouts
    assert allocation == "a0"
    assert table.is_valid_timeout("a0", ticket)
    assert not table.is_valid_timeout("other", ticket)
    assert table.get_slot_state(0) is TaskSlotState.ALLOCATED, "the table leaves freeing to its owner"
    clock.advance(TIMEOUT)
    assert len(actions.timeouts) == 1, "a timeout fires once"
    assert table.mark_slot_active("a0")
    assert not table.is_valid_timeout("a0", ticket), "marking active invalidates the ticket"


def test_reregistered_timeout_invalidates_the_old_ticket(table, actions, clock):
    assert table.allocate_slot(0, JOB, "a0")
    clock.advance(TIMEOUT)
    [(_, first)] = actions.timeouts
    assert table.mark_slot_inactive("a0")
    assert not table.is_valid_timeout("a0", first)
    clock.advance(TIMEOUT)
    [_, (_, second)] = actions.timeouts
    assert second != first
    assert table.is_valid_timeout("a0", second)


def test_timeout_cancelled_by_activation_does_not_fire_after_reactivation_cycle(table, actions, clock):
    assert table.allocate_slot(0, JOB, "a0")
    clock.advance(timedelta(seconds=5))
    assert table.mark_slot_active("a0")
    assert table.mark_slot_inactive("a0")
    clock.advance(timedelta(seconds=6))
    assert actions.timeouts == [], "the first registration (due at 10 s) was cancelled"
    clock.advance(timedelta(seconds=4))
    assert len(actions.timeouts) == 1


def test_valid_timeout_frees_the_slot_through_slot_actions(table, forwarding, clock):
    assert table.allocate_slot(0, JOB, "a0")
    assert table.allocate_slot(1, JOB, "a1")
    assert table.mark_slot_active("a1")
    clock.advance(TIMEOUT)
    assert [a for a, _ in forwarding.timeouts] == ["a0"]
    assert table.is_slot_free(0)
    assert not table.is_slot_free(1)
    assert table.get_allocation_ids_per_job(JOB) == frozenset({"a1"})


def test_freed_slot_does_not_time_out(table, actions, clock):
    assert table.allocate_slot(0, JOB, "a0")
    assert table.free_slot("a0") == 0
    clock.advance(TIMEOUT)
    assert actions.timeouts == []


# -- free ------------------------------------------------------------------------------------------


def test_free_empty_slot_returns_its_index(table, actions):
    assert table.allocate_slot(1, JOB, "a1")
    [slot] = table.get_allocated_slots(JOB)
    assert table.free_slot("a1") == 1
    assert slot.state is TaskSlotState.FREE
    assert [state for _, state in slot.history] == [
        TaskSlotState.ALLOCATED,
        TaskSlotState.RELEASING,
        TaskSlotState.FREE,
    ]
    assert table.is_slot_free(1)
    assert table.get_slot_state(1) is TaskSlotState.FREE
    assert table.get_owning_job("a1") is None
    assert table.get_allocation_ids_per_job(JOB) == frozenset()
    assert actions.freed == [], "an immediate free does not call back"
    with pytest.raises(SlotNotFoundError, match="'a1'"):
        table.free_slot("a1")
    assert table.allocate_slot(1, OTHER_JOB, "b1"), "the index can be allocated again"


def test_free_slot_with_tasks_releases_fails_tasks_and_frees_after_last_removal(table, actions):
    allocation = active_slot(table)
    tasks = [FakeTask(f"e{i}", JOB, allocation) for i in range(2)]
    for task in tasks:
        assert table.add_task(task)
    cause = RuntimeError("job master asked")
    assert table.free_slot(allocation, cause) == -1
    assert table.get_slot_state(0) is TaskSlotState.RELEASING
    assert [t.failures for t in tasks] == [[cause], [cause]]
    assert not table.is_slot_free(0)
    assert table.get_current_allocation(0) == allocation
    assert not table.is_allocated(0, JOB, allocation), "a releasing slot is no longer allocated"
    assert table.get_tasks(JOB) == tasks, "tasks of a releasing slot are still listed"

    assert table.free_slot(allocation, RuntimeError("again")) == -1
    assert [len(t.failures) for t in tasks] == [1, 1], "tasks are failed only once"

    assert table.remove_task("e0") is tasks[0]
    assert actions.freed == []
    assert table.get_slot_state(0) is TaskSlotState.RELEASING
    assert table.remove_task("e1") is tasks[1]
    assert actions.freed == [allocation]
    # The recording actions do not free; the slot waits, empty, for the owner.
    assert table.get_slot_state(0) is TaskSlotState.RELEASING
    assert table.free_slot(allocation) == 0
    assert table.is_slot_free(0)


def test_releasing_slot_is_freed_by_the_owner_after_last_removal(table, forwarding):
    allocation = active_slot(table)
    assert table.add_task(FakeTask("e", JOB, allocation))
    assert table.free_slot(allocation) == -1
    table.remove_task("e")
    assert forwarding.freed == [allocation]
    assert table.is_slot_free(0)
    assert table.get_owning_job(allocation) is None


def test_free_slot_default_cause_names_the_slot(table, actions):
    allocation = active_slot(table, index=1, allocation="a1")
    task = FakeTask("e", JOB, allocation)
    assert table.add_task(task)
    table.free_slot(allocation)
    [cause] = task.failures
    assert isinstance(cause, FlinklikeError)
    assert "slot 1" in str(cause) and "'a1'" in str(cause) and JOB in str(cause)


def test_task_that_removes_itself_while_failed_frees_its_slot(table, forwarding):
    allocation = active_slot(table)

    class SelfRemovingTask(FakeTask):
        def fail_externally(self, cause: BaseException) -> None:
            super().fail_externally(cause)
            table.remove_task(self.execution_id)  # re-enters the table from the callback

    task = SelfRemovingTask("e", JOB, allocation)
    assert table.add_task(task)
    assert table.free_slot(allocation) == -1
    assert len(task.failures) == 1
    assert table.is_slot_free(0)
    assert table.get_task("e") is None


def test_one_failing_fail_externally_does_not_spare_the_other_tasks(table, actions):
    allocation = active_slot(table)

    class Exploding(FakeTask):
        def fail_externally(self, cause: BaseException) -> None:
            super().fail_externally(cause)
            raise RuntimeError("boom")

    first, second = Exploding("e0", JOB, allocation), FakeTask("e1", JOB, allocation)
    assert table.add_task(first) and table.add_task(second)
    assert table.free_slot(allocation) == -1
    assert len(first.failures) == 1 and len(second.failures) == 1


# -- tasks -----------------------------------------------------------------------------------------


def test_add_task_requires_a_known_slot(table, actions):
    with pytest.raises(SlotNotFoundError, match="no slot holds allocation 'ghost'"):
        table.add_task(FakeTask("e", JOB, "ghost"))


def test_add_task_refuses_inactive_slot_and_wrong_job(table, actions):
    assert table.allocate_slot(0, JOB, "a0")
    assert not table.add_task(FakeTask("e", JOB, "a0")), "ALLOCATED is not ACTIVE"
    assert table.mark_slot_active("a0")
    assert not table.add_task(FakeTask("e", OTHER_JOB, "a0")), "slot belongs to another job"
    assert table.get_task("e") is None
    assert table.get_tasks(OTHER_JOB) == [] and table.get_tasks(JOB) == []


def test_add_task_refuses_a_duplicate_execution_id(table, actions):
    active_slot(table, index=0, allocation="a0")
    active_slot(table, index=1, allocation="a1")
    first = FakeTask("e", JOB, "a0")
    assert table.add_task(first)
    assert not table.add_task(FakeTask("e", JOB, "a0"))
    assert not table.add_task(FakeTask("e", JOB, "a1"))
    assert table.get_task("e") is first


def test_add_get_and_remove_tasks(table, actions):
    active_slot(table, index=1, allocation="a1")
    active_slot(table, index=0, allocation="a0")
    active_slot(table, index=-1, job=OTHER_JOB, allocation="d")
    t1, t0, t0b, other = (
        FakeTask("t1", JOB, "a1"),
        FakeTask("t0", JOB, "a0"),
        FakeTask("t0b", JOB, "a0"),
        FakeTask("o", OTHER_JOB, "d"),
    )
    for task in (t1, t0, t0b, other):
        assert table.add_task(task)
    assert table.get_task("t0") is t0 and table.get_task("nope") is None
    assert table.get_tasks(JOB) == [t0, t0b, t1], "by slot index, then insertion order"
    assert table.get_tasks(OTHER_JOB) == [other]
    assert table.get_allocated_slots(JOB) == [], "ACTIVE slots are not 'allocated' slots"
    assert table.remove_task("t0") is t0
    assert table.get_task("t0") is None
    assert table.remove_task("t0") is None
    assert table.remove_task("unknown") is None
    assert table.get_tasks(JOB) == [t0b, t1]
    assert table.get_slot_state(0) is TaskSlotState.ACTIVE, "removing from an ACTIVE slot keeps it"
    assert actions.freed == []


def test_add_and_remove_from_many_threads(table, actions):
    allocation = active_slot(table)
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            for i in range(200):
                task = FakeTask(f"{n}-{i}", JOB, allocation)
                assert table.add_task(task)
                assert table.remove_task(task.execution_id) is task
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert table.get_tasks(JOB) == []
    assert table.get_slot_state(0) is TaskSlotState.ACTIVE


# -- slot report -----------------------------------------------------------------------------------


def test_slot_report_lists_static_slots_then_dynamic_ones(table, actions):
    assert table.allocate_slot(1, JOB, "a1")
    assert table.allocate_slot(-1, OTHER_JOB, "d")
    report = table.create_slot_report("tm-7")
    assert report == SlotReport(
        resource_id="tm-7",
        slot_statuses=(
            SlotStatus(slot_index=0),
            SlotStatus(slot_index=1, allocation_id="a1", job_id=JOB),
            SlotStatus(slot_index=2, allocation_id="d", job_id=OTHER_JOB),
        ),
    )
    assert [s.is_free for s in report] == [True, False, False]
    assert len(report) == 3


def test_slot_report_keeps_releasing_slots_and_drops_freed_ones(table, actions):
    allocation = active_slot(table, index=0, allocation="a0")
    assert table.add_task(FakeTask("e", JOB, allocation))
    assert table.allocate_slot(-1, JOB, "d")
    table.free_slot("a0")
    table.free_slot("d")
    report = table.create_slot_report("tm")
    assert report.slot_statuses == (
        SlotStatus(slot_index=0, allocation_id="a0", job_id=JOB),
        SlotStatus(slot_index=1),
    )


def test_empty_table_reports_every_static_slot_free(timer):
    table = TaskSlotTable(3, timer_service=timer)
    assert [s.slot_index for s in table.create_slot_report("tm")] == [0, 1, 2]
    assert all(s.is_free for s in table.create_slot_report("tm"))


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"slot_index": 0, "allocation_id": "a"}, "must both be set"),
        ({"slot_index": 0, "job_id": JOB}, "must both be set"),
        ({"slot_index": -1}, "non-negative int, got -1"),
    ],
)
def test_slot_status_validates(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        SlotStatus(**kwargs)


def test_slot_report_validates():
    with pytest.raises(ValueError, match=r"unique, got \[0, 0\]"):
        SlotReport(resource_id="tm", slot_statuses=(SlotStatus(slot_index=0), SlotStatus(slot_index=0)))
    with pytest.raises(TypeError, match="SlotStatus objects, got int"):
        SlotReport(resource_id="tm", slot_statuses=(1,))
    report = SlotReport(resource_id="tm", slot_statuses=[SlotStatus(slot_index=0)])
    assert isinstance(report.slot_statuses, tuple)


# -- close -----------------------------------------------------------------------------------------


def test_close_before_start_closes_at_once(table):
    future = table.close()
    assert future.done() and future.result() is None
    assert table.state is TaskSlotTableState.CLOSED
    assert table.close() is future
    with pytest.raises(IllegalStateTransition, match="CLOSED"):
        table.start(RecordingSlotActions())


def test_close_without_slots_closes_at_once(table, actions):
    future = table.close()
    assert future.done()
    assert table.state is TaskSlotTableState.CLOSED


def test_close_frees_slots_fails_tasks_and_completes_when_the_last_task_is_removed(table, forwarding, clock):
    allocation = active_slot(table, index=0, allocation="a0")
    assert table.allocate_slot(1, OTHER_JOB, "a1")
    tasks = [FakeTask("e0", JOB, allocation), FakeTask("e1", JOB, allocation)]
    for task in tasks:
        assert table.add_task(task)

    future = table.close()
    assert table.state is TaskSlotTableState.CLOSING
    assert not future.done()
    assert not future.cancel(), "callers cannot cancel the close future"
    assert all(len(t.failures) == 1 and isinstance(t.failures[0], FlinklikeError) for t in tasks)
    assert table.is_slot_free(1), "the empty slot was freed at once"
    assert table.get_slot_state(0) is TaskSlotState.RELEASING
    assert table.close() is future

    with pytest.raises(SlotAllocationError, match="TaskSlotTable is CLOSING; allocate_slot is valid only in RUNNING"):
        table.allocate_slot(1, JOB, "late")
    with pytest.raises(SlotAllocationError, match="CLOSING; add_task"):
        table.add_task(FakeTask("late", JOB, allocation))
    with pytest.raises(SlotAllocationError, match="CLOSING; mark_slot_inactive"):
        table.mark_slot_inactive(allocation)

    table.remove_task("e0")
    assert not future.done()
    table.remove_task("e1")
    assert forwarding.freed == [allocation]
    assert future.done()
    assert table.state is TaskSlotTableState.CLOSED
    assert table.create_slot_report("tm").slot_statuses == (SlotStatus(slot_index=0), SlotStatus(slot_index=1))
    clock.advance(TIMEOUT * 2)
    assert forwarding.timeouts == [], "no timeout survives close"


def test_close_completes_even_if_the_owner_does_not_free_the_slot(table, actions):
    allocation = active_slot(table)
    assert table.add_task(FakeTask("e", JOB, allocation))
    future = table.close()
    assert not future.done()
    table.remove_task("e")
    assert actions.freed == [allocation]
    assert future.done()
    assert table.state is TaskSlotTableState.CLOSED
    assert table.is_slot_free(0)


def test_close_future_callbacks_run_once_closed(table, actions):
    active_slot(table)
    assert table.add_task(FakeTask("e", JOB, "a0"))
    seen: list[TaskSlotTableState] = []
    table.close().add_done_callback(lambda _: seen.append(table.state))
    assert seen == []
    table.remove_task("e")
    assert seen == [TaskSlotTableState.CLOSED]


# -- TimerService ----------------------------------------------------------------------------------


def test_timer_service_register_replace_unregister(clock, timer):
    fired: list[tuple[str, TimeoutTicket]] = []
    first = timer.register_timeout("k", timedelta(seconds=2), lambda k, t: fired.append((k, t)))
    assert timer.is_valid("k", first)
    second = timer.register_timeout("k", timedelta(seconds=5), lambda k, t: fired.append((k, t)))
    assert second != first and not timer.is_valid("k", first)
    clock.advance(timedelta(seconds=3))
    assert fired == [], "the replaced registration does not fire"
    clock.advance(timedelta(seconds=2))
    assert fired == [("k", second)]
    assert timer.is_valid("k", second), "a fired timeout stays valid until unregistered"
    assert timer.pending_keys() == frozenset()
    timer.unregister_timeout("k")
    assert not timer.is_valid("k", second)
    timer.unregister_timeout("never-registered")


def test_timer_service_fires_in_deadline_order_and_reports_count(clock, timer):
    fired: list[str] = []
    for key, seconds in [("late", 3), ("early", 1), ("mid", 2)]:
        timer.register_timeout(key, timedelta(seconds=seconds), lambda k, t: fired.append(k))
    assert timer.pending_keys() == frozenset({"late", "early", "mid"})
    clock.advance(timedelta(seconds=5))
    assert fired == ["early", "mid", "late"]
    assert timer.fire_due_timeouts() == 0


def test_timer_service_callback_error_surfaces_after_other_callbacks(clock, timer):
    fired: list[str] = []

    def explode(key, ticket):
        raise KeyError(key)

    timer.register_timeout("bad", timedelta(seconds=1), explode)
    timer.register_timeout("good", timedelta(seconds=2), lambda k, t: fired.append(k))
    with pytest.raises(KeyError, match="bad"):
        clock.advance(timedelta(seconds=2))
    assert fired == ["good"]


def test_timer_service_validates_arguments(clock, timer):
    with pytest.raises(TypeError, match="delay must be a timedelta, got int"):
        timer.register_timeout("k", 5, lambda k, t: None)
    with pytest.raises(ValueError, match="non-negative"):
        timer.register_timeout("k", timedelta(seconds=-1), lambda k, t: None)
    with pytest.raises(ValueError, match="non-negative timedelta"):
        clock.advance(timedelta(seconds=-1))
    with pytest.raises(TypeError, match="takes a timedelta"):
        clock.advance(1.0)


def test_timer_service_lifecycle(clock, timer):
    assert timer.is_manual and timer.state is TimerServiceState.CREATED
    ticket = timer.register_timeout("k", timedelta(seconds=1), lambda k, t: None)
    timer.start()
    assert timer.state is TimerServiceState.RUNNING
    with pytest.raises(IllegalStateTransition):
        timer.start()
    timer.close()
    timer.close()
    assert timer.state is TimerServiceState.CLOSED
    assert not timer.is_valid("k", ticket)
    timer.unregister_timeout("k")
    with pytest.raises(IllegalStateTransition, match="CLOSED; register_timeout"):
        timer.register_timeout("k", timedelta(seconds=1), lambda k, t: None)


def test_timer_service_background_thread_fires_and_stops():
    timer: TimerService[str] = TimerService()
    assert not timer.is_manual
    fired = threading.Event()
    threads: list[str] = []

    def callback(key, ticket):
        threads.append(threading.current_thread().name)
        fired.set()

    timer.start()
    try:
        timer.register_timeout("k", timedelta(milliseconds=5), callback)
        assert fired.wait(5.0)
        assert threads == ["timer-service"]
    finally:
        timer.close()
    assert timer.state is TimerServiceState.CLOSED
    assert not any(t.name == "timer-service" and t.is_alive() for t in threading.enumerate())


def test_two_tables_can_share_one_timer_service(clock, timer):
    first, second = (TaskSlotTable(1, timer_service=timer, default_slot_timeout=TIMEOUT) for _ in range(2))
    first_actions, second_actions = RecordingSlotActions(), RecordingSlotActions()
    first.start(first_actions)
    second.start(second_actions)
    assert first.allocate_slot(0, JOB, "same-id")
    assert second.allocate_slot(0, JOB, "same-id")
    assert first.mark_slot_active("same-id")
    clock.advance(TIMEOUT)
    assert first_actions.timeouts == []
    assert [a for a, _ in second_actions.timeouts] == ["same-id"]


# -- property-based model check --------------------------------------------------------------------

N_SLOTS = 3
JOBS = ("job-a", "job-b")
ALLOCATIONS = tuple(f"alloc-{i}" for i in range(6))
TIMEOUTS = (None, timedelta(seconds=2), timedelta(seconds=5))


@dataclass
class ModelSlot:
    index: int
    job: str
    state: TaskSlotState
    deadline: float | None
    tasks: set[str] = field(default_factory=set)


class SlotTableMachine(RuleBasedStateMachine):
    """Random operations against a TaskExecutor-like owner, checked against a dict model."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = ManualClock()
        self.table = TaskSlotTable(N_SLOTS, timer_service=TimerService(clock=self.clock), default_slot_timeout=TIMEOUT)
        self.actions = RecordingSlotActions(self.table)
        self.table.start(self.actions)
        self.model: dict[str, ModelSlot] = {}
        self.next_dynamic = N_SLOTS
        self.tasks: dict[str, FakeTask] = {}
        self.failed: set[str] = set()
        self.serial = 0

    def _deadline(self, timeout: timedelta | None) -> float:
        return self.clock() + (timeout or TIMEOUT).total_seconds()

    def _forget(self, allocation: str) -> None:
        del self.model[allocation]

    def _allocation(self, data) -> str:
        # Mostly allocations the table holds, so that sequences reach ACTIVE,
        # tasks and RELEASING; sometimes any id, to hit unknown allocations.
        if self.model and data.draw(st.integers(0, 3), label="known") > 0:
            return data.draw(st.sampled_from(sorted(self.model)), label="allocation")
        return data.draw(st.sampled_from(ALLOCATIONS), label="allocation")

    @rule(index=st.integers(-1, N_SLOTS - 1), job=st.sampled_from(JOBS), timeout=st.sampled_from(TIMEOUTS),
          data=st.data())  # fmt: skip
    def allocate(self, index, job, timeout, data):
        allocation = self._allocation(data)
        slot = self.model.get(allocation)
        if slot is not None:
            expected = (
                slot.job == job
                and slot.state in (TaskSlotState.ALLOCATED, TaskSlotState.ACTIVE)
                and (index < 0 or slot.index == index)
            )
        elif index >= 0 and any(s.index == index for s in self.model.values()):
            expected = False
        else:
            expected = True
            placed = index
            if index < 0:
                placed, self.next_dynamic = self.next_dynamic, self.next_dynamic + 1
            self.model[allocation] = ModelSlot(placed, job, TaskSlotState.ALLOCATED, self._deadline(timeout))
        assert self.table.allocate_slot(index, job, allocation, slot_timeout=timeout) is expected

    @rule(data=st.data())
    def mark_active(self, data):
        allocation = self._allocation(data)
        slot = self.model.get(allocation)
        if slot is None:
            with pytest.raises(SlotNotFoundError):
                self.table.mark_slot_active(allocation)
            return
        expected = slot.state is not TaskSlotState.RELEASING
        assert self.table.mark_slot_active(allocation) is expected
        if expected:
            slot.state, slot.deadline = TaskSlotState.ACTIVE, None

    @rule(job=st.sampled_from(JOBS), data=st.data())
    def try_mark_active(self, job, data):
        allocation = self._allocation(data)
        slot = self.model.get(allocation)
        expected = slot is not None and slot.job == job and slot.state is not TaskSlotState.RELEASING
        assert self.table.try_mark_slot_active(job, allocation) is expected
        if expected:
            slot.state, slot.deadline = TaskSlotState.ACTIVE, None

    @rule(timeout=st.sampled_from(TIMEOUTS), data=st.data())
    def mark_inactive(self, timeout, data):
        allocation = self._allocation(data)
        slot = self.model.get(allocation)
        if slot is None:
            with pytest.raises(SlotNotFoundError):
                self.table.mark_slot_inactive(allocation, timeout)
            return
        expected = slot.state is not TaskSlotState.RELEASING and not slot.tasks
        assert self.table.mark_slot_inactive(allocation, timeout) is expected
        if expected:
            slot.state, slot.deadline = TaskSlotState.ALLOCATED, self._deadline(timeout)

    @rule(job=st.sampled_from(JOBS), data=st.data())
    def add_task(self, job, data):
        allocation = self._allocation(data)
        self.serial += 1
        task = FakeTask(f"exec-{self.serial}", job, allocation)
        slot = self.model.get(allocation)
        if slot is None:
            with pytest.raises(SlotNotFoundError):
                self.table.add_task(task)
            return
        expected = slot.state is TaskSlotState.ACTIVE and slot.job == job
        assert self.table.add_task(task) is expected
        if expected:
            slot.tasks.add(task.execution_id)
            self.tasks[task.execution_id] = task

    @precondition(lambda self: self.tasks)
    @rule(data=st.data())
    def remove_task(self, data):
        execution_id = data.draw(st.sampled_from(sorted(self.tasks)))
        task = self.tasks.pop(execution_id)
        freed_before = len(self.actions.freed)
        assert self.table.remove_task(execution_id) is task
        slot = self.model[task.allocation_id]
        slot.tasks.discard(execution_id)
        if slot.state is TaskSlotState.RELEASING and not slot.tasks:
            # The owner (self.actions) is told and frees the slot.
            assert self.actions.freed[freed_before:] == [task.allocation_id]
            self._forget(task.allocation_id)
        else:
            assert len(self.actions.freed) == freed_before

    @rule()
    def remove_unknown_task(self):
        assert self.table.remove_task("never-added") is None

    @rule(data=st.data())
    def free(self, data):
        allocation = self._allocation(data)
        slot = self.model.get(allocation)
        if slot is None:
            with pytest.raises(SlotNotFoundError):
                self.table.free_slot(allocation)
            return
        expected = -1 if slot.tasks else slot.index
        assert self.table.free_slot(allocation) == expected
        if slot.tasks:
            slot.state, slot.deadline = TaskSlotState.RELEASING, None
            self.failed |= slot.tasks
        else:
            self._forget(allocation)

    @rule(seconds=st.sampled_from((0.5, 1.0, 3.0, 6.0, 11.0)))
    def advance(self, seconds):
        fired_before = len(self.actions.timeouts)
        self.clock.advance(timedelta(seconds=seconds))
        now = self.clock()
        # Only ALLOCATED slots carry a deadline (activation and release clear it).
        due = {a for a, s in self.model.items() if s.deadline is not None and s.deadline <= now}
        assert {a for a, _ in self.actions.timeouts[fired_before:]} == due
        assert len(self.actions.timeouts) - fired_before == len(due)
        for allocation in due:
            assert not self.model[allocation].tasks
            self._forget(allocation)

    # -- invariants ---------------------------------------------------------------------------------

    @invariant()
    def slots_agree_with_model(self):
        by_index = {s.index: (a, s) for a, s in self.model.items()}
        holders = []
        for index in range(self.next_dynamic):
            state = self.table.get_slot_state(index)
            allocation = self.table.get_current_allocation(index)
            if index in by_index:
                expected_allocation, slot = by_index[index]
                assert (allocation, state) == (expected_allocation, slot.state)
                assert self.table.get_owning_job(allocation) == slot.job
                holders.append(allocation)
            else:
                # A FREE slot has no job and no allocation.
                assert state is TaskSlotState.FREE
                assert allocation is None and self.table.is_slot_free(index)
        # An allocation id is in at most one slot.
        assert len(holders) == len(set(holders))

    @invariant()
    def tasks_live_only_in_active_or_releasing_slots(self):
        for execution_id, task in self.tasks.items():
            assert self.table.get_task(execution_id) is task
            slot = self.model[task.allocation_id]
            assert self.table.get_slot_state(slot.index) in (TaskSlotState.ACTIVE, TaskSlotState.RELEASING)
            assert len(task.failures) == (1 if execution_id in self.failed else 0)

    @invariant()
    def per_job_queries_agree_with_model(self):
        for job in JOBS:
            mine = {a: s for a, s in self.model.items() if s.job == job}
            assert self.table.get_allocation_ids_per_job(job) == frozenset(mine)
            assert self.table.get_active_task_slot_allocation_ids_per_job(job) == frozenset(
                a for a, s in mine.items() if s.state is TaskSlotState.ACTIVE
            )
            allocated = sorted(s.index for s in mine.values() if s.state is TaskSlotState.ALLOCATED)
            assert [s.index for s in self.table.get_allocated_slots(job)] == allocated
            assert self.table.has_allocated_slots(job) is bool(allocated)
            assert {t.execution_id for t in self.table.get_tasks(job)} == {e for s in mine.values() for e in s.tasks}
        assert self.table.get_active_task_slot_allocation_ids() == frozenset(
            a for a, s in self.model.items() if s.state is TaskSlotState.ACTIVE
        )

    @invariant()
    def report_agrees_with_queries(self):
        report = self.table.create_slot_report("tm")
        indices = [s.slot_index for s in report]
        assert indices == list(range(N_SLOTS)) + sorted(s.index for s in self.model.values() if s.index >= N_SLOTS)
        for status in report:
            assert self.table.get_current_allocation(status.slot_index) == status.allocation_id
            assert self.table.is_slot_free(status.slot_index) is status.is_free
            if status.allocation_id is not None:
                assert self.table.get_owning_job(status.allocation_id) == status.job_id

    def teardown(self):
        future = self.table.close()
        for execution_id in sorted(self.tasks):
            assert len(self.tasks[execution_id].failures) == 1
            self.table.remove_task(execution_id)
        assert future.done()
        assert self.table.state is TaskSlotTableState.CLOSED
        assert all(s.is_free for s in self.table.create_slot_report("tm"))


SlotTableMachine.TestCase.settings = settings(
    max_examples=250,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
# ~10 s of CPU; on a shared 2-core machine under parallel tests the default 120 s limit failed it by time alone.
TestSlotTableModel = pytest.mark.timeout(600)(SlotTableMachine.TestCase)
