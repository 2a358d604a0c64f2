"""Runtime-core throughput on this machine, measured in one run.

Prints records per second of
  (a) a vectorized stateless pipeline: SequenceSource -> map_batches (Arrow compute) -> filter-free discard sink,
  (b) the per-record keyed count: SequenceSource -> key_by("key") -> KeyedProcessFunction with ValueState,
each with 1 and 2 TaskExecutor processes (parallelism = number of TaskExecutors), and the 2-vs-1 scaling ratios.

Throughput counts from job submission to the end of the job (deployment included), cluster start-up excluded.
Each pipeline is measured in ``--rounds`` rounds of a 1-TM run followed by a 2-TM run; the summary line
gives the median throughputs and the median of the rounds' ratios.

    python benchmarks/throughput.py [--records-a N] [--records-b N] [--rounds N]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import pyarrow as pa
import pyarrow.compute as pc
from quiet import QuietWatch

from connectors import SequenceSource
from flinklike_spark import (
    Configuration,
    KeyedProcessFunction,
    Sink,
    SinkWriter,
    StreamExecutionEnvironment,
    ValueStateDescriptor,
)
from flinklike_spark._runtime.minicluster import MiniCluster

END_OF_TIME = 2**62
NUM_KEYS = 1000


class CountingWriter(SinkWriter):
    """Counts rows, and sums the "count" column when there is one (the keyed count's output)."""

    def __init__(self) -> None:
        self.rows = 0
        self.counted = 0

    def write(self, batch: pa.RecordBatch) -> None:
        self.rows += batch.num_rows
        if "count" in batch.schema.names:
            self.counted += pc.sum(batch.column("count")).as_py() or 0

    def accumulator(self):
        return {"rows": self.rows, "counted": self.counted}


class CountingSink(Sink):
    name = "rows"

    def create_writer(self, context):
        return CountingWriter()


class CountPerKey(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        current = self.count.value()
        if current is None:
            ctx.timer_service().register_event_time_timer(END_OF_TIME)
            current = 0
        self.count.update(current + 1)

    def on_timer(self, timestamp, ctx):
        yield {"key": ctx.get_current_key(), "count": self.count.value()}


def vectorized(env: StreamExecutionEnvironment, records: int) -> None:
    source = SequenceSource(num_keys=NUM_KEYS, records_per_key=records // NUM_KEYS, batch_size=65536)
    env.from_source(source, name="seq").map_batches(
        lambda b: pa.RecordBatch.from_arrays(
            [b.column(0), pc.add(pc.multiply(b.column(1), 3), 1)], names=["key", "value"]
        )
    ).sink_to(CountingSink())


def keyed_count(env: StreamExecutionEnvironment, records: int) -> None:
    source = SequenceSource(num_keys=NUM_KEYS, records_per_key=records // NUM_KEYS)
    env.from_source(source, name="seq").key_by("key").process(CountPerKey()).sink_to(CountingSink())


def run_timed(env: StreamExecutionEnvironment, config: Configuration, name: str) -> tuple[int, int, float]:
    """Run the job on a fresh MiniCluster: ``(CountingSink rows, their "count" sum, seconds from
    submission to the end)``; cluster start-up is not timed."""
    with MiniCluster(config) as cluster:
        client = cluster.submit_job(env.get_job_graph(name))
        started = time.perf_counter()
        result = client.wait(timeout=1800)
        elapsed = time.perf_counter() - started
    totals = result.accumulators["rows"]
    return sum(t["rows"] for t in totals), sum(t["counted"] for t in totals), elapsed


def measure(build, records: int, task_managers: int, extra: dict) -> float:
    config = Configuration({"parallelism.default": task_managers, "local.number-taskmanager": task_managers, **extra})
    env = StreamExecutionEnvironment.get_execution_environment(config)
    build(env, records)
    rows, counted, elapsed = run_timed(env, config, build.__name__)
    if build is vectorized:
        counted = rows
    if counted != records or (build is keyed_count and rows != NUM_KEYS):
        raise SystemExit(f"{build.__name__}: {rows} output rows accounting for {counted} records, expected {records}")
    return records / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records-a", type=int, default=100_000_000)
    parser.add_argument("--records-b", type=int, default=20_000_000)
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds of (1 TM, 2 TM) measured back to back; the medians are reported (default 3)",
    )
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra configuration, e.g. --conf taskmanager.memory.segment-size=128kb",
    )
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    extra = dict(item.split("=", 1) for item in args.conf)
    print(f"machine: {platform.machine()} {platform.processor() or ''} cores={__import__('os').cpu_count()} "
          f"python={platform.python_version()} pyarrow={pa.__version__}")  # fmt: skip
    with QuietWatch() as quiet:
        for label, build, records, target in (
            ("(a) vectorized stateless", vectorized, args.records_a, 5_000_000),
            ("(b) per-record keyed count", keyed_count, args.records_b, 300_000),
        ):
            # Shared machines drift over tens of seconds; a 1-TM and a 2-TM run measured back to
            # back see the same conditions, so each round gives one ratio and the median is kept.
            ones, twos = [], []
            for round_number in range(1, args.rounds + 1):
                ones.append(measure(build, records, 1, extra))
                twos.append(measure(build, records, 2, extra))
                print(f"  {label} round {round_number}: 1 TM {ones[-1]:,.0f} rec/s | 2 TM {twos[-1]:,.0f} rec/s "
                      f"| ratio {twos[-1] / ones[-1]:.2f}", flush=True)  # fmt: skip
            ratio = statistics.median(two / one for one, two in zip(ones, twos))
            print(f"{label}: 1 TM {statistics.median(ones):,.0f} rec/s | 2 TM {statistics.median(twos):,.0f} rec/s "
                  f"| scaling 2-vs-1 {ratio:.2f} (medians of {args.rounds} rounds)", flush=True)  # fmt: skip
            quiet.target(
                f"{label}: target {target:,} rec/s with 2 TM and scaling >= 1.6",
                statistics.median(twos) >= target and ratio >= 1.6,
            )
    quiet.report()


if __name__ == "__main__":
    main()
