"""Window overhead on this machine: keyed tumbling-window count and reduce next to the plain keyed count.

Prints records per second, measured in one run with the same source, key count and
parallelism, of
  (1) the plain keyed count: SequenceSource -> key_by -> KeyedProcessFunction with ValueState
      (the baseline of benchmarks/throughput.py (b)),
  (2) a keyed tumbling event-time window count: key_by -> window(TumblingEventTimeWindows)
      -> aggregate(count AggregateFunction),
  (3) the same windows with reduce(),
  (4) the rolling KeyedStream.reduce (one output row per input row),
and each one's overhead relative to (1) (target: windows within 2x). Then the same operators alone:
the same 4,096-row batches pushed through each operator in this process (no cluster, no network),
which isolates the operators' per-record cost from the noise of a shared machine.

The event time is the ``seq`` column (ms); every key gets ``records_per_key / window_ms`` windows.
Each pipeline is measured ``--rounds`` times in turn; medians are reported.

    python benchmarks/windows.py [--records N] [--window-ms N] [--parallelism N] [--rounds N]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import numpy as np
import pyarrow as pa
from throughput import NUM_KEYS, CountingSink, CountPerKey, run_timed

from connectors import SequenceSource
from flinklike_spark import Configuration, StreamExecutionEnvironment, WatermarkStrategy
from flinklike_spark._runtime.operators.operator_registry import create_operator
from flinklike_spark._runtime.operators.operator_spec import OperatorSpec
from flinklike_spark._runtime.operators.stream_operator import OperatorContext, Output
from flinklike_spark._runtime.operators.window_descriptor import PaneKind, WindowOperatorDescriptor
from flinklike_spark._runtime.record_timestamps import with_timestamps
from flinklike_spark.datastream.functions import AggregateFunction
from flinklike_spark.datastream.window import Time, TumblingEventTimeWindows


class CountAggregate(AggregateFunction):
    """Counts a window's records; the accumulator is ``[key, count]``."""

    def create_accumulator(self):
        return [None, 0]

    def add(self, value, accumulator):
        accumulator[0] = value["key"]
        accumulator[1] += 1
        return accumulator

    def get_result(self, accumulator):
        return {"key": accumulator[0], "count": accumulator[1]}

    def merge(self, a, b):
        return [a[0] or b[0], a[1] + b[1]]


def add_seq(a, b):
    return {"key": a["key"], "seq": a["seq"] + b["seq"]}


