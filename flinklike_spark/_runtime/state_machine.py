"""A small, strict state-machine helper: an Enum plus a transition table.

Every state machine of the runtime (ExecutionState, TaskSlotState, the slot
table's own state, the async snapshot runnable, barrier handler states) is an
``Enum`` plus a ``Mapping[State, frozenset[State]]`` whose terminal states map
to the empty set. :class:`StateMachine` holds the current state, takes edges
with :meth:`StateMachine.transition` (raising :class:`IllegalStateTransition`
for an edge not in the table) and records a timestamped history.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Generic, TypeVar

from flinklike_spark.errors import IllegalStateTransition

__all__ = ["StateMachine", "validate_transition_table"]

S = TypeVar("S", bound=Enum)


def validate_transition_table(states: type[S], table: Mapping[S, frozenset[S]]) -> None:
    """Check that ``table`` has exactly one entry per member of ``states``.

    Raises:
        ValueError: a state is missing from the table or a target is not a member.
    """
    missing = [s.name for s in states if s not in table]
    if missing:
        raise ValueError(f"transition table of {states.__name__} lacks states {missing}")
    for source, targets in table.items():
        for target in targets:
            if not isinstance(target, states):
                raise ValueError(f"{source!r} -> {target!r}: target is not a {states.__name__}")


class StateMachine(Generic[S]):
    """The current state of one object plus the edges it may take.

    Thread-safe: transitions are serialized by an internal lock, so two threads
    racing to move the same object (say, cancel vs. finish) see exactly one win.

    Args:
        name: what this machine belongs to; appears in error messages.
        initial: the starting state.
        table: allowed edges; terminal states map to an empty frozenset.
        clock: seconds source for the history timestamps (injectable in tests).
    """

    def __init__(
        self,
        name: str,
        initial: S,
        table: Mapping[S, frozenset[S]],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        validate_transition_table(type(initial), table)
        self._name = name
        self._table = table
        self._clock = clock
        self._lock = threading.Lock()
        self._state = initial
        self._history: list[tuple[float, S]] = [(clock(), initial)]

    @property
    def state(self) -> S:
        return self._state

    @property
    def history(self) -> list[tuple[float, S]]:
        """(timestamp, state) pairs in the order they were entered, initial state first."""
        with self._lock:
            return list(self._history)

    def can_transition(self, target: S) -> bool:
        return target in self._table[self._state]

    def is_terminal(self) -> bool:
        return not self._table[self._state]

    def transition(self, target: S, *, expected: S | frozenset[S] | None = None) -> S:
        """Move to ``target`` and return the previous state.

        Args:
            target: the state to enter.
            expected: if given, the move happens only from this state (or one of
                these states); otherwise :class:`IllegalStateTransition` is raised.

        Raises:
            IllegalStateTransition: the edge is not in the table, or the current
                state is not ``expected``.
        """
        with self._lock:
            source = self._state
            if expected is not None:
                allowed = expected if isinstance(expected, frozenset) else frozenset((expected,))
                if source not in allowed:
                    raise IllegalStateTransition(
                        f"{self._name}: expected state in {sorted(s.name for s in allowed)} "
                        f"to move to {target.name}, but it is {source.name}",
                        source=source,
                        target=target,
                    )
            if target not in self._table[source]:
                valid = sorted(s.name for s in self._table[source]) or ["none (terminal state)"]
                raise IllegalStateTransition(
                    f"{self._name}: illegal transition {source.name} -> {target.name}; "
                    f"valid targets from {source.name}: {', '.join(valid)}",
                    source=source,
                    target=target,
                )
            self._state = target
            self._history.append((self._clock(), target))
            return source

    def try_transition(self, target: S, *, expected: S | frozenset[S] | None = None) -> bool:
        """Like :meth:`transition`, but return False instead of raising."""
        try:
            self.transition(target, expected=expected)
        except IllegalStateTransition:
            return False
        return True

    def __repr__(self) -> str:
        return f"StateMachine({self._name!r}, state={self._state.name})"
