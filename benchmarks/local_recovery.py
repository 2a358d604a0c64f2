"""Task-local recovery against a Delta restore: one subtask's keyed state (a keyed count).

A heap-backend keyed count of ``--keys`` keys (int key, int count) is
snapshotted once: written to a Delta checkpoint (``operator_state``) and kept
as the TaskExecutor's local copy (:mod:`flinklike_spark._runtime.taskexecutor.local_state`).
Then the restore of that subtask is timed both ways, in phases (plus the Delta decode
with the cyclic GC left on, "decode, GC on", against which ``serialization.paused_gc`` is measured):

* Delta: the Delta log and Parquet read (``iter_keyed_state``), decoding the
  pickled key/value cells into entries, putting them into a new backend;
* local: loading the local copy (one pickle) into entries, putting them back.

The issue's scenario (1M keys at parallelism 2) restores 500k keys per subtask,
the default. Median of ``--repeats``.

    python benchmarks/local_recovery.py [--keys N] [--repeats N]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime

from checkpointing import CheckpointCommitter, CheckpointRecord, SnapshotWriter, iter_keyed_state, write_state_snapshots
from flinklike_spark import ValueStateDescriptor
from flinklike_spark._runtime import serialization
from flinklike_spark._runtime.operators.stream_operator import OperatorSnapshot
from flinklike_spark._runtime.state.keyed_state import HeapKeyedStateBackend
from flinklike_spark._runtime.taskexecutor.local_state import TaskLocalStateStore
from flinklike_spark._runtime.taskexecutor.restore import _entries

MAX_PARALLELISM = 128


@contextlib.contextmanager
def gc_pause_off() -> Iterator[None]:
    """The decode as it was before ``serialization.paused_gc``: the pause made a no-op (the A/B line)."""
    original = serialization.paused_gc
    serialization.paused_gc = contextlib.nullcontext
    try:
        yield
    finally:
        serialization.paused_gc = original


DESCRIPTOR = ValueStateDescriptor("count")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=500_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    times: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as base, tempfile.TemporaryDirectory() as local_root:
        backend = HeapKeyedStateBackend(max_parallelism=MAX_PARALLELISM)
        state = backend.get_state(DESCRIPTOR, ValueStateDescriptor)
        for key in range(args.keys):
            backend.current_key = key
            state.update(key % 1000)
        parts = backend.snapshot_entries()
        start = time.perf_counter()
        writer = SnapshotWriter(base, "bench", 1, "count", 0)
        write_state_snapshots(writer, parts)
        handle = writer.finish()
        delta_write = time.perf_counter() - start
        CheckpointCommitter(base).commit("bench", 1, [handle], CheckpointRecord(trigger_time=datetime.now(UTC)))
        subtask = TaskLocalStateStore(local_root).for_subtask("bench", "count", 0)
        start = time.perf_counter()
        subtask.store(1, [("count", OperatorSnapshot(keyed=list(parts)))])
        local_write = time.perf_counter() - start

        def put_back(entries) -> None:
            restored = HeapKeyedStateBackend(max_parallelism=MAX_PARALLELISM)
            for entry in entries:
                restored.restore_entry(entry.state_name, entry.key, entry.value)

        for _ in range(args.repeats):
            t0 = time.perf_counter()
            tables = list(iter_keyed_state(base, "bench", 1, "count", key_groups=range(MAX_PARALLELISM)))
            t1 = time.perf_counter()
            entries = [e for table in tables for e in _entries(table)]
            t2 = time.perf_counter()
            put_back(entries)
            t3 = time.perf_counter()
            local = subtask.load(1)["count"]
            t4 = time.perf_counter()
            put_back(local)
            t5 = time.perf_counter()
            with gc_pause_off():
                unpaused = [e for table in tables for e in _entries(table)]
            t6 = time.perf_counter()
            assert len(local) == len(entries) == len(unpaused) == args.keys
            del unpaused
            for name, value in (("delta read", t1 - t0), ("delta decode", t2 - t1), ("delta put back", t3 - t2),
                                ("local load", t4 - t3), ("local put back", t5 - t4),
                                ("decode, GC on", t6 - t5)):  # fmt: skip
                times.setdefault(name, []).append(value)
    median = {name: statistics.median(values) for name, values in times.items()}
    print(f"machine: {platform.machine()} cores={os.cpu_count()} python={platform.python_version()} "
          f"load {load:.1f} -> {os.getloadavg()[0]:.1f}; {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")  # fmt: skip
    print(
        f"{args.keys:,} keys of one subtask; snapshot write: Delta {delta_write:.3f} s, local copy {local_write:.3f} s"
    )
    for name, value in median.items():
        print(f"  {name:16} {value:7.3f} s")
    delta = median["delta read"] + median["delta decode"] + median["delta put back"]
    local = median["local load"] + median["local put back"]
    print(f"  restore: Delta {delta:.3f} s, local {local:.3f} s ({delta / local:.1f}x)")


if __name__ == "__main__":
    main()
