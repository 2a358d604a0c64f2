"""The RocksDB backend's batching never loses a write: per-batch prefetch, the cache written back
only on eviction and full snapshots, incremental snapshots read from the cache, and what a prefetch
found absent, against a checkpoint, a TTL expiry, a timer firing and a restore.

Each scenario runs a keyed process operator on the real RocksDB backend (a 1 mb budget, so
that a few thousand keys evict within one input batch) and on the heap backend, and checks
every key's results analytically and against the heap run: nothing lost, nothing duplicated.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

pytest.importorskip("rocksdict")

from checkpointing import (  # noqa: E402
    CheckpointCommitter,
    CheckpointRecord,
    SnapshotWriter,
    read_operator_state,
    write_state_snapshots,
)
from flinklike_spark import KeyedProcessFunction, Time  # noqa: E402
from flinklike_spark._runtime.operators.operator_registry import create_operator  # noqa: E402
from flinklike_spark._runtime.operators.operator_spec import OperatorSpec  # noqa: E402
from flinklike_spark._runtime.operators.stream_operator import OperatorContext, RestoredState  # noqa: E402
from flinklike_spark._runtime.state.incremental_snapshot import IncrementalConfig  # noqa: E402
from flinklike_spark._runtime.state.keyed_state import HeapKeyedStateBackend  # noqa: E402
from flinklike_spark._runtime.state.rocksdb_state import RocksDBKeyedStateBackend  # noqa: E402
from flinklike_spark._runtime.taskexecutor.restore import _entries  # noqa: E402
from flinklike_spark.config import RocksDBOptions, StateBackendType  # noqa: E402
from flinklike_spark.datastream.state import ReducingStateDescriptor, StateTtlConfig, ValueStateDescriptor  # noqa: E402
from tests.support.clocks import ManualClock  # noqa: E402
from tests.support.outputs import ListOutput  # noqa: E402

MAX_PARALLELISM = 128
BACKENDS = [StateBackendType.HASHMAP, StateBackendType.ROCKSDB]
#: More keys than a 1 mb cache holds (about 2,000 entries): every batch below evicts.
KEYS = 5_000
TTL_MS = 10_000


class Counting(KeyedProcessFunction):
    """Per key: a count and a sum of ``x``; ``recent`` is the last ``x`` (with ``ttl``: it expires
    ``TTL_MS`` after its write; a state with TTL makes every snapshot full); a record with a
    ``timer`` field registers an event-time timer, which adds 1000 to the count when it fires."""

    def __init__(self, *, ttl: bool) -> None:
        self.ttl = ttl

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))
        self.total = runtime_context.get_reducing_state(ReducingStateDescriptor("total", lambda a, b: a + b))
        self.fired = runtime_context.get_state(ValueStateDescriptor("fired"))
        recent = ValueStateDescriptor("recent")
        if self.ttl:
            recent.enable_time_to_live(StateTtlConfig.new_builder(Time.milliseconds(TTL_MS)).build())
        self.recent = runtime_context.get_state(recent)

    def process_element(self, value, ctx):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        self.total.add(value["x"])
        previous = self.recent.value()
        self.recent.update(value["x"])
        if "timer" in value:
            ctx.timer_service().register_event_time_timer(value["timer"])
        yield {"k": ctx.get_current_key(), "count": count, "total": self.total.get(), "previous": previous}

    def on_timer(self, timestamp, ctx):
        self.count.update(self.count.value() + 1000)
        self.fired.update((self.fired.value() or 0) + 1)
        yield {"k": ctx.get_current_key(), "count": self.count.value(), "fired": self.fired.value()}


class Job:
    """One keyed process operator subtask, checkpointed into ``base`` and restorable from it."""

    def __init__(
        self, backend: StateBackendType, base: str, local_dir: str, clock: ManualClock, *, incremental: bool, ttl: bool
    ) -> None:
        self.backend_type, self.base, self.local_dir, self.clock, self.ttl = backend, base, local_dir, clock, ttl
        self.incremental = IncrementalConfig() if incremental else None
        self.outputs: list = []
        self._start(None)

    def _start(self, restored: RestoredState | None) -> None:
        self.op = create_operator(OperatorSpec(uid="count", name="count", kind="keyed_process", function=Counting(ttl=self.ttl),
                                               key_field="k"))  # fmt: skip
        self.out = ListOutput()
        context = OperatorContext(
            task_name="t", subtask_index=0, parallelism=1, max_parallelism=MAX_PARALLELISM, attempt_number=0,
            clock_ms=self.clock, state_backend_type=self.backend_type, incremental=self.incremental,
            rocksdb=RocksDBOptions(local_dir=self.local_dir, memory_per_slot=1 << 20),
        )  # fmt: skip
        self.op.setup(context, self.out)
        self.op.initialize_state(restored)
        self.op.open()

    def rows(self, rows: list[dict], timestamp: int = 0) -> None:
        self.op.process_rows(rows, [timestamp] * len(rows))
        self._collect()

    def watermark(self, timestamp: int) -> None:
        self.op.process_watermark(timestamp)
        self._collect()

    def _collect(self) -> None:
        self.outputs.extend(self.out.rows)
        self.out.rows.clear()

    def checkpoint(self, checkpoint_id: int) -> tuple[int, ...] | None:
        snapshot = self.op.snapshot_state(checkpoint_id)
        writer = SnapshotWriter(self.base, "job", checkpoint_id, "count", 0)
        write_state_snapshots(writer, [*snapshot.keyed, *snapshot.keyed_changes, *snapshot.operator])
        handle = writer.finish(chain=snapshot.chain)
        record = CheckpointRecord(trigger_time=datetime.now(UTC), parallelism={"count": 1})
        CheckpointCommitter(self.base).commit("job", checkpoint_id, [handle], record)
        if self.op.incremental is not None:
            self.op.incremental.notify_complete(checkpoint_id)
        return snapshot.chain

    def restore(self, checkpoint_id: int) -> None:
        """The operator fails (what it did since ``checkpoint_id`` is lost) and restarts from it."""
        self.op.close()
        table = read_operator_state(self.base, "job", checkpoint_id, "count", key_groups=range(MAX_PARALLELISM))
        self._start(RestoredState(checkpoint_id=checkpoint_id, keyed=tuple(_entries(table))))

    def state(self, name: str) -> dict:
        backend = self.op.backend
        state = backend._handles[name]
        result = {}
        for key in sorted(backend.keys_of(name)):
            backend.current_key = key
            result[key] = state.value() if hasattr(state, "value") else state.get()
        return result

    def close(self) -> None:
        self.op.close()


def _batch(keys, x: int, **extra) -> list[dict]:
    return [{"k": key, "x": x, **extra} for key in keys]


@pytest.fixture
def jobs(tmp_path):
    created = []

    def make(
        backend: StateBackendType, *, incremental: bool = False, ttl: bool = False, clock: ManualClock | None = None
    ) -> Job:
        name = f"{backend.value}-{len(created)}"
        job = Job(backend, str(tmp_path / name / "cp"), str(tmp_path / name / "local"),
                  clock or ManualClock(1_000_000), incremental=incremental, ttl=ttl)  # fmt: skip
        created.append(job)
        return job

    yield make
    for job in created:
        job.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("incremental", [False, True], ids=["full", "incremental"])
def test_every_write_reaches_the_checkpoint_and_the_restore_discards_only_later_ones(jobs, incremental):
    results = {}
    for backend in BACKENDS:
        job = jobs(backend, incremental=incremental)
        job.rows(_batch(range(KEYS), 1))
        assert job.checkpoint(1) is None  # the first checkpoint is a full base
        job.rows(_batch(range(0, KEYS, 2), 10))  # every second key again: half the state changes
        assert job.checkpoint(2) == ((1, 2) if incremental else None)  # incremental: the changes only
        job.rows(_batch(range(KEYS), 100))  # lost with the failure below
        job.restore(2)
        assert job.state("count") == {k: 2 if k % 2 == 0 else 1 for k in range(KEYS)}
        assert job.state("total") == {k: 11 if k % 2 == 0 else 1 for k in range(KEYS)}
        job.outputs.clear()
        job.rows(_batch(range(KEYS), 100))  # replayed after the restore
        assert [row["count"] for row in job.outputs] == [3 if k % 2 == 0 else 2 for k in range(KEYS)]
        assert [row["total"] for row in job.outputs] == [111 if k % 2 == 0 else 101 for k in range(KEYS)]
        results[backend] = (job.outputs, job.state("count"), job.state("total"))
    assert results[StateBackendType.ROCKSDB] == results[StateBackendType.HASHMAP]


@pytest.mark.timeout(120)
def test_a_key_written_evicted_and_read_again_in_one_batch_is_found_though_prefetch_saw_it_absent(jobs):
    job = jobs(StateBackendType.ROCKSDB, incremental=True)
    backend = job.op.backend
    assert isinstance(backend, RocksDBKeyedStateBackend)
    # key -1 is new (the prefetch finds it absent), then 4,000 new keys evict it, then it comes again.
    job.rows([{"k": -1, "x": 1}, *_batch(range(4_000), 1), {"k": -1, "x": 2}])
    assert backend.cached_entries() < 4_000  # it did evict within the batch
    assert job.outputs[-1] == {"k": -1, "count": 2, "total": 3, "previous": 1}
    job.checkpoint(1)
    job.rows([{"k": -1, "x": 4}, *_batch(range(4_000, 8_000), 1), {"k": -1, "x": 8}])
    job.checkpoint(2)  # incremental: key -1 was evicted, so its value comes from RocksDB
    job.restore(2)
    job.outputs.clear()
    job.rows([{"k": -1, "x": 16}])
    assert job.outputs == [{"k": -1, "count": 5, "total": 31, "previous": 8}]


@pytest.mark.timeout(120)
def test_timers_fire_on_evicted_keys_and_their_writes_survive_a_checkpoint_and_restore(jobs):
    results = {}
    for backend in BACKENDS:
        job = jobs(backend, incremental=True)
        job.rows(_batch(range(KEYS), 1, timer=500), timestamp=100)
        job.checkpoint(1)
        job.watermark(1_000)  # fires one timer per key, in timestamp-then-key order, most keys uncached
        fired = [row for row in job.outputs if "fired" in row]
        assert sorted(row["k"] for row in fired) == list(range(KEYS))
        assert all(row == {"k": row["k"], "count": 1001, "fired": 1} for row in fired)
        job.checkpoint(2)
        job.rows(_batch(range(KEYS), 1), timestamp=2_000)  # lost with the failure below
        job.restore(2)
        assert job.state("count") == dict.fromkeys(range(KEYS), 1001)
        assert job.state("fired") == dict.fromkeys(range(KEYS), 1)
        job.outputs.clear()
        job.watermark(3_000)  # the timers fired before the checkpoint do not fire again
        job.rows(_batch(range(KEYS), 1), timestamp=3_000)
        assert [row["count"] for row in job.outputs] == [1002] * KEYS
        results[backend] = job.outputs
    assert results[StateBackendType.ROCKSDB] == results[StateBackendType.HASHMAP]


@pytest.mark.timeout(120)
def test_an_entry_expired_in_the_cache_is_removed_and_its_rewrite_survives_eviction_and_restore(jobs):
    results = {}
    for backend in BACKENDS:
        clock = ManualClock(1_000_000)
        job = jobs(backend, clock=clock, ttl=True)
        job.rows(_batch(range(KEYS), 1))
        clock.advance(TTL_MS + 1)  # every "recent" entry has expired
        job.rows(_batch(range(KEYS), 2))  # each read drops the expired entry, then writes a new one
        assert [row["previous"] for row in job.outputs[KEYS:]] == [None] * KEYS
        job.checkpoint(1)  # TTL state: a full snapshot, with the rewritten entries
        clock.advance(TTL_MS // 2)  # the rewritten entries are still alive after the restore
        job.restore(1)
        assert job.state("recent") == dict.fromkeys(range(KEYS), 2)
        job.outputs.clear()
        job.rows(_batch(range(KEYS), 3))
        assert [row["previous"] for row in job.outputs] == [2] * KEYS
        assert [row["count"] for row in job.outputs] == [3] * KEYS
        results[backend] = job.outputs
    assert results[StateBackendType.ROCKSDB] == results[StateBackendType.HASHMAP]


@pytest.mark.timeout(120)
def test_restored_entries_are_found_by_the_first_prefetch_and_not_taken_for_absent(jobs):
    source = jobs(StateBackendType.HASHMAP)
    source.rows(_batch(range(KEYS), 7))
    source.checkpoint(1)
    target = jobs(StateBackendType.ROCKSDB)
    target.base = source.base
    target.restore(1)  # restored entries wait in a write batch until the first access
    target.rows(_batch(range(KEYS), 1))
    assert [row["count"] for row in target.outputs] == [2] * KEYS
    assert [row["previous"] for row in target.outputs] == [7] * KEYS


@pytest.mark.timeout(120)
def test_entries_an_incremental_snapshot_read_from_the_cache_are_still_written_back_when_evicted(jobs):
    results = {}
    for backend in BACKENDS:
        job = jobs(backend, incremental=True)
        job.rows(_batch(range(KEYS), 1))
        job.checkpoint(1)
        job.rows(_batch(range(0, KEYS, 2), 10))  # cached, changed: the next snapshot reads them from the cache
        assert job.checkpoint(2) == (1, 2)
        job.rows(_batch(range(KEYS, 3 * KEYS), 1))  # other keys evict them, unchanged since the snapshot
        assert job.checkpoint(3) == (1, 2, 3)
        job.outputs.clear()
        job.rows(_batch(range(KEYS), 100))  # read back from RocksDB
        assert [row["count"] for row in job.outputs] == [3 if k % 2 == 0 else 2 for k in range(KEYS)]
        job.restore(3)
        assert job.state("total") == {k: 11 if k % 2 == 0 else 1 for k in range(KEYS)} | dict.fromkeys(
            range(KEYS, 3 * KEYS), 1
        )
        results[backend] = job.outputs
    assert results[StateBackendType.ROCKSDB] == results[StateBackendType.HASHMAP]


def _entries_of(snapshots) -> dict:
    return {(s.name, key): value for s in snapshots for _, key, value in s.entries}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seed", [3, 4])
def test_random_batches_with_prefetch_and_incremental_snapshots_rebuild_the_heap_backends_state(tmp_path, seed):
    """Random operations of every state kind in prefetched batches, on more keys than the cache holds;
    a full snapshot plus the incremental ones after it always add up to the heap backend's state."""
    from tests.unit.state.test_rocksdb_state import _apply, _states

    rng = random.Random(seed)
    heap = HeapKeyedStateBackend(max_parallelism=MAX_PARALLELISM)
    rocks = RocksDBKeyedStateBackend(max_parallelism=MAX_PARALLELISM,
                                     options=RocksDBOptions(local_dir=str(tmp_path), memory_per_slot=1 << 20))  # fmt: skip
    try:
        heap_states, rocks_states = _states(heap), _states(rocks)
        view = _entries_of(rocks.snapshot_entries())
        for batch_number in range(60):
            keys = [
                rng.choice([rng.randrange(20_000), f"k{rng.randrange(40)}"]) for _ in range(rng.randrange(1, 2_500))
            ]
            rocks.prefetch(keys)
            for i, key in enumerate(keys):
                op = rng.randrange(8)
                heap.current_key = rocks.current_key = key
                assert _apply(rocks_states, op, i) == _apply(heap_states, op, i), (batch_number, i, key, op)
            if batch_number % 7 == 6:
                for change in rocks.snapshot_changes():
                    view.update({(change.name, key): value for _, key, value in change.upserts})
                    for _, key, _ in change.deletes:
                        view.pop((change.name, key), None)
                assert view == _entries_of(heap.snapshot_entries()), batch_number
        assert rocks.cached_entries() < rocks.num_keys()  # it did evict
    finally:
        rocks.close()
