"""Spark Structured Streaming's runners of W4 (recovery) and W5 (latency); called by ``engine_spark.py``.

Both read Spark's ``rate`` source (``rowsPerSecond`` fixed, ``numPartitions``
P): row ``value`` is ``key = value % keys``, ``seq = value // keys``, and its
``timestamp`` is the time the source scheduled it (its creation time).

* W5: a stateless projection (Spark's cheapest pipeline; flinklike-spark's
  W5 has a keyed stateful stage) into ``foreachBatch``, which collects the
  batch to the driver and records ``now - timestamp`` per row; default
  trigger (the next micro-batch as soon as the previous one ended).
* W4: in local mode the executors are threads of the driver's JVM, so a
  killed worker is a killed Spark application: recovery is a restart of the
  query from its ``checkpointLocation``. A child process runs the query
  (``foreachBatch`` writes each micro-batch to ``batch-<id>.parquet``,
  overwriting on a replay: exactly once); after three micro-batches its
  whole process group (Python driver and JVM) gets SIGKILL and a new child
  restarts the query from the same checkpoint. Measured: kill -> the first
  micro-batch file written after it. Lost and duplicated ``(key, seq)`` are
  counted from the files.
"""

from __future__ import annotations

import faulthandler
import glob
import os
import signal
import subprocess
import sys
import tempfile
import time

import pyarrow.parquet as pq
from workloads import exactly_once, latency_metrics, micro_batch_phases, per_key

__all__ = ["run_w4", "run_w5", "w4_child"]


def _session(parallelism: int):
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(f"local[{parallelism}]")
        .config("spark.sql.shuffle.partitions", str(parallelism))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _keyed_rate(spark, keys: int, rate: float, parallelism: int):
    from pyspark.sql import functions as F

    return (
        spark.readStream.format("rate")
        .option("rowsPerSecond", str(int(rate)))
        .option("numPartitions", str(parallelism))
        .load()
        .select(
            (F.col("value") % keys).alias("key"),
            (F.col("value") / keys).cast("long").alias("seq"),
            "value",
            F.col("timestamp").cast("double").alias("created"),
        )
    )


def run_w5(records: int, keys: int, parallelism: int, *, rate: float) -> tuple[float, dict, dict]:
    spark = _session(parallelism)
    samples: list[tuple[float, float]] = []
    seen: set[int] = set()
    counts = {"rows": 0}

    def sink(df, _batch_id):
        rows = df.select("value", "created").collect()
        now = time.time()
        for row in rows:
            if row["value"] < records:
                samples.append((row["created"], now - row["created"]))
                seen.add(row["value"])
                counts["rows"] += 1

    with tempfile.TemporaryDirectory(prefix="compare-w5-spark-") as tmp:
        started = time.perf_counter()
        query = (
            _keyed_rate(spark, keys, rate, parallelism)
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", tmp)
            .start()
        )
        deadline = time.monotonic() + records / rate + 180
        while len(seen) < records and time.monotonic() < deadline and query.exception() is None:
            time.sleep(0.1)
        error = query.exception()
        phases = micro_batch_phases(query.recentProgress)
        query.stop()
        elapsed = time.perf_counter() - started
    spark.stop()
    if error is not None:
        raise SystemExit(f"W5 spark: the query failed: {str(error)[:300]}")
    metrics = {**latency_metrics(samples, rate), "micro_batch_ms": phases}
    return elapsed, {"rows": counts["rows"], "distinct": len(seen)}, metrics


def w4_child(out: str, checkpoint: str, records: int, keys: int, parallelism: int, rate: float) -> None:
    """The query of W4 (run in a child process): until every value below ``records`` was written."""
    spark = _session(parallelism)
    done = {"max": -1}

    def sink(df, batch_id):
        table = df.select("key", "seq", "value").toArrow()
        # Written under a temporary name and renamed: a batch file is whole or absent; a replay overwrites.
        path = os.path.join(out, f"batch-{batch_id:06d}.parquet")
        pq.write_table(table, path + ".tmp")
        os.replace(path + ".tmp", path)
        if table.num_rows:
            done["max"] = max(done["max"], max(table.column("value").to_pylist()))

    query = (
        _keyed_rate(spark, keys, rate, parallelism)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", checkpoint)
        .start()
    )
    while done["max"] < records - 1 and query.exception() is None:
        time.sleep(0.05)
    error = query.exception()
    query.stop()
    spark.stop()
    if error is not None:
        raise SystemExit(f"W4 spark child: the query failed: {str(error)[:300]}")


def _start_child(out: str, checkpoint: str, records: int, keys: int, parallelism: int, rate: float):
    argv = [sys.executable, os.path.abspath(__file__), out, checkpoint, str(records), str(keys), str(parallelism),
            str(rate)]  # fmt: skip
    return subprocess.Popen(argv, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _batch_files(out: str) -> list[str]:
    return sorted(glob.glob(os.path.join(out, "batch-*.parquet")))


def run_w4(records: int, keys: int, parallelism: int, *, rate: float) -> tuple[float, dict, dict]:
    m = per_key(records, keys)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="compare-w4-spark-") as tmp:
        out, checkpoint = os.path.join(tmp, "out"), os.path.join(tmp, "checkpoint")
        os.makedirs(out)
        first = _start_child(out, checkpoint, records, keys, parallelism, rate)
        deadline = time.monotonic() + 300
        while len(_batch_files(out)) < 3:
            if first.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"W4 spark: the first query ended or stalled: {first.stderr.read()[-500:]!r}")
            time.sleep(0.05)
        killed_at = time.time()
        os.killpg(first.pid, signal.SIGKILL)  # the driver's Python process and its JVM
        first.wait()
        second = _start_child(out, checkpoint, records, keys, parallelism, rate)
        flowing_at = None
        while second.poll() is None:
            if flowing_at is None:
                for path in _batch_files(out):
                    if os.stat(path).st_mtime > killed_at:
                        flowing_at = time.time()
                        break
            if time.monotonic() > deadline + 300:
                os.killpg(second.pid, signal.SIGKILL)
                raise SystemExit("W4 spark: the restarted query did not finish")
            time.sleep(0.02)
        if second.returncode != 0:
            raise SystemExit(f"W4 spark: the restarted query failed: {second.stderr.read()[-500:]!r}")
        pairs = []
        for path in _batch_files(out):
            table = pq.read_table(path, columns=["key", "seq"])
            pairs += zip(table.column("key").to_pylist(), table.column("seq").to_pylist())
    metrics = {
        "recovery_s": None if flowing_at is None else flowing_at - killed_at,
        "restarts": 1,
        "rows": len(pairs),
        "measures": "SIGKILL of the Spark application (driver + local executors) -> restarted query's first "
        "micro-batch output",
    }
    return time.perf_counter() - started, exactly_once(pairs, keys, m), metrics


if __name__ == "__main__":  # the W4 child: out checkpoint records keys parallelism rate
    faulthandler.enable(all_threads=True)
    out_dir, checkpoint_dir, n, k, p, r = sys.argv[1:7]
    w4_child(out_dir, checkpoint_dir, int(n), int(k), int(p), float(r))
