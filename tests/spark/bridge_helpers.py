"""Helpers of the Spark bridge tests: waiting on queries and reading Delta tables in commit order."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq

__all__ = ["assert_exactly_once_in_order", "rows_in_commit_order", "wait_for"]


def wait_for(condition, *, timeout: float, what: str, query=None, interval: float = 0.5):
    """Poll ``condition()`` until it returns a truthy value; fail naming ``what`` (and the query's error)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if query is not None and query.exception() is not None:
            raise AssertionError(f"query failed while waiting for {what}: {query.exception()}")
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def rows_in_commit_order(table: str | Path) -> list[dict]:
    """Every row of a Delta table in commit order: log version, then add order, then row order.

    Reads the ``_delta_log`` JSON commits directly (no checkpoint files are
    expected in these short tests), so the order is exactly what the writer committed.
    """
    table = Path(table)
    rows: list[dict] = []
    for commit in sorted((table / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "remove" in action:
                raise AssertionError(f"{table} has a remove action in {commit.name}; rows were deleted")
            if "add" in action:
                rows.extend(pq.read_table(table / action["add"]["path"]).to_pylist())
    return rows


def assert_exactly_once_in_order(rows: list[dict], keys, *, min_per_key: int) -> dict[int, int]:
    """Per key: seq 0, 1, 2, ... with no gap, no duplicate, no reordering; at least ``min_per_key``.

    Returns key -> number of rows.
    """
    per_key: dict[int, list[int]] = defaultdict(list)
    for row in rows:
        per_key[row["key"]].append(row["seq"])
    assert sorted(per_key) == sorted(keys), f"keys {sorted(per_key)} != {sorted(keys)}"
    for key, seqs in per_key.items():
        if seqs != list(range(len(seqs))):
            dup = len(seqs) - len(set(seqs))
            lost = sorted(set(range(max(seqs) + 1)) - set(seqs))[:10]
            first_bad = next(i for i, s in enumerate(seqs) if s != i)
            raise AssertionError(
                f"key {key}: {dup} duplicates, lost {lost}, first out of place at row {first_bad}: "
                f"{seqs[max(0, first_bad - 3) : first_bad + 3]}"
            )
        assert len(seqs) >= min_per_key, f"key {key}: only {len(seqs)} rows, expected >= {min_per_key}"
    return {k: len(v) for k, v in per_key.items()}


def start_fed_query(spark, *, total: int, rows_per_batch: int, pipeline: str, job_dir, checkpoint, query_id: str,
                    **options: str):  # fmt: skip
    """A ``writeStream.format("flinklike")`` query feeding ``pipeline`` Spark's values 0..total-1.

    Spark's rate-micro-batch source, 2 partitions, ``rows_per_batch`` rows per micro-batch whatever the
    wall time; the job checkpoints every 300 ms at parallelism 2; ``options`` are added (e.g. ``pipeline.args``).
    """
    rows = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", rows_per_batch)
        .option("numPartitions", 2)
        .load()
        .where(f"value < {total}")
        .select("value")
    )
    writer = (
        rows.writeStream.format("flinklike")
        .option("pipeline", pipeline)
        .option("execution.checkpointing.dir", str(job_dir))
        .option("execution.checkpointing.interval", "300 ms")
        .option("parallelism.default", "2")
        .option("queryId", query_id)
        .option("checkpointLocation", str(checkpoint))
    )
    for key, value in options.items():
        writer = writer.option(key, value)
    return writer.trigger(processingTime="500 milliseconds").start()
