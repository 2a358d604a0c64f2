"""State handles that record which keys they write, for incremental checkpoints.

A :class:`~flinklike_spark._runtime.state.keyed_state.HeapKeyedStateBackend`
created with ``track_changes`` hands these out instead of the plain handles of
:mod:`flinklike_spark.datastream.state`: each is a subclass of the plain handle whose
writing methods also add the current key to ``_changed``, the backend's set of
keys written since the last snapshot. Reads are inherited unchanged, and the
plain handles (no incremental checkpoints) stay exactly as fast as before.
A write is one more ``set.add``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from checkpointing.schemas import StateKind
from flinklike_spark.datastream.state import (
    AggregatingState,
    ListState,
    MapState,
    ReducingState,
    State,
    ValueState,
)

__all__ = ["TRACKED_HANDLE_OF_KIND"]


class _TrackedClear:
    """``clear`` that records the key (shared by every tracking handle)."""

    __slots__ = ()

    def clear(self) -> None:
        key = self._backend.current_key
        self._table.pop(key, None)
        self._changed.add(key)


class TrackedValueState(_TrackedClear, ValueState):
    __slots__ = ("_changed",)

    def update(self, value: Any) -> None:
        key = self._backend.current_key
        if value is None:
            self._table.pop(key, None)
        else:
            self._table[key] = value
        self._changed.add(key)


class TrackedListState(_TrackedClear, ListState):
    __slots__ = ("_changed",)

    def add(self, value: Any) -> None:
        key = self._backend.current_key
        self._table.setdefault(key, []).append(value)
        self._changed.add(key)

    def add_all(self, values: Iterable[Any]) -> None:
        super().add_all(values)
        self._changed.add(self._backend.current_key)

    def update(self, values: Iterable[Any]) -> None:
        super().update(values)
        self._changed.add(self._backend.current_key)


class TrackedMapState(_TrackedClear, MapState):
    __slots__ = ("_changed",)

    def _map(self) -> dict:
        key = self._backend.current_key
        self._changed.add(key)  # the caller is about to change the map
        return self._table.setdefault(key, {})

    def remove(self, key: Any) -> None:
        super().remove(key)
        self._changed.add(self._backend.current_key)


class TrackedReducingState(_TrackedClear, ReducingState):
    __slots__ = ("_changed",)

    def add(self, value: Any) -> None:
        super().add(value)
        self._changed.add(self._backend.current_key)


class TrackedAggregatingState(_TrackedClear, AggregatingState):
    __slots__ = ("_changed",)

    def add(self, value: Any) -> None:
        super().add(value)
        self._changed.add(self._backend.current_key)


#: The tracking handle class of each descriptor kind (no TTL: TTL states are never tracked).
TRACKED_HANDLE_OF_KIND: dict[StateKind, type[State]] = {
    StateKind.VALUE: TrackedValueState,
    StateKind.LIST: TrackedListState,
    StateKind.MAP: TrackedMapState,
    StateKind.REDUCING: TrackedReducingState,
    StateKind.AGGREGATING: TrackedAggregatingState,
}
