"""State handles of TTL-enabled state (Flink's ``AbstractTtlState`` decorators, heap flavour).

Stored entries are :class:`~flinklike_spark.datastream.state.TtlValue` pairs ``(user
value, last access ms)``: per key for value, reducing and aggregating state,
per map entry for map state and per element for list state. The semantics are
documented on :class:`~flinklike_spark.datastream.state.StateTtlConfig`; in short, an
entry is expired once ``timestamp + ttl <= now``, a read of an expired entry
removes it (returning it once under ``ReturnExpiredIfNotCleanedUp``), and
writes (and reads, under ``OnReadAndWrite``) stamp ``now``.

Incremental cleanup (:class:`IncrementalCleanup`) walks the state's table a
few keys per access with a cursor over a copy of its key list, so it never
iterates a dict that the task thread changes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from checkpointing.schemas import StateKind
from flinklike_spark.datastream.state import (
    AggregatingState,
    ListState,
    MapState,
    ReducingState,
    StateTtlConfig,
    TtlValue,
    ValueState,
)

__all__ = ["TTL_HANDLE_OF_KIND", "IncrementalCleanup", "TtlPolicy", "is_ttl_entry", "strip_expired"]

_NEVER_RETURN = StateTtlConfig.StateVisibility.NeverReturnExpired
_ON_READ = StateTtlConfig.UpdateType.OnReadAndWrite


class TtlPolicy:
    """The parts of a :class:`StateTtlConfig` the handles need, plus the clock."""

    __slots__ = ("clock_ms", "return_expired", "ttl_ms", "update_on_read")

    def __init__(self, config: StateTtlConfig, clock_ms: Callable[[], int]) -> None:
        self.clock_ms = clock_ms
        self.ttl_ms = config.ttl_ms
        self.return_expired = config.get_state_visibility() is not _NEVER_RETURN
        self.update_on_read = config.get_update_type() is _ON_READ

    def expired(self, entry: TtlValue, now: int) -> bool:
        return entry.timestamp + self.ttl_ms <= now


def _alive_elements(entries: list, policy: TtlPolicy, now: int) -> list:
    return [e for e in entries if not policy.expired(e, now)]


def strip_expired(kind: StateKind, stored: Any, policy: TtlPolicy, now: int) -> Any:
    """``stored`` (a table value) without its expired parts; None when nothing is left."""
    if kind == StateKind.MAP:
        alive = {k: e for k, e in stored.items() if not policy.expired(e, now)}
        return alive or None
    if kind == StateKind.LIST:
        return _alive_elements(stored, policy, now) or None
    return None if policy.expired(stored, now) else stored


def is_ttl_entry(kind: StateKind, stored: Any) -> bool:
    """Whether a stored table value is in TTL form (used to reject a changed TTL setting on restore)."""
    if kind == StateKind.MAP:
        return all(isinstance(e, TtlValue) for e in stored.values())
    if kind == StateKind.LIST:
        return all(isinstance(e, TtlValue) for e in stored)
    return isinstance(stored, TtlValue)


class IncrementalCleanup:
    """Checks ``size`` keys of one table per call and drops their expired parts."""

    __slots__ = ("_cursor", "_kind", "_policy", "_size", "_table")

    def __init__(self, table: dict, kind: StateKind, policy: TtlPolicy, size: int) -> None:
        self._table = table
        self._kind = kind
        self._policy = policy
        self._size = size
        self._cursor: Iterator[Any] = iter(())

    def run(self) -> None:
        table = self._table
        if not table or not self._size:
            return
        now = self._policy.clock_ms()
        for _ in range(self._size):
            key = next(self._cursor, _END)
            if key is _END:
                # A copy of the keys: the table may change between calls.
                self._cursor = iter(list(table))
                key = next(self._cursor, _END)
                if key is _END:
                    return
            stored = table.get(key)
            if stored is None:
                continue
            alive = strip_expired(self._kind, stored, self._policy, now)
            if alive is None:
                del table[key]
            elif alive is not stored and len(alive) != len(stored):
                table[key] = alive


_END = object()


class _TtlMixin:
    """Shared by the TTL handles: the policy and the optional incremental cleanup."""

    __slots__ = ()

    def _init_ttl(self, policy: TtlPolicy, cleanup: IncrementalCleanup | None) -> None:
        self._policy = policy
        self._cleanup = cleanup

    def _access(self) -> int:
        """Run incremental cleanup, if any; return the current processing time."""
        if self._cleanup is not None:
            self._cleanup.run()
        return self._policy.clock_ms()

    def _read(self, key: Any, now: int) -> tuple[bool, Any]:
        """``(found, user value)`` of a per-key TtlValue, applying visibility and update-on-read."""
        table = self._table
        entry = table.get(key)
        if entry is None:
            return False, None
        policy = self._policy
        if policy.expired(entry, now):
            del table[key]
            return (True, entry.value) if policy.return_expired else (False, None)
        if policy.update_on_read:
            table[key] = TtlValue(entry.value, now)
        return True, entry.value


class TtlValueState(_TtlMixin, ValueState):
    __slots__ = ("_cleanup", "_policy")

    def value(self) -> Any:
        return self._read(self._backend.current_key, self._access())[1]

    def update(self, value: Any) -> None:
        now = self._access()
        if value is None:
            self._table.pop(self._backend.current_key, None)
        else:
            self._table[self._backend.current_key] = TtlValue(value, now)


class TtlReducingState(_TtlMixin, ReducingState):
    __slots__ = ("_cleanup", "_policy")

    def get(self) -> Any:
        return self._read(self._backend.current_key, self._access())[1]

    def add(self, value: Any) -> None:
        now = self._access()
        key = self._backend.current_key
        found, current = self._read(key, now)
        self._table[key] = TtlValue(value if not found or current is None else self._reduce(current, value), now)


class TtlAggregatingState(_TtlMixin, AggregatingState):
    __slots__ = ("_cleanup", "_policy")

    def get(self) -> Any:
        found, accumulator = self._read(self._backend.current_key, self._access())
        return self._agg.get_result(accumulator) if found and accumulator is not None else None

    def add(self, value: Any) -> None:
        now = self._access()
        key = self._backend.current_key
        found, accumulator = self._read(key, now)
        if not found or accumulator is None:
            accumulator = self._agg.create_accumulator()
        self._table[key] = TtlValue(self._agg.add(value, accumulator), now)


class TtlListState(_TtlMixin, ListState):
    """Each element expires on its own; ``add`` stamps only the new element, ``update`` all."""

    __slots__ = ("_cleanup", "_policy")

    def get(self) -> list:
        now = self._access()
        key = self._backend.current_key
        stored = self._table.get(key)
        if not stored:
            return []
        policy = self._policy
        alive = _alive_elements(stored, policy, now)
        result = [e.value for e in (stored if policy.return_expired else alive)]
        if not alive:
            del self._table[key]
        elif policy.update_on_read:
            self._table[key] = [TtlValue(e.value, now) for e in alive]
        elif len(alive) != len(stored):
            self._table[key] = alive
        return result

    def add(self, value: Any) -> None:
        now = self._access()
        self._table.setdefault(self._backend.current_key, []).append(TtlValue(value, now))

    def add_all(self, values: Iterable[Any]) -> None:
        now = self._access()
        stamped = [TtlValue(v, now) for v in values]
        if stamped:
            self._table.setdefault(self._backend.current_key, []).extend(stamped)

    def update(self, values: Iterable[Any]) -> None:
        now = self._access()
        stamped = [TtlValue(v, now) for v in values]
        if stamped:
            self._table[self._backend.current_key] = stamped
        else:
            self._table.pop(self._backend.current_key, None)


class TtlMapState(_TtlMixin, MapState):
    """Each map entry expires on its own."""

    __slots__ = ("_cleanup", "_policy")

    def _entry(self, user_key: Any, now: int) -> tuple[bool, Any]:
        key = self._backend.current_key
        entries = self._table.get(key)
        if not entries:
            return False, None
        entry = entries.get(user_key)
        if entry is None:
            return False, None
        policy = self._policy
        if policy.expired(entry, now):
            del entries[user_key]
            if not entries:
                del self._table[key]
            return (True, entry.value) if policy.return_expired else (False, None)
        if policy.update_on_read:
            entries[user_key] = TtlValue(entry.value, now)
        return True, entry.value

    def get(self, key: Any) -> Any:
        return self._entry(key, self._access())[1]

    def contains(self, key: Any) -> bool:
        return self._entry(key, self._access())[0]

    def put(self, key: Any, value: Any) -> None:
        now = self._access()
        self._map()[key] = TtlValue(value, now)

    def put_all(self, dict_value: dict) -> None:
        now = self._access()
        if dict_value:
            self._map().update({k: TtlValue(v, now) for k, v in dict_value.items()})

    def remove(self, key: Any) -> None:
        self._access()
        super().remove(key)

    def _visible_items(self) -> list[tuple[Any, Any]]:
        now = self._access()
        key = self._backend.current_key
        entries = self._table.get(key)
        if not entries:
            return []
        policy = self._policy
        visible = []
        for user_key, entry in list(entries.items()):
            if policy.expired(entry, now):
                del entries[user_key]
                if policy.return_expired:
                    visible.append((user_key, entry.value))
            else:
                if policy.update_on_read:
                    entries[user_key] = TtlValue(entry.value, now)
                visible.append((user_key, entry.value))
        if not entries:
            del self._table[key]
        return visible

    def keys(self) -> Iterator[Any]:
        return iter([k for k, _ in self._visible_items()])

    def values(self) -> Iterator[Any]:
        return iter([v for _, v in self._visible_items()])

    def items(self) -> Iterator[tuple[Any, Any]]:
        return iter(self._visible_items())

    def is_empty(self) -> bool:
        return not self._visible_items()


#: The TTL handle class of each state kind (constructed like the plain handles of ``HANDLE_OF_KIND``,
#: then given their policy with ``_init_ttl``).
TTL_HANDLE_OF_KIND: dict[StateKind, type[_TtlMixin]] = {
    StateKind.VALUE: TtlValueState,
    StateKind.LIST: TtlListState,
    StateKind.MAP: TtlMapState,
    StateKind.REDUCING: TtlReducingState,
    StateKind.AGGREGATING: TtlAggregatingState,
}
