"""Keyed state backends: the :class:`KeyedStateBackend` seam and the heap implementation.

The task thread is the only user. ``current_key`` is a plain attribute set by
the keyed operator before it calls user code; state handles (see
:mod:`flinklike_spark.state`) read it on every access, so the per-record path
costs one dict operation per state access.

Which backend an operator gets is chosen by Flink's ``state.backend.type``
(:func:`create_keyed_state_backend`): ``hashmap`` (:class:`HeapKeyedStateBackend`,
the default) or ``rocksdb`` (:mod:`~flinklike_spark._runtime.streaming.rocksdb_state`).

Snapshots: :meth:`KeyedStateBackend.snapshot_entries` is the *synchronous* part
of a checkpoint and does as little as possible on the task thread: it copies
each table's key and value lists (C-speed list copies), deep-copies only values
that are mutable (ints, strings, bytes, floats and tuples of those are shared,
which is safe because nothing can change them), and defers the key groups to
the asynchronous part, where :class:`checkpointing.KeyedColumns` computes them
vectorized when the writer first asks.
"""

from __future__ import annotations

import abc
import copy
import datetime
import decimal
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from checkpointing.writer import KeyedColumns
from flinklike_spark._runtime.network.partitioner import assign_key_groups, stable_hash_scalar
from flinklike_spark._runtime.streaming.tracked_state import TRACKED_HANDLE_OF_KIND
from flinklike_spark._runtime.streaming.ttl_state import (
    IncrementalCleanup,
    TtlPolicy,
    create_ttl_handle,
    is_ttl_entry,
    strip_expired,
)
from flinklike_spark.errors import ConfigurationError
from flinklike_spark.state import (
    HANDLE_OF_KIND,
    StateDescriptor,
    TtlValue,
)

