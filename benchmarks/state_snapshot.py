"""Cost of one full keyed-state snapshot and its restore, in one process (no cluster).

Fills a heap keyed state backend with ``--keys`` small entries (int key -> int
count, the keyed count's state) and measures the three parts of a full
checkpoint of one subtask:

* sync: ``backend.snapshot_entries()`` on the task thread (the task is blocked);
* async: writing those entries with a :class:`checkpointing.SnapshotWriter`
  (key groups, pickling, Parquet), as the TaskExecutor's I/O pool does;
* restore: reading the committed checkpoint back for all key groups
  (``read_operator_state``), decoding it as a restoring task does, and putting
  every entry back into a fresh backend.

The commit (Delta log) is done but not timed: it does not depend on the state size.

    python benchmarks/state_snapshot.py [--keys 1000000] [--profile sync|async|restore]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
import time
from datetime import UTC, datetime

from checkpointing import (
    CheckpointCommitter,
    CheckpointRecord,
    SnapshotWriter,
    read_operator_state,
    write_state_snapshots,
)
from flinklike_spark import ValueStateDescriptor
from flinklike_spark._runtime.state.keyed_state import HeapKeyedStateBackend
from flinklike_spark._runtime.taskexecutor.restore import _entries

MAX_PARALLELISM = 128


def run(keys: int, profile: str | None) -> dict[str, float]:
    backend = HeapKeyedStateBackend(max_parallelism=MAX_PARALLELISM)
    count = backend.get_state(ValueStateDescriptor("count"), ValueStateDescriptor)
    for key in range(keys):
        backend.current_key = key
        count.update(key % 1000 + 1)
    results = {}
    profiler = cProfile.Profile()

    def timed(name, fn):
        if profile == name:
            profiler.enable()
        start = time.perf_counter()
        value = fn()
        results[name] = time.perf_counter() - start
        if profile == name:
            profiler.disable()
        return value

    with tempfile.TemporaryDirectory() as base:
        entries = timed("sync", backend.snapshot_entries)

        def write():
            writer = SnapshotWriter(base, "bench", 1, "op", 0)
            write_state_snapshots(writer, entries)
            return writer.finish()

        handle = timed("async", write)
        now = datetime.now(UTC)
        CheckpointCommitter(base).commit("bench", 1, [handle], CheckpointRecord(trigger_time=now))
        results["bytes"] = handle.state_bytes

        def restore():
            fresh = HeapKeyedStateBackend(max_parallelism=MAX_PARALLELISM)
            table = read_operator_state(base, "bench", 1, "op", key_groups=range(MAX_PARALLELISM))
            for entry in _entries(table):
                fresh.restore_entry(entry.state_name, entry.key, entry.value)
            return fresh

        restored = timed("restore", restore)
        assert restored.num_keys() == keys, (restored.num_keys(), keys)
    if profile:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--profile", choices=("sync", "async", "restore"), default=None)
    args = parser.parse_args()
    results = run(args.keys, args.profile)
    print(
        f"{args.keys:,} keys: sync {results['sync']:.3f} s, async {results['async']:.3f} s, "
        f"restore {results['restore']:.3f} s, {results['bytes'] / 2**20:.1f} MiB"
    )


if __name__ == "__main__":
    main()
