"""Keyed-count throughput with TaskExecutors on 2 Spark executors vs. the local 2-process cluster.

Starts a real Spark standalone cluster on 127.0.0.1 (master + worker from pyspark's
package, 2 one-core executors, as the tests in ``tests/sparkcluster`` do), builds a
SparkSession on it with this checkout shipped as ``spark.submit.pyFiles``, and runs the
per-record keyed count of ``benchmarks/throughput.py`` (SequenceSource -> key_by ->
KeyedProcessFunction with ValueState, parallelism 2) alternately

  local: a MiniCluster with 2 TaskExecutor processes (``execution.target: local``), and
  spark: 2 TaskExecutors as one barrier stage on the 2 Spark executors (``execution.target: spark``).

Throughput counts from submission to the end of the job; cluster start-up (processes,
or the barrier stage and registrations) is excluded in both. The summary gives the
median throughputs and the median of the rounds' spark/local ratios.

    python benchmarks/spark_executors.py [--records N] [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # throughput.py, tests.support.spark_standalone

from throughput import NUM_KEYS, keyed_count  # noqa: E402

from flinklike_spark import Configuration, StreamExecutionEnvironment  # noqa: E402
from flinklike_spark._runtime.minicluster import MiniCluster  # noqa: E402
from tests.support.spark_standalone import StandaloneCluster, write_project_zip  # noqa: E402


def timed(cluster, env: StreamExecutionEnvironment, records: int) -> float:
    """Records per second of one keyed count on a started ``cluster``, which is closed after."""
    with cluster:
        client = cluster.submit_job(env.get_job_graph("keyed count"))
        started = time.perf_counter()
        result = client.wait(timeout=1800)
        elapsed = time.perf_counter() - started
    totals = result.accumulators["rows"]
    rows, counted = sum(t["rows"] for t in totals), sum(t["counted"] for t in totals)
    if rows != NUM_KEYS or counted != records:
        raise SystemExit(f"{rows} output rows accounting for {counted} records, expected {NUM_KEYS} and {records}")
    return records / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=4_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from flinklike_spark.spark import session
    from flinklike_spark.spark.task_executor_launcher import spark_cluster

    work = Path(tempfile.mkdtemp(prefix="bench-spark-executors-"))
    cluster = StandaloneCluster(work).start()
    try:
        conf = cluster.spark_conf() | {"spark.submit.pyFiles": str(write_project_zip(work / "flinklike.zip"))}
        os.chdir(work)  # spark-warehouse
        spark = session("bench-spark-executors", master=None, config=conf)
        spark.sparkContext.setLogLevel("ERROR")
        spark.sparkContext.addPyFile(str(HERE / "throughput.py"))  # the job's functions live there
        print(f"machine: {platform.machine()} cores={os.cpu_count()} python={platform.python_version()} "
              f"load={os.getloadavg()[0]:.1f} (shared with other work); spark master {cluster.master_url}, "
              f"2 executors x 1 core; {args.records:,} records, {NUM_KEYS} keys", flush=True)  # fmt: skip
        config = Configuration({"parallelism.default": 2, "local.number-taskmanager": 2})
        local_rates, spark_rates, ratios = [], [], []
        for round_ in range(args.rounds):
            env = StreamExecutionEnvironment.get_execution_environment(config)
            keyed_count(env, args.records)
            local = timed(MiniCluster(config), env, args.records)
            spark_rate = timed(spark_cluster(config, spark), env, args.records)
            local_rates.append(local)
            spark_rates.append(spark_rate)
            ratios.append(spark_rate / local)
            print(f"round {round_ + 1}: local 2 processes {local:,.0f} rec/s, 2 Spark executors "
                  f"{spark_rate:,.0f} rec/s, ratio {spark_rate / local:.2f}", flush=True)  # fmt: skip
        print(f"median: local {statistics.median(local_rates):,.0f} rec/s, spark {statistics.median(spark_rates):,.0f} "
              f"rec/s, spark/local {statistics.median(ratios):.2f}")  # fmt: skip
        spark.stop()
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
