"""ExecutionState and JobStatus transition tables: every legal edge works, every other pair raises."""

from __future__ import annotations

import itertools
import pickle

import pytest

from flinklike_spark._runtime.graph.execution_state import (
    EXECUTION_STATE_TRANSITIONS,
    JOB_STATUS_TRANSITIONS,
    ExecutionState,
    JobStatus,
    is_terminal,
    job_status_transition_table,
    transition_table,
)
from flinklike_spark._runtime.state_machine import StateMachine
from flinklike_spark.errors import IllegalStateTransition

S = ExecutionState
J = JobStatus

EXPECTED_EXECUTION_EDGES = {
    (S.CREATED, S.SCHEDULED),
    (S.CREATED, S.CANCELED),
    (S.CREATED, S.FAILED),
    (S.SCHEDULED, S.DEPLOYING),
    (S.SCHEDULED, S.CANCELED),
    (S.SCHEDULED, S.FAILED),
    (S.DEPLOYING, S.INITIALIZING),
    (S.DEPLOYING, S.CANCELING),
    (S.DEPLOYING, S.FAILED),
    (S.INITIALIZING, S.RUNNING),
    (S.INITIALIZING, S.CANCELING),
    (S.INITIALIZING, S.FAILED),
    (S.RUNNING, S.FINISHED),
    (S.RUNNING, S.CANCELING),
    (S.RUNNING, S.FAILED),
    (S.CANCELING, S.CANCELED),
    (S.CANCELING, S.FAILED),
    # A task that cancels itself (its producer failed or was cancelled: Flink's
    # CancelTaskException) goes to CANCELED without passing CANCELING.
    (S.DEPLOYING, S.CANCELED),
    (S.INITIALIZING, S.CANCELED),
    (S.RUNNING, S.CANCELED),
}

ALL_EXECUTION_PAIRS = list(itertools.product(S, S))
ALL_JOB_PAIRS = list(itertools.product(J, J))
JOB_EDGES = {(a, b) for a, targets in JOB_STATUS_TRANSITIONS.items() for b in targets}


def _pair_id(pair):
    return f"{pair[0].name}->{pair[1].name}"


def test_table_has_exactly_flinks_edges():
    actual = {(a, b) for a, targets in EXECUTION_STATE_TRANSITIONS.items() for b in targets}
    assert actual == EXPECTED_EXECUTION_EDGES
    assert transition_table() is EXECUTION_STATE_TRANSITIONS


@pytest.mark.parametrize("pair", ALL_EXECUTION_PAIRS, ids=_pair_id)
def test_execution_state_edge(pair):
    source, target = pair
    machine = StateMachine("t", source, EXECUTION_STATE_TRANSITIONS)
    if pair in EXPECTED_EXECUTION_EDGES:
        assert machine.transition(target) is source
        assert machine.state is target
    else:
        with pytest.raises(IllegalStateTransition) as info:
            machine.transition(target)
        assert info.value.source is source and info.value.target is target
        assert machine.state is source


def test_terminal_states():
    assert {s for s in S if is_terminal(s)} == {S.FINISHED, S.CANCELED, S.FAILED}
    assert {s for s in S if s.is_terminal} == {S.FINISHED, S.CANCELED, S.FAILED}
    assert all(EXECUTION_STATE_TRANSITIONS[s] == frozenset() for s in (S.FINISHED, S.CANCELED, S.FAILED))


def test_failed_is_reachable_from_every_non_terminal_state():
    assert {s for s in S if S.FAILED in EXECUTION_STATE_TRANSITIONS[s]} == {s for s in S if not s.is_terminal}


def test_happy_path_history():
    machine = StateMachine("t", S.CREATED, transition_table())
    path = [S.SCHEDULED, S.DEPLOYING, S.INITIALIZING, S.RUNNING, S.FINISHED]
    for state in path:
        machine.transition(state)
    assert [s for _, s in machine.history] == [S.CREATED, *path]


def test_illegal_transition_pickles_with_source_and_target():
    machine = StateMachine("t", S.FINISHED, transition_table())
    with pytest.raises(IllegalStateTransition) as info:
        machine.transition(S.RUNNING)
    clone = pickle.loads(pickle.dumps(info.value))
    assert (clone.source, clone.target) == (S.FINISHED, S.RUNNING)
    assert "FINISHED -> RUNNING" in str(clone)


@pytest.mark.parametrize("pair", ALL_JOB_PAIRS, ids=_pair_id)
def test_job_status_edge(pair):
    source, target = pair
    machine = StateMachine("job", source, job_status_transition_table())
    if pair in JOB_EDGES:
        machine.transition(target)
        assert machine.state is target
    else:
        with pytest.raises(IllegalStateTransition):
            machine.transition(target)
        assert machine.state is source


def test_job_status_key_edges_and_terminals():
    for edge in [
        (J.INITIALIZING, J.CREATED),
        (J.CREATED, J.RUNNING),
        (J.RUNNING, J.FINISHED),
        (J.RUNNING, J.FAILING),
        (J.FAILING, J.FAILED),
        (J.RUNNING, J.CANCELLING),
        (J.CANCELLING, J.CANCELED),
        (J.RUNNING, J.RESTARTING),
        (J.RESTARTING, J.RUNNING),
    ]:
        assert edge in JOB_EDGES, edge
    assert {s for s in J if s.is_terminal} == {J.FAILED, J.CANCELED, J.FINISHED, J.SUSPENDED}
    assert {s for s in J if s.is_globally_terminal} == {J.FAILED, J.CANCELED, J.FINISHED}
    assert (J.FINISHED, J.RUNNING) not in JOB_EDGES
