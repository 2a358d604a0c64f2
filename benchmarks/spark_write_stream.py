"""Rows per second through ``df.writeStream.format("flinklike").option("pipeline", ...)`` at source parallelism 1 and 2.

Spark's rate-micro-batch source (``--rows-per-batch`` rows per micro-batch over
2 partitions, micro-batches as fast as Spark runs them) feeds the job through
the bridge's input table; the job
(:func:`passthrough`: the Spark input source -> a vectorized map -> DeltaSink,
exactly once) runs with ``parallelism.default`` 1, then 2, so its input table
is read by one or two source subtasks (one split per subtask, each Spark
partition's files in one split). Throughput = rows committed to the job's
Delta output per second over ``--seconds``, after the job's first output; the
rows Spark committed to the input table in the same window are printed beside
it (when the job keeps up, its rate is Spark's). Both runs share one local[2]
SparkSession and are printed as one table.

Run:  python3 benchmarks/spark_write_stream.py [--seconds 30] [--rows-per-batch 200000]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import sys
import tempfile
import time
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from connectors import DeltaSink
from flinklike_spark import StreamExecutionEnvironment

OUT = "out"


def _keyed(batch: pa.RecordBatch) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pc.bit_wise_and(batch.column(0), 15), batch.column(0)], names=["key", "value"])


def passthrough(env: StreamExecutionEnvironment, stream):
    """The benchmark's pipeline: rows -> (key, value) -> Delta, beside the job directory."""
    out = os.path.join(os.path.dirname(env.config.checkpointing.directory.rstrip("/")), OUT)
    (
        stream.map_batches(_keyed, output_type=pa.schema([("key", pa.int64()), ("value", pa.int64())]))
        .sink_to(DeltaSink(out))
        .uid("out")
    )


def _rows(path: str) -> int:
    try:
        table = DeltaTable(path)
    except Exception:  # noqa: BLE001 - not created yet
        return 0
    actions = pa.table(table.get_add_actions(flatten=True))
    return int(pc.sum(actions["num_records"]).as_py() or 0) if actions.num_rows else 0


def _input_rows_ever(job: str) -> int:
    """Rows Spark ever committed to the input table (consumed files are removed: count the log's adds)."""
    rows = 0
    for commit in sorted(glob.glob(os.path.join(job, "input", "_delta_log", "*.json"))):
        with open(commit) as lines:
            for line in lines:
                add = json.loads(line).get("add")
                if add is not None:
                    rows += json.loads(add["stats"])["numRecords"]
    return rows


def run(spark, workdir: str, parallelism: int, rows_per_batch: int, seconds: float) -> dict:
    job = os.path.join(workdir, f"p{parallelism}", "job")
    out = os.path.join(workdir, f"p{parallelism}", OUT)
    rows = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", rows_per_batch)
        .option("numPartitions", 2)
        .load()
    )
    query = (
        rows.select("value")
        .writeStream.format("flinklike")
        .option("pipeline", "spark_write_stream:passthrough")
        .option("execution.checkpointing.dir", job)
        .option("execution.checkpointing.interval", "1 s")
        .option("parallelism.default", str(parallelism))
        .option("checkpointLocation", os.path.join(workdir, f"p{parallelism}", "spark"))
        .start()
    )
    try:
        deadline = time.monotonic() + 600
        while _rows(out) == 0:
            if query.exception() is not None:
                raise RuntimeError(f"query failed: {query.exception()}")
            if time.monotonic() > deadline:
                raise RuntimeError("no output within 600 s")
            time.sleep(0.5)
        time.sleep(5)  # past the start-up backlog of the first checkpoints
        start_rows, start_fed, start = _rows(out), _input_rows_ever(job), time.monotonic()
        time.sleep(seconds)
        end_rows, end_fed, elapsed = _rows(out), _input_rows_ever(job), time.monotonic() - start
    finally:
        query.stop()
    return {
        "parallelism": parallelism,
        "rows": end_rows - start_rows,
        "rows_per_s": (end_rows - start_rows) / elapsed,
        "fed_per_s": (end_fed - start_fed) / elapsed,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rows-per-batch", type=int, default=200_000)
    args = parser.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the job's runner imports this module
    from flinklike_spark.spark import session

    spark = session("spark-write-stream-benchmark", config={"spark.ui.enabled": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    workdir = tempfile.mkdtemp(prefix="spark-write-stream-")
    results = [run(spark, workdir, p, args.rows_per_batch, args.seconds) for p in (1, 2)]
    spark.stop()
    print(
        f"# {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, {os.cpu_count()} cores, "
        f"rate-micro-batch {args.rows_per_batch:,} rows per micro-batch over 2 partitions, "
        f"{args.seconds:.0f} s per run"
    )
    print("| source parallelism | rows in the window | rows/s (engine -> Delta) | ratio | rows/s Spark -> input |")
    print("|---:|---:|---:|---:|---:|")
    for r in results:
        ratio = r["rows_per_s"] / results[0]["rows_per_s"] if results[0]["rows_per_s"] else float("nan")
        print(f"| {r['parallelism']} | {r['rows']:,} | {r['rows_per_s']:,.0f} | {ratio:.2f} | {r['fed_per_s']:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
