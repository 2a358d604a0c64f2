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

``--failover`` measures executor loss instead (issue 31 item 4): the ``regions`` scenario
of ``tests/sparkcluster/cluster_jobs.py`` (two pipelined regions, one per TaskExecutor,
800 rows/s into a DeltaSink, ``fixed-delay`` restarts after ``--restart-delay``) with
``--redundant`` spare TaskExecutors (``slotmanager.redundant-taskmanager-num``) on 2 +
``--redundant`` one-core executors; each round SIGKILLs the executor JVM of subtask 0's
TaskExecutor and reports kill -> restarted sink's first record, kill -> the lost region's
redeployment (and onto which TaskExecutor) and kill -> the replacement's registration.

    python benchmarks/spark_executors.py --failover [--redundant N] [--restart-delay "0 ms"] [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import signal
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
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


def _killer(cluster: StandaloneCluster):
    """``kill(placement)`` for the regions scenario: SIGKILL the executor JVM hosting subtask 0's TaskExecutor."""

    def kill(placement: dict) -> tuple[float, int]:
        import psutil

        kill.hosts = sorted({p["resource_id"] for p in placement.values()})

        executors = {e.pid: e for e in cluster.executor_processes()}
        pid = placement["delta-0"]["pid"]
        [executor] = [executors[p.pid] for p in psutil.Process(pid).parents() if p.pid in executors]
        executor.send_signal(signal.SIGKILL)
        return time.time(), 0

    return kill


def failover(args: argparse.Namespace) -> None:
    from flinklike_spark.spark import session

    sys.path.insert(0, str(HERE.parent / "tests" / "sparkcluster"))
    import cluster_jobs

    work = Path(tempfile.mkdtemp(prefix="bench-spark-failover-"))
    executors = 2 + args.redundant
    cluster = StandaloneCluster(work, cores=executors).start()
    try:
        conf = cluster.spark_conf() | {
            "spark.cores.max": str(executors),
            "spark.submit.pyFiles": str(write_project_zip(work / "flinklike.zip")),
        }
        os.chdir(work)  # spark-warehouse
        spark = session("bench-spark-failover", master=None, config=conf)
        spark.sparkContext.setLogLevel("ERROR")
        spark.sparkContext.addPyFile(cluster_jobs.__file__)  # the job's functions live there
        print(f"machine: {platform.machine()} cores={os.cpu_count()} python={platform.python_version()} "
              f"load={os.getloadavg()[0]:.1f} (shared with other work); {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; "
              f"spark master {cluster.master_url}, {executors} executors x 1 core; redundant={args.redundant}, "
              f"restart delay {args.restart_delay}", flush=True)  # fmt: skip
        recoveries = []
        for round_ in range(args.rounds):
            directory = work / f"round-{round_}"
            job = {"checkpoints": str(directory / "checkpoints"), "table": str(directory / "out"),
                   "records_per_key": 4_000, "rate": 800, "redundant": args.redundant,
                   "restart_delay": args.restart_delay}  # fmt: skip
            load = os.getloadavg()[0]
            kill = _killer(cluster)
            result = cluster_jobs.regions(spark, job, kill=kill)
            recoveries.append(result["recovery_seconds"])
            spares = sorted(set(result["task_executors_before"]) - set(kill.hosts))
            print(f"round {round_ + 1} (load {load:.1f}): kill -> restarted sink's first record "
                  f"{result['recovery_seconds']} s; redeployed after {result['redeployed_at']} s onto "
                  f"{result['redeployed_on']} (spares before the kill: {spares}); "
                  f"replacement registered after {result['replacements_registered']} s; restarts "
                  f"{result['restarts']}", flush=True)  # fmt: skip
        print(f"median kill -> output again: {statistics.median(r for r in recoveries if r is not None)} s "
              f"(redundant={args.redundant})")  # fmt: skip
        spark.stop()
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=4_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--failover", action="store_true", help="measure executor loss instead of throughput")
    parser.add_argument("--redundant", type=int, default=1, help="--failover: spare TaskExecutors")
    parser.add_argument("--restart-delay", default="0 ms", help="--failover: fixed-delay restart delay")
    args = parser.parse_args()
    if args.failover:
        failover(args)
        return
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
