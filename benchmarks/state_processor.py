"""Time of the State Processor API's steps on one keyed count of ``--keys`` keys, in one process.

With ``--spark`` (a local Spark session with Delta): a history Delta table of
2.5 events per key is written, Spark counts per key, and that DataFrame is the
bootstrap data (``toArrow`` is timed on its own). Without it the counts are a
pyarrow table. Then, timed: writing the savepoint (``SavepointWriter``: key
groups, pickling, Parquet, Delta commit), reading it back decoded
(``SavepointReader.read_keyed_state``), deriving a copy (``from_existing_savepoint``),
and a 2-TaskExecutor job restoring it and counting 3,000 new events.

    python benchmarks/state_processor.py [--keys 1000000] [--spark]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time

import pyarrow as pa

from flinklike_spark.state_processor import OperatorTransformation, SavepointReader, SavepointWriter
from tests.support.state_processor_jobs import run_count_job


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--spark", action="store_true", help="bootstrap from a Delta table with Spark")
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="state-processor-")
    steps: dict[str, float] = {}

    def timed(name, call):
        started = time.perf_counter()
        result = call()
        steps[name] = time.perf_counter() - started
        return result

    if args.spark:
        from pyspark.sql import functions as F

        from flinklike_spark.spark import session

        spark = timed(
            "spark session", lambda: session("state-processor-benchmark", config={"spark.ui.enabled": "false"})
        )
        events = int(args.keys * 2.5)
        timed(
            "write the history Delta table",
            lambda: (
                spark.range(events)
                .select(((F.col("id") * 48271) % args.keys).alias("key"))
                .write.format("delta")
                .save(f"{directory}/history")
            ),
        )
        counts = spark.read.format("delta").load(f"{directory}/history").groupBy("key").agg(F.count("*").alias("count"))
        data = timed("Spark groupBy count + toArrow", counts.toArrow)
    else:
        data = pa.table({"key": list(range(args.keys)), "count": [3] * args.keys})
    bootstrap = OperatorTransformation.bootstrap_with(data).key_by("key").states("count")
    path = timed("write the savepoint", lambda: SavepointWriter.new_savepoint().with_operator("count", bootstrap)
                 .write(f"{directory}/savepoints"))  # fmt: skip
    state = timed("read_keyed_state", lambda: SavepointReader.read(path).read_keyed_state("count"))
    assert state.num_rows == args.keys
    derived = timed(
        "derive a copy", lambda: SavepointWriter.from_existing_savepoint(path).write(f"{directory}/savepoints")
    )
    rng = random.Random(1)
    new = [{"key": rng.randrange(args.keys), "amount": 1} for _ in range(3000)]
    config = {"parallelism.default": 2, "local.number-taskmanager": 2, "execution.state-recovery.path": derived}
    rows = timed("job: restore + 3,000 events", lambda: run_count_job(config, new))
    assert len(rows) == 3000
    for name, seconds in steps.items():
        print(f"{name:40s} {seconds:7.2f} s")


if __name__ == "__main__":
    main()
