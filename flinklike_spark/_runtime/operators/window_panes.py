"""Pane and merging-window bookkeeping of the window operator: state names, pane contents, scoped state.

Panes live in :class:`Panes` (``{key: {window: contents}}``); trigger and
``window_state()`` state in a :class:`ScopedStateBackend` keyed by
``(key, window)``, whose key group is the record key's, and which merges the
state of session windows (:meth:`ScopedStateBackend.merge_namespaces`). The
state names are those of the snapshot (see the table in
:mod:`~flinklike_spark._runtime.operators.window_operator`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flinklike_spark._runtime.state.keyed_state import (
    HeapKeyedStateBackend,
    KeyedStateBackend,
)
from flinklike_spark.datastream.functions import (
    KeyedStateStore,
)
from flinklike_spark.datastream.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from flinklike_spark.datastream.window import (
    MergingWindowAssigner,
)
from flinklike_spark.errors import ConfigurationError

__all__ = [
    "CONTENTS_STATE",
    "EVENT_TIMERS_STATE",
    "MERGING_SET_STATE",
    "PROCESSING_TIMERS_STATE",
    "SCOPED_STATE_PREFIX",
    "MergeCollector",
    "Panes",
    "ScopedStateBackend",
    "WindowStateStore",
]

CONTENTS_STATE = "_window/contents"
MERGING_SET_STATE = "_window/merging-window-set"
SCOPED_STATE_PREFIX = "_window/scoped/"
EVENT_TIMERS_STATE = "_window/event_time_timers"
PROCESSING_TIMERS_STATE = "_window/processing_time_timers"


class ScopedStateBackend(HeapKeyedStateBackend):
    """Keyed state whose ``current_key`` is ``(record key, window)``; key groups follow the record key."""

    _snapshot_prefix = SCOPED_STATE_PREFIX

    @staticmethod
    def _group_key(key: tuple[Any, Any]) -> Any:
        return key[0]

    def merge_namespaces(self, descriptor: Any, sources: Iterable[Any], target: Any) -> None:
        """Fold the entries of ``sources`` (composite keys) into ``target``: list, reducing or
        aggregating state (Flink's ``InternalMergingState.mergeNamespaces``)."""
        if descriptor.ttl_config is not None:
            raise ConfigurationError(
                f"state {descriptor.name!r} has a time-to-live: merge_partitioned_state does not merge TTL state"
            )
        table = self.get_table(descriptor)
        for source in sources:
            value = table.pop(source, None)
            if value is None:
                continue
            current = table.get(target)
            if current is None:
                table[target] = value
            elif isinstance(descriptor, ReducingStateDescriptor):
                table[target] = descriptor.reduce_function(current, value)
            elif isinstance(descriptor, AggregatingStateDescriptor):
                table[target] = descriptor.agg_function.merge(current, value)
            elif isinstance(descriptor, ListStateDescriptor):
                table[target] = current + value
            else:
                raise ConfigurationError(
                    f"state {descriptor.name!r} ({type(descriptor).__name__}) cannot be merged: "
                    f"merge_partitioned_state supports ReducingStateDescriptor, AggregatingStateDescriptor "
                    f"and ListStateDescriptor"
                )

    def get_table(self, descriptor: Any) -> dict:
        self.get_state(descriptor, type(descriptor))
        return self._tables[descriptor.name]


class Panes:
    """Pane contents as ``{key: {window: contents}}``: two lookups of flat keys are cheaper than one
    of a nested ``(key, window)`` tuple, whose hash Python recomputes on every access."""

    __slots__ = ("by_key",)

    def __init__(self) -> None:
        self.by_key: dict[Any, dict[Any, Any]] = {}

    def get(self, key: Any, window: Any) -> Any:
        panes = self.by_key.get(key)
        return None if panes is None else panes.get(window)

    def set(self, key: Any, window: Any, contents: Any) -> None:
        panes = self.by_key.get(key)
        if panes is None:
            self.by_key[key] = {window: contents}
        else:
            panes[window] = contents

    def pop(self, key: Any, window: Any) -> Any:
        panes = self.by_key.get(key)
        if panes is None:
            return None
        contents = panes.pop(window, None)
        if not panes:
            del self.by_key[key]
        return contents


class WindowStateStore(KeyedStateStore):
    def __init__(self, backend: KeyedStateBackend, *, allowed: bool = True, why: str = "") -> None:
        self._backend = backend
        self._allowed = allowed
        self._why = why

    def _get(self, descriptor: Any, expected: type) -> Any:
        if not self._allowed:
            raise ConfigurationError(self._why)
        return self._backend.get_state(descriptor, expected)

    def get_state(self, state_descriptor):
        return self._get(state_descriptor, ValueStateDescriptor)

    def get_list_state(self, state_descriptor):
        return self._get(state_descriptor, ListStateDescriptor)

    def get_map_state(self, state_descriptor):
        return self._get(state_descriptor, MapStateDescriptor)

    def get_reducing_state(self, state_descriptor):
        return self._get(state_descriptor, ReducingStateDescriptor)

    def get_aggregating_state(self, state_descriptor):
        return self._get(state_descriptor, AggregatingStateDescriptor)


class MergeCollector(MergingWindowAssigner.MergeCallback):
    def __init__(self) -> None:
        self.merges: list[tuple[list[Any], Any]] = []

    def merge(self, to_be_merged, merge_result) -> None:
        self.merges.append((list(to_be_merged), merge_result))
