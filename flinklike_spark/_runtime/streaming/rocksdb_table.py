"""One state's entries in the RocksDB backend: :class:`RocksTable` (cache in front of RocksDB) and value serialization.

A RocksDB key is ``state id (2 bytes) | key group (2 bytes, big-endian) |
encoded key`` (Flink's key-group-prefixed layout, one prefix per state instead
of a column family), so a scan of one state yields its entries ordered by key
group. Keys are encoded with
:func:`~flinklike_spark._runtime.streaming.state_keys.encode_key` (canonical:
the same key always gives the same bytes); values are pickled (cloudpickle as
fallback) by :func:`dumps` / :func:`dumps_all`.

The table is the backend's helper: it reserves cache room through the backend
(which evicts across all tables) and reads through the backend's scan.
Sizes of cached entries are estimated by :func:`entry_size`.
"""

from __future__ import annotations

import itertools
import pickle
import struct
import sys
from collections.abc import Iterator
from typing import Any, Protocol

import numpy as np

from flinklike_spark._runtime.network.partitioner import stable_hash_scalar
from flinklike_spark._runtime.streaming.keyed_state import key_groups_of
from flinklike_spark._runtime.streaming.state_keys import INT_KEY_BIAS, decode_key, encode_key


class TableOwner(Protocol):
    """What a :class:`RocksDBTable` uses of its backend (``RocksDBKeyedStateBackend``): the database, the
    shared cache budget and prefix scans. A protocol, so that the table and the backend do not import each other."""

    max_parallelism: int
    _db: Any
    _cached: int
    _cached_bytes: int

    def _new_batch(self) -> Any: ...

    def _reserve(self, size: int) -> None: ...

    def _scan(self, reader: Any, prefix: bytes) -> Iterator[tuple[bytes, bytes]]: ...

__all__ = ["RocksTable", "dumps", "dumps_all", "entry_size"]

#: Estimated Python heap bytes of one cached entry besides its value (dict slot, key object,
#: dirty- and changed-set slots).
_ENTRY_OVERHEAD = 200
#: Estimated bytes per element of a cached list or dict beyond its own array (the element objects).
_ELEMENT_BYTES = 64
#: Cached values the state handles mutate in place (list and map state): a read marks them dirty.
_CONTAINERS = frozenset({list, dict})
_MISSING = object()
#: A RocksDB key of an int64 state key, as a numpy row: prefix, key group, tag b"I", biased key.
_INT_KEY_ROW = np.dtype([("state", ">u2"), ("group", ">u2"), ("tag", "u1"), ("key", ">u8")])
_SCALARS = frozenset({bytes, str, int, float, bool, type(None)})


def entry_size(value: Any) -> int:
    """Estimated heap bytes of a cached entry (the value one level deep, plus the entry overhead)."""
    kind = type(value)
    if kind in _SCALARS:
        return _ENTRY_OVERHEAD + sys.getsizeof(value)
    if kind in _CONTAINERS:
        return _ENTRY_OVERHEAD + sys.getsizeof(value) + len(value) * _ELEMENT_BYTES
    if isinstance(value, tuple):  # TtlValue, aggregation accumulators
        return _ENTRY_OVERHEAD + sys.getsizeof(value) + sum(map(sys.getsizeof, value))
    return _ENTRY_OVERHEAD + sys.getsizeof(value) + _ELEMENT_BYTES


def dumps_all(values: list) -> list[bytes]:
    """``dumps`` of every value, with the C pickler mapped over the list while it works."""
    try:
        return list(map(pickle.dumps, values, itertools.repeat(pickle.HIGHEST_PROTOCOL, len(values))))
    except (pickle.PicklingError, TypeError, AttributeError):
        return [dumps(value) for value in values]


def dumps(value: Any) -> bytes:
    try:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError):
        import cloudpickle

        return cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


