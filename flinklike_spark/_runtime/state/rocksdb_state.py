"""The RocksDB keyed state backend (Flink's ``EmbeddedRocksDBStateBackend``, ``state.backend.type: rocksdb``).

Working state lives in an embedded RocksDB (the ``rocksdict`` binding) per
operator subtask, so keyed state may be far larger than memory. Single reads
from Python cost microseconds, so a bounded in-memory cache of recently used
entries sits in front of it (write-back: a written entry reaches RocksDB when it
is evicted or at the next full snapshot). Flink's RocksDB backend has no such
cache; here the cost of a call from Python into RocksDB is what it saves.

Access paths (per-access costs measured by ``benchmarks/state_backends.py``):

* cached: the value, reducing and aggregating handles of
  :mod:`~flinklike_spark._runtime.state.rocksdb_handles` read and write the
  table's cache dict directly (a write adds the key to the table's ``changed``
  set, nothing else: no size accounting, no RocksDB call);
* uncached: :meth:`RocksDBKeyedStateBackend.prefetch`, which keyed operators call
  with each input batch's keys, loads the batch's entries of every registered
  state with one multi-get per state and remembers the keys RocksDB lacks (so
  their first read costs nothing); a key not prefetched costs one RocksDB get.

Layout: one RocksDB instance per backend, in a directory of its own under
``state.backend.rocksdb.localdir`` (default: the system temp directory), removed
by :meth:`RocksDBKeyedStateBackend.close`; directories left by killed processes
are removed by the next backend created on the machine
(:mod:`~flinklike_spark._runtime.state.rocksdb_local`). Each state is a
:class:`~flinklike_spark._runtime.state.rocksdb_table.RocksTable`: keys are
prefixed by state and key group, so a scan of one state yields its entries
ordered by key group, which is the order the checkpoint writer sorts into.

The local RocksDB is working state only, never a recovery source: the WAL is
off, and restore reads the Delta checkpoint tables (as the heap backend does).

Memory: ``state.backend.rocksdb.memory.fixed-per-slot`` (default 128 mb) is
split in half: RocksDB's block cache, with write buffers charged to it
(``write-buffer-ratio``), gets one half; the hot-entry cache the other, counted
in estimated heap bytes per entry (``sys.getsizeof`` one level deep plus a fixed
overhead) when an entry enters the cache. Cached writes and in-place changes of
list and map values are not counted as they happen: the size is re-estimated
from a sample of each table (:data:`~flinklike_spark._runtime.state.rocksdb_table.SIZE_SAMPLE`
entries) at every full snapshot and about once a second while batches are
prefetched. Eviction is oldest-first (insertion order), a quarter of a table at
most per round.

Full snapshots: the synchronous part writes the changed cached entries to RocksDB and
takes a RocksDB checkpoint (a directory of hard links to the immutable SST
files, after a memtable flush: Flink's native snapshot); the asynchronous part
opens it read-only and scans it in chunks
(:class:`~checkpointing.writer.KeyedColumnChunks`), so a checkpoint never holds
the whole state in memory. (A RocksDB ``Snapshot`` would be cheaper, but
``rocksdict`` 0.3.29 iterates a snapshot with the live view: only its point reads
honour it.) The checkpoint directory is removed when the last chunk source of
that snapshot is garbage-collected, or at :meth:`close`.

Incremental snapshots write nothing back: the current values of the keys
changed since the previous snapshot come from the cache (or, for entries evicted
since, from RocksDB by one multi-get), and the cached ones stay marked unwritten
until they are evicted or a full snapshot writes them.

State TTL: expired entries are dropped on read (by the TTL handles, as on the
heap) and left out of full snapshots under ``cleanup_full_snapshot``. RocksDB's
compaction-filter cleanup needs a filter in native code that Python cannot
supply through ``rocksdict``, and incremental cleanup is heap-only in Flink too;
both settings are accepted and have no effect here.
"""

from __future__ import annotations

import itertools
import os
import pickle
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from checkpointing.schemas import StateKind
from checkpointing.state_snapshots import KeyedStateChanges, KeyedStateSnapshot
from checkpointing.writer import KeyedColumnChunks, KeyedColumns
from flinklike_spark._runtime.state.keyed_state import current_entries, detach_values, key_groups_of
from flinklike_spark._runtime.state.rocksdb_handles import ROCKS_HANDLE_OF_KIND
from flinklike_spark._runtime.state.rocksdb_local import (
    DIR_PREFIX,
    LocalSnapshot,
    release_freed_memory,
    remove_stale_dirs,
)
from flinklike_spark._runtime.state.rocksdb_table import RocksTable, dumps
from flinklike_spark._runtime.state.state_backend_base import NOTHING, KeyedStateBackend, StateBackendContext
from flinklike_spark._runtime.state.state_keys import decode_key
from flinklike_spark._runtime.state.ttl_state import TtlPolicy, strip_expired
from flinklike_spark.config import RocksDBOptions
from flinklike_spark.errors import ConfigurationError

