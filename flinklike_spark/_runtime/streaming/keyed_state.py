"""Heap keyed state backend: one ``dict`` per state name, keyed by the record key.

The task thread is the only user. ``current_key`` is set by the keyed operator
before it calls user code; state handles (see :mod:`flinklike_spark.state`)
read it on every access. Key groups are computed only at snapshot time, so the
per-record path costs one dict operation.
"""

from __future__ import annotations

import copy
from typing import Any

from flinklike_spark._runtime.network.partitioner import key_group_for
from flinklike_spark.state import (
    ListState,
    ListStateDescriptor,
    MapState,
    MapStateDescriptor,
    ReducingState,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueState,
    ValueStateDescriptor,
)

__all__ = ["HeapKeyedStateBackend"]

_HANDLES = {
    ValueStateDescriptor: ValueState,
    ListStateDescriptor: ListState,
    MapStateDescriptor: MapState,
}


_KIND_OF = {
    ValueStateDescriptor: "value",
    ListStateDescriptor: "list",
    MapStateDescriptor: "map",
    ReducingStateDescriptor: "reducing",
}


class HeapKeyedStateBackend:
    """Keyed state of one operator subtask.

    Attributes:
        current_key: the key whose entries state handles read and write.
    """

    def __init__(self, *, max_parallelism: int) -> None:
        self.max_parallelism = max_parallelism
        self.current_key: Any = None
        self._tables: dict[str, dict] = {}
        self._descriptors: dict[str, StateDescriptor] = {}
        self._handles: dict[str, Any] = {}

    def get_state(self, descriptor: StateDescriptor, expected: type[StateDescriptor]) -> Any:
        """The handle for ``descriptor``; the same name must keep the same kind."""
        if not isinstance(descriptor, expected):
            raise TypeError(f"expected a {expected.__name__}, got {type(descriptor).__name__} ({descriptor!r})")
        known = self._descriptors.get(descriptor.name)
        if known is not None:
            if type(known) is not type(descriptor):
                raise ValueError(
                    f"state {descriptor.name!r} was registered as {type(known).__name__}, "
                    f"cannot get it as {type(descriptor).__name__}"
                )
            return self._handles[descriptor.name]
        table = self._tables.setdefault(descriptor.name, {})
        if isinstance(descriptor, ReducingStateDescriptor):
            handle: Any = ReducingState(self, table, descriptor.reduce_function)
        else:
            handle = _HANDLES[type(descriptor)](self, table)
        self._descriptors[descriptor.name] = descriptor
        self._handles[descriptor.name] = handle
        return handle

    def state_names(self) -> list[str]:
        return sorted(self._tables)

    def copy_tables(self) -> dict[str, dict]:
        """A deep copy of every table: the synchronous part of a snapshot."""
        return {name: copy.deepcopy(table) for name, table in self._tables.items()}

    def restore_tables(self, tables: dict[str, dict]) -> None:
        for name, entries in tables.items():
            self._tables.setdefault(name, {}).update(entries)

    def snapshot_entries(self) -> list[tuple[str, str, list[tuple[int, Any, Any]]]]:
        """Synchronous part of a snapshot: ``(state name, kind, [(key group, key, value copy)])``.

        Values are deep-copied, so later updates on the task thread do not leak
        into the snapshot being written asynchronously.
        """
        max_parallelism = self.max_parallelism
        result = []
        for name, table in self._tables.items():
            descriptor = self._descriptors.get(name)
            kind = _KIND_OF.get(type(descriptor), "value")
            entries = [(key_group_for(key, max_parallelism), key, copy.deepcopy(value)) for key, value in table.items()]
            result.append((name, kind, entries))
        return result

    def restore_entry(self, state_name: str, key: Any, value: Any) -> None:
        """Put one restored entry back (before the user function's ``open``)."""
        self._tables.setdefault(state_name, {})[key] = value

    def num_keys(self) -> int:
        keys: set = set()
        for table in self._tables.values():
            keys.update(table)
        return len(keys)
