"""Failover cost on this machine, measured in one run.

A job of 4 independent pipelined regions (source -> map -> sink over forward
edges, chaining off, parallelism 4, 2 TaskExecutor processes x 2 slots) runs
unbounded; the map of subtask 2 is made to fail on demand. Prints:

  (a) recovery time, failure detected -> every restarted task RUNNING again,
      with ``fixed-delay`` and a 0 ms delay (so no backoff is included), for
      ``region`` failover (3 tasks restart) and ``full`` failover (12 tasks),
      median of ``--repeats`` failures each;
  (b) the throughput (rows/s written by the sinks) of the three unaffected
      regions in the ``--window`` seconds before a failure, and while the
      failed region restarts (here with a ``--delay`` s backoff, so the
      restart lasts long enough to measure), and their ratio.

"Failure detected" is when the JobMaster handled the failure (the exception
history's timestamp); "running" is the RUNNING timestamp of the new attempts'
executions. Targets (the failover design's): region recovery under 1 s; unaffected regions
keep at least 90% of their throughput.

    python benchmarks/recovery.py [--repeats N] [--delay S] [--window S]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from connectors import SequenceSource
from flinklike_spark import Configuration, MapFunction, Sink, SinkWriter, StreamExecutionEnvironment
from flinklike_spark._runtime.graph.execution_state import ExecutionState
from flinklike_spark._runtime.minicluster import MiniCluster

PARALLELISM = 4
FAILING = 2


class FailOnDemand(MapFunction):
    """Subtask ``FAILING`` raises once per file ``<dir>/fail`` (removed first: exactly once)."""

    def __init__(self, directory: str) -> None:
        self.trigger = os.path.join(directory, "fail")

    def open(self, runtime_context):
        self.armed = runtime_context.index_of_this_subtask == FAILING

    def map(self, value):
        if self.armed:
            try:
                os.remove(self.trigger)
            except FileNotFoundError:
                return value
            raise RuntimeError("benchmark failure")
        return value


class RateSink(Sink):
    """Appends ``<wall time> <rows>`` per batch to ``<dir>/rows-<subtask>``."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def create_writer(self, context):
        return _RateWriter(Path(self.directory) / f"rows-{context.subtask_index}")


class _RateWriter(SinkWriter):
    def __init__(self, path: Path) -> None:
        self.file = path.open("a", buffering=1)

    def write(self, batch):
        self.file.write(f"{time.time():.4f} {batch.num_rows}\n")

    def close(self):
        self.file.close()


def rows_between(directory: Path, subtask: int, start: float, end: float) -> int:
    path = directory / f"rows-{subtask}"
    total = 0
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and start <= float(parts[0]) < end:
            total += int(parts[1])
    return total


def start_job(strategy: str, delay: float, directory: Path):
    config = Configuration(
        {
            "parallelism.default": PARALLELISM,
            "local.number-taskmanager": 2,
            "taskmanager.numberOfTaskSlots": 2,
            "jobmanager.execution.failover-strategy": strategy,
            "restart-strategy.type": "fixed-delay",
            "restart-strategy.fixed-delay.attempts": 1000,
            "restart-strategy.fixed-delay.delay": f"{int(delay * 1000)} ms",
        }
    )
    env = StreamExecutionEnvironment(config)
    env.disable_operator_chaining()
    (
        env.from_source(
            SequenceSource(num_keys=16, records_per_key=None, rows_per_second=40_000, batch_size=256), name="seq"
        )  # fmt: skip
        .map(FailOnDemand(str(directory)))
        .sink_to(RateSink(str(directory)))
    )
    cluster = MiniCluster(config)
    cluster.start()
    client = cluster.submit_job(env.get_job_graph(f"recovery-{strategy}"))
    return cluster, client, cluster._jobs[client.job_id]


def all_running(job) -> bool:
    return all(v.current_execution.state is ExecutionState.RUNNING for v in job.graph.vertices())


def wait(condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the job did not get there in time")
        time.sleep(0.01)


def fail_once(job, client, directory: Path):
    """Trigger one failure; return (failure time, the restarted vertex ids)."""
    before = len(client.get_exception_history())
    (directory / "fail").write_text("x")
    wait(lambda: len(client.get_exception_history()) > before)
    entry = client.get_exception_history()[-1]
    return entry.timestamp.timestamp(), entry.restarted


def recovery_times(strategy: str, repeats: int) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        cluster, client, job = start_job(strategy, 0.0, directory)
        try:
            wait(lambda: all_running(job))
            times = []
            for _ in range(repeats):
                time.sleep(1.0)
                failed_at, restarted = fail_once(job, client, directory)
                vertices = [v for v in job.graph.vertices() if str(v.id) in restarted]
                wait(lambda vertices=vertices: all(
                    v.current_execution.state is ExecutionState.RUNNING and v.prior_executions
                    and v.prior_executions[-1].is_terminal for v in vertices) and all_running(job))  # fmt: skip
                running_at = max(v.current_execution.state_timestamps[ExecutionState.RUNNING] for v in vertices)
                times.append(running_at - failed_at)
            return times
        finally:
            client.cancel()
            cluster.close()


def unaffected_throughput(delay: float, window: float) -> tuple[float, float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        cluster, client, job = start_job("region", delay, directory)
        try:
            wait(lambda: all_running(job))
            time.sleep(window + 1.0)
            failed_at, _ = fail_once(job, client, directory)
            wait(lambda: all_running(job))
            back_at = time.time()
            time.sleep(0.5)
            others = [s for s in range(PARALLELISM) if s != FAILING]
            before = sum(rows_between(directory, s, failed_at - window, failed_at) for s in others) / window
            during = sum(rows_between(directory, s, failed_at, back_at) for s in others) / (back_at - failed_at)
            return before, during, back_at - failed_at
        finally:
            client.cancel()
            cluster.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="failures per strategy for (a)")
    parser.add_argument("--delay", type=float, default=3.0, help="restart delay (s) while measuring (b)")
    parser.add_argument("--window", type=float, default=3.0, help="seconds of throughput before the failure (b)")
    args = parser.parse_args()
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"# {platform.node()} {platform.python_version()} {os.cpu_count()} cores, {when}")
    results = {}
    for strategy in ("region", "full"):
        times = recovery_times(strategy, args.repeats)
        results[strategy] = statistics.median(times)
        print(f"(a) {strategy:6} recovery (failure handled -> restarted tasks RUNNING, no backoff): "
              f"median {results[strategy] * 1000:.0f} ms, runs {[round(t * 1000) for t in times]} ms")  # fmt: skip
    before, during, restart = unaffected_throughput(args.delay, args.window)
    print(f"(b) unaffected regions: {before:,.0f} rows/s before, {during:,.0f} rows/s during a {restart:.2f} s "
          f"restart of region {FAILING} ({during / before:.0%})")  # fmt: skip
    print(
        f"summary: region {results['region'] * 1000:.0f} ms, full {results['full'] * 1000:.0f} ms "
        f"(target region < 1000 ms); unaffected throughput {during / before:.0%} (target >= 90%)"
    )


if __name__ == "__main__":
    main()
