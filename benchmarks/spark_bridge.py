"""Throughput and end-to-end latency through the Spark bridge, next to Spark's own keyed count.

Two pipelines doing a keyed count, each read by a Spark query whose
``foreachBatch`` records when rows become visible in a micro-batch:

* **bridge**: an engine job (generator -> key_by -> running count per key)
  read with ``spark.readStream.format("flinklike")``. Every row carries the
  wall time at which the engine created it; latency = arrival in the Spark
  micro-batch - creation, per row. Rows become visible when the checkpoint
  after them completes, so latency is bounded below by the checkpoint interval.
* **spark**: Spark's rate source -> ``groupBy(key).count()`` (update mode).
  Aggregated rows hide single events, so each group's oldest and newest event
  timestamp give two latency samples per group and micro-batch.

Each pipeline runs twice: unthrottled for throughput (rows per second visible
in Spark), and at a fixed rate for latency (p50/p99). Everything shares one
local[2] SparkSession.

Run:  python3 benchmarks/spark_bridge.py [--seconds 30] [--rate 2000]
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa

from connectors import SequenceSource
from flinklike_spark import KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor

KEYS = 16
LATENCY_RATE = 2_000
COUNTED = pa.schema([("key", pa.int64()), ("count", pa.int64()), ("created_ms", pa.float64())])


class Count(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield {"key": value["key"], "count": count, "created_ms": value["created_ms"]}


def _stamp(batch: pa.RecordBatch) -> pa.RecordBatch:
    created = pa.array(np.full(batch.num_rows, time.time() * 1000.0))
    return pa.RecordBatch.from_arrays([batch.column(0), created], names=["key", "created_ms"])


def _pipeline(env: StreamExecutionEnvironment, rate: float | None):
    return (
        env.from_source(SequenceSource(num_keys=KEYS, records_per_key=None, rows_per_second=rate), name="gen")
        .uid("gen")
        .map_batches(_stamp, output_type=pa.schema([("key", pa.int64()), ("created_ms", pa.float64())]))
        .key_by("key")
        .process(Count(), output_type=COUNTED)
        .uid("count")
    )


def unthrottled(env: StreamExecutionEnvironment):
    return _pipeline(env, None)


def throttled(env: StreamExecutionEnvironment):
    return _pipeline(env, LATENCY_RATE)


class Recorder:
    """Collects rows and latency samples from foreachBatch calls."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rows = 0
        self.latencies: list[np.ndarray] = []
        self.first: float | None = None
        self.last: float | None = None

    def add(self, rows: int, latencies_ms: np.ndarray) -> None:
        now = time.monotonic()
        with self.lock:
            if rows and self.first is None:
                self.first = now
            self.last = now
            self.rows += rows
            if len(latencies_ms):
                self.latencies.append(latencies_ms)

    def summary(self) -> dict:
        lat = np.concatenate(self.latencies) if self.latencies else np.array([np.nan])
        span = (self.last - self.first) if self.first is not None and self.last > self.first else float("nan")
        return {
            "rows": self.rows,
            "rows_per_s": self.rows / span if span == span else float("nan"),
            "p50_ms": float(np.nanpercentile(lat, 50)),
            "p99_ms": float(np.nanpercentile(lat, 99)),
        }


def run_bridge(spark, work: Path, pipeline: str, seconds: float) -> dict:
    recorder = Recorder()

    def sink(df, batch_id):
        arrival = time.time() * 1000.0
        created = df.select("created_ms").toArrow().column(0).to_numpy()
        recorder.add(len(created), arrival - created)

    query = (
        spark.readStream.format("flinklike")
        .option("pipeline", f"spark_bridge:{pipeline}")
        .option("execution.checkpointing.dir", str(work / pipeline / "job"))
        .option("execution.checkpointing.interval", "500 ms")
        .option("parallelism.default", "2")
        .option("local.number-taskmanager", "2")
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(work / pipeline / "spark"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    _measure(query, recorder, seconds)
    return recorder.summary()


def run_spark(spark, work: Path, rate: int, seconds: float, name: str) -> dict:
    from pyspark.sql import functions as F

    recorder = Recorder()

    def sink(df, batch_id):
        arrival = time.time() * 1000.0
        table = df.toArrow()
        if table.num_rows == 0:
            return recorder.add(0, np.array([]))
        oldest = table.column("oldest").cast(pa.int64()).to_numpy() / 1000.0
        newest = table.column("newest").cast(pa.int64()).to_numpy() / 1000.0
        recorder.add(int(table.column("n").to_numpy().sum()), arrival - np.concatenate([oldest, newest]))

    query = (
        spark.readStream.format("rate").option("rowsPerSecond", rate).load()
        .withColumn("key", F.col("value") % KEYS)
        .groupBy("key")
        .agg(F.count("*").alias("n"), F.min("timestamp").alias("oldest"), F.max("timestamp").alias("newest"))
        .writeStream.outputMode("update").foreachBatch(sink)
        .option("checkpointLocation", str(work / name / "spark"))
        .trigger(processingTime="0 seconds")
        .start()
    )  # fmt: skip
    _measure(query, recorder, seconds)
    return recorder.summary()


def _measure(query, recorder: Recorder, seconds: float) -> None:
    deadline = time.monotonic() + 600
    while recorder.first is None and time.monotonic() < deadline:  # first rows take 10-20 s
        if query.exception() is not None:
            raise RuntimeError(query.exception())
        time.sleep(0.2)
    with recorder.lock:  # measure the steady state only
        recorder.rows, recorder.latencies, recorder.first = 0, [], time.monotonic()
    time.sleep(seconds)
    query.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="steady-state measuring time per run")
    parser.add_argument("--spark-rate", type=int, default=1_000_000, help="rate source rows/s for throughput")
    args = parser.parse_args()

    from flinklike_spark.spark import session

    spark = session("spark-bridge-benchmark", config={"spark.ui.enabled": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    work = Path(tempfile.mkdtemp(prefix="bridge-bench-"))
    results = {
        "bridge throughput (unthrottled)": run_bridge(spark, work, "unthrottled", args.seconds),
        f"bridge latency ({LATENCY_RATE} rows/s)": run_bridge(spark, work, "throttled", args.seconds),
        f"spark throughput (rate {args.spark_rate} rows/s)": run_spark(
            spark, work, args.spark_rate, args.seconds, "spark-tp"),
        f"spark latency ({LATENCY_RATE} rows/s)": run_spark(spark, work, LATENCY_RATE, args.seconds, "spark-lat"),
    }  # fmt: skip
    spark.stop()
    print(f"# {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, {platform.processor() or platform.machine()}")
    print(f"{'run':45s} {'rows':>10s} {'rows/s':>10s} {'p50 ms':>9s} {'p99 ms':>9s}")
    for name, r in results.items():
        print(f"{name:45s} {r['rows']:>10d} {r['rows_per_s']:>10.0f} {r['p50_ms']:>9.0f} {r['p99_ms']:>9.0f}")


if __name__ == "__main__":
    main()
