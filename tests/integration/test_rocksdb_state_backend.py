"""State larger than memory: a keyed job on the RocksDB backend whose state is several times its
memory budget checkpoints, loses a TaskExecutor to SIGKILL, restores, and ends with exact results,
while every TaskExecutor's resident memory stays within its idle size plus the budget plus a
stated overhead.

Each key's value is a 4 KiB blob that depends on (key, seq); the function checks, on every
record, that the stored blob is the one the previous record of that key wrote (so a lost,
stale or duplicated state entry or record fails the job), and emits one row per key from an
end-of-input timer (CollectSink returns the last attempt's output only).
"""

from __future__ import annotations

import contextlib
import hashlib
import signal
import threading
import time

import psutil
import pytest

from checkpointing import list_completed_checkpoints
from connectors import CollectSink, SequenceSource
from flinklike_spark import KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor
from tests.support.checkpoint_jobs import checkpoint_config
from tests.support.failover_jobs import task_executor_processes, wait_for

pytest.importorskip("rocksdict")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(360)]  # ~100 s on an idle 2-core machine

END_OF_TIME = 2**62
NUM_KEYS = 40_000
RECORDS_PER_KEY = 2
BLOB_BYTES = 4096
PARALLELISM = 2
BUDGET = 16 << 20  # state.backend.rocksdb.memory.fixed-per-slot
#: Memory a TaskExecutor may use beyond the baseline (the same job with tiny state) and the budget.
#: Measured (docs/benchmarks.md, "RocksDB state backend"): up to ~95 MiB in steady state (the
#: checkpoint writer's chunk pickled, as Arrow and as Parquet on the I/O pool's threads, RocksDB's
#: table readers, iterators and compaction outside the block cache, the glibc arenas of those
#: threads, more batches in flight than in the warm-up) and up to ~150 MiB on the TaskExecutor that
#: runs the restarted attempt beside the leftovers of the failed one; the heap backend peaks at
#: ~1 GiB (800 MiB above the baseline) in this job.
OVERHEAD = 176 << 20
#: State per subtask / budget: the point of the test (RocksDB holds what memory cannot).
STATE_PER_SUBTASK = NUM_KEYS // PARALLELISM * BLOB_BYTES


def blob(key: int, seq: int) -> bytes:
    """Incompressible (so the checkpoint's Parquet bytes are the state's size), unique per (key, seq)."""
    return hashlib.shake_256(f"{key}:{seq}".encode()).digest(BLOB_BYTES)


class BlobChain(KeyedProcessFunction):
    def __init__(self, *, seconds_per_record: float, records_per_key: int) -> None:
        self.seconds_per_record = seconds_per_record
        self.records_per_key = records_per_key

    def open(self, runtime_context):
        self.blob = runtime_context.get_state(ValueStateDescriptor("blob"))
        self.next_seq = runtime_context.get_state(ValueStateDescriptor("next_seq"))

    def process_element(self, value, ctx):
        key, seq = value["key"], value["seq"]
        expected = self.next_seq.value() or 0
        if seq != expected:
            raise AssertionError(f"key {key}: got seq {seq}, expected {expected}")
        if seq > 0 and self.blob.value() != blob(key, seq - 1):
            raise AssertionError(f"key {key}: the blob of seq {seq - 1} was lost or changed")
        if seq == 0:  # CollectSink keeps only the last attempt's output: emit at the end of input
            ctx.timer_service().register_event_time_timer(END_OF_TIME)
        self.blob.update(blob(key, seq))
        self.next_seq.update(seq + 1)
        if seq > 0 and self.seconds_per_record:  # slow the last pass: a checkpoint of all keys completes in it
            time.sleep(self.seconds_per_record)

    def on_timer(self, timestamp, ctx):
        key = ctx.get_current_key()
        last = self.records_per_key - 1
        yield {"key": key, "seq": self.next_seq.value() - 1, "blob_ok": self.blob.value() == blob(key, last)}


