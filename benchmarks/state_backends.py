"""Heap (``hashmap``) against RocksDB (``rocksdb``) keyed state backend: fill, checkpoint, restore.

For each backend, in one process (no cluster), with ``--keys`` entries (int key ->
``--value-bytes`` bytes value; the keyed count's shape with a payload):

* fill: one ``ValueState.update`` per key, as a keyed function does;
* sync: ``snapshot_entries()`` on the task thread (heap: copies the tables;
  RocksDB: writes the cache back and takes a local checkpoint by hard links);
* async: writing the snapshot with a :class:`checkpointing.SnapshotWriter`
  (Parquet files of the Delta ``operator_state`` table), as the I/O pool does;
* bytes: the Parquet bytes that checkpoint wrote;
* restore: reading the committed checkpoint file by file (as a restoring task
  does), putting every entry into a fresh backend of the same type, and one
  state read (which makes RocksDB write its last restore batch);
* read: ``ValueState.value()`` of ``--reads`` random keys after the restore, per read
  (RocksDB: cache misses, the cache starts empty), one key at a time;
* batched read: the same for other random keys in batches of ``--batch`` keys,
  each batch first handed to ``prefetch`` as a keyed operator does per input batch
  (RocksDB: one multi-get per batch);
* in cache: ``value()`` + ``update()`` of ``--hot-keys`` keys that are in the cache
  (RocksDB: its in-memory write-back cache), cycled ``--hot-rounds`` times, per access
  (one ``value()`` or one ``update()``);

Per-access costs are printed as CPU time of this process (``time.process_time``,
which includes RocksDB's background threads) and wall time: on a shared machine
the CPU time is the steadier one. The commit (Delta log) is done but not timed.
Ratios (rocksdb / hashmap) are of this run; the targets of issue 31 are printed beside them.

    python benchmarks/state_backends.py [--keys 1000000] [--value-bytes 16] [--budget-mb 64]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import tempfile
import time
from datetime import UTC, datetime

from checkpointing import CheckpointCommitter, CheckpointRecord, SnapshotWriter, iter_keyed_state, write_state_snapshots
from flinklike_spark import ValueStateDescriptor
from flinklike_spark._runtime.state.keyed_state import HeapKeyedStateBackend
from flinklike_spark._runtime.state.rocksdb_state import RocksDBKeyedStateBackend
from flinklike_spark._runtime.taskexecutor.restore import _entries
from flinklike_spark.config import RocksDBOptions

MAX_PARALLELISM = 128
DESCRIPTOR = ValueStateDescriptor("value")


def make(kind: str, local_dir: str, budget: int):
    if kind == "hashmap":
        return HeapKeyedStateBackend(max_parallelism=MAX_PARALLELISM)
    return RocksDBKeyedStateBackend(
        max_parallelism=MAX_PARALLELISM, options=RocksDBOptions(local_dir=local_dir, memory_per_slot=budget)
    )


class Clocks:
    """Wall and CPU seconds of one measured stretch (``with Clocks() as c: ...``)."""

    def __enter__(self) -> Clocks:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall, self.cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu


def hot_access(backend, state, keys: int, rounds: int) -> tuple[float, float]:
    """(CPU, wall) seconds per access of ``value()`` + ``update()`` on ``keys`` cached keys, best of 3."""
    order = list(range(keys))
    for key in order:  # written once: in the cache from here on
        backend.current_key = key
        state.update(0)
    best_cpu = best_wall = float("inf")
    for _ in range(3):
        with Clocks() as clocks:
            for _ in range(rounds):
                for key in order:
                    backend.current_key = key
                    state.update(state.value() + 1)
        best_cpu, best_wall = min(best_cpu, clocks.cpu), min(best_wall, clocks.wall)
    accesses = 2 * keys * rounds
    return best_cpu / accesses, best_wall / accesses


def cold_reads(backend, state, keys: list[int], batch: int | None) -> tuple[float, float]:
    """(CPU, wall) seconds per ``value()`` of ``keys``, with ``prefetch`` per ``batch`` keys if given."""
    step = batch or len(keys)
    with Clocks() as clocks:
        for start in range(0, len(keys), step):
            chunk = keys[start : start + step]
            if batch:
                backend.prefetch(chunk)
            for key in chunk:
                backend.current_key = key
                if state.value() is None:
                    raise SystemExit(f"key {key} lost")
    return clocks.cpu / len(keys), clocks.wall / len(keys)


def run(
    kind: str, keys: int, value_bytes: int, budget: int, reads: int, batch: int, hot_keys: int, hot_rounds: int
) -> dict[str, float]:
    results: dict[str, float] = {}
    payload = b"x" * value_bytes
    with tempfile.TemporaryDirectory() as base, tempfile.TemporaryDirectory() as local_dir:
        backend = make(kind, local_dir, budget)
        state = backend.get_state(DESCRIPTOR, ValueStateDescriptor)
        start = time.perf_counter()
        for key in range(keys):
            backend.current_key = key
            state.update(payload)
        results["fill"] = time.perf_counter() - start

        start = time.perf_counter()
        entries = backend.snapshot_entries()
        results["sync"] = time.perf_counter() - start
        start = time.perf_counter()
        writer = SnapshotWriter(base, "bench", 1, "op", 0)
        write_state_snapshots(writer, entries)
        handle = writer.finish()
        results["async"] = time.perf_counter() - start
        results["bytes"] = handle.state_bytes
        del entries
        backend.close()
        CheckpointCommitter(base).commit("bench", 1, [handle], CheckpointRecord(trigger_time=datetime.now(UTC)))

        start = time.perf_counter()
        restored = make(kind, local_dir, budget)
        for table in iter_keyed_state(base, "bench", 1, "op", key_groups=range(MAX_PARALLELISM)):
            for entry in _entries(table):
                restored.restore_entry(entry.state_name, entry.key, entry.value)
        state = restored.get_state(DESCRIPTOR, ValueStateDescriptor)
        results["restore"] = time.perf_counter() - start

        order = random.Random(1).sample(range(keys), min(2 * reads, keys))
        results["read_cpu"], results["read"] = cold_reads(restored, state, order[: len(order) // 2], None)
        results["batch_cpu"], results["batch"] = cold_reads(restored, state, order[len(order) // 2 :], batch)
        restored.close()
        backend = make(kind, local_dir, budget)
        state = backend.get_state(DESCRIPTOR, ValueStateDescriptor)
        results["hot_cpu"], results["hot"] = hot_access(backend, state, hot_keys, hot_rounds)
        backend.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=16)
    parser.add_argument("--budget-mb", type=int, default=64, help="state.backend.rocksdb.memory.fixed-per-slot")
    parser.add_argument("--reads", type=int, default=100_000, help="random reads after the restore (each way)")
    parser.add_argument("--batch", type=int, default=1_000, help="keys per prefetched batch of the batched reads")
    parser.add_argument("--hot-keys", type=int, default=10_000, help="cached keys of the in-cache accesses")
    parser.add_argument("--hot-rounds", type=int, default=20, help="passes over them per measurement")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    runs = {
        kind: run(kind, args.keys, args.value_bytes, args.budget_mb << 20, args.reads, args.batch,
                  args.hot_keys, args.hot_rounds)
        for kind in ("hashmap", "rocksdb")
    }  # fmt: skip
    print(f"machine: {platform.machine()} cores={os.cpu_count()} python={platform.python_version()} "
          f"load {load:.1f} -> {os.getloadavg()[0]:.1f}; {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")  # fmt: skip
    print(f"{args.keys:,} keys, {args.value_bytes} B values, rocksdb budget {args.budget_mb} MiB")
    print(f"{'':8} {'fill':>8} {'sync':>8} {'async':>8} {'ckpt':>8} {'MiB':>7} {'restore':>8}")
    for kind, r in runs.items():
        print(
            f"{kind:8} {r['fill']:7.2f}s {r['sync']:7.3f}s {r['async']:7.2f}s {r['sync'] + r['async']:7.2f}s "
            f"{r['bytes'] / 2**20:7.1f} {r['restore']:7.2f}s"
        )
    heap, rocks = runs["hashmap"], runs["rocksdb"]
    print(
        "rocksdb/hashmap: "
        + ", ".join(f"{name} {rocks[name] / heap[name]:.2f}x" for name in ("fill", "sync", "async", "bytes", "restore"))
    )
    print("per access, CPU / wall (us):")
    rows = (
        ("in cache: value()+update(), per access", "hot", "target: rocksdb <= 3x hashmap"),
        ("not in cache: value(), one key at a time", "read", "target: rocksdb <= 10 us"),
        (f"not in cache: value(), prefetched per {args.batch} keys", "batch", "target: rocksdb <= 10 us"),
    )
    for label, name, target in rows:
        print(f"  {label:48} hashmap {heap[name + '_cpu'] * 1e6:6.2f} / {heap[name] * 1e6:6.2f}   "
              f"rocksdb {rocks[name + '_cpu'] * 1e6:6.2f} / {rocks[name] * 1e6:6.2f}   "
              f"ratio {rocks[name + '_cpu'] / heap[name + '_cpu']:5.2f}x / {rocks[name] / heap[name]:5.2f}x   "
              f"({target})")  # fmt: skip
    print(f"  fill: one update() of a new key            hashmap {heap['fill'] / args.keys * 1e6:6.2f} (wall)   "
          f"rocksdb {rocks['fill'] / args.keys * 1e6:6.2f} (wall)")  # fmt: skip


if __name__ == "__main__":
    main()
