"""One state's entries in the RocksDB backend: :class:`RocksTable` (cache in front of RocksDB) and value serialization.

A RocksDB key is ``state id (2 bytes) | key group (2 bytes, big-endian) |
encoded key`` (Flink's key-group-prefixed layout, one prefix per state instead
of a column family), so a scan of one state yields its entries ordered by key
group. Keys are encoded with
:func:`~flinklike_spark._runtime.state.state_keys.encode_key` (canonical:
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

from flinklike_spark._runtime.state.key_groups import stable_hash_scalar
from flinklike_spark._runtime.state.keyed_state import key_groups_of
from flinklike_spark._runtime.state.state_keys import INT_KEY_BIAS, decode_key, encode_key


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


__all__ = ["SIZE_SAMPLE", "RocksTable", "dumps", "dumps_all", "entry_size"]

#: Entries sampled to re-estimate a cache's size (at snapshots and once a second while records flow).
SIZE_SAMPLE = 512

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

    Supports the dict operations the handles in :mod:`flinklike_spark.datastream.state`
    and :mod:`~flinklike_spark._runtime.state.ttl_state` use: ``get``,
    ``[]``, ``[]=``, ``del``, ``pop``, ``setdefault``, ``in``; the handles of
    :mod:`~flinklike_spark._runtime.state.rocksdb_handles` read and write
    :attr:`cache` and :attr:`changed` directly when the key is cached, and come
    here otherwise. Values a handle may mutate in place (lists, dicts) are
    marked changed whenever they are read.

    Bookkeeping (the invariant: a cached entry may differ from RocksDB's only if
    its key is in ``changed`` or ``_dirty``):

    * ``cache``: key -> current value of the entries held in memory;
    * ``changed``: keys written (or read as a container) since the last
      snapshot; the cached ones are not in RocksDB yet. One ``set.add`` per
      write is all the bookkeeping a cached write costs; with change tracking
      off, evicted keys leave it (it then holds cached keys only);
    * ``_dirty``: cached keys written before the last incremental snapshot and
      not written back since (an incremental snapshot reads the cache instead
      of writing it back);
    * ``_removed``: keys deleted since the last snapshot (with change tracking);
    * ``_absent``: keys the last :meth:`prefetch` found in neither the cache nor
      RocksDB, so a read of them costs no RocksDB lookup; cleared by every
      eviction and prefetch (an evicted entry reaches RocksDB).
    """

    __slots__ = (
        "_absent", "_backend", "_db", "_dirty", "_group_prefixes", "_max_parallelism", "_removed", "_track",
        "cache", "changed", "name", "prefix",
    )  # fmt: skip

    def __init__(self, backend: TableOwner, name: str, state_id: int, *, track_changes: bool = True) -> None:
        self._backend = backend
        self._db = backend._db
        self.name = name
        self.prefix = struct.pack(">H", state_id)
        self._max_parallelism = backend.max_parallelism
        #: RocksDB key prefix (state id and key group) of each key group, built once
        self._group_prefixes = [self.prefix + group.to_bytes(2, "big") for group in range(backend.max_parallelism)]
        self._track = track_changes
        self.cache: dict[Any, Any] = {}
        self.changed: set[Any] = set()
        self._dirty: set[Any] = set()
        self._removed: set[Any] = set()
        self._absent: set[Any] = set()

    def rocks_key(self, key: Any) -> bytes:
        return self._group_prefixes[stable_hash_scalar(key) % self._max_parallelism] + encode_key(key)

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
                rows["group"] = key_groups_of(keys, self._max_parallelism)
                rows["tag"] = ord("I")
                rows["key"] = ints.view(np.uint64) ^ np.uint64(INT_KEY_BIAS)
                return rows.view(f"V{_INT_KEY_ROW.itemsize}").tolist()
        return [self.rocks_key(key) for key in keys]

    # dict protocol -------------------------------------------------------------------------------

    def get(self, key: Any, default: Any = None) -> Any:
        value = self.cache.get(key, _MISSING)
        if value is _MISSING:
            value = self._load(key)
            if value is _MISSING:
                return default
        if type(value) in _CONTAINERS:
            self.changed.add(key)
        return value

    def _load(self, key: Any) -> Any:
        """The stored value of an uncached key (now cached), or ``_MISSING``."""
        if key in self._absent:
            return _MISSING
        raw = self._db.get(self.rocks_key(key))
        if raw is None:
            return _MISSING
        value = pickle.loads(raw)
        self._backend._reserve(entry_size(value))  # before the insert: eviction never drops this entry
        self.cache[key] = value
        return value

    def __getitem__(self, key: Any) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __setitem__(self, key: Any, value: Any) -> None:
        cache = self.cache
        if key not in cache:
            self._backend._reserve(entry_size(value))
        cache[key] = value
        self.changed.add(key)

    def pop(self, key: Any, default: Any = _MISSING) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            if default is _MISSING:
                raise KeyError(key)
            return default
        del self.cache[key]
        self._backend._cached -= 1
        self._backend._cached_bytes -= entry_size(value)
        self.changed.discard(key)
        self._dirty.discard(key)
        if self._track:
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
        return bool(self.cache) or next(self._backend._scan(self._db, self.prefix), None) is not None

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
        """Every entry (read from RocksDB after writing the changed ones back)."""
        self.flush()
        return [(decode_key(k[4:]), pickle.loads(v)) for k, v in self._backend._scan(self._db, self.prefix)]

    # cache management ----------------------------------------------------------------------------

    def prefetch(self, keys: list) -> None:
        """Load the entries of the uncached ``keys`` (distinct) with one RocksDB multi-get, and
        remember the keys RocksDB has no entry for (until the next eviction or prefetch)."""
        cache = self.cache
        absent = self._absent
        absent.clear()
        missing = [key for key in keys if key not in cache]
        if not missing:
            return
        raws = self._db.get(self.rocks_keys(missing))
        loads, reserve = pickle.loads, self._backend._reserve
        none = []
        for key, raw in zip(missing, raws, strict=True):
            if raw is None:
                none.append(key)
            else:
                value = loads(raw)
                reserve(entry_size(value))
                cache[key] = value
        absent.update(none)  # after the inserts: an eviction among them clears the set

    def _unwritten(self) -> list:
        """Cached keys whose value RocksDB may not have."""
        keys = self.changed.union(self._dirty) if self._dirty else self.changed
        return list(self.cache.keys() & keys)

    def flush(self, batch: Any = None) -> int:
        """Write the changed cached entries to RocksDB (into ``batch`` when given); bytes written.

        ``changed`` keeps its keys (they are still changes since the last snapshot).
        """
        keys = self._unwritten()
        self._dirty.clear()
        if not keys:
            return 0
        own = batch is None
        if own:
            batch = self._backend._new_batch()
        raws = dumps_all(list(map(self.cache.__getitem__, keys)))
        put = batch.put
        for rocks_key, raw in zip(self.rocks_keys(keys), raws, strict=True):
            put(rocks_key, raw)
        if own:
            self._db.write(batch)
        return sum(map(len, raws))

    def evict(self, nbytes: int) -> tuple[int, int]:
        """Drop the oldest cached entries until about ``nbytes`` are freed, writing the changed ones;
        ``(entries evicted, bytes freed)``."""
        cache, changed, dirty = self.cache, self.changed, self._dirty
        backend = self._backend
        evicted = freed = 0
        average = max(1, backend._cached_bytes // max(1, backend._cached))
        count = min(max(1, len(cache) // 4), nbytes // average + 1)
        written_keys, written_values = [], []
        for key in list(itertools.islice(cache, count)):
            if freed >= nbytes:
                break
            value = cache.pop(key)
            evicted += 1
            freed += entry_size(value)
            if key in changed or key in dirty:
                written_keys.append(key)
                written_values.append(value)
        self._absent.clear()
        if written_keys:
            dirty.difference_update(written_keys)
            if not self._track:
                changed.difference_update(written_keys)  # only cached keys stay: the set stays bounded
            batch = backend._new_batch()
            put = batch.put
            for rocks_key, raw in zip(self.rocks_keys(written_keys), dumps_all(written_values), strict=True):
                put(rocks_key, raw)
            self._db.write(batch)
        return evicted, freed

    def estimated_bytes(self) -> int:
        """Estimated bytes of the cached entries, from a sample of at most :data:`SIZE_SAMPLE` of them
        (spread over the cache; values may have been replaced or grown in place since they were counted)."""
        cache = self.cache
        size = len(cache)
        if size <= SIZE_SAMPLE:
            return sum(map(entry_size, cache.values()))
        sample = list(itertools.islice(cache.values(), 0, None, size // SIZE_SAMPLE))
        return sum(map(entry_size, sample)) * size // len(sample)

    def take_changes(self) -> tuple[set, set]:
        """``(keys written, keys removed)`` since the last snapshot, for an incremental snapshot
        that reads the cache without writing it back: the cached written keys stay unwritten."""
        changed, removed = self.changed.copy(), self._removed
        self._dirty.update(self.cache.keys() & changed)
        self.changed.clear()  # in place: the handles hold this set
        self._removed = set()
        return changed, removed

    def reset_changes(self) -> None:
        """Forget the changes (after a :meth:`flush`, at a full snapshot)."""
        self.changed.clear()
        self._removed = set()

    def forget_absent(self) -> None:
        """Entries were written to RocksDB around the cache (a restore): forget what prefetch found absent."""
        self._absent.clear()

    def close(self) -> None:
        self.cache.clear()
        self.changed.clear()
        self._dirty.clear()
        self._absent.clear()
