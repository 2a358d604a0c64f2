"""The autoscaler answering a step change of input rate: how long until it decides, rescales and catches up.

A keyed running count whose stage takes ``--cost-ms`` per record (a sleep: each
subtask then handles about ``1000 / cost`` records/s whatever the machine's
cores) reads a ``SequenceSource`` whose arrivals (a topic a producer writes to)
step from ``--rate`` to ``--step`` times that at ``--step-at`` seconds, and writes
to a DeltaSink. The local cluster starts with one TaskExecutor of one slot,
``slotmanager.number-of-slots.max`` 4; the autoscaler samples every second over
a 5 s window after a 3 s stabilization. Printed, from the step:

- time to the decision (the autoscaler's first scale-up decision);
- time until the rescaled job runs (the decision's rescale: every task running again);
- time until the backlog is gone: the first Delta commit after the last scale-up whose newest row
  arrived less than ``--caught-up`` seconds before the commit (a row's arrival time follows from
  the arrival schedule; a job that is behind commits rows that arrived long ago);
- every decision and rescale with its time, the slots the job used before and after, and each
  decision's per-vertex figures.

The Delta output is checked before any figure counts: every row's count is its
seq + 1 (keyed state moved intact) and no (key, seq) repeats.

    python benchmarks/autoscaling.py [--rate R] [--step F] [--cost-ms C]

``--spark`` runs the same on a Spark standalone cluster on 127.0.0.1 (master and worker from pyspark's
package, 4 one-core executors allowed by ``spark.cores.max``, this checkout shipped as
``spark.submit.pyFiles``): the TaskExecutors run on Spark executors, the executors that host none are
given back when the cluster starts, and a scale-up asks Spark for executors (docs/elastic.md, "On Spark
executors"). It also prints the application's executors at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
from deltalake import DeltaTable
from quiet import QuietWatch

from connectors import DeltaSink, SequenceSource
from flinklike_spark import KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor
from flinklike_spark.errors import JobCancelledError


class SlowRunningCount(KeyedProcessFunction):
    def __init__(self, seconds_per_record: float) -> None:
        self.seconds_per_record = seconds_per_record

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        time.sleep(self.seconds_per_record)
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield {"key": value["key"], "seq": value["seq"], "count": count}


def _get(url: str):
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.load(response)


def _commits(table: Path) -> list[tuple[float, int]]:
    """(commit time, the newest seq it added) of every Delta commit that added rows, in commit order."""
    commits = []
    for log in sorted((table / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in log.read_text().splitlines()]
        added = [a["add"]["path"] for a in actions if "add" in a]
        info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        if added and "timestamp" in info:
            newest = max(pq.read_table(table / path, columns=["seq"]).column("seq").to_pylist()[-1] for path in added)
            commits.append((info["timestamp"] / 1000, newest))
    return commits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=200.0, help="records/s before the step")
    parser.add_argument("--step", type=float, default=3.0, help="factor of the step")
    parser.add_argument("--step-at", type=float, default=20.0, help="seconds after the start")
    parser.add_argument("--cost-ms", type=float, default=3.0, help="milliseconds the keyed stage takes per record")
    parser.add_argument("--observe", type=float, default=60.0, help="seconds the job runs after the step")
    parser.add_argument("--caught-up", type=float, default=2.5, help="lag (s) of a commit that has caught up")
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--spark", action="store_true", help="TaskExecutors on a local Spark standalone cluster")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="autoscaling-bench-"))
    if not args.spark:
        run(args, work, {}, spark=None)
        return
    here = Path(__file__).resolve().parent
    sys.path.insert(0, str(here.parent))  # tests.support.spark_standalone
    from flinklike_spark.spark import session
    from tests.support.spark_standalone import StandaloneCluster, write_project_zip

    cluster = StandaloneCluster(work / "spark", cores=4).start()
    try:
        conf = cluster.spark_conf() | {"spark.cores.max": "4",
                                       "spark.submit.pyFiles": str(write_project_zip(work / "flinklike.zip"))}  # fmt: skip
        os.chdir(work)  # spark-warehouse
        spark = session("bench-autoscaling", master=None, config=conf)
        spark.sparkContext.setLogLevel("ERROR")
        settle = time.monotonic() + 300
        while os.getloadavg()[0] >= 0.5 and time.monotonic() < settle:  # the cluster's start is not the run's
            time.sleep(5)
        run(args, work, {"execution.target": "spark"}, spark=spark)
        spark.stop()
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


def _executors(spark) -> list[str]:
    from flinklike_spark.spark.task_executor_launcher import live_executors

    return sorted((eid for eid, _ in live_executors(spark.sparkContext)), key=int)


def run(args, work: Path, extra: dict, *, spark) -> None:
    """One run: the job, the step, the figures (``extra``: configuration for the Spark target)."""
    env = StreamExecutionEnvironment.get_execution_environment({
        **extra, "jobmanager.scheduler": "adaptive", "parallelism.default": 1, "rest.port": 0,
        "local.number-taskmanager": 1, "taskmanager.numberOfTaskSlots": 1, "slotmanager.number-of-slots.max": 4,
        "execution.checkpointing.interval": "1s", "execution.checkpointing.dir": str(work / "checkpoints"),
        "job.autoscaler.enabled": True, "autoscaler.standalone.control-loop.interval": "1s",
        "job.autoscaler.stabilization.interval": "3s", "job.autoscaler.metrics.window": "5s",
        "job.autoscaler.catch-up.duration": "30s", "job.autoscaler.restart.time": "3s",
    })  # fmt: skip
    source = SequenceSource(
        num_keys=args.keys, records_per_key=None, arrival_rates=[(0, args.rate), (args.step_at, args.rate * args.step)]
    )
    step_time = source.arrival_start + args.step_at
    (
        env.from_source(source, name="topic").uid("topic")
        .key_by("key").process(SlowRunningCount(args.cost_ms / 1000)).uid("count")
        .sink_to(DeltaSink(work / "out")).uid("out")
    )  # fmt: skip
    with QuietWatch() as watch:
        client = env.execute_async("autoscaling benchmark")
        base = f"{client.web_interface_url}/jobs/{client.job_id}"
        autoscaler = rescales = None
        while time.time() < step_time + args.observe:
            autoscaler, rescales = _get(f"{base}/autoscaler"), _get(f"{base}/rescales")["rescales"]
            time.sleep(0.5)
        slots = len(_get(f"{client.web_interface_url}/taskmanagers")["taskmanagers"])
        executors = _executors(spark) if spark is not None else None
        client.cancel()
        try:
            client.wait(120)
        except JobCancelledError:
            pass

    rows = DeltaTable(str(work / "out")).to_pyarrow_table(columns=["key", "seq", "count"]).to_pylist()
    assert rows and all(r["count"] == r["seq"] + 1 for r in rows), "a count is not its seq + 1: keyed state was lost"
    assert len({(r["key"], r["seq"]) for r in rows}) == len(rows), "a (key, seq) was written twice"
    rate, after_rate = args.rate, args.rate * args.step
    print(f"{len(rows):,} rows checked exactly once; {rate:.0f} -> {after_rate:.0f} records/s at {args.step_at:.0f} s; "
          f"{args.cost_ms} ms per record, {args.keys} keys; TaskExecutors on "
          f"{'Spark executors' if spark is not None else 'local processes'}")  # fmt: skip

    def arrived_at(seq: int) -> float:  # when every key's row ``seq`` had arrived
        needed = (seq + 1) * args.keys
        before = rate * args.step_at
        offset = needed / rate if needed <= before else args.step_at + (needed - before) / after_rate
        return source.arrival_start + offset

    for d in autoscaler["decisions"]:
        print(f"decision {d['id']} at {d['timestamp'] / 1000 - step_time:+6.1f} s: {d['reason']}")
        for v in d["vertices"]:
            print(f"    {v['vertexId']}: busy {v['busyRatio']}, true rate {v['trueProcessingRate']}/s, "
                  f"target {v['targetRate']}/s, catch-up {v['catchUpRate']}/s")  # fmt: skip
    for r in rescales:
        done = (r["timestamp"] + r["durationMs"]) / 1000 - step_time
        print(f"rescale {max(r['parallelismBefore'].values())} -> {max(r['parallelismAfter'].values())} running at "
              f"{done:+6.1f} s (took {r['durationMs'] / 1000:.1f} s): {r['cause']}")  # fmt: skip
    ups = [r for r in rescales if r["cause"].startswith("autoscaler: scale up")]
    if not ups:
        print(f"NO SCALE-UP within {args.observe:.0f} s of the step")
    else:
        last_up = (ups[-1]["timestamp"] + ups[-1]["durationMs"]) / 1000
        lags = [(at, at - arrived_at(seq)) for at, seq in _commits(work / "out")]
        gone = next((at for at, lag in lags if at > last_up and lag < args.caught_up), None)
        first = autoscaler["decisions"][0]["timestamp"] / 1000 - step_time
        print(f"time to the decision:           {first:6.1f} s")
        print(f"time to the rescaled job:       {(ups[0]['timestamp'] + ups[0]['durationMs']) / 1000 - step_time:6.1f} s"
              f" (the last scale-up: {last_up - step_time:.1f} s)")  # fmt: skip
        print("time until the backlog is gone: " + ("not within the run" if gone is None else
              f"{gone - step_time:6.1f} s (a commit's newest row arrived < {args.caught_up} s before it)"))  # fmt: skip
        print(f"slots used: {max(ups[0]['parallelismBefore'].values())} -> "
              f"{max(ups[-1]['parallelismAfter'].values())} (TaskExecutors of 1 slot at the end: {slots})")  # fmt: skip
    if executors is not None:
        print(f"Spark executors at the end: {executors}")
    watch.report()


if __name__ == "__main__":
    main()
