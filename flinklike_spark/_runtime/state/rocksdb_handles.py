"""State handles of the RocksDB backend that read and write cached entries without a call into the table.

The plain handles of :mod:`flinklike_spark.datastream.state` call the table's dict
methods, which for :class:`~flinklike_spark._runtime.state.rocksdb_table.RocksTable`
are Python functions: a cached read or write then costs a few Python calls
(about 6x the heap backend's per access, measured). These subclasses go to the
table's ``cache`` dict and ``changed`` set directly when the current key is
cached — a write is one dict store and one ``set.add``, as the heap backend's
change-tracking handles — and to the table (RocksDB, size accounting,
eviction) only when it is not. Removal always goes through the table.

Contract shared with the table: a cached value may be replaced here only
together with ``changed.add(key)``; a container value (list, dict) read here
is marked changed, since the caller may mutate it in place (as
``RocksTable.get`` does). List and map state keep the plain handles: their
accesses go through ``RocksTable.get``/``setdefault``.

The cached read is one function (:func:`_read_current`) bound as each handle's
read method itself (``value``, ``get``), so sharing it costs no extra call per access.
"""

from __future__ import annotations

from typing import Any

from flinklike_spark._runtime.state.rocksdb_table import RocksTable
from flinklike_spark.datastream.state import AggregatingState, ReducingState, ValueState

__all__ = ["ROCKS_HANDLE_OF_KIND"]

_CONTAINERS = (list, dict)
_MISSING = object()


def _read_current(self) -> Any:
    """The current key's value: from the cache (a container marked changed), else from the table."""
    key = self._backend.current_key
    value = self._cache.get(key, _MISSING)
    if value is _MISSING:
        return self._table.get(key)
    if value.__class__ in _CONTAINERS:
        self._changed.add(key)
    return value


class RocksValueState(ValueState):
    __slots__ = ("_cache", "_changed")

    def __init__(self, backend: Any, table: RocksTable) -> None:
        super().__init__(backend, table)
        self._cache = table.cache
        self._changed = table.changed

    value = _read_current

    def update(self, value: Any) -> None:
        key = self._backend.current_key
        if value is None:
            self._table.pop(key, None)
            return
        cache = self._cache
        if key in cache:
            cache[key] = value
            self._changed.add(key)
        else:
            self._table[key] = value


class RocksReducingState(ReducingState):
    __slots__ = ("_cache", "_changed")

    def __init__(self, backend: Any, table: RocksTable, reduce_function: Any) -> None:
        super().__init__(backend, table, reduce_function)
        self._cache = table.cache
        self._changed = table.changed

    get = _read_current

    def add(self, value: Any) -> None:
        key = self._backend.current_key
        cache = self._cache
        current = cache.get(key, _MISSING)
        if current is _MISSING:
            current = self._table.get(key)
            self._table[key] = value if current is None else self._reduce(current, value)
            return
        cache[key] = value if current is None else self._reduce(current, value)
        self._changed.add(key)


class RocksAggregatingState(AggregatingState):
    __slots__ = ("_cache", "_changed")

    def __init__(self, backend: Any, table: RocksTable, agg_function: Any) -> None:
        super().__init__(backend, table, agg_function)
        self._cache = table.cache
        self._changed = table.changed

    def get(self) -> Any:
        accumulator = _read_current(self)
        return None if accumulator is None else self._agg.get_result(accumulator)

    def add(self, value: Any) -> None:
        key = self._backend.current_key
        cache = self._cache
        accumulator = cache.get(key, _MISSING)
        if accumulator is _MISSING:
            accumulator = self._table.get(key)
            if accumulator is None:
                accumulator = self._agg.create_accumulator()
            self._table[key] = self._agg.add(value, accumulator)
            return
        cache[key] = self._agg.add(value, accumulator)
        self._changed.add(key)


#: The RocksDB backend's handle class of each descriptor kind without TTL (list and map: the plain ones).
ROCKS_HANDLE_OF_KIND: dict[str, type] = {
    "value": RocksValueState,
    "reducing": RocksReducingState,
    "aggregating": RocksAggregatingState,
}