class RocksTable:
    """One state's entries: a dict-like view (what the state handles use) over the cache and RocksDB.

    Supports the dict operations the handles in :mod:`flinklike_spark.state`
    and :mod:`~flinklike_spark._runtime.streaming.ttl_state` use: ``get``,
    ``[]``, ``[]=``, ``del``, ``pop``, ``setdefault``, ``in``. Values a handle
    may mutate in place (lists, dicts) are marked dirty whenever they are read.
    """

    __slots__ = ("_backend", "_cache", "_changed", "_db", "_dirty", "_removed", "name", "prefix")

    def __init__(self, backend: TableOwner, name: str, state_id: int) -> None:
        self._backend = backend
        self._db = backend._db
        self.name = name
        self.prefix = struct.pack(">H", state_id)
        self._cache: dict[Any, Any] = {}
        self._dirty: set[Any] = set()  # cached keys whose value RocksDB does not have yet
        self._changed: set[Any] = set()  # keys written since the last snapshot (incremental)
        self._removed: set[Any] = set()  # keys deleted since the last snapshot (incremental)

    def rocks_key(self, key: Any) -> bytes:
        backend = self._backend
        group = stable_hash_scalar(key) % backend.max_parallelism
        return self.prefix + group.to_bytes(2, "big") + encode_key(key)

    def rocks_keys(self, keys: list) -> list[bytes]:
        """``rocks_key`` of every key; all-int64 key lists are encoded vectorized."""
        if len(keys) >= 32 and set(map(type, keys)) == {int}:
            try:
                ints = np.array(keys, dtype=np.int64)
            except OverflowError:
                pass
            else:
                rows = np.empty(len(keys), dtype=_INT_KEY_ROW)
                rows["state"] = int.from_bytes(self.prefix, "big")
                rows["group"] = key_groups_of(keys, self._backend.max_parallelism)
                rows["tag"] = ord("I")
                rows["key"] = ints.view(np.uint64) ^ np.uint64(INT_KEY_BIAS)
                return rows.view(f"V{_INT_KEY_ROW.itemsize}").tolist()
        return [self.rocks_key(key) for key in keys]

    # dict protocol -------------------------------------------------------------------------------

    def get(self, key: Any, default: Any = None) -> Any:
        value = self._cache.get(key, _MISSING)
        if value is _MISSING:
            raw = self._db.get(self.rocks_key(key))
            if raw is None:
                return default
            value = pickle.loads(raw)
            self._backend._reserve(entry_size(value))  # before the insert: eviction never drops this entry
            self._cache[key] = value
        if type(value) in _CONTAINERS:
            self._dirty.add(key)
            self._changed.add(key)
        return value

    def __getitem__(self, key: Any) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __setitem__(self, key: Any, value: Any) -> None:
        cache = self._cache
        old = cache.get(key, _MISSING)
        if old is _MISSING:
            self._backend._reserve(entry_size(value))
        else:
            self._backend._cached_bytes += entry_size(value) - entry_size(old)
        cache[key] = value
        self._dirty.add(key)
        self._changed.add(key)
        self._removed.discard(key)

    def pop(self, key: Any, default: Any = _MISSING) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            if default is _MISSING:
                raise KeyError(key)
            return default
        if self._cache.pop(key, _MISSING) is not _MISSING:
            self._backend._cached -= 1
            self._backend._cached_bytes -= entry_size(value)
        self._dirty.discard(key)
        self._changed.discard(key)
        self._removed.add(key)
        self._db.delete(self.rocks_key(key))
        return value

    def __delitem__(self, key: Any) -> None:
        self.pop(key)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            self[key] = default
            return default
        return value

    def __contains__(self, key: Any) -> bool:
        return self.get(key, _MISSING) is not _MISSING

    def __bool__(self) -> bool:
        return bool(self._cache) or next(self._backend._scan(self._db, self.prefix), None) is not None

    def __len__(self) -> int:
        self.flush()
        return sum(1 for _ in self._backend._scan(self._db, self.prefix))

    def __iter__(self) -> Iterator[Any]:
        return iter([key for key, _ in self.items()])

    def keys(self) -> Iterator[Any]:
        return iter(self)

    def values(self) -> list:
        return [value for _, value in self.items()]

    def items(self) -> list[tuple[Any, Any]]:
        """Every entry (read from RocksDB after writing the dirty ones back)."""
        self.flush()
        return [(decode_key(k[4:]), pickle.loads(v)) for k, v in self._backend._scan(self._db, self.prefix)]

    # cache management ----------------------------------------------------------------------------

    def flush(self, batch: Any = None) -> int:
        """Write the dirty cached entries to RocksDB (into ``batch`` when given); bytes written."""
        dirty = self._dirty
        if not dirty:
            return 0
        own = batch is None
        if own:
            batch = self._backend._new_batch()
        keys = list(dirty)
        raws = dumps_all(list(map(self._cache.__getitem__, keys)))
        put = batch.put
        for rocks_key, raw in zip(self.rocks_keys(keys), raws, strict=True):
            put(rocks_key, raw)
        written = sum(map(len, raws))
        dirty.clear()
        if own:
            self._db.write(batch)
        return written

    def evict(self, nbytes: int) -> tuple[int, int]:
        """Drop the oldest cached entries until about ``nbytes`` are freed, writing the dirty ones;
        ``(entries evicted, bytes freed)``."""
        cache, dirty = self._cache, self._dirty
        batch = self._backend._new_batch()
        evicted = freed = 0
        backend = self._backend
        average = max(1, backend._cached_bytes // max(1, backend._cached))
        count = min(max(1, len(cache) // 4), nbytes // average + 1)
        written_keys, written_values = [], []
        for key in list(itertools.islice(cache, count)):
            if freed >= nbytes:
                break
            value = cache.pop(key)
            evicted += 1
            freed += entry_size(value)
            if key in dirty:
                dirty.discard(key)
                written_keys.append(key)
                written_values.append(value)
        if written_keys:
            put = batch.put
            for rocks_key, raw in zip(self.rocks_keys(written_keys), dumps_all(written_values), strict=True):
                put(rocks_key, raw)
            self._db.write(batch)
        return evicted, freed

    def cached_bytes(self) -> int:
        """Estimated bytes of the cached entries, recomputed (values may have grown in place)."""
        return sum(map(entry_size, self._cache.values()))

    def take_changes(self) -> tuple[set, set]:
        changed, removed = self._changed, self._removed
        self._changed, self._removed = set(), set()
        return changed, removed

    def close(self) -> None:
        self._cache.clear()
        self._dirty.clear()
