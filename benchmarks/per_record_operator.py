"""The per-record keyed path alone: a KeyedProcessFunction with ValueState in one process, no cluster.

Pushes ``--records`` rows (1,000 int keys, 4,096-row Arrow batches) through a
KeyedProcessOperator running the W2 count (``ValueState`` read and write per
record, one output row per key at the end) and prints records per second of
this process's CPU time (``time.process_time``, so that other processes on a
shared machine disturb it less than wall time), the median of ``--rounds``.
The output is checked (one row per key) before the rate is printed.

    python benchmarks/per_record_operator.py [--records N] [--rounds N]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from vectorized_aggregations import CountingOutput

from flinklike_spark._runtime.operators.operator_spec import OperatorSpec
from flinklike_spark._runtime.operators.process_operators import KeyedProcessOperator
from flinklike_spark._runtime.operators.stream_operator import OperatorContext

sys.path.insert(0, str(Path(__file__).resolve().parent / "compare"))
from flinklike_parts import CountUntil  # noqa: E402 - W2's function, as the peer comparison runs it

KEYS = 1000
SCHEMA = pa.schema([("key", pa.int64()), ("seq", pa.int64())])


def run_once(data: list[pa.RecordBatch], records: int) -> float:
    spec = OperatorSpec(
        uid="count", name="count", kind="keyed_process", function=CountUntil(records // KEYS), input_schema=SCHEMA,
        output_schema=pa.schema([("key", pa.int64()), ("count", pa.int64())]), key_field="key",
    )  # fmt: skip
    operator, output = KeyedProcessOperator(spec), CountingOutput()
    context = OperatorContext(task_name="count", subtask_index=0, parallelism=1, max_parallelism=128, attempt_number=0)
    operator.setup(context, output)
    operator.initialize_state(None)
    operator.open()
    started = time.process_time()
    for batch in data:
        operator.process_batch(batch)
    elapsed = time.process_time() - started
    operator.close()
    if output.rows != KEYS:
        raise SystemExit(f"expected one output row per key ({KEYS}), got {output.rows}")
    return records / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    records = args.records - args.records % KEYS
    data = []
    for start in range(0, records, 4096):
        i = np.arange(start, min(records, start + 4096), dtype=np.int64)
        data.append(pa.RecordBatch.from_arrays([pa.array(i % KEYS), pa.array(i // KEYS)], schema=SCHEMA))
    rates = [run_once(data, records) for _ in range(args.rounds)]
    print(f"machine: {platform.machine()} python={platform.python_version()} pyarrow={pa.__version__} | "
          f"{records:,} records, {KEYS} keys")  # fmt: skip
    print(f"KeyedProcessOperator W2 count: {statistics.median(rates):,.0f} rec/s of CPU time "
          f"(median of {args.rounds}; min {min(rates):,.0f}, max {max(rates):,.0f})")  # fmt: skip


if __name__ == "__main__":
    main()
