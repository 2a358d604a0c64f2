"""flinklike-spark's runners of the scenario workloads W3 (checkpointing), W4 (recovery) and W5 (latency).

Called by ``engine_flinklike.py``; each returns ``(seconds, summary, metrics)``:
the summary is checked by the harness against :func:`workloads.expected`
before the metrics count. All jobs run on a local MiniCluster with P
TaskExecutor processes.

* W3: (a) a slow sink (1 ms per record) behind a keyed count, checkpoints
  every second, aligned and then unaligned, ``seconds`` each; the median
  durations (trigger to last acknowledgement) come from the engine's own
  ``checkpoints`` table. (b) the keyed count of W2 without checkpoints and with
  aligned checkpoints every 1 s (Delta commit each time), same job, run
  without/with/with/without; rates from the mean times of each side.
* W4: a keyed exactly-once job (throttled source -> keyed pass-through that
  stamps each record's processing time -> DeltaSink, checkpoints every
  500 ms, fixed-delay restarts at 0 ms). After two completed checkpoints one
  TaskExecutor process gets SIGKILL. The bounded job then finishes; "output
  flowing again" is the commit time, in the Delta log, of the first commit
  holding a record processed after the kill; lost and duplicated
  ``(key, seq)`` are counted per key from the table.
* W5: a throttled source (fixed rate) -> vectorized map stamping each record
  with its creation time (chained to the source) -> keyed pass-through with
  a per-key count in state -> sink computing ``now - created`` per record.
  ``mode="readStream"`` runs the same job under
  ``spark.readStream.format("flinklike")`` and measures at Spark's
  ``foreachBatch`` instead (see ``latency_pipelines.py``).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from flinklike_parts import CountUntil, SummarySink
from workloads import exactly_once, latency_metrics, micro_batch_phases, per_key

from checkpointing import latest_completed, list_completed_checkpoints
from connectors import DeltaSink, SequenceSource
from flinklike_spark import (
    Configuration,
    KeyedProcessFunction,
    Sink,
    SinkWriter,
    StreamExecutionEnvironment,
    ValueStateDescriptor,
)
from flinklike_spark._runtime.cluster.process_main import TASK_EXECUTOR_PROCESS_NAME
from flinklike_spark._runtime.minicluster import MiniCluster

__all__ = ["run_w3", "run_w4", "run_w5"]


# --- W3 -----------------------------------------------------------------------------------------------------------


class KeyedCount(KeyedProcessFunction):
    """A count per key in ValueState, emitted with every record."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        current = (self.count.value() or 0) + 1
        self.count.update(current)
        yield {"key": value["key"], "count": current}


class SlowSink(Sink):
    """Takes ``seconds_per_record`` per record: the backpressure behind the keyed exchange."""

    name = "slow"

    def __init__(self, seconds_per_record: float) -> None:
        self.seconds_per_record = seconds_per_record

    def create_writer(self, context):
        return _SlowWriter(self.seconds_per_record)


class _SlowWriter(SinkWriter):
    def __init__(self, seconds_per_record: float) -> None:
        self.seconds_per_record = seconds_per_record
        self.rows = 0

    def write(self, batch: pa.RecordBatch) -> None:
        self.rows += batch.num_rows
        time.sleep(self.seconds_per_record * batch.num_rows)

    def accumulator(self):
        return self.rows


def _cluster_config(parallelism: int, **settings) -> Configuration:
    return Configuration({"parallelism.default": parallelism, "local.number-taskmanager": parallelism, **settings})


def backpressured_checkpoints(mode: str, seconds: float, parallelism: int, min_checkpoints: int) -> list[float]:
    """Durations (ms) of the checkpoints of the slow-sink job in ``mode``.

    It runs ``seconds``, and then on until ``min_checkpoints`` completed (or 90 s
    more): an aligned checkpoint under backpressure takes seconds here.
    """
    directory = tempfile.mkdtemp(prefix=f"compare-w3-{mode}-")
    config = _cluster_config(
        parallelism,
        **{
            "execution.checkpointing.interval": "1s",
            "execution.checkpointing.dir": directory,
            "execution.checkpointing.unaligned.enabled": mode == "unaligned",
            "execution.checkpointing.num-retained": 1000,
            "taskmanager.memory.segment-size": "4kb",
        },
    )
    env = StreamExecutionEnvironment.get_execution_environment(config)
    source = SequenceSource(num_keys=100, records_per_key=None)
    env.from_source(source, name="seq").uid("seq").key_by("key").process(KeyedCount()).uid("count").sink_to(
        SlowSink(0.001)
    )
    with MiniCluster(config) as cluster:
        client = cluster.submit_job(env.get_job_graph(f"w3-backpressure-{mode}"))
        time.sleep(seconds)
        deadline = time.monotonic() + 90
        while (len(list_completed_checkpoints(directory, client.job_id)) < min_checkpoints
               and time.monotonic() < deadline and not client.done()):  # fmt: skip
            time.sleep(0.1)
        client.cancel()
        try:
            client.wait(60)
        except Exception:  # noqa: BLE001 - cancelled on purpose; a real failure shows as no checkpoints
            pass
    return [c.duration.total_seconds() * 1000 for c in list_completed_checkpoints(directory, client.job_id)]