def _keyed(env: StreamExecutionEnvironment, records: int):
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner("seq")
    source = SequenceSource(num_keys=NUM_KEYS, records_per_key=records // NUM_KEYS)
    return env.from_source(source, strategy, name="seq").key_by("key")


def keyed_count(env, records, window_ms):
    _keyed(env, records).process(CountPerKey()).sink_to(CountingSink())


def window_count(env, records, window_ms):
    (
        _keyed(env, records)
        .window(TumblingEventTimeWindows.of(Time.milliseconds(window_ms)))
        .aggregate(CountAggregate())
        .sink_to(CountingSink())
    )


def window_reduce(env, records, window_ms):
    (
        _keyed(env, records)
        .window(TumblingEventTimeWindows.of(Time.milliseconds(window_ms)))
        .reduce(add_seq)
        .sink_to(CountingSink())
    )


def rolling_reduce(env, records, window_ms):
    _keyed(env, records).reduce(add_seq).sink_to(CountingSink())


def expected_rows(build, records: int, window_ms: int) -> int:
    per_key = records // NUM_KEYS
    if build is keyed_count:
        return NUM_KEYS
    if build is rolling_reduce:
        return records
    return NUM_KEYS * -(-per_key // window_ms)


def measure(build, records: int, window_ms: int, parallelism: int) -> float:
    config = Configuration({"parallelism.default": parallelism, "local.number-taskmanager": parallelism})
    env = StreamExecutionEnvironment.get_execution_environment(config)
    build(env, records, window_ms)
    rows, counted, elapsed = run_timed(env, config, build.__name__)
    if rows != expected_rows(build, records, window_ms) or (
        build in (keyed_count, window_count) and counted != records
    ):
        raise SystemExit(f"{build.__name__}: {rows} rows counting {counted} records: wrong result")
    return records / elapsed


class _Discard(Output):
    def emit_rows(self, rows, timestamps=None):
        pass

    def emit_batch(self, batch):
        pass

    def emit_watermark(self, timestamp):
        pass


def operator_only(records: int, window_ms: int) -> dict[str, float]:
    """Records per second of each pipeline's keyed operator alone, fed the source's batches in process."""
    per_key = records // NUM_KEYS
    keys = np.tile(np.arange(NUM_KEYS, dtype=np.int64), per_key)
    seqs = np.repeat(np.arange(per_key, dtype=np.int64), NUM_KEYS)
    whole = pa.RecordBatch.from_arrays([pa.array(keys), pa.array(seqs)], names=["key", "seq"])
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner("seq")
    # the batches as the source emits them: with the event timestamps in their reserved column
    stamped = with_timestamps(whole, strategy.create_generator().assign(whole))
    batches = [stamped.slice(i, 4096) for i in range(0, whole.num_rows, 4096)]
    assigner = TumblingEventTimeWindows.of(Time.milliseconds(window_ms))
    trigger = assigner.get_default_trigger(None)
    operators = {
        "(1)": ("keyed_process", CountPerKey()),
        "(2)": ("window", WindowOperatorDescriptor(
            assigner=assigner, trigger=trigger, pane_kind=PaneKind.AGGREGATE, aggregate_function=CountAggregate())),
        "(3)": ("window", WindowOperatorDescriptor(
            assigner=assigner, trigger=trigger, pane_kind=PaneKind.REDUCE, reduce_function=add_seq)),
        "(4)": ("keyed_reduce", add_seq),
    }  # fmt: skip
    rates = {}
    for label, (kind, function) in operators.items():
        spec = OperatorSpec(uid="op", name=label, kind=kind, function=function, key_field="key",
                            input_schema=whole.schema, timestamp_strategy=strategy)  # fmt: skip
        op = create_operator(spec)
        op.setup(OperatorContext(task_name="bench", subtask_index=0, parallelism=1, max_parallelism=128,
                                 attempt_number=0), _Discard())  # fmt: skip
        op.initialize_state(None)
        op.open()
        started = time.perf_counter()
        for batch in batches:
            op.process_batch(batch)
            op.process_watermark(batch.column(1)[-1].as_py() - 1)
        op.process_watermark(2**63 - 1)
        rates[label] = whole.num_rows / (time.perf_counter() - started)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=4_000_000)
    parser.add_argument("--window-ms", type=int, default=1000)
    parser.add_argument("--parallelism", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"machine: {platform.machine()} cores={__import__('os').cpu_count()} python={platform.python_version()} "
          f"pyarrow={pa.__version__} | {args.records:,} records, {NUM_KEYS} keys, {args.window_ms} ms windows, "
          f"parallelism {args.parallelism}")  # fmt: skip
    pipelines = (
        ("(1) keyed count (KeyedProcessFunction)", keyed_count),
        ("(2) tumbling window count (aggregate)", window_count),
        ("(3) tumbling window reduce", window_reduce),
        ("(4) rolling KeyedStream.reduce", rolling_reduce),
    )
    rates: dict[str, list[float]] = {label: [] for label, _ in pipelines}
    for round_number in range(1, args.rounds + 1):
        for label, build in pipelines:  # interleaved, so drift of the shared machine hits all alike
            rates[label].append(measure(build, args.records, args.window_ms, args.parallelism))
        print(f"  round {round_number}: " + " | ".join(f"{r[-1]:,.0f}" for r in rates.values()), flush=True)
    baseline = statistics.median(rates[pipelines[0][0]])
    print("whole jobs (1 TaskExecutor process per subtask, medians):")
    for label, _ in pipelines:
        rate = statistics.median(rates[label])
        print(f"  {label:42s} {rate:>12,.0f} rec/s   overhead vs (1): {baseline / rate:.2f}x", flush=True)
    alone = [operator_only(args.records, args.window_ms) for _ in range(args.rounds)]
    print("operators alone (same batches, in this process, medians):")
    base = statistics.median(r["(1)"] for r in alone)
    for label, _ in pipelines:
        rate = statistics.median(r[label[:3]] for r in alone)
        print(f"  {label:42s} {rate:>12,.0f} rec/s   overhead vs (1): {base / rate:.2f}x", flush=True)


if __name__ == "__main__":
    main()