__all__ = ["SNAPSHOT_CHUNK_BUDGET_SHARE", "SNAPSHOT_CHUNK_ENTRIES", "RocksDBKeyedStateBackend"]

#: At most this many entries per chunk handed to the checkpoint writer ...
SNAPSHOT_CHUNK_ENTRIES = 50_000
#: ... and at most this share of the memory budget in serialized values (the writer holds a chunk
#: a few times over while it pickles and encodes it); each chunk becomes its own Parquet file.
SNAPSHOT_CHUNK_BUDGET_SHARE = 1 / 16
#: Restored entries written to RocksDB per batch (and at most 1/16 of the budget in bytes).
_RESTORE_BATCH = 20_000
#: Seconds between re-estimates of the cache size while batches are prefetched.
_ESTIMATE_INTERVAL_S = 1.0
#: Assumed bytes of a cached entry when bounding a prefetch (an int or a short string value).
_PREFETCH_ENTRY_BYTES = 256


def _current_entries(table: RocksTable, keys: set) -> tuple[list, list, list]:
    """``(keys, values, deleted keys)``: the current entry of each of ``keys``, from the cache (mutable
    values deep-copied) or else from RocksDB; the keys without one are deleted."""
    found, values, uncached = current_entries(table.cache, list(keys))
    values = detach_values(values)
    deleted = []
    if uncached:
        raws = table._db.get(table.rocks_keys(uncached))
        loads = pickle.loads
        for key, raw in zip(uncached, raws, strict=True):
            if raw is None:
                deleted.append(key)
            else:
                found.append(key)
                values.append(loads(raw))
    return found, values, deleted