def keyed_count_run(records: int, keys: int, parallelism: int, *, checkpoints: bool) -> tuple[float, dict, int]:
    """W2's job; returns (seconds from submission to end, summary, checkpoints completed).

    The count of completed checkpoints is the JobMaster's own statistics (what
    Flink's REST API reports as ``counts.completed``): the ``checkpoints``
    table keeps only ``execution.checkpointing.num-retained`` (default 1) of them.
    """
    settings = {}
    if checkpoints:
        directory = tempfile.mkdtemp(prefix="compare-w3-overhead-")
        settings = {"execution.checkpointing.interval": "1s", "execution.checkpointing.dir": directory}
    config = _cluster_config(parallelism, **settings)
    env = StreamExecutionEnvironment.get_execution_environment(config)
    m = per_key(records, keys)
    env.from_source(SequenceSource(num_keys=keys, records_per_key=m), name="seq").key_by("key").process(
        CountUntil(m)
    ).sink_to(SummarySink("count"))
    with MiniCluster(config) as cluster:
        client = cluster.submit_job(env.get_job_graph("w3-overhead"))
        started = time.perf_counter()
        result = client.wait(timeout=1800)
        elapsed = time.perf_counter() - started
        master = cluster._jobs[client.job_id]  # the MiniCluster's JobMaster (as benchmarks/recovery.py reads it)
        completed = master.checkpoints.stats.num_completed if checkpoints else 0
    totals = result.accumulators["summary"]
    summary = {"rows": sum(t["rows"] for t in totals), "sum": sum(t["total"] for t in totals)}
    return elapsed, summary, completed


def run_w3(
    records: int, keys: int, parallelism: int, *, seconds: float, min_checkpoints: int
) -> tuple[float, dict, dict]:
    started = time.perf_counter()
    metrics: dict = {}
    for mode in ("aligned", "unaligned"):
        durations = backpressured_checkpoints(mode, seconds, parallelism, min_checkpoints)
        if len(durations) < min_checkpoints:
            raise SystemExit(f"W3: only {len(durations)} {mode} checkpoint(s) completed in {seconds} s")
        metrics[f"{mode}_median_ms"] = statistics.median(durations)
        metrics[f"{mode}_max_ms"] = max(durations)
        metrics[f"{mode}_checkpoints"] = len(durations)
    metrics["aligned_over_unaligned"] = metrics["aligned_median_ms"] / metrics["unaligned_median_ms"]
    # Without, with, with, without (ABBA): a load that drifts during the four runs hits both sides alike.
    runs = {False: [], True: []}
    summaries, completed = [], 0
    for checkpoints in (False, True, True, False):
        elapsed, summary, count = keyed_count_run(records, keys, parallelism, checkpoints=checkpoints)
        runs[checkpoints].append(elapsed)
        summaries.append(summary)
        completed += count
    without, with_cp = statistics.mean(runs[False]), statistics.mean(runs[True])
    metrics |= {
        "rate_without": records / without,
        "rate_with_1s_checkpoints": records / with_cp,
        "checkpoints_during_run": completed / 2,
        "overhead": 1 - without / with_cp,
    }
    # Every run must be right; a disagreement shows as the wrong ones.
    summary = summaries[0] if all(x == summaries[0] for x in summaries) else {"runs": summaries}
    return time.perf_counter() - started, summary, metrics


# --- W4 -----------------------------------------------------------------------------------------------------------


class StampedPassThrough(KeyedProcessFunction):
    """Keyed exactly-once pass-through: a count per key in state; each record gets its processing time."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)
        yield {"key": value["key"], "seq": value["seq"], "processed": time.time()}


def task_executor_processes():
    """This process's local TaskExecutors: each names itself ``taskexecutor`` (forked ones share the fork
    server's command line)."""
    import psutil

    name = TASK_EXECUTOR_PROCESS_NAME.decode()
    return [p for p in psutil.Process().children(recursive=True) if p.name() == name]


