"""The cost of a DeltaSink commit as its table ages, with Delta's default log retention and with a shorter one.

A ``DeltaSink`` commits once per checkpoint to the user's table. The table's
``_delta_log`` keeps ``delta.logRetentionDuration`` of versions (Delta's
default: 30 days), and deltalake lists the whole log directory at every commit
on a local filesystem (S3 lists from the current version on): a sink committing
every few hundred milliseconds pays more per commit the older its table is.
This commits ``--commits`` checkpoints of one subtask through the sink's own
writer and committer, as fast as they go, and prints the median commit time of
the ``--window`` commits up to each mark with the number of files under
``_delta_log``: once with the table as the sink creates it, once with
``delta.logRetentionDuration`` set to ``--retention`` (what docs/checkpoints.md
recommends for such sinks).

    python benchmarks/delta_sink_aging.py [--marks 100 1000 3000] [--retention "interval 30 seconds"]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time

import pyarrow as pa
from deltalake import DeltaTable
from quiet import QuietWatch

from connectors.delta import DeltaSink
from flinklike_spark.connector_api import SinkWriterContext

SCHEMA = pa.schema([("key", pa.int64()), ("seq", pa.int64())])


def age(path: str, marks: list[int], *, window: int, retention: str | None) -> dict[int, tuple[float, int]]:
    """Commit checkpoints 1..max(marks); ``{mark: (median commit seconds, _delta_log files)}``."""
    sink = DeltaSink(path)
    writer = sink.create_writer(SinkWriterContext(subtask_index=0, parallelism=1, job_id="aging", operator_uid="sink"))
    writer.open()
    committer = sink.create_committer()
    seconds: dict[int, float] = {}
    figures = {}
    try:
        for checkpoint in range(1, max(marks) + 1):
            writer.write(pa.RecordBatch.from_pylist([{"key": 0, "seq": checkpoint}], schema=SCHEMA))
            committables = writer.prepare_commit(checkpoint)
            started = time.perf_counter()
            committer.commit(committables)
            seconds[checkpoint] = time.perf_counter() - started
            if checkpoint == 1 and retention is not None:
                DeltaTable(path).alter.set_table_properties({"delta.logRetentionDuration": retention})
            if checkpoint in marks:
                median = statistics.median(seconds[i] for i in range(max(1, checkpoint - window + 1), checkpoint + 1))
                figures[checkpoint] = (median, len(os.listdir(os.path.join(path, "_delta_log"))))
                print(f"  {retention or 'default retention'}: commit {checkpoint:>6,}: {median * 1000:6.1f} ms, "
                      f"{figures[checkpoint][1]:>6,} _delta_log files", flush=True)  # fmt: skip
    finally:
        writer.close()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--marks", type=int, nargs="+", default=[100, 1_000, 3_000])
    parser.add_argument("--window", type=int, default=50)
    parser.add_argument("--retention", default="interval 30 seconds", help="the shorter delta.logRetentionDuration")
    args = parser.parse_args()
    marks = sorted(args.marks)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"machine: {platform.machine()} cores={os.cpu_count()} python={platform.python_version()} "
          f"load={os.getloadavg()[0]:.1f}; commit {commit}; medians of the {args.window} commits up to each mark",
          flush=True)  # fmt: skip
    with QuietWatch() as quiet:
        results = {}
        for retention in (None, args.retention):
            directory = tempfile.mkdtemp(prefix="bench-sink-aging-")
            try:
                results[retention] = age(f"{directory}/t", marks, window=args.window, retention=retention)
            finally:
                shutil.rmtree(directory, ignore_errors=True)
    quiet.report()
    for retention, figures in results.items():
        (first, _), (last, files) = figures[marks[0]], figures[marks[-1]]
        print(f"{retention or 'default retention (30 days)'}: commit {marks[-1]:,} costs {last / first:.2f}x commit "
              f"{marks[0]:,} ({last * 1000:.1f} vs {first * 1000:.1f} ms, {files:,} log files)")  # fmt: skip


if __name__ == "__main__":
    main()