class RocksDBKeyedStateBackend(KeyedStateBackend):
    """Keyed state in an embedded RocksDB behind a bounded write-back cache; see the module docstring.

    Args:
        max_parallelism: number of key groups.
        options: the ``state.backend.rocksdb.*`` settings.
        clock_ms: processing time in ms, for state TTL (injectable for tests).
        track_changes: record the keys written and removed between snapshots, for
            :meth:`snapshot_changes` (incremental checkpoints); without it the tables
            remember only the cached keys not yet written back.

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
        track_changes: bool = True,
    ) -> None:
        try:
            import rocksdict
        except ImportError as exc:
            raise ConfigurationError(
                "state.backend.type 'rocksdb' needs the rocksdict package: pip install 'flinklike-spark[rocksdb]'"
            ) from exc
        super().__init__(max_parallelism=max_parallelism, clock_ms=clock_ms)
        self._rocksdict = rocksdict
        options = options if options is not None else RocksDBOptions()
        self.options = options
        parent = os.path.join(options.local_dir or tempfile.gettempdir(), DIR_PREFIX)
        try:
            os.makedirs(parent, exist_ok=True)
            remove_stale_dirs(parent)
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
        self._tables: dict[str, RocksTable] = {}
        self._restore_batch: Any = None
        self._restore_bytes = 0
        self._restoring = False
        #: bytes of serialized values per snapshot chunk and restore batch
        self._chunk_bytes = max(1 << 20, int(budget * SNAPSHOT_CHUNK_BUDGET_SHARE))
        self._cached = 0  # entries in all tables' caches
        self._cached_bytes = 0  # their estimated heap bytes (see entry_size)
        self._track_changes = track_changes
        self._estimated_at = time.monotonic()  # when _cached_bytes was last re-estimated
        #: most uncached keys one prefetch loads per state (a batch beyond the cache would evict itself)
        self._prefetch_limit = max(256, self._cache_bytes // (8 * _PREFETCH_ENTRY_BYTES))
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
            table = max(self._tables.values(), key=lambda t: len(t.cache))
            if not table.cache:
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

    # -- KeyedStateBackend primitives -------------------------------------------------------------

    @classmethod
    def from_context(cls, context: StateBackendContext) -> RocksDBKeyedStateBackend:
        return cls(
            max_parallelism=context.max_parallelism,
            options=context.rocksdb,
            clock_ms=context.clock_ms,
            track_changes=context.incremental,
        )

    def _table(self, name: str) -> RocksTable:
        table = self._tables.get(name)
        if table is None:
            if len(self._tables) >= 1 << 16:
                raise ConfigurationError(f"too many keyed states in one operator (at most 65536), adding {name!r}")
            table = RocksTable(self, name, len(self._tables), track_changes=self._track_changes)
            self._tables[name] = table
        return table

    def _plain_handle(self, name: str, kind: StateKind, table: Any, args: tuple[Any, ...]) -> Any:
        handle = ROCKS_HANDLE_OF_KIND.get(kind.value)
        return super()._plain_handle(name, kind, table, args) if handle is None else handle(self, table, *args)

    def prefetch(self, keys: list) -> None:
        """Load the entries of ``keys`` (one input batch's) for every registered state with one
        RocksDB multi-get per state, so that the accesses that follow find them cached; also
        re-estimates the cache size about once a second (see the module docstring)."""
        if self._closed or not self._handles or not keys:
            return
        self._restored()
        distinct = list(dict.fromkeys(keys))[: self._prefetch_limit]
        for name in self._handles:
            self._tables[name].prefetch(distinct)
        if time.monotonic() - self._estimated_at >= _ESTIMATE_INTERVAL_S:
            self._reestimate()

    def _finish_restore(self) -> None:
        if self._restore_batch is not None:
            for table in self._tables.values():
                table.forget_absent()
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

    def _before_access(self) -> None:
        self._check_open()
        self._restored()

    def _stored_sample(self, name: str) -> Any:
        first = next(self._scan(self._db, self._table(name).prefix), None)
        return NOTHING if first is None else pickle.loads(first[1])

    def restore_entry(self, state_name: str, key: Any, value: Any) -> None:
        self._check_open()
        table = self._table(state_name)
        batch = self._restore_batch
        if batch is None:
            batch = self._restore_batch = self._new_batch()
        raw = dumps(value)
        batch.put(table.rocks_key(key), raw)
        self._restore_bytes += len(raw)
        if self._restore_bytes >= self._chunk_bytes or batch.len() >= _RESTORE_BATCH:
            self._finish_restore()

    def flush(self) -> int:
        """Write every changed cached entry (and pending restored ones) to RocksDB; bytes written."""
        self._check_open()
        self._finish_restore()
        batch = self._new_batch()
        written = sum(table.flush(batch) for table in self._tables.values())
        if written:
            self._db.write(batch)
        self._reestimate()
        return written

    def _reestimate(self) -> None:
        """Re-estimate the caches' size from a sample of each (cached writes and in-place changes of
        list and map values are not counted as they happen), and evict if it is over the budget."""
        self._estimated_at = time.monotonic()
        self._cached = sum(len(table.cache) for table in self._tables.values())
        self._cached_bytes = sum(table.estimated_bytes() for table in self._tables.values())
        if self._cached_bytes > self._cache_bytes:
            self._evict()

    def snapshot_entries(self) -> list[KeyedStateSnapshot]:
        """Write the cache back, take a local RocksDB checkpoint, and return lazy chunked scans of it.

        The scans run when the checkpoint writer iterates them (the asynchronous
        part); entries of states with ``cleanup_full_snapshot`` TTL leave out
        what had expired when this method ran. Resets incremental change tracking.
        """
        self.flush()
        os.makedirs(self._snapshot_root, exist_ok=True)
        path = os.path.join(self._snapshot_root, str(next(self._snapshots)))
        self._rocksdict.Checkpoint(self._db).create_checkpoint(path)
        snapshot = LocalSnapshot(path, self._open_read_only)
        now = self.clock_ms() if self._ttl else 0
        result = []
        for name, table in self._tables.items():
            table.reset_changes()
            if next(self._scan(self._db, table.prefix), None) is None:
                continue
            kind = self._kind_of(name)
            policy = self._ttl.get(name)
            result.append(KeyedStateSnapshot(
                name=name,
                kind=kind,
                entries=KeyedColumnChunks(
                    lambda s=snapshot, p=table.prefix, k=kind, pol=policy: self._chunks(s, p, k, pol, now)
                ),
            ))  # fmt: skip
        return result

    def _chunks(
        self, snapshot: LocalSnapshot, prefix: bytes, kind: StateKind, policy: TtlPolicy | None, now: int
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
        return self._track_changes and not self._ttl

    def snapshot_changes(self) -> list[KeyedStateChanges]:
        """Synchronous part of an incremental snapshot: upserted entries and deleted keys of every
        state changed since the previous snapshot (full or incremental).

        Nothing is written back: the values of changed keys still cached are taken
        from the cache (mutable ones deep-copied, so the task thread cannot change
        them afterwards), the others (written back when evicted) are read from
        RocksDB with one multi-get; a changed key with no entry is a delete.
        """
        if not self.tracks_changes:
            raise NotImplementedError(
                "snapshot_changes() on a RocksDB state backend that does not track changes "
                "(created without track_changes, or holding a state with time-to-live)"
            )
        self._check_open()
        self._finish_restore()
        max_parallelism = self.max_parallelism
        result = []
        for name, table in self._tables.items():
            changed, removed = table.take_changes()
            if not changed and not removed:
                continue
            keys, values, deleted = _current_entries(table, changed | removed)
            result.append(KeyedStateChanges(
                name=name,
                kind=self._kind_of(name),
                upserts=KeyedColumns(keys, values, lambda k=keys: key_groups_of(k, max_parallelism)),
                deletes=KeyedColumns(deleted, [None] * len(deleted), lambda d=deleted: key_groups_of(d, max_parallelism)),
            ))  # fmt: skip
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
        """Estimated heap bytes of the cached entries (see the module docstring; exact only right
        after :meth:`flush` of a cache of at most ``SIZE_SAMPLE`` entries per state)."""
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
