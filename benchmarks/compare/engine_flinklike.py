"""flinklike-spark's runner: ``python engine_flinklike.py W2 --records N --keys K --parallelism P``.

Runs on a local MiniCluster with P TaskExecutor processes (parallelism P).
Two times: the *wall* time from job submission to the job's end (cluster
start-up excluded), and the *busy* time from the first task RUNNING to the last
task FINISHED by the JobMaster's execution timestamps (job submission,
scheduling and the first task's deployment excluded; what the other tasks take
to deploy while the first runs included).
The input is the in-process generator (``SequenceSource``), or with ``--input DIR``
the shared Parquet files of ``inputs.py`` (the files Spark reads), one split per file.
W3, W4 and W5 are in ``scenarios_flinklike.py`` (``--seconds`` for W3's
backpressured runs, ``--rate`` for W4's and W5's input rate; ``--mode
readStream`` runs W5 under ``spark.readStream.format("flinklike")``).
"""

from __future__ import annotations

import argparse
import faulthandler
import time

import pyarrow as pa
import pyarrow.compute as pc
from flinklike_parts import CountUntil, SummarySink
from workloads import WINDOW_MS, per_key, print_result

from connectors import SequenceSource
from flinklike_spark import (
    Configuration,
    StreamExecutionEnvironment,
    WatermarkStrategy,
)
from flinklike_spark._runtime.graph.execution_state import ExecutionState
from flinklike_spark._runtime.minicluster import MiniCluster
from flinklike_spark.datastream import aggregations as agg
from flinklike_spark.datastream.window import Time, TumblingEventTimeWindows


def _source(records: int, keys: int, batch_size: int, input_dir: str | None):
    """The generator, or (``input_dir``) the shared Parquet files holding the same records."""
    if input_dir is None:
        return SequenceSource(num_keys=keys, records_per_key=per_key(records, keys), batch_size=batch_size)
    from inputs import input_files
    from parquet_source import ParquetFiles

    return ParquetFiles(input_files(input_dir, records, keys), batch_size=batch_size)


def build(env: StreamExecutionEnvironment, workload: str, records: int, keys: int, input_dir: str | None = None) -> str:
    m = per_key(records, keys)
    if workload == "W1":
        source = _source(records, keys, 65536, input_dir)
        env.from_source(source, name="seq").map_batches(
            lambda b: pa.RecordBatch.from_arrays(
                [b.column(0), pc.add(pc.multiply(b.column(1), 3), 1)], names=["key", "value"]
            )
        ).sink_to(SummarySink("value"))
        return "rows"
    if workload == "W2":
        source = _source(records, keys, 4096, input_dir)
        env.from_source(source, name="seq").key_by("key").process(CountUntil(m)).sink_to(SummarySink("count"))
        return "rows"
    if workload == "W2v":
        strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner("seq")
        source = _source(records, keys, 65536, input_dir)
        (
            env.from_source(source, strategy, name="seq")
            .key_by("key")
            .window(TumblingEventTimeWindows.of(Time.milliseconds(WINDOW_MS)))
            .aggregate(agg.count(), agg.KeyedWindowResult("key"))
            .sink_to(SummarySink("count"))
        )
        return "rows"
    raise SystemExit(f"flinklike: unknown workload {workload!r}")


def busy_seconds(master) -> float:
    """From the first task RUNNING to the last task FINISHED (the JobMaster's clock for both)."""
    stamps = [v.current_execution.state_timestamps for v in master.graph.vertices()]
    return max(s[ExecutionState.FINISHED] for s in stamps) - min(s[ExecutionState.RUNNING] for s in stamps)


def main() -> None:
    faulthandler.enable(all_threads=True)  # a native crash (SIGSEGV) leaves every thread's stack on stderr
    parser = argparse.ArgumentParser()
    parser.add_argument("workload")
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--parallelism", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=10.0, help="W3: run time of each backpressured job")
    parser.add_argument("--min-checkpoints", type=int, default=3, help="W3: checkpoints each backpressured run needs")
    parser.add_argument("--rate", type=float, default=1000.0, help="W4, W5: input rows per second")
    parser.add_argument("--mode", choices=["readStream"], default=None, help="W5 through Spark's readStream")
    parser.add_argument("--input", default=None, help="W1, W2, W2v: read the shared Parquet files in this directory")
    args = parser.parse_args()
    if args.workload in ("W3", "W4", "W5"):
        import scenarios_flinklike as scenarios

        if args.workload == "W3":
            outcome = scenarios.run_w3(
                args.records, args.keys, args.parallelism, seconds=args.seconds, min_checkpoints=args.min_checkpoints
            )
        elif args.workload == "W4":
            outcome = scenarios.run_w4(args.records, args.keys, args.parallelism, rate=args.rate)
        elif args.mode == "readStream":
            outcome = scenarios.run_w5_read_stream(args.records, args.keys, args.parallelism, rate=args.rate)
        else:
            outcome = scenarios.run_w5(args.records, args.keys, args.parallelism, rate=args.rate)
        seconds, summary, metrics = outcome
        print_result(seconds, summary, metrics=metrics)
        return
    config = Configuration({"parallelism.default": args.parallelism, "local.number-taskmanager": args.parallelism})
    env = StreamExecutionEnvironment.get_execution_environment(config)
    build(env, args.workload, args.records, args.keys, args.input)
    with MiniCluster(config) as cluster:
        client = cluster.submit_job(env.get_job_graph(args.workload))
        started = time.perf_counter()
        result = client.wait(timeout=1800)
        elapsed = time.perf_counter() - started
        busy = busy_seconds(cluster._jobs[client.job_id])
    totals = result.accumulators["summary"]
    rows = sum(t["rows"] for t in totals)
    total = sum(t["total"] for t in totals)
    summary = {"rows": rows, "total": total} if args.workload == "W1" else {"rows": rows, "sum": total}
    print_result(busy, summary, wall_seconds=elapsed)


if __name__ == "__main__":
    main()
