"""Spark Structured Streaming's runner (its own venv):
``python engine_spark.py W2 --records N --keys K --parallelism P --input DIR --batches B``.

The input is the shared Parquet files of ``inputs.py`` in ``--input`` (the first
``N / rows_per_file`` files, hard-linked into a directory of their own), read as a
stream with ``maxFilesPerTrigger`` = files / B (B micro-batches; B = 1: the whole
input in one micro-batch) and ``Trigger.AvailableNow``, on ``local[P]`` with
``--shuffle-partitions`` (default P) shuffle partitions and Arrow batches of 65,536 rows to the Python workers
(``spark.sql.execution.arrow.maxRecordsPerBatch``; Spark's default is 10,000).
Without ``--input`` the files are written to a temporary directory first. W1:
``mapInArrow``; W2: ``groupBy(key).applyInPandasWithState`` (per-key count in
state, emitted when it reaches the key's last record); W2v: native
``groupBy(window(ts, 1 s), key).count()`` (update mode). The time reported is
Spark's *busy time*: the sum of the micro-batches' ``triggerExecution``
durations from the query's progress reports (session start, file listing
between batches and idle time excluded); the wall time and the micro-batch
count are reported beside it. W4 and W5 are in ``scenarios_spark.py`` (``--rate``).
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import tempfile
import time

import pyarrow as pa
from workloads import WINDOW_MS, per_key, print_result


def linked_input(input_dir: str, target: str, records: int, keys: int) -> int:
    """Hard links to the files of the first ``records`` rows in ``target`` (Spark reads a directory); their count."""
    from inputs import input_files

    files = input_files(input_dir, records, keys)
    os.makedirs(target)
    for path in files:
        os.link(path, os.path.join(target, os.path.basename(path)))
    return len(files)


def main() -> None:
    faulthandler.enable(all_threads=True)  # a native crash (SIGSEGV) leaves every thread's stack on stderr
    parser = argparse.ArgumentParser()
    parser.add_argument("workload")
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--parallelism", type=int, default=1)
    parser.add_argument("--rate", type=float, default=1000.0, help="W4, W5: the rate source's rows per second")
    parser.add_argument("--input", default=None, help="W1, W2, W2v: the shared Parquet files' directory (inputs.py)")
    parser.add_argument("--batches", type=int, default=1, help="W1, W2, W2v: micro-batches the input is read in")
    parser.add_argument("--shuffle-partitions", type=int, default=None, help="spark.sql.shuffle.partitions (default P)")
    args = parser.parse_args()
    if args.workload in ("W4", "W5"):
        import scenarios_spark

        run = scenarios_spark.run_w4 if args.workload == "W4" else scenarios_spark.run_w5
        seconds, summary, metrics = run(args.records, args.keys, args.parallelism, rate=args.rate)
        print_result(seconds, summary, metrics=metrics)
        return
    m = per_key(args.records, args.keys)

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    spark = (
        SparkSession.builder.master(f"local[{args.parallelism}]")
        .config("spark.sql.shuffle.partitions", str(args.shuffle_partitions or args.parallelism))
        .config("spark.sql.streaming.numRecentProgressUpdates", "100000")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "65536")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    with tempfile.TemporaryDirectory(dir=args.input) as tmp:
        if args.input is None:
            from inputs import ensure_input

            ensure_input(os.path.join(tmp, "all"), args.records, args.keys, min(args.records, 1_000_000))
        data = os.path.join(tmp, "in")
        files = linked_input(args.input or os.path.join(tmp, "all"), data, args.records, args.keys)
        per_trigger = -(-files // max(1, args.batches))
        schema = "key long, seq long, ts timestamp"
        stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", per_trigger).parquet(data)
        totals = {"rows": 0, "sum": 0}
        latest: dict = {}

        if args.workload == "W1":

            def transform(batches):
                import pyarrow.compute as pc

                for b in batches:
                    yield pa.RecordBatch.from_arrays(
                        [b.column(0), pc.add(pc.multiply(b.column(1), 3), 1)], ["key", "value"]
                    )

            out = stream.mapInArrow(transform, "key long, value long")

            def sink(df, _batch_id):
                row = df.agg(F.count("*").alias("n"), F.sum("value").alias("s")).collect()[0]
                totals["rows"] += row["n"]
                totals["sum"] += row["s"] or 0

            mode = "append"
        elif args.workload == "W2":
            import pandas as pd

            def count(key, frames, state):
                current = state.get[0] if state.exists else 0
                for frame in frames:
                    current += len(frame)
                state.update((current,))
                if current == m:
                    yield pd.DataFrame({"key": [key[0]], "count": [current]})

            out = stream.groupBy("key").applyInPandasWithState(
                count, "key long, count long", "count long", "Update", GroupStateTimeout.NoTimeout
            )

            def sink(df, _batch_id):
                for row in df.collect():
                    totals["rows"] += 1
                    totals["sum"] += row["count"]

            mode = "update"
        elif args.workload == "W2v":
            out = (
                stream.withWatermark("ts", "0 seconds")
                .groupBy(F.window("ts", f"{WINDOW_MS} milliseconds"), "key")
                .count()
                .select("key", F.col("window.start").alias("start"), "count")
            )

            def sink(df, _batch_id):
                for row in df.collect():
                    latest[(row["key"], row["start"])] = row["count"]

            mode = "update"
        else:
            raise SystemExit(f"spark: unknown workload {args.workload!r}")
        started = time.perf_counter()
        query = out.writeStream.outputMode(mode).foreachBatch(sink).trigger(availableNow=True).start()
        query.awaitTermination()
        wall = time.perf_counter() - started
        progress = [p for p in query.recentProgress if p["numInputRows"]]
        busy_ms = sum(p["durationMs"].get("triggerExecution", 0) for p in progress)
        if args.workload == "W2v":
            totals = {"rows": len(latest), "sum": sum(latest.values())}
        summary = {"rows": totals["rows"], "total": totals["sum"]} if args.workload == "W1" else totals
    spark.stop()
    print_result(
        busy_ms / 1000, summary, wall_seconds=wall, micro_batches=len(progress), max_files_per_trigger=per_trigger
    )


if __name__ == "__main__":
    main()