def first_commit_after(path: str, after_version: int, since: float) -> float | None:
    """The commit time (wall-clock seconds, from the Delta log) of the first version after ``after_version``
    that adds a record processed after ``since``; ``None`` if none does.

    Read from the log once the job has ended, not polled while it runs: a poller stopped when the job ends
    can miss the job's last commit, which after a late kill is the only one (a flake of the CI's quick run).
    """
    from deltalake import DeltaTable

    table = DeltaTable(path, version=after_version)
    seen = set(table.file_uris())
    committed_at = {entry["version"]: entry["timestamp"] / 1000 for entry in DeltaTable(path).history()}
    for version in sorted(v for v in committed_at if v > after_version):
        table.load_as_version(version)
        files = set(table.file_uris())
        for uri in sorted(files - seen):
            processed = pq.read_table(uri, columns=["processed"]).column("processed")
            if len(processed) and pc.max(processed).as_py() > since:
                return committed_at[version]
        seen = files
    return None


def run_w4(records: int, keys: int, parallelism: int, *, rate: float) -> tuple[float, dict, dict]:
    from deltalake import DeltaTable

    m = per_key(records, keys)
    with tempfile.TemporaryDirectory(prefix="compare-w4-") as tmp:
        directory, out = os.path.join(tmp, "checkpoints"), os.path.join(tmp, "out")
        config = _cluster_config(
            parallelism,
            **{
                "execution.checkpointing.interval": "500 ms",
                "execution.checkpointing.dir": directory,
                "restart-strategy.type": "fixed-delay",
                "restart-strategy.fixed-delay.attempts": 3,
                "restart-strategy.fixed-delay.delay": "0 ms",
            },
        )
        env = StreamExecutionEnvironment.get_execution_environment(config)
        source = SequenceSource(num_keys=keys, records_per_key=m, rows_per_second=rate, batch_size=256)
        env.from_source(source, name="seq").uid("seq").key_by("key").process(StampedPassThrough()).uid("stamp").sink_to(
            DeltaSink(out)
        )
        started = time.perf_counter()
        with MiniCluster(config) as cluster:
            client = cluster.submit_job(env.get_job_graph("w4-recovery"))
            deadline = time.monotonic() + 120
            # the latest id, not a count: one checkpoint is retained (Flink's default), older ones are removed
            while (latest := latest_completed(directory, client.job_id)) is None or latest.checkpoint_id < 2:
                if client.done() or time.monotonic() > deadline:
                    ended = f"ended ({client.get_job_status()})" if client.done() else "ran 120 s"
                    latest_id = latest.checkpoint_id if latest else None
                    raise SystemExit(
                        f"W4: the job {ended} before its second checkpoint (latest: {latest_id}); the kill needs it"
                    )
                time.sleep(0.05)
            victims = task_executor_processes()
            if not victims:
                raise SystemExit("W4: no TaskExecutor process to kill")
            before_kill = DeltaTable(out).version()
            killed_at = time.time()
            victims[-1].kill()  # SIGKILL
            client.wait(timeout=600)
            restarts = client.num_restarts
            history = client.get_exception_history()
        elapsed = time.perf_counter() - started
        table = DeltaTable(out).to_pyarrow_table(columns=["key", "seq"])
        flowing_at = first_commit_after(out, before_kill, killed_at)
    if flowing_at is None:
        raise SystemExit("W4: no output committed after the kill held a record processed after it: nothing measured")
    summary = exactly_once(zip(table.column("key").to_pylist(), table.column("seq").to_pylist()), keys, m)
    metrics = {
        "recovery_s": flowing_at - killed_at,
        "detected_s": history[0].timestamp.timestamp() - killed_at if history else None,
        "restarts": restarts,
        "rows": table.num_rows,
        "measures": "SIGKILL of a TaskExecutor process -> first Delta commit holding a record processed after it",
    }
    return elapsed, summary, metrics


# --- W5 -----------------------------------------------------------------------------------------------------------