class RssSampler:
    """Samples the resident set size of every TaskExecutor process (also replacements) every 50 ms."""

    def __init__(self) -> None:
        self.peak: dict[int, int] = {}  # pid -> highest RSS seen
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            with contextlib.suppress(psutil.Error):  # a process may exit between listing and reading
                for process in task_executor_processes():
                    with contextlib.suppress(psutil.Error):
                        rss = process.memory_info().rss
                        self.peak[process.pid] = max(self.peak.get(process.pid, 0), rss)


def build(directory: str, rocksdb_dir: str, *, num_keys: int, records_per_key: int) -> StreamExecutionEnvironment:
    config = checkpoint_config(directory, "aligned", PARALLELISM) | {
        "execution.checkpointing.interval": "1 s",
        "state.backend.type": "rocksdb",
        "state.backend.rocksdb.localdir": rocksdb_dir,
        "state.backend.rocksdb.memory.fixed-per-slot": BUDGET,
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": 1,
        "restart-strategy.fixed-delay.delay": "0 ms",
    }
    env = StreamExecutionEnvironment.get_execution_environment(config)
    (
        env.from_source(SequenceSource(num_keys=num_keys, records_per_key=records_per_key), name="seq")
        .uid("seq")
        .key_by("key")
        .process(BlobChain(seconds_per_record=0.0005, records_per_key=records_per_key))
        .uid("blobs")
        .sink_to(CollectSink("last"))
    )
    return env


def test_state_larger_than_memory_survives_a_killed_task_executor_within_its_memory_budget(tmp_path):
    assert STATE_PER_SUBTASK >= 4 * BUDGET
    rocksdb_dir = tmp_path / "rocksdb"
    # The baseline: the same job with almost no state (20 keys) but as many records, so the
    # TaskExecutors have imported everything, deployed the job and warmed the data path.
    with RssSampler() as idle:
        warm_up = build(str(tmp_path / "warm-up"), str(rocksdb_dir), num_keys=20, records_per_key=1_000)
        assert len(CollectSink.rows(warm_up.execute("baseline"))) == 20
    baseline = max(idle.peak.values())

    directory = str(tmp_path / "checkpoints")
    env = build(directory, str(rocksdb_dir), num_keys=NUM_KEYS, records_per_key=RECORDS_PER_KEY)
    with RssSampler() as rss:
        client = env.execute_async("state larger than memory")
        try:
            # Kill once a checkpoint holds (nearly) every key's blob: restore must bring it all back.
            def whole_state_checkpointed() -> bool:
                assert not client.done(), f"the job ended ({client.get_job_status()}) before a checkpoint held all keys"
                return bool(client.job_id) and any(
                    c.state_bytes >= 0.9 * NUM_KEYS * BLOB_BYTES
                    for c in list_completed_checkpoints(directory, client.job_id)
                )

            wait_for(whole_state_checkpointed, "a checkpoint of the whole state", 120)
            victim = task_executor_processes()[0]
            victim.send_signal(signal.SIGKILL)
            result = client.wait(timeout=180)
        except BaseException:
            with contextlib.suppress(Exception):
                client.cancel()
            raise
    rows = CollectSink.rows(result)
    assert sorted(row["key"] for row in rows) == list(range(NUM_KEYS))  # every key once: none lost, none twice
    assert all(row["seq"] == RECORDS_PER_KEY - 1 and row["blob_ok"] for row in rows)
    assert client.num_restarts == 1
    checkpoints = list_completed_checkpoints(directory, client.job_id)
    assert max(c.state_bytes for c in checkpoints) >= NUM_KEYS * BLOB_BYTES  # 160 MB of state, 10x the budget
    assert len(rss.peak) >= 3, rss.peak  # the two TaskExecutors and the victim's replacement
    limit = baseline + BUDGET + OVERHEAD
    peaks = {pid: f"{peak / 2**20:.0f} MiB" for pid, peak in rss.peak.items()}
    print(f"baseline {baseline / 2**20:.0f} MiB, limit {limit / 2**20:.0f} MiB, peaks {peaks}")
    assert max(rss.peak.values()) <= limit, f"RSS above baseline + budget + overhead: {peaks}"
    assert not list((rocksdb_dir / "flinklike-rocksdb").glob("*"))  # every instance directory removed
