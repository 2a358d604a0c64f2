"""Full versus incremental checkpoints of 1M keys, measured in one run.

Two subtasks (parallelism 2) of a keyed count hold ``--keys`` keys between them
(int key -> int count in the heap backend). Every simulated second, ``--rates``
percent of the keys (random ones) are updated through the state handle, as the
keyed count does, then one checkpoint is taken with the engine's own code path:

* sync part: ``IncrementalKeyedSnapshots.snapshot`` (``snapshot_entries`` for a
  full checkpoint, ``snapshot_changes`` for an incremental one), on the task thread;
* async part: a :class:`checkpointing.SnapshotWriter` per subtask (key groups,
  pickling, Parquet);
* commit: :class:`checkpointing.CheckpointCommitter` (Delta transactions,
  completion row; for incremental checkpoints also the chain check), then
  retention with ``num-retained`` 1 (reference-counted for shared state).

The two subtasks run one after the other in this process, so a checkpoint's
duration here is the sum of both subtasks' sync and async parts (on a cluster
the subtasks run in parallel). The first checkpoint of every
configuration is the same full base and is not counted. Restore reads the last
checkpoint back for all key groups (``read_operator_state``, which resolves an
incremental chain), decodes it and puts every entry into fresh backends, as a
restoring task does.

"Checkpoint" is Flink's checkpoint duration (trigger to the last acknowledgement: both
subtasks' sync and async parts), in wall time and in CPU time of this process (which
includes the writer's Arrow threads and RocksDB's background threads; on a shared machine
the steadier of the two); the commit and retention that follow are printed apart.

Also measured: the per-record cost of change tracking, alone (a keyed count's
``value()`` + ``update()`` per record, with and without tracking) and in the
engine (the keyed count's throughput with full versus incremental checkpoints).

    python benchmarks/incremental_checkpoints.py [--keys 1000000] [--checkpoints 8] [--rates 1 10]
        [--engine-records 4000000] [--engine-rounds 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime

from quiet import QuietWatch

from checkpointing import (
    CheckpointCommitter,
    CheckpointRecord,
    SnapshotWriter,
    read_operator_state,
    retain,
    write_state_snapshots,
)
from flinklike_spark import ValueStateDescriptor
from flinklike_spark._runtime.state.incremental_snapshot import (
    IncrementalConfig,
    IncrementalKeyedSnapshots,
    KeyedSnapshot,
)
from flinklike_spark._runtime.state.key_groups import key_group_range
from flinklike_spark._runtime.state.keyed_state import HeapKeyedStateBackend, key_groups_of
from flinklike_spark._runtime.taskexecutor.restore import _entries

MAX_PARALLELISM = 128
PARALLELISM = 2
JOB = "bench"
UID = "count"


def make_backend(kind: str, *, track_changes: bool = False):
    """A ``hashmap`` or ``rocksdb`` keyed state backend (RocksDB always tracks its changes)."""
    if kind == "rocksdb":
        from flinklike_spark._runtime.state.rocksdb_state import RocksDBKeyedStateBackend

        return RocksDBKeyedStateBackend(max_parallelism=MAX_PARALLELISM)
    return HeapKeyedStateBackend(max_parallelism=MAX_PARALLELISM, track_changes=track_changes)


class Subtask:
    """One keyed-count subtask: its backend, its ``count`` handle, its snapshot strategy."""

    def __init__(self, keys: list[int], *, incremental: bool, backend: str = "hashmap") -> None:
        self.backend = make_backend(backend, track_changes=incremental)
        self.count = self.backend.get_state(ValueStateDescriptor("count"), ValueStateDescriptor)
        self.keys = keys
        self.snapshots = IncrementalKeyedSnapshots(self.backend, IncrementalConfig()) if incremental else None
        self.update(keys)

    def update(self, keys) -> None:
        backend, count = self.backend, self.count
        for key in keys:
            backend.current_key = key
            count.update((count.value() or 0) + 1)

    def snapshot(self, checkpoint_id: int):
        if self.snapshots is None:
            return KeyedSnapshot(entries=self.backend.snapshot_entries())
        return self.snapshots.snapshot(checkpoint_id)

    def write(self, base: str, checkpoint_id: int, subtask: int, snapshot):
        writer = SnapshotWriter(base, JOB, checkpoint_id, UID, subtask)
        write_state_snapshots(writer, [*snapshot.entries, *snapshot.changes])
        return writer.finish(chain=snapshot.chain)


def split_keys(num_keys: int) -> list[list[int]]:
    groups = key_groups_of(list(range(num_keys)), MAX_PARALLELISM)
    ranges = [key_group_range(MAX_PARALLELISM, PARALLELISM, s) for s in range(PARALLELISM)]
    return [[k for k, g in zip(range(num_keys), groups.tolist()) if g in r] for r in ranges]


def run(
    num_keys: int, checkpoints: int, rate_percent: float, *, incremental: bool, backend: str = "hashmap", seed: int = 7
) -> dict:
    """Median checkpoint duration and bytes, and the restore time, of one configuration."""
    rate = rate_percent / 100
    rng = random.Random(seed)
    shares = split_keys(num_keys)
    subtasks = [Subtask(keys, incremental=incremental, backend=backend) for keys in shares]
    durations, cpus, sizes, finalizes = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="bench-incr-") as base:
        committer = CheckpointCommitter(base)
        for checkpoint_id in range(1, checkpoints + 2):
            if checkpoint_id > 1:  # one second of input: rate * keys random keys change
                for subtask in subtasks:
                    subtask.update(rng.sample(subtask.keys, int(len(subtask.keys) * rate)))
            trigger = datetime.now(UTC)
            started, started_cpu = time.perf_counter(), time.process_time()
            handles = []
            for index, subtask in enumerate(subtasks):
                handles.append(subtask.write(base, checkpoint_id, index, subtask.snapshot(checkpoint_id)))
            elapsed = time.perf_counter() - started  # Flink's duration: trigger to the last acknowledgement
            cpu = time.process_time() - started_cpu
            started = time.perf_counter()
            committer.commit(JOB, checkpoint_id, handles, CheckpointRecord(trigger_time=trigger))
            retain(base, JOB, 1)
            finalize = time.perf_counter() - started
            for subtask in subtasks:
                if subtask.snapshots is not None:
                    subtask.snapshots.notify_complete(checkpoint_id)
            if checkpoint_id > 1:
                durations.append(elapsed)
                cpus.append(cpu)
                finalizes.append(finalize)
                sizes.append(sum(h.state_bytes for h in handles))
        started = time.perf_counter()
        restored = 0
        for subtask in range(PARALLELISM):
            fresh = make_backend(backend)
            key_groups = key_group_range(MAX_PARALLELISM, PARALLELISM, subtask)
            table = read_operator_state(base, JOB, checkpoint_id, UID, key_groups=key_groups)
            for entry in _entries(table):
                fresh.restore_entry(entry.state_name, entry.key, entry.value)
            restored += fresh.num_keys()
            fresh.close()
        restore = time.perf_counter() - started
        for subtask in subtasks:
            subtask.backend.close()
        if restored != num_keys:
            raise SystemExit(f"restored {restored} keys, expected {num_keys}")
    return {
        "duration": statistics.median(durations),
        "cpu": statistics.median(cpus),
        "bytes": statistics.median(sizes),
        "finalize": statistics.median(finalizes),
        "restore": restore,
    }


def per_record_cost(records: int, rounds: int = 9) -> tuple[float, float]:
    """CPU seconds per ``value()`` + ``update()`` of a keyed count over 100k keys (already in state),
    without and with change tracking: the best of ``rounds`` interleaved passes each (process
    time, which other processes on a shared machine disturb less than wall time)."""
    keys = [i % 100_000 for i in range(records)]
    backends = []
    for track in (False, True):
        backend = HeapKeyedStateBackend(max_parallelism=MAX_PARALLELISM, track_changes=track)
        count = backend.get_state(ValueStateDescriptor("count"), ValueStateDescriptor)
        backends.append((backend, count))
    best = [float("inf"), float("inf")]
    for _ in range(rounds):
        for index, (backend, count) in enumerate(backends):
            backend.snapshot_entries()  # empties the change set, as every checkpoint does
            started = time.process_time()
            for key in keys:
                backend.current_key = key
                count.update((count.value() or 0) + 1)
            best[index] = min(best[index], time.process_time() - started)
    return best[0] / records, best[1] / records


def engine_throughput(records: int, rounds: int) -> tuple[float, float]:
    """Median records/s of the engine's per-record keyed count (1,000 keys, 2 TaskExecutors,
    checkpoints every second) with full and with incremental checkpoints, runs alternating:
    the whole per-record path, where change tracking adds one ``set.add`` per state write."""
    from throughput import keyed_count, measure

    full, incremental = [], []
    for _ in range(rounds):
        for results, on in ((full, False), (incremental, True)):
            with tempfile.TemporaryDirectory(prefix="bench-incr-engine-") as directory:
                extra = {
                    "execution.checkpointing.interval": "1s",
                    "execution.checkpointing.dir": directory,
                    "execution.checkpointing.incremental": on,
                }
                results.append(measure(keyed_count, records, 2, extra))
    return statistics.median(full), statistics.median(incremental)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--checkpoints", type=int, default=8, help="checkpoints measured per configuration")
    parser.add_argument(
        "--rates", type=float, nargs="+", default=[1.0, 10.0], help="percent of keys changed per second"
    )
    parser.add_argument(
        "--engine-records", type=int, default=4_000_000, help="records of the engine keyed-count runs (0: skip them)"
    )
    parser.add_argument("--engine-rounds", type=int, default=3)
    parser.add_argument("--backends", nargs="+", default=["hashmap", "rocksdb"], choices=["hashmap", "rocksdb"])
    args = parser.parse_args()
    print(f"machine: {platform.machine()} cores={os.cpu_count()} python={platform.python_version()} "
          f"load={os.getloadavg()[0]:.1f}; {args.keys:,} keys, parallelism {PARALLELISM}, "
          f"{args.checkpoints} checkpoints per configuration (medians)", flush=True)  # fmt: skip
    incremental_at_10: dict[str, dict] = {}
    with QuietWatch() as quiet:
        for backend, rate in [(b, r) for b in args.backends for r in args.rates]:
            full = run(args.keys, args.checkpoints, rate, incremental=False, backend=backend)
            incr = run(args.keys, args.checkpoints, rate, incremental=True, backend=backend)
            for label, r in (("full", full), ("incremental", incr)):
                print(f"  {backend}, {rate:g}% keys changed/s, {label:11}: checkpoint {r['duration'] * 1000:8.1f} ms "
                      f"(CPU {r['cpu'] * 1000:.1f} ms), "
                      f"{r['bytes'] / 2**20:7.2f} MiB written; then commit + retention {r['finalize'] * 1000:.0f} ms; "
                      f"restore {r['restore']:.2f} s", flush=True)  # fmt: skip
            print(f"{backend}, {rate:g}% changed/s: incremental {full['duration'] / incr['duration']:.1f}x faster, "
                  f"{full['bytes'] / incr['bytes']:.1f}x smaller than full; restore "
                  f"{incr['restore'] / full['restore']:.2f}x the full restore time "
                  f"(target at 1%: >= 10x faster and >= 10x smaller)", flush=True)  # fmt: skip
            if rate == 10:
                incremental_at_10[backend] = incr
        for backend, r in incremental_at_10.items():
            quiet.target(f"{backend}: incremental checkpoint of {args.keys:,} keys at 10% changed/s, "
                         f"{r['duration'] * 1000:.0f} ms wall ({r['cpu'] * 1000:.0f} ms CPU; target <= 200 ms)",
                         r["duration"] <= 0.2)  # fmt: skip
    quiet.report()
    off, on = per_record_cost(1_000_000)
    print(
        f"per-record value()+update(): {off * 1e9:.0f} ns untracked, {on * 1e9:.0f} ns tracked "
        f"(+{(on / off - 1) * 100:.1f}%)",
        flush=True,
    )
    if args.engine_records:
        full, incremental = engine_throughput(args.engine_records, args.engine_rounds)
        print(
            f"engine keyed count, checkpoints every 1 s: {full:,.0f} rec/s with full checkpoints, "
            f"{incremental:,.0f} rec/s with incremental ones ({(incremental / full - 1) * 100:+.1f}%, "
            f"medians of {args.engine_rounds} alternating runs)"
        )


if __name__ == "__main__":
    main()