def stamp_creation(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Adds ``created`` (wall-clock seconds) to a batch as it leaves the source (chained: same task)."""
    now = time.time()
    return pa.RecordBatch.from_arrays(
        [batch.column(0), batch.column(1), pa.array([now] * batch.num_rows, pa.float64())],
        names=["key", "seq", "created"],
    )


class LatencyPassThrough(KeyedProcessFunction):
    """A per-key count in state, and the record unchanged: the keyed stage of the latency pipeline."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)
        yield value


def latency_stream(env: StreamExecutionEnvironment, records: int, keys: int, rate: float):
    m = per_key(records, keys)
    schema = pa.schema([("key", pa.int64()), ("seq", pa.int64()), ("created", pa.float64())])
    return (
        env.from_source(
            SequenceSource(num_keys=keys, records_per_key=m, rows_per_second=rate, batch_size=64), name="seq"
        )  # fmt: skip
        .uid("seq")
        .map_batches(stamp_creation, output_type=schema)
        .uid("stamp")
        .key_by("key")
        .process(LatencyPassThrough(), output_type=schema)
        .uid("pass")
    )


class LatencySink(Sink):
    """Records ``now - created`` per record, and the ``(key, seq)`` count for the check."""

    name = "latency"

    def create_writer(self, context):
        return _LatencyWriter()


class _LatencyWriter(SinkWriter):
    def __init__(self) -> None:
        self.latencies: list[tuple[float, float]] = []
        self.pairs: set[tuple[int, int]] = set()
        self.rows = 0

    def write(self, batch: pa.RecordBatch) -> None:
        now = time.time()
        created = batch.column("created").to_pylist()
        self.latencies.extend((c, now - c) for c in created)
        self.pairs.update(zip(batch.column("key").to_pylist(), batch.column("seq").to_pylist()))
        self.rows += batch.num_rows

    def accumulator(self):
        return {"latencies": self.latencies, "rows": self.rows, "distinct": len(self.pairs)}


def run_w5(records: int, keys: int, parallelism: int, *, rate: float) -> tuple[float, dict, dict]:
    config = _cluster_config(parallelism)
    env = StreamExecutionEnvironment.get_execution_environment(config)
    latency_stream(env, records, keys, rate).sink_to(LatencySink())
    with MiniCluster(config) as cluster:
        client = cluster.submit_job(env.get_job_graph("w5-latency"))
        started = time.perf_counter()
        result = client.wait(timeout=600)
        elapsed = time.perf_counter() - started
    parts = result.accumulators["latency"]
    samples = [s for p in parts for s in p["latencies"]]
    summary = {"rows": sum(p["rows"] for p in parts), "distinct": sum(p["distinct"] for p in parts)}
    return elapsed, summary, latency_metrics(samples, rate)


def run_w5_read_stream(records: int, keys: int, parallelism: int, *, rate: float) -> tuple[float, dict, dict]:
    """The W5 job under ``spark.readStream.format("flinklike")``; latency measured at ``foreachBatch``."""
    from pyspark.sql import SparkSession

    from flinklike_spark.spark.spark_session import register

    os.environ["COMPARE_W5"] = f"{records},{keys},{rate}"  # read by latency_pipelines in the engine's runner
    spark = (
        SparkSession.builder.master(f"local[{parallelism}]")
        .config("spark.sql.shuffle.partitions", str(parallelism))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    samples: list[tuple[float, float]] = []
    pairs: set[tuple[int, int]] = set()
    counts = {"rows": 0}
    with tempfile.TemporaryDirectory(prefix="compare-w5-rs-") as tmp:
        reader = (
            spark.readStream.format("flinklike")
            .option("pipeline", "latency_pipelines:latency_job")
            .option("execution.checkpointing.dir", str(Path(tmp) / "job"))
            .option("execution.checkpointing.interval", "200 ms")
            .option("parallelism.default", str(parallelism))
            .load()
        )

        def sink(df, _batch_id):
            rows = df.select("key", "seq", "created").collect()
            now = time.time()
            samples.extend((r["created"], now - r["created"]) for r in rows)
            pairs.update((r["key"], r["seq"]) for r in rows)
            counts["rows"] += len(rows)

        started = time.perf_counter()
        query = reader.writeStream.foreachBatch(sink).option("checkpointLocation", str(Path(tmp) / "spark")).start()
        deadline = time.monotonic() + records / rate + 180
        while counts["rows"] < records and time.monotonic() < deadline and query.exception() is None:
            time.sleep(0.1)
        error = query.exception()
        phases = micro_batch_phases(query.recentProgress)
        query.stop()
        elapsed = time.perf_counter() - started
    spark.stop()
    if error is not None:
        raise SystemExit(f"W5 readStream: the query failed: {str(error)[:300]}")
    summary = {"rows": counts["rows"], "distinct": len(pairs)}
    return elapsed, summary, {**latency_metrics(samples, rate), "micro_batch_ms": phases}
