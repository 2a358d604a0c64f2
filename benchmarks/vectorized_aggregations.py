"""Vectorized built-in aggregations against the per-record operators, operators alone, in one run.

Pushes the same Arrow batches (``--batch`` rows, 1,000 int keys, event time =
``seq`` ms) through each pair of operators in this process (no cluster, no
network) and prints records per second and the ratio vectorized / per-record:

  (1) keyed count per 1 s tumbling event-time window: ``aggregate(aggregations.count(), KeyedWindowResult)``
      (the per-record operator runs the same built-in through its Python path);
  (2) rolling ``KeyedStream.sum("seq")`` (one output row per input row);
  (3) rolling ``KeyedStream.max_by("seq")``.

Both operators of a pair must emit the same number of rows (checked).

    python benchmarks/vectorized_aggregations.py [--records N] [--batch N] [--rounds N]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import numpy as np
import pyarrow as pa

from flinklike_spark._runtime.operators.keyed_operators import FieldAggregation, KeyedReduceOperator
from flinklike_spark._runtime.operators.operator_spec import OperatorSpec
from flinklike_spark._runtime.operators.stream_operator import OperatorContext, Output
from flinklike_spark._runtime.operators.vectorized_aggregation import (
    VectorizedRollingAggregateOperator,
    VectorizedWindowAggregateOperator,
)
from flinklike_spark._runtime.operators.window_descriptor import PaneKind, WindowOperatorDescriptor
from flinklike_spark._runtime.operators.window_operator import WindowOperator
from flinklike_spark._runtime.record_timestamps import with_timestamps
from flinklike_spark.datastream import aggregations as agg
from flinklike_spark.datastream.window import Time, TumblingEventTimeWindows

KEYS = 1000
SCHEMA = pa.schema([("key", pa.int64()), ("seq", pa.int64())])


class CountingOutput(Output):
    def __init__(self) -> None:
        self.rows = 0

    def emit_rows(self, rows, timestamps=None):
        self.rows += len(rows)

    def emit_batch(self, batch):
        self.rows += batch.num_rows

    def emit_watermark(self, timestamp):
        pass


def batches(records: int, size: int) -> list[pa.RecordBatch]:
    out = []
    for start in range(0, records, size):
        i = np.arange(start, min(records, start + size), dtype=np.int64)
        seq = i // KEYS
        out.append(with_timestamps(pa.RecordBatch.from_arrays([pa.array(i % KEYS), pa.array(seq)], schema=SCHEMA),
                                   pa.array(seq)))  # fmt: skip
    return out


def window_spec() -> OperatorSpec:
    assigner = TumblingEventTimeWindows.of(Time.seconds(1))
    descriptor = WindowOperatorDescriptor(
        assigner=assigner, trigger=assigner.get_default_trigger(None), pane_kind=PaneKind.AGGREGATE,
        aggregate_function=agg.count(), window_function=agg.KeyedWindowResult("key"),
    )  # fmt: skip
    return OperatorSpec(uid="w", name="w", kind="window", function=descriptor, input_schema=SCHEMA, key_field="key")


def rolling_spec(aggregation: str) -> OperatorSpec:
    return OperatorSpec(
        uid="r", name="r", kind="keyed_reduce", function=FieldAggregation(aggregation, "seq"),
        input_schema=SCHEMA, output_schema=SCHEMA, key_field="key",
    )  # fmt: skip


def run(cls, spec: OperatorSpec, data: list[pa.RecordBatch]) -> tuple[float, int]:
    op = cls(spec)
    out = CountingOutput()
    op.setup(OperatorContext(task_name="b", subtask_index=0, parallelism=1, max_parallelism=128, attempt_number=0), out)
    op.initialize_state(None)
    op.open()
    started = time.perf_counter()
    for batch in data:
        op.process_batch(batch)
        op.process_watermark(batch.column(1)[0].as_py() - 1)
    op.process_watermark(2**63 - 1)
    elapsed = time.perf_counter() - started
    return sum(b.num_rows for b in data) / elapsed, out.rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"machine: {platform.machine()} cores={__import__('os').cpu_count()} python={platform.python_version()} "
          f"pyarrow={pa.__version__} | {args.records:,} records, {args.batch:,}-row batches, {KEYS} keys")  # fmt: skip
    data = batches(args.records, args.batch)
    pairs = (
        ("(1) window count per 1 s", window_spec(), WindowOperator, VectorizedWindowAggregateOperator),
        ("(2) rolling sum", rolling_spec("sum"), KeyedReduceOperator, VectorizedRollingAggregateOperator),
        ("(3) rolling max_by", rolling_spec("max_by"), KeyedReduceOperator, VectorizedRollingAggregateOperator),
    )
    for label, spec, per_record, vectorized in pairs:
        slow, fast = [], []
        for _ in range(args.rounds):
            rate, rows = run(per_record, spec, data)
            slow.append(rate)
            rate, vector_rows = run(vectorized, spec, data)
            fast.append(rate)
            if rows != vector_rows:
                raise SystemExit(f"{label}: per-record emitted {rows} rows, vectorized {vector_rows}")
        ratio = statistics.median(f / s for f, s in zip(fast, slow))
        print(f"{label}: per-record {statistics.median(slow):,.0f} rec/s | vectorized {statistics.median(fast):,.0f} "
              f"rec/s | {ratio:.1f}x (medians of {args.rounds})", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
