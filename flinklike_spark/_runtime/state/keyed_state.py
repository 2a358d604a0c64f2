"""The heap keyed state backend (``state.backend.type: hashmap``, the default), and snapshot helpers.

The task thread is the only user. ``current_key`` is a plain attribute set by
the keyed operator before it calls user code; state handles (see
:mod:`flinklike_spark.datastream.state`) read it on every access, so the per-record path
costs one dict operation per state access. Registration, TTL and handle
selection are the base class's
(:class:`~flinklike_spark._runtime.state.state_backend_base.KeyedStateBackend`);
this module holds the tables (one ``dict`` per state) and their snapshots.

Snapshots: :meth:`HeapKeyedStateBackend.snapshot_entries` is the *synchronous* part
of a checkpoint and does as little as possible on the task thread: it copies
each table's key and value lists (C-speed list copies), deep-copies only values
that are mutable (ints, strings, bytes, floats and tuples of those are shared,
which is safe because nothing can change them), and defers the key groups to
the asynchronous part, where :class:`checkpointing.KeyedColumns` computes them
vectorized when the writer first asks.
"""

from __future__ import annotations

import copy
import datetime
import decimal
import itertools
import operator
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from checkpointing.schemas import StateKind
from checkpointing.state_snapshots import KeyedStateChanges, KeyedStateSnapshot
from checkpointing.writer import KeyedColumns
from flinklike_spark._runtime.state.key_groups import assign_key_groups, stable_hash_scalar
from flinklike_spark._runtime.state.state_backend_base import KeyedStateBackend, StateBackendContext
from flinklike_spark._runtime.state.ttl_state import TtlPolicy, strip_expired
from flinklike_spark.datastream.state import TtlValue

__all__ = [
    "HeapKeyedStateBackend",
    "KeyedStateBackend",
    "current_entries",
    "detach_values",
    "key_groups_of",
]

#: Types whose values can never change: a snapshot may share them with working state.
_IMMUTABLE: frozenset[type] = frozenset({
    int, float, bool, str, bytes, complex, type(None), decimal.Decimal,
    datetime.datetime, datetime.date, datetime.time, datetime.timedelta,
})  # fmt: skip
_TUPLES = (tuple, TtlValue)


def _immutable(value: Any) -> bool:
    kind = type(value)
    if kind in _IMMUTABLE:
        return True
    if kind in _TUPLES or (isinstance(value, tuple) and hasattr(kind, "_fields")):  # NamedTuples
        return all(_immutable(item) for item in value)
    return False


def detach_values(values: list) -> list:
    """``values`` (a list the caller owns) with every mutable value replaced by a deep copy.

    Immutable values are shared, not copied; when every value's type is
    immutable (checked with one C-speed pass over the types) nothing is copied.
    """
    if set(map(type, values)) <= _IMMUTABLE:
        return values
    for i, value in enumerate(values):
        if not _immutable(value):
            values[i] = copy.deepcopy(value)
    return values


def current_entries(table: Mapping[Any, Any], keys: list) -> tuple[list, list, list]:
    """``(keys with an entry, their values, keys without one)`` of ``keys`` in ``table``.

    The lookups and, when some key has no entry, the split run at C speed
    (``map`` and ``itertools.compress``, no Python loop per key).
    """
    values = list(map(table.get, keys, itertools.repeat(_MISSING, len(keys))))
    missing = list(map(operator.is_, values, itertools.repeat(_MISSING, len(values))))
    if True not in missing:
        return keys, values, []
    present = list(map(operator.not_, missing))
    compress = itertools.compress
    return list(compress(keys, present)), list(compress(values, present)), list(compress(keys, missing))


def key_groups_of(keys: list, max_parallelism: int) -> np.ndarray:
    """Key group of each key, as :func:`~flinklike_spark._runtime.state.key_groups.key_group_for`.

    All-``int`` keys are hashed vectorized (the partitioner's own Arrow path,
    which is defined to agree with the scalar hash); other keys one by one.
    """
    if not keys:
        return np.empty(0, dtype=np.int32)
    if set(map(type, keys)) == {int}:
        try:
            return assign_key_groups(pa.array(keys, type=pa.int64()), max_parallelism)
        except (OverflowError, pa.ArrowInvalid):
            pass  # beyond 64 bits: the scalar hash handles big ints
    return np.fromiter((stable_hash_scalar(k) % max_parallelism for k in keys), np.int32, len(keys))


