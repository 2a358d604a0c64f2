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
  (RocksDB: mostly cache misses with a 64 MB budget).

The commit (Delta log) is done but not timed. Ratios (rocksdb / hashmap) are of this run.

    python benchmarks/state_backends.py [--keys 1000000] [--value-bytes 16] [--budget-mb 64]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from datetime import UTC, datetime

from checkpointing import CheckpointCommitter, CheckpointRecord, SnapshotWriter, iter_keyed_state, write_state_snapshots
from flinklike_spark import ValueStateDescriptor
from flinklike_spark._runtime.streaming.keyed_state import HeapKeyedStateBackend
from flinklike_spark._runtime.streaming.rocksdb_state import RocksDBKeyedStateBackend
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


def run(kind: str, keys: int, value_bytes: int, budget: int, reads: int) -> dict[str, float]:
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

        order = random.Random(1).sample(range(keys), min(reads, keys))
        start = time.perf_counter()
        for key in order:
            restored.current_key = key
            assert state.value() is not None
        results["read"] = (time.perf_counter() - start) / len(order)
        restored.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=16)
    parser.add_argument("--budget-mb", type=int, default=64, help="state.backend.rocksdb.memory.fixed-per-slot")
    parser.add_argument("--reads", type=int, default=100_000, help="random reads after the restore")
    args = parser.parse_args()
    runs = {
        kind: run(kind, args.keys, args.value_bytes, args.budget_mb << 20, args.reads) for kind in ("hashmap", "rocksdb")
    }
    print(f"{args.keys:,} keys, {args.value_bytes} B values, rocksdb budget {args.budget_mb} MiB")
    print(f"{'':8} {'fill':>8} {'sync':>8} {'async':>8} {'ckpt':>8} {'MiB':>7} {'restore':>8} {'us/read':>8}")
    for kind, r in runs.items():
        print(
            f"{kind:8} {r['fill']:7.2f}s {r['sync']:7.3f}s {r['async']:7.2f}s {r['sync'] + r['async']:7.2f}s "
            f"{r['bytes'] / 2**20:7.1f} {r['restore']:7.2f}s {r['read'] * 1e6:8.2f}"
        )
    heap, rocks = runs["hashmap"], runs["rocksdb"]
    print(
        "rocksdb/hashmap: "
        + ", ".join(
            f"{name} {rocks[name] / heap[name]:.2f}x" for name in ("fill", "sync", "async", "bytes", "restore", "read")
        )
    )


if __name__ == "__main__":
    main()
