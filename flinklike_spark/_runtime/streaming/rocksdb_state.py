"""The RocksDB keyed state backend (Flink's ``EmbeddedRocksDBStateBackend``, ``state.backend.type: rocksdb``).

Working state lives in an embedded RocksDB (the ``rocksdict`` binding) per
operator subtask, so keyed state may be far larger than memory. Single reads
from Python cost microseconds, so a bounded in-memory cache of recently used
entries sits in front of it (write-back: a written entry reaches RocksDB when it
is evicted or at the next snapshot).

Layout: one RocksDB instance per backend, in a directory of its own under
``state.backend.rocksdb.localdir`` (default: the system temp directory), removed
by :meth:`RocksDBKeyedStateBackend.close`; directories left by killed processes
are removed by the next backend created on the machine. A RocksDB key is
``state id (2 bytes) | key group (2 bytes, big-endian) | encoded key``
(Flink's key-group-prefixed layout, one prefix per state instead of a column
family), so a scan of one state yields its entries ordered by key group, which
is the order the checkpoint writer sorts into. Keys are encoded with
:func:`~flinklike_spark._runtime.streaming.state_keys.encode_key` (canonical:
the same key always gives the same bytes); values are pickled.

The local RocksDB is working state only, never a recovery source: the WAL is
off, and restore reads the Delta checkpoint tables (as the heap backend does).

Memory: ``state.backend.rocksdb.memory.fixed-per-slot`` (default 128 mb) is
split in half: RocksDB's block cache, with write buffers charged to it
(``write-buffer-ratio``), gets one half; the hot-entry cache the other, counted
in estimated heap bytes per entry (``sys.getsizeof`` one level deep plus a fixed
overhead; recounted at every snapshot, since list and map values grow in place).
Eviction is oldest-first (insertion order), a quarter of a table at most per round.

Snapshots: the synchronous part writes the dirty cached entries to RocksDB and
takes a RocksDB checkpoint (a directory of hard links to the immutable SST
files, after a memtable flush: Flink's native snapshot); the asynchronous part
opens it read-only and scans it in chunks
(:class:`~checkpointing.writer.KeyedColumnChunks`), so a checkpoint never holds
the whole state in memory. (A RocksDB ``Snapshot`` would be cheaper, but
``rocksdict`` 0.3.29 iterates a snapshot with the live view: only its point reads
honour it.) The checkpoint directory is removed when the last chunk source of
that snapshot is garbage-collected, or at :meth:`close`.

State TTL: expired entries are dropped on read (by the TTL handles, as on the
heap) and left out of full snapshots under ``cleanup_full_snapshot``. RocksDB's
compaction-filter cleanup needs a filter in native code that Python cannot
supply through ``rocksdict``, and incremental cleanup is heap-only in Flink too;
both settings are accepted and have no effect here.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pickle
import shutil
import struct
import sys
import tempfile
import threading
import uuid
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from checkpointing.writer import KeyedColumnChunks, KeyedColumns
from flinklike_spark._runtime.network.partitioner import stable_hash_scalar
from flinklike_spark._runtime.streaming.keyed_state import KeyedStateBackend, detach_values, key_groups_of
from flinklike_spark._runtime.streaming.state_keys import INT_KEY_BIAS, decode_key, encode_key
from flinklike_spark._runtime.streaming.ttl_state import TtlPolicy, create_ttl_handle, is_ttl_entry, strip_expired
from flinklike_spark.config import RocksDBOptions
from flinklike_spark.errors import ConfigurationError
from flinklike_spark.state import HANDLE_OF_KIND, StateDescriptor

__all__ = ["RocksDBKeyedStateBackend", "release_freed_memory"]

#: At most this many entries per chunk handed to the checkpoint writer ...
SNAPSHOT_CHUNK_ENTRIES = 50_000
#: ... and at most this share of the memory budget in serialized values (the writer holds a chunk
#: a few times over while it pickles and encodes it); each chunk becomes its own Parquet file.
SNAPSHOT_CHUNK_BUDGET_SHARE = 1 / 16
#: Restored entries written to RocksDB per batch (and at most 1/16 of the budget in bytes).
_RESTORE_BATCH = 20_000
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
_DIR_PREFIX = "flinklike-rocksdb"


def _size(value: Any) -> int:
    """Estimated heap bytes of a cached entry (the value one level deep, plus the entry overhead)."""
    kind = type(value)
    if kind in _SCALARS:
        return _ENTRY_OVERHEAD + sys.getsizeof(value)
    if kind in _CONTAINERS:
        return _ENTRY_OVERHEAD + sys.getsizeof(value) + len(value) * _ELEMENT_BYTES
    if isinstance(value, tuple):  # TtlValue, aggregation accumulators
        return _ENTRY_OVERHEAD + sys.getsizeof(value) + sum(map(sys.getsizeof, value))
    return _ENTRY_OVERHEAD + sys.getsizeof(value) + _ELEMENT_BYTES


def _dumps_all(values: list) -> list[bytes]:
    """``_dumps`` of every value, with the C pickler mapped over the list while it works."""
    try:
        return list(map(pickle.dumps, values, itertools.repeat(pickle.HIGHEST_PROTOCOL, len(values))))
    except (pickle.PicklingError, TypeError, AttributeError):
        return [_dumps(value) for value in values]


def _dumps(value: Any) -> bytes:
    try:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError):
        import cloudpickle

        return cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


# -- memory ----------------------------------------------------------------------------------------


def _load_malloc_trim() -> Callable[[int], int] | None:
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None


_MALLOC_TRIM = _load_malloc_trim()


def release_freed_memory() -> None:
    """Return memory freed to glibc's arenas to the OS (no-op elsewhere).

    glibc keeps one arena per thread that allocated; a restarted task runs on a
    new thread, so what the previous attempt's cache and restore freed would stay
    resident beside what the new attempt allocates. Called after a restore and at
    ``close``.
    """
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


# -- directories -----------------------------------------------------------------------------------


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale_dirs(parent: str) -> None:
    """Remove instance directories of processes that no longer run (e.g. a SIGKILLed TaskExecutor)."""
    with contextlib.suppress(OSError):
        for name in os.listdir(parent):
            pid_text = name.split("-", 1)[0]
            if pid_text.isdigit() and int(pid_text) != os.getpid() and not _pid_alive(int(pid_text)):
                shutil.rmtree(os.path.join(parent, name), ignore_errors=True)


# -- the per-state table ---------------------------------------------------------------------------


class _RocksTable:
    """One state's entries: a dict-like view (what the state handles use) over the cache and RocksDB.

    Supports the dict operations the handles in :mod:`flinklike_spark.state`
    and :mod:`~flinklike_spark._runtime.streaming.ttl_state` use: ``get``,
    ``[]``, ``[]=``, ``del``, ``pop``, ``setdefault``, ``in``. Values a handle
    may mutate in place (lists, dicts) are marked dirty whenever they are read.
    """

    __slots__ = ("_backend", "_cache", "_changed", "_db", "_dirty", "_removed", "name", "prefix")

    def __init__(self, backend: RocksDBKeyedStateBackend, name: str, state_id: int) -> None:
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
            self._backend._reserve(_size(value))  # before the insert: eviction never drops this entry
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
            self._backend._reserve(_size(value))
        else:
            self._backend._cached_bytes += _size(value) - _size(old)
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
            self._backend._cached_bytes -= _size(value)
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
        raws = _dumps_all(list(map(self._cache.__getitem__, keys)))
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
            freed += _size(value)
            if key in dirty:
                dirty.discard(key)
                written_keys.append(key)
                written_values.append(value)
        if written_keys:
            put = batch.put
            for rocks_key, raw in zip(self.rocks_keys(written_keys), _dumps_all(written_values), strict=True):
                put(rocks_key, raw)
            self._db.write(batch)
        return evicted, freed

    def cached_bytes(self) -> int:
        """Estimated bytes of the cached entries, recomputed (values may have grown in place)."""
        return sum(map(_size, self._cache.values()))

    def take_changes(self) -> tuple[set, set]:
        changed, removed = self._changed, self._removed
        self._changed, self._removed = set(), set()
        return changed, removed

    def close(self) -> None:
        self._cache.clear()
        self._dirty.clear()


class _LocalSnapshot:
    """A RocksDB checkpoint directory, opened read-only on first use, closed and deleted when
    this object is garbage-collected (or by the backend's ``close``)."""

    def __init__(self, path: str, open_read_only: Callable[[str], Any]) -> None:
        self.path = path
        self._open = open_read_only
        self._lock = threading.Lock()
        self._db: list[Any] = []  # the open instance, shared with the finalizer
        self._finalizer = weakref.finalize(self, _drop_local_snapshot, self._db, path)

    def reader(self) -> Any:
        with self._lock:
            if not self._db:
                self._db.append(self._open(self.path))
            return self._db[0]


def _drop_local_snapshot(opened: list, path: str) -> None:
    for db in opened:
        with contextlib.suppress(Exception):
            db.close()
    opened.clear()
    shutil.rmtree(path, ignore_errors=True)


# -- the backend -----------------------------------------------------------------------------------


class RocksDBKeyedStateBackend(KeyedStateBackend):
    """Keyed state in an embedded RocksDB behind a bounded write-back cache; see the module docstring.

    Args:
        max_parallelism: number of key groups.
        options: the ``state.backend.rocksdb.*`` settings.
        clock_ms: processing time in ms, for state TTL (injectable for tests).

    Raises:
        ConfigurationError: ``rocksdict`` is not installed, or the local
            directory cannot be created.

    Call :meth:`close` when the operator ends (it removes the directory).
    """

    def __init__(
        self,
        *,
        max_parallelism: int,
        options: RocksDBOptions | None = None,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        try:
            import rocksdict
        except ImportError as exc:
            raise ConfigurationError(
                "state.backend.type 'rocksdb' needs the rocksdict package: pip install 'flinklike-spark[rocksdb]'"
            ) from exc
        self._rocksdict = rocksdict
        options = options if options is not None else RocksDBOptions()
        self.options = options
        self.max_parallelism = max_parallelism
        self.current_key: Any = None
        self.clock_ms = clock_ms if clock_ms is not None else _wall_clock_ms
        parent = os.path.join(options.local_dir or tempfile.gettempdir(), _DIR_PREFIX)
        try:
            os.makedirs(parent, exist_ok=True)
            _remove_stale_dirs(parent)
            self.directory = os.path.join(parent, f"{os.getpid()}-{uuid.uuid4().hex[:12]}")
            os.makedirs(self.directory)
        except OSError as exc:
            raise ConfigurationError(
                f"state.backend.rocksdb.localdir: cannot create a RocksDB directory under {parent!r}: {exc}"
            ) from exc
        budget = options.memory_per_slot
        self._cache_bytes = budget // 2 if options.managed else budget
        self._block_cache: Any = None
        self._db = rocksdict.Rdict(self.directory, self._db_options(budget - self._cache_bytes))
        self._snapshot_root = self.directory + ".snapshots"
        self._snapshots = itertools.count(1)
        write_options = rocksdict.WriteOptions()
        write_options.disable_wal = True  # working state only: recovery reads the checkpoints
        self._db.set_write_options(write_options)
        self._tables: dict[str, _RocksTable] = {}
        self._descriptors: dict[str, StateDescriptor] = {}
        self._handles: dict[str, Any] = {}
        self._ttl: dict[str, TtlPolicy] = {}
        self._restore_batch: Any = None
        self._restore_bytes = 0
        self._restoring = False
        #: bytes of serialized values per snapshot chunk and restore batch
        self._chunk_bytes = max(1 << 20, int(budget * SNAPSHOT_CHUNK_BUDGET_SHARE))
        self._cached = 0  # entries in all tables' caches
        self._cached_bytes = 0  # their estimated heap bytes (see _size)
        self._closed = False

    def _db_options(self, rocks_bytes: int) -> Any:
        rocksdict = self._rocksdict
        opts = rocksdict.Options(raw_mode=True)
        opts.create_if_missing(True)
        table = rocksdict.BlockBasedOptions()
        table.set_bloom_filter(10, False)
        if self.options.managed:
            # Flink's bounded-memory setup: one block cache that also accounts for the memtables,
            # with index and filter blocks inside it, so RocksDB's native memory stays near rocks_bytes.
            cache = self._block_cache = rocksdict.Cache(rocks_bytes)
            write_buffers = int(rocks_bytes * self.options.write_buffer_ratio)
            table.set_block_cache(cache)
            table.set_cache_index_and_filter_blocks(True)
            table.set_pin_l0_filter_and_index_blocks_in_cache(True)
            # Partitioned index and filters (Flink's state.backend.rocksdb.memory.partitioned-index-filters):
            # with whole-file index blocks in a small cache, every point read of a large SST file
            # reloads its index (~0.5 ms per get measured); partitions load only the part needed.
            table.set_index_type(rocksdict.BlockBasedIndexType.two_level_index_search())
            table.set_partition_filters(True)
            table.set_pin_top_level_index_and_filter(True)
            table.set_metadata_block_size(4096)
            opts.set_write_buffer_manager(
                rocksdict.WriteBufferManager.new_write_buffer_manager_with_cache(write_buffers, False, cache)
            )
            opts.set_write_buffer_size(max(write_buffers // 2, 1 << 20))
            opts.set_max_write_buffer_number(2)
        opts.set_block_based_table_factory(table)
        opts.set_max_background_jobs(2)
        return opts

    # -- cache accounting -------------------------------------------------------------------------

    def _reserve(self, size: int) -> None:
        """Count one entry of ``size`` bytes about to enter a cache, evicting first when the
        caches would exceed their share of the budget."""
        self._cached += 1
        self._cached_bytes += size
        if self._cached_bytes > self._cache_bytes:
            self._evict()

    def _evict(self) -> None:
        """Bring the caches back to 90% of their budget, oldest entries of the largest tables first."""
        target = self._cache_bytes * 9 // 10
        for _ in range(64):  # each round frees at most a quarter of one table
            excess = self._cached_bytes - target
            if excess <= 0:
                return
            table = max(self._tables.values(), key=lambda t: len(t._cache))
            if not table._cache:
                return
            evicted, freed = table.evict(excess)
            self._cached -= evicted
            self._cached_bytes -= freed

    def _open_read_only(self, path: str) -> Any:
        """A read-only instance of a local checkpoint, sharing the block cache (so the budget holds)."""
        rocksdict = self._rocksdict
        opts = rocksdict.Options(raw_mode=True)
        table = rocksdict.BlockBasedOptions()
        if self._block_cache is not None:
            table.set_block_cache(self._block_cache)
            table.set_cache_index_and_filter_blocks(True)
        opts.set_block_based_table_factory(table)
        return rocksdict.Rdict(path, opts, access_type=rocksdict.AccessType.read_only())

    def _new_batch(self) -> Any:
        return self._rocksdict.WriteBatch(raw_mode=True)

    def _scan(self, reader: Any, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """``(rocks key, value)`` of one state prefix, in key order, from the DB or a snapshot."""
        read_options = self._rocksdict.ReadOptions()
        upper = (int.from_bytes(prefix, "big") + 1).to_bytes(2, "big")
        read_options.set_iterate_upper_bound(upper)
        # A generator, so that read_options lives as long as the iteration: rocksdict's iterator
        # does not keep the bound alive, and a collected bound ends the scan early.
        yield from reader.items(from_key=prefix, read_opt=read_options)
        del read_options

    # -- KeyedStateBackend ------------------------------------------------------------------------

    def _table(self, name: str) -> _RocksTable:
        table = self._tables.get(name)
        if table is None:
            if len(self._tables) >= 1 << 16:
                raise ConfigurationError(f"too many keyed states in one operator (at most 65536), adding {name!r}")
            table = self._tables[name] = _RocksTable(self, name, len(self._tables))
        return table

    def _finish_restore(self) -> None:
        if self._restore_batch is not None:
            self._db.write(self._restore_batch)
            self._restore_batch = None
            self._restore_bytes = 0
            self._restoring = True

    def _restored(self) -> None:
        """The restore is over (the first state access): write the last batch, give its memory back."""
        self._finish_restore()
        if self._restoring:
            self._restoring = False
            release_freed_memory()

    def get_state(self, descriptor: StateDescriptor, expected: type[StateDescriptor]) -> Any:
        if not isinstance(descriptor, expected):
            raise TypeError(f"expected a {expected.__name__}, got {type(descriptor).__name__} ({descriptor!r})")
        self._check_open()
        self._restored()
        name = descriptor.name
        known = self._descriptors.get(name)
        if known is not None:
            if type(known) is not type(descriptor):
                raise ValueError(
                    f"state {name!r} was registered as {type(known).__name__}, "
                    f"cannot get it as {type(descriptor).__name__}"
                )
            return self._handles[name]
        table = self._table(name)
        ttl = descriptor.ttl_config
        self._check_restored_ttl(descriptor, table, ttl is not None)
        if ttl is None:
            cls = HANDLE_OF_KIND[descriptor.kind]
            if descriptor.kind == "reducing":
                handle = cls(self, table, descriptor.reduce_function)
            elif descriptor.kind == "aggregating":
                handle = cls(self, table, descriptor.agg_function)
            else:
                handle = cls(self, table)
        else:
            policy = TtlPolicy(ttl, self.clock_ms)
            # Incremental cleanup is a heap-backend strategy (as in Flink): reads and full snapshots clean here.
            handle = create_ttl_handle(descriptor, self, table, policy, None)
            if ttl.get_cleanup_strategies().in_full_snapshot():
                self._ttl[name] = policy
        self._descriptors[name] = descriptor
        self._handles[name] = handle
        return handle

    def _check_restored_ttl(self, descriptor: StateDescriptor, table: _RocksTable, ttl: bool) -> None:
        first = next(self._scan(self._db, table.prefix), None)
        if first is None:
            return
        if is_ttl_entry(descriptor.kind, pickle.loads(first[1])) != ttl:
            had = "with" if not ttl else "without"
            raise ConfigurationError(
                f"state {descriptor.name!r} was checkpointed {had} time-to-live but is now registered "
                f"{'with' if ttl else 'without'} it; enabling or disabling TTL on existing state is not "
                f"supported (use a new state name)"
            )

    def restore_entry(self, state_name: str, key: Any, value: Any) -> None:
        self._check_open()
        table = self._table(state_name)
        batch = self._restore_batch
        if batch is None:
            batch = self._restore_batch = self._new_batch()
        raw = _dumps(value)
        batch.put(table.rocks_key(key), raw)
        self._restore_bytes += len(raw)
        if self._restore_bytes >= self._chunk_bytes or batch.len() >= _RESTORE_BATCH:
            self._finish_restore()

    def flush(self) -> int:
        """Write every dirty cached entry (and pending restored ones) to RocksDB; bytes written."""
        self._check_open()
        self._finish_restore()
        batch = self._new_batch()
        written = sum(table.flush(batch) for table in self._tables.values())
        if written:
            self._db.write(batch)
        # Values grown in place (list and map state) drift from their recorded size: recount.
        self._cached_bytes = sum(table.cached_bytes() for table in self._tables.values())
        if self._cached_bytes > self._cache_bytes:
            self._evict()
        return written

    def snapshot_entries(self) -> list[tuple[str, str, KeyedColumnChunks]]:
        """Write the cache back, take a local RocksDB checkpoint, and return lazy chunked scans of it.

        The scans run when the checkpoint writer iterates them (the asynchronous
        part); entries of states with ``cleanup_full_snapshot`` TTL leave out
        what had expired when this method ran. Resets incremental change tracking.
        """
        self.flush()
        os.makedirs(self._snapshot_root, exist_ok=True)
        path = os.path.join(self._snapshot_root, str(next(self._snapshots)))
        self._rocksdict.Checkpoint(self._db).create_checkpoint(path)
        snapshot = _LocalSnapshot(path, self._open_read_only)
        now = self.clock_ms() if self._ttl else 0
        result = []
        for name, table in self._tables.items():
            table.take_changes()
            if next(self._scan(self._db, table.prefix), None) is None:
                continue
            descriptor = self._descriptors.get(name)
            kind = descriptor.kind if descriptor is not None else "value"
            policy = self._ttl.get(name)
            result.append((
                name,
                kind,
                KeyedColumnChunks(
                    lambda s=snapshot, p=table.prefix, k=kind, pol=policy: self._chunks(s, p, k, pol, now)
                ),
            ))  # fmt: skip
        return result

    def _chunks(
        self, snapshot: _LocalSnapshot, prefix: bytes, kind: str, policy: TtlPolicy | None, now: int
    ) -> Iterator[KeyedColumns]:
        keys: list = []
        values: list = []
        groups: list[int] = []
        loads = pickle.loads
        max_bytes = self._chunk_bytes
        size = 0
        for rocks_key, raw in self._scan(snapshot.reader(), prefix):
            value = loads(raw)
            if policy is not None:
                value = strip_expired(kind, value, policy, now)
                if value is None:
                    continue
            groups.append((rocks_key[2] << 8) | rocks_key[3])
            keys.append(decode_key(rocks_key[4:]))
            values.append(value)
            size += len(raw)
            if len(keys) >= SNAPSHOT_CHUNK_ENTRIES or size >= max_bytes:
                yield KeyedColumns(keys, values, groups)
                keys, values, groups, size = [], [], [], 0
        if keys:
            yield KeyedColumns(keys, values, groups)

    @property
    def tracks_changes(self) -> bool:
        """Every RocksDB state table tracks its written and deleted keys; states with time-to-live
        take full snapshots (as on the heap backend), since expiry changes entries unseen."""
        return not self._ttl

    def snapshot_changes(self) -> list[tuple[str, str, KeyedColumns, list]]:
        """Synchronous part of an incremental snapshot: ``(state name, kind, upserted entries,
        deleted keys)`` per state changed since the previous snapshot (full or incremental).

        Upserted values are read back from RocksDB after the cache is written
        back, so they are copies the task thread cannot change.
        """
        self.flush()
        result = []
        for name, table in self._tables.items():
            changed, removed = table.take_changes()
            if not changed and not removed:
                continue
            descriptor = self._descriptors.get(name)
            kind = descriptor.kind if descriptor is not None else "value"
            keys = list(changed)
            rocks_keys = table.rocks_keys(keys)
            raws = self._db.get(rocks_keys) if rocks_keys else []
            values = detach_values([pickle.loads(raw) for raw in raws])
            groups = [(rk[2] << 8) | rk[3] for rk in rocks_keys]
            result.append((name, kind, KeyedColumns(keys, values, groups), list(removed)))
        return result

    def keys_of(self, state_name: str) -> list[Any]:
        table = self._tables.get(state_name)
        return [] if table is None else list(table.keys())

    def num_keys(self) -> int:
        self.flush()
        keys: set[bytes] = set()
        for table in self._tables.values():
            keys.update(rocks_key[2:] for rocks_key, _ in self._scan(self._db, table.prefix))
        return len(keys)

    def state_names(self) -> list[str]:
        return sorted(self._tables)

    def cached_entries(self) -> int:
        """Entries currently held in the in-memory cache (for tests and metrics)."""
        return self._cached

    def cached_bytes(self) -> int:
        """Estimated heap bytes of the cached entries (see the module docstring)."""
        return self._cached_bytes

    def cache_budget(self) -> int:
        """Bytes of the budget the in-memory cache may use (the rest is RocksDB's)."""
        return self._cache_bytes

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"the RocksDB state backend at {self.directory!r} is closed")

    def close(self) -> None:
        """Close RocksDB and delete its directories (also of snapshots not yet written); idempotent."""
        if self._closed:
            return
        self._closed = True
        for table in self._tables.values():
            table.close()
        self._restore_batch = None
        self._tables.clear()
        self._handles.clear()
        try:
            self._db.close()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)
            shutil.rmtree(self._snapshot_root, ignore_errors=True)
            release_freed_memory()


def _wall_clock_ms() -> int:
    import time

    return int(time.time() * 1000)
