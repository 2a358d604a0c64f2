"""Checkpointing cost on this machine, measured in one run.

Prints
  (1) checkpoint duration under backpressure (a keyed stage that takes 1 ms per
      record) for aligned and unaligned checkpoints, and the ratio aligned /
      unaligned (target: unaligned at least 20x faster);
  (2) throughput of the per-record keyed count with checkpoints every second
      versus without, and the ratio (target: at least 90%).

Durations are Flink's end-to-end durations (trigger to last acknowledgement),
read back from the ``checkpoints`` Delta table.

    python benchmarks/checkpoint_cost.py [--seconds 20] [--records 10000000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from quiet import QuietWatch
from throughput import CountingSink, keyed_count

from checkpointing import list_completed_checkpoints
from connectors import SequenceSource
from flinklike_spark import Configuration, KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor
from flinklike_spark._runtime.minicluster import MiniCluster


class OneMillisecondPerRecord(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)
        time.sleep(0.001)


def checkpoint_durations(mode: str, seconds: float) -> list[float]:
    """Run the backpressured job for ``seconds``; return completed checkpoint durations (ms)."""
    directory = tempfile.mkdtemp(prefix=f"bench-{mode}-")
    config = Configuration(
        {
            "parallelism.default": 2,
            "local.number-taskmanager": 2,
            "execution.checkpointing.interval": "1s",
            "execution.checkpointing.dir": directory,
            "execution.checkpointing.unaligned.enabled": mode == "unaligned",
            "execution.checkpointing.num-retained": 1000,
            "taskmanager.memory.segment-size": "4kb",
        }
    )
    env = StreamExecutionEnvironment.get_execution_environment(config)
    source = SequenceSource(num_keys=100, records_per_key=10**9)  # effectively unbounded
    env.from_source(source, name="seq").key_by("key").process(OneMillisecondPerRecord()).uid("slow").sink_to(
        CountingSink()
    )
    with MiniCluster(config) as cluster:
        client = cluster.submit_job(env.get_job_graph(f"backpressure-{mode}"))
        time.sleep(seconds)
        client.cancel()
        try:
            client.wait(60)
        except Exception:  # noqa: BLE001 - cancelled on purpose
            pass
    return [c.duration.total_seconds() * 1000 for c in list_completed_checkpoints(directory, client.job_id)]


def keyed_count_throughput(records: int, checkpoints: bool) -> float:
    settings = {"parallelism.default": 2, "local.number-taskmanager": 2}
    if checkpoints:
        settings |= {
            "execution.checkpointing.interval": "1s",
            "execution.checkpointing.dir": tempfile.mkdtemp(prefix="bench-throughput-"),
        }
    config = Configuration(settings)
    env = StreamExecutionEnvironment.get_execution_environment(config)
    keyed_count(env, records)
    with MiniCluster(config) as cluster:
        client = cluster.submit_job(env.get_job_graph("keyed count"))
        started = time.perf_counter()
        client.wait(1800)
        elapsed = time.perf_counter() - started
        completed = len(list_completed_checkpoints(settings["execution.checkpointing.dir"])) if checkpoints else 0
    if checkpoints and not completed:
        raise SystemExit("no checkpoint completed during the throughput run; raise --records")
    return records / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0, help="run time of each backpressured job")
    parser.add_argument("--records", type=int, default=20_000_000, help="records of each throughput run")
    args = parser.parse_args()

    results = {}
    with QuietWatch() as quiet:
        for mode in ("aligned", "unaligned"):
            durations = checkpoint_durations(mode, args.seconds)
            if not durations:
                raise SystemExit(f"no {mode} checkpoint completed within {args.seconds} s; raise --seconds")
            results[mode] = statistics.median(durations)
            print(f"(1) {mode:9s} checkpoints under backpressure: {len(durations)} completed, "
                  f"median {results[mode]:,.0f} ms, max {max(durations):,.0f} ms")  # fmt: skip
        speedup = results["aligned"] / results["unaligned"]
        quiet.target(f"(1) unaligned is {speedup:.1f}x faster than aligned (target >= 20x)", speedup >= 20)

        without = keyed_count_throughput(args.records, checkpoints=False)
        with_checkpoints = keyed_count_throughput(args.records, checkpoints=True)
        share = with_checkpoints / without
        quiet.target(f"(2) keyed count: {without:,.0f} rec/s without checkpoints, {with_checkpoints:,.0f} rec/s "
                     f"with 1 s checkpoints: {share:.0%} (target >= 90%)", share >= 0.9)  # fmt: skip
    quiet.report()


if __name__ == "__main__":
    main()
