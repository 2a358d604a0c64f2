"""Keyed state: descriptors (public) and the state handles functions use.

A descriptor names a state and, for reducing state, carries its reduce
function. ``runtime_context.get_state(descriptor)`` returns a handle bound to
the operator's keyed state backend: every access reads or writes the value of
the *current key* (the key of the record or timer being processed). Values
must be picklable (they are checkpointed).
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Iterable, Iterator
from typing import Any

__all__ = [
    "ListState",
    "ListStateDescriptor",
    "MapState",
    "MapStateDescriptor",
    "ReducingState",
    "ReducingStateDescriptor",
    "StateDescriptor",
    "ValueState",
    "ValueStateDescriptor",
]


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not name:
        raise ValueError(f"a state descriptor needs a non-empty string name, got {name!r}")


@dataclasses.dataclass(frozen=True)
class StateDescriptor:
    """Base descriptor: ``name`` identifies the state within its operator."""

    name: str
    type_info: Any = None

    kind = "value"

    def __post_init__(self) -> None:
        _check_name(self.name)


@dataclasses.dataclass(frozen=True)
class ValueStateDescriptor(StateDescriptor):
    kind = "value"


@dataclasses.dataclass(frozen=True)
class ListStateDescriptor(StateDescriptor):
    kind = "list"


@dataclasses.dataclass(frozen=True)
class MapStateDescriptor(StateDescriptor):
    kind = "map"


@dataclasses.dataclass(frozen=True)
class ReducingStateDescriptor(StateDescriptor):
    """``reduce_function(a, b) -> c`` folds every added value into the stored one."""

    reduce_function: Callable[[Any, Any], Any] | None = None
    kind = "reducing"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not callable(self.reduce_function):
            raise ValueError(f"ReducingStateDescriptor {self.name!r} needs a callable reduce_function")


class _KeyedState(abc.ABC):
    """A state handle: reads and writes the entry of the backend's current key.

    ``table`` maps key -> stored value; ``backend`` exposes ``current_key``.
    """

    __slots__ = ("_backend", "_table")

    def __init__(self, backend: Any, table: dict) -> None:
        self._backend = backend
        self._table = table

    def clear(self) -> None:
        self._table.pop(self._backend.current_key, None)


class ValueState(_KeyedState):
    __slots__ = ()

    def value(self) -> Any:
        """The current key's value, or None if unset."""
        return self._table.get(self._backend.current_key)

    def update(self, value: Any) -> None:
        """Set the current key's value; None clears it."""
        if value is None:
            self._table.pop(self._backend.current_key, None)
        else:
            self._table[self._backend.current_key] = value


class ListState(_KeyedState):
    __slots__ = ()

    def get(self) -> list:
        return list(self._table.get(self._backend.current_key, ()))

    def add(self, value: Any) -> None:
        self._table.setdefault(self._backend.current_key, []).append(value)

    def add_all(self, values: Iterable[Any]) -> None:
        self._table.setdefault(self._backend.current_key, []).extend(values)

    def update(self, values: Iterable[Any]) -> None:
        values = list(values)
        if values:
            self._table[self._backend.current_key] = values
        else:
            self.clear()


class MapState(_KeyedState):
    __slots__ = ()

    def _map(self) -> dict:
        return self._table.setdefault(self._backend.current_key, {})

    def get(self, key: Any) -> Any:
        return self._table.get(self._backend.current_key, {}).get(key)

    def put(self, key: Any, value: Any) -> None:
        self._map()[key] = value

    def put_all(self, entries: dict) -> None:
        self._map().update(entries)

    def remove(self, key: Any) -> None:
        entries = self._table.get(self._backend.current_key)
        if entries is not None:
            entries.pop(key, None)
            if not entries:
                self.clear()

    def contains(self, key: Any) -> bool:
        return key in self._table.get(self._backend.current_key, {})

    def keys(self) -> Iterator[Any]:
        return iter(list(self._table.get(self._backend.current_key, {}).keys()))

    def values(self) -> Iterator[Any]:
        return iter(list(self._table.get(self._backend.current_key, {}).values()))

    def items(self) -> Iterator[tuple[Any, Any]]:
        return iter(list(self._table.get(self._backend.current_key, {}).items()))

    def is_empty(self) -> bool:
        return not self._table.get(self._backend.current_key)


class ReducingState(_KeyedState):
    __slots__ = ("_reduce",)

    def __init__(self, backend: Any, table: dict, reduce_function: Callable[[Any, Any], Any]) -> None:
        super().__init__(backend, table)
        self._reduce = reduce_function

    def get(self) -> Any:
        return self._table.get(self._backend.current_key)

    def add(self, value: Any) -> None:
        key = self._backend.current_key
        current = self._table.get(key)
        self._table[key] = value if current is None else self._reduce(current, value)
