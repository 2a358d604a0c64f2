"""Credit-based flow control: a slow sink slows the source down and memory stays bounded."""

from __future__ import annotations

import threading
import time

import psutil
import pyarrow as pa
import pytest

from connectors import SequenceSource
from flinklike_spark import Configuration, Sink, SinkWriter, StreamExecutionEnvironment
from flinklike_spark._runtime.minicluster import MiniCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

ROW_PAYLOAD = 1024  # bytes of padding per row
MEMORY_BOUND = 64 * 1024 * 1024  # allowed RSS growth of any TaskExecutor
DATA_VOLUME = 10 * MEMORY_BOUND  # what must pass through while memory stays bounded
SEGMENT_SIZE = 256 * 1024  # network buffer size: ~256 rows per buffer, ~2,560 buffers in all
SINK_SLEEP = 0.01  # per buffer: the sinks need >= 2,560 * 10 ms / 2 = 12.8 s, the source alone < 1 s


class SlowWriter(SinkWriter):
    def __init__(self) -> None:
        self.rows = 0
        self.bytes = 0

    def write(self, batch: pa.RecordBatch) -> None:
        time.sleep(SINK_SLEEP)
        self.rows += batch.num_rows
        self.bytes += batch.nbytes

    def accumulator(self):
        return {"rows": self.rows, "bytes": self.bytes}


class SlowSink(Sink):
    name = "slow"

    def create_writer(self, context):
        return SlowWriter()


def pad(batch: pa.RecordBatch) -> pa.RecordBatch:
    padding = pa.array([b"x" * ROW_PAYLOAD] * batch.num_rows, type=pa.binary())
    return batch.append_column("payload", padding)


def test_slow_sink_backpressures_source_and_memory_stays_bounded():
    rows_needed = DATA_VOLUME // ROW_PAYLOAD
    num_keys = 64
    config = Configuration(
        {"parallelism.default": 2, "local.number-taskmanager": 2, "taskmanager.memory.segment-size": SEGMENT_SIZE}
    )
    env = StreamExecutionEnvironment.get_execution_environment(config)
    (
        env.from_source(SequenceSource(num_keys=num_keys, records_per_key=rows_needed // num_keys), name="seq")
        .map_batches(pad)
        .key_by("key")
        .sink_to(SlowSink())
    )
    with MiniCluster(config) as cluster:
        processes = [psutil.Process(pid) for pid in cluster.task_executor_pids.values()]
        job_graph = env.get_job_graph("backpressure")
        source_vertex = next(v.id for v in job_graph if v.is_source)
        client = cluster.submit_job(job_graph)
        # The baseline is taken once both sources emit: by then every task imported its modules and
        # began processing, so what grows afterwards is buffered data (a fixed delay was too short
        # on a loaded machine, and the imports counted as growth).
        deadline = time.monotonic() + 60
        while sum(1 for task, m in client.task_metrics().items()
                  if task.startswith(source_vertex) and m.get("records_out", 0) > 0) < 2:  # fmt: skip
            assert time.monotonic() < deadline, "the sources emitted nothing within 60 s"
            time.sleep(0.05)
        baseline = {p.pid: p.memory_info().rss for p in processes}
        peak = dict(baseline)
        stop = threading.Event()
        source_metrics: dict[str, dict[str, float]] = {}

        def sample() -> None:
            ticks = 0
            while not stop.wait(0.05):
                for p in processes:
                    try:
                        peak[p.pid] = max(peak[p.pid], p.memory_info().rss)
                    except psutil.NoSuchProcess:
                        return
                ticks += 1
                if ticks % 20 == 0:  # every second: the source subtasks' counters
                    for task, metrics in client.task_metrics().items():
                        if task.startswith(source_vertex) and metrics:
                            source_metrics[task] = metrics

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            result = client.wait(timeout=200)
        finally:
            stop.set()
            sampler.join()
    totals = result.accumulators["slow"]
    passed_bytes = sum(t["bytes"] for t in totals)
    passed_rows = sum(t["rows"] for t in totals)
    assert passed_rows == (rows_needed // num_keys) * num_keys
    assert passed_bytes >= DATA_VOLUME * 0.95
    # The source was slowed down: most of its time went to waiting for credit.
    assert len(source_metrics) == 2, f"no metrics sampled from both source subtasks: {source_metrics}"
    for task, metrics in source_metrics.items():
        share = metrics["backpressured_seconds"] / metrics["uptime_seconds"]
        assert share > 0.5, f"source {task} was backpressured only {share:.0%} of its time: {metrics}"
    growth = {pid: peak[pid] - baseline[pid] for pid in baseline}
    assert max(growth.values()) < MEMORY_BOUND, (
        f"TaskExecutor RSS grew by {max(growth.values()) / 2**20:.0f} MiB (bound {MEMORY_BOUND / 2**20:.0f} MiB) "
        f"while {passed_bytes / 2**20:.0f} MiB passed"
    )
