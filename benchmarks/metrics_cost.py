"""The cost of metrics reporting on the per-record keyed count, measured in one run (with / without).

Without: the cluster's defaults, nobody asks for metrics (the task counters
still count, as Flink's always do, and heartbeats carry them every 10 s).
With: the Prometheus reporter on (``metrics.reporter.prom.*``),
``metrics.fetcher.update-interval`` set to ``--poll-interval``, and a client
thread that, every ``--poll-interval`` (default 1 s), scrapes ``/metrics``
and GETs ``/jobs/:jobid`` and the vertices' ``subtasks/metrics``: what an
open dashboard plus a Prometheus server do, more often than Flink's defaults
(dashboard every 3 s, metrics fetched every 10 s, Prometheus typically every
15 s). ``--poll-interval 0.1`` is a stress case.

Rounds alternate without / with back to back (a shared machine drifts over
tens of seconds); the summary is the median of the rounds' ratios.

    python benchmarks/metrics_cost.py [--records N] [--rounds N] [--task-managers N]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import threading
import time
import urllib.request

from benchmarks.throughput import NUM_KEYS, keyed_count
from flinklike_spark import Configuration, StreamExecutionEnvironment
from flinklike_spark._runtime.minicluster import MiniCluster
from flinklike_spark._runtime.network.ports import free_port
from flinklike_spark.config import PROMETHEUS_REPORTER_FACTORY


def _poll(url: str, prometheus: str, job_id: str, stop: threading.Event, counter: list[int], every: float) -> None:
    while not stop.wait(every):
        try:
            urllib.request.urlopen(prometheus, timeout=5).read()
            job = json.loads(urllib.request.urlopen(f"{url}/jobs/{job_id}", timeout=5).read())
            for vertex in job["vertices"]:
                urllib.request.urlopen(f"{url}/jobs/{job_id}/vertices/{vertex['id']}/subtasks/metrics"
                                       "?get=numRecordsInPerSecond,busyTimeMsPerSecond", timeout=5).read()  # fmt: skip
            counter[0] += 1
        except OSError:
            pass  # the job (and cluster) just ended


def run(records: int, task_managers: int, *, reporting: bool, every: float = 1.0) -> tuple[float, int]:
    """(records per second from submission to the end, polls made while it ran)."""
    values = {"parallelism.default": task_managers, "local.number-taskmanager": task_managers, "rest.port": 0}
    port = free_port()
    if reporting:
        values.update({"metrics.reporter.prom.factory.class": PROMETHEUS_REPORTER_FACTORY,
                       "metrics.reporter.prom.port": str(port),
                       "metrics.fetcher.update-interval": f"{int(every * 1000)}ms"})  # fmt: skip
    config = Configuration(values)
    env = StreamExecutionEnvironment.get_execution_environment(config)
    keyed_count(env, records)
    polls = [0]
    with MiniCluster(config) as cluster:
        client = cluster.submit_job(env.get_job_graph("keyed count"))
        stop = threading.Event()
        poller = None
        if reporting:
            poller = threading.Thread(target=_poll, args=(client.web_interface_url, f"http://127.0.0.1:{port}/metrics",
                                                          client.job_id, stop, polls, every), daemon=True)  # fmt: skip
        started = time.perf_counter()
        if poller is not None:
            poller.start()
        result = client.wait(timeout=1800)
        elapsed = time.perf_counter() - started
        stop.set()
        if poller is not None:
            poller.join()
    totals = result.accumulators["rows"]
    counted = sum(t["counted"] for t in totals)
    if counted != records or sum(t["rows"] for t in totals) != NUM_KEYS:
        raise SystemExit(f"keyed count accounted for {counted} records, expected {records}")
    return records / elapsed, polls[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--task-managers", type=int, default=2)
    parser.add_argument("--poll-interval", type=float, default=1.0, help="seconds between polls (default 1)")
    args = parser.parse_args()
    print(f"machine: {platform.machine()} cores={os.cpu_count()} python={platform.python_version()}")
    ratios = []
    for round_number in range(1, args.rounds + 1):
        without, _ = run(args.records, args.task_managers, reporting=False)
        with_, polls = run(args.records, args.task_managers, reporting=True, every=args.poll_interval)
        ratios.append(with_ / without)
        print(f"  round {round_number}: without {without:,.0f} rec/s | with {with_:,.0f} rec/s ({polls} polls) "
              f"| with/without {ratios[-1]:.3f}", flush=True)  # fmt: skip
    print(
        f"keyed count, {args.task_managers} TM, {args.records:,} records, polls every {args.poll_interval} s: "
        f"with/without metrics reporting "
        f"{statistics.median(ratios):.3f} (median of {args.rounds} rounds; target >= 0.95)"
    )


if __name__ == "__main__":
    main()
