"""Records of a stream without a declared type through the per-record path: ``RowsConverter.to_batch`` then
``records_of`` (what one operator emits and the next one reads), for tuples and positional Rows.

Prints records per second of this process's CPU time, the median of ``--rounds`` rounds of ten
4,096-record batches.

    python benchmarks/undeclared_records.py [--rounds N]
"""

from __future__ import annotations

import argparse
import statistics
import time

from flinklike_spark._runtime.operators.rows import RowsConverter
from flinklike_spark.common.types import Row, records_of

BATCH = 4096


def rate(records: list, rounds: int) -> float:
    converter = RowsConverter(None, stream_name="s")
    converter.to_batch(records)  # fixes the stream's encoding
    times = []
    for _ in range(rounds):
        started = time.process_time()
        for _ in range(10):
            records_of(converter.to_batch(records))
        times.append(time.process_time() - started)
    return 10 * len(records) / statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    tuples = [(f"key{i % 1000}", i, i * 0.5) for i in range(BATCH)]
    rows = [Row(f"key{i % 1000}", i, i * 0.5) for i in range(BATCH)]
    for name, records in (("tuples", tuples), ("positional Rows", rows)):
        print(f"undeclared {name}: {rate(records, args.rounds):,.0f} records/s of CPU time (emit + read)")


if __name__ == "__main__":
    main()