__all__ = [
    "HeapKeyedStateBackend",
    "KeyedStateBackend",
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


def key_groups_of(keys: list, max_parallelism: int) -> np.ndarray:
    """Key group of each key, as :func:`~flinklike_spark._runtime.network.partitioner.key_group_for`.

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


class KeyedStateBackend(abc.ABC):
    """Keyed state of one operator subtask (Flink's ``KeyedStateBackend``).

    Call order: ``restore_entry`` for every restored entry (before the user
    function's ``open``), then ``get_state`` from ``open`` or later, with
    ``current_key`` set before every state access. ``snapshot_entries`` runs
    on the task thread at a checkpoint; what it returns must not change when
    working state changes afterwards (it is written asynchronously).

    Attributes:
        current_key: the key whose entries state handles read and write (a
            plain attribute: operators assign it once per record).
        max_parallelism: number of key groups.
    """

    current_key: Any
    max_parallelism: int

    @abc.abstractmethod
    def get_state(self, descriptor: StateDescriptor, expected: type[StateDescriptor]) -> Any:
        """The handle for ``descriptor``; the same name must keep the same kind.

        Raises:
            TypeError: ``descriptor`` is not an ``expected``.
            ValueError: the name was registered with another kind, or with
                another TTL setting than the restored entries have.
        """

    @abc.abstractmethod
    def snapshot_entries(self) -> list[tuple[str, str, KeyedColumns]]:
        """Synchronous part of a snapshot: ``(state name, kind, entries)`` per non-empty state.

        ``entries`` is a sequence of ``(key group, key, value)``; key groups
        are computed lazily (in the asynchronous part).
        """

    @abc.abstractmethod
    def snapshot_changes(self) -> list[tuple[str, str, KeyedColumns, list]]:
        """Synchronous part of an incremental snapshot: (state name, kind, upserted entries, deleted keys)
        per state changed since the previous snapshot (full or incremental).

        Like :meth:`snapshot_entries`, the result must not change when working state
        changes afterwards, and both reset the change tracking: the next call returns
        the changes since this snapshot. Only valid while :attr:`tracks_changes` is True.

        Deleted keys are record keys (their key group is ``key_group_for(key, max_parallelism)``).

        Raises:
            NotImplementedError: the backend does not track changes (see :attr:`tracks_changes`).
        """

    @property
    def tracks_changes(self) -> bool:
        """True when :meth:`snapshot_changes` can describe every change since the last snapshot.

        A backend tracks changes when it was asked to (``track_changes``) and every
        registered state supports it; otherwise callers take full snapshots.
        """
        return False

    @abc.abstractmethod
    def restore_entry(self, state_name: str, key: Any, value: Any) -> None:
        """Put one restored entry back (before the user function's ``open``)."""

    @abc.abstractmethod
    def keys_of(self, state_name: str) -> list[Any]:
        """The keys holding an entry of state ``state_name`` (a snapshot: safe to change state while iterating)."""

    @abc.abstractmethod
    def num_keys(self) -> int:
        """Number of distinct keys holding any state."""

    @abc.abstractmethod
    def state_names(self) -> list[str]:
        """Names of the states that hold or held entries, sorted."""

    def close(self) -> None:  # noqa: B027 - optional hook: the heap backend holds nothing to release
        """Release what the backend holds outside the Python heap (idempotent; the operator's
        ``close`` calls it). Snapshots already returned stay readable."""


class HeapKeyedStateBackend(KeyedStateBackend):
    """Keyed state on the Python heap: one ``dict`` per state name, keyed by the record key.

    Args:
        max_parallelism: number of key groups.
        clock_ms: processing time in ms, for state TTL (injectable for tests).
        track_changes: record which keys each state handle writes, for
            :meth:`snapshot_changes` (incremental checkpoints): handles are then the
            tracking subclasses of :mod:`~flinklike_spark._runtime.streaming.tracked_state`
            (one more ``set.add`` per write); without it, the plain handles. States with time-to-live
            change on reads and in background cleanups, so a backend holding one stops
            tracking (:attr:`tracks_changes` turns False) and snapshots are full.
    """

    def __init__(
        self, *, max_parallelism: int, clock_ms: Callable[[], int] | None = None, track_changes: bool = False
    ) -> None:
        self.max_parallelism = max_parallelism
        self._track_changes = track_changes
        self._changes: dict[str, set] = {}  # state name -> keys written since the last snapshot
        self.current_key: Any = None
        self.clock_ms = clock_ms if clock_ms is not None else _wall_clock_ms
        self._tables: dict[str, dict] = {}
        self._descriptors: dict[str, StateDescriptor] = {}
        self._handles: dict[str, Any] = {}
        self._ttl: dict[str, TtlPolicy] = {}  # state name -> policy, for snapshot cleanup
        self._per_record_cleanups: list[IncrementalCleanup] = []

    #: Maps a stored key to the key whose group it belongs to (the scoped window backend overrides it).
    _group_key: Callable[[Any], Any] | None = None
    #: Prefix of state names in snapshots (the scoped window backend overrides it).
    _snapshot_prefix = ""

    def get_state(self, descriptor: StateDescriptor, expected: type[StateDescriptor]) -> Any:
        if not isinstance(descriptor, expected):
            raise TypeError(f"expected a {expected.__name__}, got {type(descriptor).__name__} ({descriptor!r})")
        name = descriptor.name
        known = self._descriptors.get(name)
        if known is not None:
            if type(known) is not type(descriptor):
                raise ValueError(
                    f"state {name!r} was registered as {type(known).__name__}, "
                    f"cannot get it as {type(descriptor).__name__}"
                )
            return self._handles[name]
        table = self._tables.setdefault(name, {})
        ttl = descriptor.ttl_config
        self._check_restored_ttl(descriptor, table, ttl is not None)
        if ttl is None:
            handle = self._plain_handle(descriptor, table)
        else:
            policy = TtlPolicy(ttl, self.clock_ms)
            strategy = ttl.get_cleanup_strategies().get_incremental_cleanup_strategy()
            cleanup = None
            if strategy is not None and strategy.cleanup_size > 0:
                cleanup = IncrementalCleanup(table, descriptor.kind, policy, strategy.cleanup_size)
                if strategy.run_cleanup_for_every_record:
                    self._per_record_cleanups.append(cleanup)
                    self._listen_to_key_changes()
            handle = create_ttl_handle(descriptor, self, table, policy, cleanup)
            if ttl.get_cleanup_strategies().in_full_snapshot():
                self._ttl[name] = policy
        self._descriptors[name] = descriptor
        self._handles[name] = handle
        return handle

    def _plain_handle(self, descriptor: StateDescriptor, table: dict) -> Any:
        cls = (TRACKED_HANDLE_OF_KIND if self._track_changes else HANDLE_OF_KIND)[descriptor.kind]
        if descriptor.kind == "reducing":
            handle = cls(self, table, descriptor.reduce_function)
        elif descriptor.kind == "aggregating":
            handle = cls(self, table, descriptor.agg_function)
        else:
            handle = cls(self, table)
        if self._track_changes:
            handle._changed = self._changes.setdefault(descriptor.name, set())
        return handle

    @staticmethod
    def _check_restored_ttl(descriptor: StateDescriptor, table: dict, ttl: bool) -> None:
        # Flink fails such a restore (the TTL serializer differs); silently reading
        # (value, timestamp) pairs as user values, or the reverse, would corrupt results.
        if not table:
            return
        sample = next(iter(table.values()))
        if is_ttl_entry(descriptor.kind, sample) != ttl:
            had = "with" if not ttl else "without"
            raise ConfigurationError(
                f"state {descriptor.name!r} was checkpointed {had} time-to-live but is now registered "
                f"{'with' if ttl else 'without'} it; enabling or disabling TTL on existing state is not "
                f"supported (use a new state name)"
            )

    def _listen_to_key_changes(self) -> None:
        """Run per-record incremental cleanups whenever ``current_key`` is assigned.

        Only backends with such a cleanup pay for it: the instance switches to a
        subclass whose ``current_key`` is a property; everyone else keeps the
        plain attribute (a property costs ~100 ns per record).
        """
        cls = type(self)
        if getattr(cls, "_listens_to_keys", False):
            return
        listening = _LISTENING_CLASSES.get(cls)
        if listening is None:
            listening = type(f"KeyListening{cls.__name__}", (cls,), {
                "_listens_to_keys": True, "current_key": property(_get_key, _set_key_and_clean),
                "__module__": cls.__module__,
            })  # fmt: skip
            _LISTENING_CLASSES[cls] = listening
        self.__class__ = listening

    def state_names(self) -> list[str]:
        return sorted(self._tables)

    @property
    def tracks_changes(self) -> bool:
        return self._track_changes and not self._ttl and not any(
            d.ttl_config is not None for d in self._descriptors.values()
        )

    def snapshot_changes(self) -> list[tuple[str, str, KeyedColumns, list]]:
        """Synchronous part of an incremental snapshot: the current entry of every key written since
        the previous snapshot (upserts), and those keys that hold no entry any more (deletes)."""
        if not self.tracks_changes:
            raise NotImplementedError(
                "snapshot_changes() on a keyed state backend that does not track changes "
                "(created without track_changes, or holding a state with time-to-live)"
            )
        max_parallelism = self.max_parallelism
        group_key = self._group_key
        result = []
        for name, changed in self._changes.items():
            if not changed:
                continue
            written = list(changed)
            changed.clear()  # in place: the state's handle holds this set
            table = self._tables.get(name, {})
            descriptor = self._descriptors.get(name)
            kind = descriptor.kind if descriptor is not None else "value"
            keys, values, deleted = [], [], []
            get = table.get
            for key in written:
                value = get(key, _MISSING)
                if value is _MISSING:
                    deleted.append(key)
                else:
                    keys.append(key)
                    values.append(value)
            values = detach_values(values)
            group_keys = keys if group_key is None else [group_key(k) for k in keys]
            result.append((
                self._snapshot_prefix + name,
                kind,
                KeyedColumns(keys, values, lambda g=group_keys: key_groups_of(g, max_parallelism)),
                deleted,
            ))  # fmt: skip
        return result

    def _reset_changes(self) -> None:
        for changed in self._changes.values():
            changed.clear()

    def snapshot_entries(self) -> list[tuple[str, str, KeyedColumns]]:
        """Synchronous part of a snapshot; see the module docstring for what is copied.

        Entries of states with ``cleanup_full_snapshot`` TTL leave out what has
        expired (working state keeps it until read or cleaned up).
        """
        self._reset_changes()
        max_parallelism = self.max_parallelism
        group_key = self._group_key
        now = self.clock_ms() if self._ttl else 0
        result = []
        for name, table in self._tables.items():
            if not table:
                continue
            descriptor = self._descriptors.get(name)
            kind = descriptor.kind if descriptor is not None else "value"
            keys = list(table)
            values = list(table.values())
            policy = self._ttl.get(name)
            if policy is not None:
                keys, values = _alive(kind, keys, values, policy, now)
                if not keys:
                    continue
            values = detach_values(values)
            group_keys = keys if group_key is None else [group_key(k) for k in keys]
            result.append((
                self._snapshot_prefix + name,
                kind,
                KeyedColumns(keys, values, lambda g=group_keys: key_groups_of(g, max_parallelism)),
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


_LISTENING_CLASSES: dict[type, type] = {}
_MISSING = object()


def _get_key(self: HeapKeyedStateBackend) -> Any:
    return self.__dict__["current_key"]


def _set_key_and_clean(self: HeapKeyedStateBackend, key: Any) -> None:
    self.__dict__["current_key"] = key
    for cleanup in self._per_record_cleanups:
        cleanup.run()


def _alive(kind: str, keys: list, values: list, policy: TtlPolicy, now: int) -> tuple[list, list]:
    alive_keys, alive_values = [], []
    for key, stored in zip(keys, values):
        alive = strip_expired(kind, stored, policy, now)
        if alive is not None:
            alive_keys.append(key)
            alive_values.append(alive)
    return alive_keys, alive_values


def _wall_clock_ms() -> int:
    import time

    return int(time.time() * 1000)