class HeapKeyedStateBackend(KeyedStateBackend):
    """Keyed state on the Python heap: one ``dict`` per state name, keyed by the record key.

    Args:
        max_parallelism: number of key groups.
        clock_ms: processing time in ms, for state TTL (injectable for tests).
        track_changes: record which keys each state handle writes, for
            :meth:`snapshot_changes` (incremental checkpoints): handles are then the
            tracking subclasses of :mod:`~flinklike_spark._runtime.state.tracked_state`
            (one more ``set.add`` per write); without it, the plain handles. States with time-to-live
            change on reads and in background cleanups, so a backend holding one stops
            tracking (:attr:`tracks_changes` turns False) and snapshots are full.
    """

    supports_incremental_cleanup = True

    def __init__(
        self, *, max_parallelism: int, clock_ms: Callable[[], int] | None = None, track_changes: bool = False
    ) -> None:
        super().__init__(max_parallelism=max_parallelism, clock_ms=clock_ms, track_changes_in_handles=track_changes)
        self._tables: dict[str, dict] = {}

    @classmethod
    def from_context(cls, context: StateBackendContext) -> HeapKeyedStateBackend:
        return cls(
            max_parallelism=context.max_parallelism, clock_ms=context.clock_ms, track_changes=context.incremental
        )

    #: Maps a stored key to the key whose group it belongs to (the scoped window backend overrides it).
    _group_key: Callable[[Any], Any] | None = None

    def _table(self, name: str) -> dict:
        return self._tables.setdefault(name, {})

    def state_names(self) -> list[str]:
        return sorted(self._tables)

    @property
    def tracks_changes(self) -> bool:
        return (
            self._track_in_handles
            and not self._ttl
            and not any(d.ttl_config is not None for d in self._descriptors.values())
        )

    def _columns(self, keys: list, values: list) -> KeyedColumns:
        """Entries of one table, with key groups computed on first use (in the asynchronous part)."""
        max_parallelism = self.max_parallelism
        group_key = self._group_key
        group_keys = keys if group_key is None else [group_key(k) for k in keys]
        return KeyedColumns(keys, values, lambda: key_groups_of(group_keys, max_parallelism))

    def snapshot_changes(self) -> list[KeyedStateChanges]:
        """Synchronous part of an incremental snapshot: the current entry of every key written since
        the previous snapshot (upserts), and those keys that hold no entry any more (deletes)."""
        if not self.tracks_changes:
            raise NotImplementedError(
                "snapshot_changes() on a keyed state backend that does not track changes "
                "(created without track_changes, or holding a state with time-to-live)"
            )
        result = []
        for name, changed in self._changes.items():
            if not changed:
                continue
            written = list(changed)
            changed.clear()  # in place: the state's handle holds this set
            keys, values, deleted = current_entries(self._tables.get(name, {}), written)
            result.append(KeyedStateChanges(
                name=self._snapshot_prefix + name,
                kind=self._kind_of(name),
                upserts=self._columns(keys, detach_values(values)),
                deletes=self._columns(deleted, [None] * len(deleted)),
            ))  # fmt: skip
        return result

    def _reset_changes(self) -> None:
        for changed in self._changes.values():
            changed.clear()

    def snapshot_entries(self) -> list[KeyedStateSnapshot]:
        """Synchronous part of a snapshot; see the module docstring for what is copied.

        Entries of states with ``cleanup_full_snapshot`` TTL leave out what has
        expired (working state keeps it until read or cleaned up).
        """
        self._reset_changes()
        now = self.clock_ms() if self._ttl else 0
        result = []
        for name, table in self._tables.items():
            if not table:
                continue
            kind = self._kind_of(name)
            keys = list(table)
            values = list(table.values())
            policy = self._ttl.get(name)
            if policy is not None:
                keys, values = _alive(kind, keys, values, policy, now)
                if not keys:
                    continue
            result.append(KeyedStateSnapshot(
                name=self._snapshot_prefix + name, kind=kind, entries=self._columns(keys, detach_values(values))
            ))  # fmt: skip
        return result

    def restore_entry(self, state_name: str, key: Any, value: Any) -> None:
        self._tables.setdefault(state_name, {})[key] = value

    def keys_of(self, state_name: str) -> list[Any]:
        return list(self._tables.get(state_name, ()))

    def num_keys(self) -> int:
        keys: set = set()
        for table in self._tables.values():
            keys.update(table)
        return len(keys)


_MISSING = object()


def _alive(kind: StateKind, keys: list, values: list, policy: TtlPolicy, now: int) -> tuple[list, list]:
    alive_keys, alive_values = [], []
    for key, stored in zip(keys, values):
        alive = strip_expired(kind, stored, policy, now)
        if alive is not None:
            alive_keys.append(key)
            alive_values.append(alive)
    return alive_keys, alive_values
