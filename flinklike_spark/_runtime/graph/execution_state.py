"""The states of one execution attempt and of a whole job, with Flink's transition tables.

:class:`ExecutionState` is shared by the JobMaster's view of an attempt
(:class:`~flinklike_spark._runtime.graph.execution_graph.Execution`) and the
TaskExecutor's :class:`Task`. Its table follows Flink's ``ExecutionState``
diagram (without ``RECONCILING``)::

    CREATED -> SCHEDULED -> DEPLOYING -> INITIALIZING -> RUNNING -> FINISHED
       |           |            |             |             |
       |           |            +-------------+-------------+
       |           |                          v
       |           |                      CANCELING ----------> CANCELED
       +-----------+----------------------------------------------^

    ... -> FAILED from every non-terminal state
    DEPLOYING / INITIALIZING / RUNNING -> CANCELED directly when the task
    cancels itself because its producer failed or was cancelled (Flink's
    ``CancelTaskException``: only the root cause counts as a failure)

:class:`JobStatus` is the status of the job as a whole (Flink's ``JobStatus``).

Both tables are plain mappings ``state -> frozenset(targets)`` for
:class:`~flinklike_spark._runtime.state_machine.StateMachine`; terminal states
map to the empty set.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum

__all__ = [
    "EXECUTION_STATE_TRANSITIONS",
    "JOB_STATUS_TRANSITIONS",
    "ExecutionState",
    "JobStatus",
    "is_terminal",
    "job_status_transition_table",
    "transition_table",
]


class ExecutionState(Enum):
    """Lifecycle of one execution attempt of one subtask."""

    CREATED = "created"
    SCHEDULED = "scheduled"
    DEPLOYING = "deploying"
    INITIALIZING = "initializing"
    RUNNING = "running"
    FINISHED = "finished"
    CANCELING = "canceling"
    CANCELED = "canceled"
    FAILED = "failed"

    @property
    def is_terminal(self) -> bool:
        """True for FINISHED, CANCELED and FAILED: no edge leaves these states."""
        return not EXECUTION_STATE_TRANSITIONS[self]


_S = ExecutionState

EXECUTION_STATE_TRANSITIONS: Mapping[ExecutionState, frozenset[ExecutionState]] = {
    _S.CREATED: frozenset(
        {
            _S.SCHEDULED,  # the scheduler picked the vertex and requests a slot
            _S.CANCELED,  # cancelled before scheduling: nothing was deployed, no task to wait for
            _S.FAILED,  # failed before scheduling (e.g. the job failed globally)
        }
    ),
    _S.SCHEDULED: frozenset(
        {
            _S.DEPLOYING,  # the slot arrived and the deployment was not superseded
            _S.CANCELED,  # cancelled while waiting for a slot: the slot request is withdrawn
            _S.FAILED,  # the slot request failed or timed out
        }
    ),
    _S.DEPLOYING: frozenset(
        {
            _S.INITIALIZING,  # the task thread started and restores state / sets up the network
            _S.CANCELING,  # cancelled after submission: the TaskExecutor must be told
            _S.CANCELED,  # the task cancelled itself: its producer failed or was cancelled
            _S.FAILED,  # the submission RPC failed, or the task failed while starting
        }
    ),
    _S.INITIALIZING: frozenset(
        {
            _S.RUNNING,  # restore done, the mailbox loop starts
            _S.CANCELING,  # cancelled during restore
            _S.CANCELED,  # the task cancelled itself: its producer failed or was cancelled
            _S.FAILED,  # restore or operator setup failed
        }
    ),
    _S.RUNNING: frozenset(
        {
            _S.FINISHED,  # all inputs ended and the operators closed cleanly
            _S.CANCELING,  # cancel requested (job cancel or failover of its region)
            _S.CANCELED,  # the task cancelled itself: its producer failed or was cancelled
            _S.FAILED,  # user code or the runtime raised
        }
    ),
    _S.CANCELING: frozenset(
        {
            _S.CANCELED,  # the task stopped and released its resources
            _S.FAILED,  # the task failed while cancelling, or could not be reached
        }
    ),
    _S.FINISHED: frozenset(),  # terminal
    _S.CANCELED: frozenset(),  # terminal
    _S.FAILED: frozenset(),  # terminal
}


def transition_table() -> Mapping[ExecutionState, frozenset[ExecutionState]]:
    """Return :data:`EXECUTION_STATE_TRANSITIONS` (the table for a StateMachine of an attempt)."""
    return EXECUTION_STATE_TRANSITIONS


def is_terminal(state: ExecutionState) -> bool:
    """True if ``state`` has no outgoing edge (FINISHED, CANCELED, FAILED)."""
    return not EXECUTION_STATE_TRANSITIONS[state]


class JobStatus(Enum):
    """Status of a whole job (Flink's ``JobStatus``)."""

    INITIALIZING = "initializing"
    CREATED = "created"
    RUNNING = "running"
    FAILING = "failing"
    FAILED = "failed"
    CANCELLING = "cancelling"
    CANCELED = "canceled"
    FINISHED = "finished"
    RESTARTING = "restarting"
    SUSPENDED = "suspended"

    @property
    def is_terminal(self) -> bool:
        """True if no edge leaves this status (FAILED, CANCELED, FINISHED, SUSPENDED)."""
        return not JOB_STATUS_TRANSITIONS[self]

    @property
    def is_globally_terminal(self) -> bool:
        """True for FAILED, CANCELED and FINISHED; SUSPENDED is only locally terminal.

        A suspended job may be resumed by another JobMaster; a globally terminal
        one is over and its result can be reported to the client.
        """
        return self in (JobStatus.FAILED, JobStatus.CANCELED, JobStatus.FINISHED)


_J = JobStatus

JOB_STATUS_TRANSITIONS: Mapping[JobStatus, frozenset[JobStatus]] = {
    _J.INITIALIZING: frozenset(
        {
            _J.CREATED,  # the JobMaster built the ExecutionGraph
            _J.CANCELLING,  # cancelled while the JobMaster was still being set up
            _J.FAILED,  # building the ExecutionGraph failed (bad plan, restore error)
        }
    ),
    _J.CREATED: frozenset(
        {
            _J.RUNNING,  # scheduling started
            _J.CANCELLING,  # cancelled before any task was scheduled
            _J.FAILED,  # failed before scheduling (e.g. no resources can ever be found)
            _J.SUSPENDED,  # the JobMaster lost leadership / the cluster shuts down
        }
    ),
    _J.RUNNING: frozenset(
        {
            _J.FINISHED,  # every execution finished
            _J.FAILING,  # an unrecoverable failure: tasks are being cancelled before FAILED
            _J.CANCELLING,  # the user cancelled the job
            _J.RESTARTING,  # a global failover cancels every task before restarting
            _J.FAILED,  # failed with nothing left to cancel
            _J.SUSPENDED,  # the JobMaster lost leadership / the cluster shuts down
        }
    ),
    _J.FAILING: frozenset(
        {
            _J.FAILED,  # every task reached a terminal state
            _J.RESTARTING,  # the restart strategy allows another attempt after all
            _J.CANCELLING,  # the user cancelled while the job was failing
            _J.SUSPENDED,  # the JobMaster lost leadership / the cluster shuts down
        }
    ),
    _J.CANCELLING: frozenset(
        {
            _J.CANCELED,  # every task reached a terminal state
            _J.FAILED,  # an unrecoverable error while cancelling
            _J.SUSPENDED,  # the JobMaster lost leadership / the cluster shuts down
        }
    ),
    _J.RESTARTING: frozenset(
        {
            _J.RUNNING,  # new attempts are being scheduled
            _J.CREATED,  # the graph was reset and waits to be scheduled again
            _J.CANCELLING,  # the user cancelled during the restart backoff
            _J.FAILED,  # restoring for the restart failed unrecoverably
            _J.SUSPENDED,  # the JobMaster lost leadership / the cluster shuts down
        }
    ),
    _J.FAILED: frozenset(),  # terminal
    _J.CANCELED: frozenset(),  # terminal
    _J.FINISHED: frozenset(),  # terminal
    _J.SUSPENDED: frozenset(),  # terminal for this JobMaster (locally terminal)
}


def job_status_transition_table() -> Mapping[JobStatus, frozenset[JobStatus]]:
    """Return :data:`JOB_STATUS_TRANSITIONS` (the table for a StateMachine of a job)."""
    return JOB_STATUS_TRANSITIONS
