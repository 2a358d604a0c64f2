"""``spark.readStream.format("flinklike")``: exactly once end to end through real Spark and Delta.

A keyed counting job runs on the engine; a Spark query reads its output
through the bridge and writes a Delta table with Spark's own Delta sink. The
test stops the Spark query and starts it again from its checkpointLocation,
and separately kills the engine job's runner (the job resumes from its latest
checkpoint). The Delta table Spark wrote must hold every (key, seq) exactly
once, in order per key.
"""

from __future__ import annotations

import json
import os
import signal

import pytest

from flinklike_spark.spark.job_record_table import RunnerState, read_record
from tests.spark.bridge_helpers import assert_exactly_once_in_order, rows_in_commit_order, wait_for
from tests.spark.pipelines import NUM_KEYS

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(1500)]


def start_query(spark, job_dir, spark_checkpoint, out):
    reader = (
        spark.readStream.format("flinklike")
        .option("pipeline", "tests.spark.pipelines:keyed_count")
        .option("execution.checkpointing.dir", str(job_dir))
        .option("execution.checkpointing.interval", "300 ms")
        .option("parallelism.default", "2")
        .option("maxCheckpointsPerTrigger", "3")
        .load()
    )
    return (
        reader.writeStream.format("delta")
        .option("checkpointLocation", str(spark_checkpoint))
        .trigger(processingTime="500 milliseconds")
        .start(str(out))
    )


def checkpoints_per_batch(query) -> list[int]:
    """How many checkpoint ids each micro-batch of ``query`` advanced (its offset range)."""
    spans = []
    for progress in query.recentProgress:
        source = progress["sources"][0]
        start, end = (json.loads(o) if isinstance(o, str) else o for o in (source["startOffset"], source["endOffset"]))
        if start is not None and end is not None:
            spans.append(end["checkpoint"] - max(start["checkpoint"], 0))  # checkpoint ids start at 1
    return spans


def rows_written(query) -> int:
    return sum(p["numInputRows"] for p in query.recentProgress)


def test_read_stream_exactly_once_across_query_restart_and_job_kill(spark, tmp_path):
    job_dir, spark_checkpoint, out = tmp_path / "job", tmp_path / "spark-checkpoint", tmp_path / "out"

    first = start_query(spark, job_dir, spark_checkpoint, out)
    wait_for(lambda: rows_written(first) >= 200, timeout=400, what="the first query to write rows", query=first)
    first.stop()
    # maxCheckpointsPerTrigger=3: every checkpoint of this job has output, so without admission
    # control the first batch after the slow start would span every checkpoint completed meanwhile.
    spans = checkpoints_per_batch(first)
    assert spans and max(spans) <= 3, spans
    # Spark stops the source worker after stop() returns; the worker's EOF stops the job.
    wait_for(
        lambda: read_record(str(job_dir)).state is RunnerState.STOPPED,
        timeout=120,
        what="the engine job to stop with its query",
    )
    stopped_pid = read_record(str(job_dir)).pid

    second = start_query(spark, job_dir, spark_checkpoint, out)
    wait_for(lambda: rows_written(second) >= 200, timeout=400, what="the restarted query to write rows", query=second)
    # The restarted query first re-reads output committed before the stop; the job resumes meanwhile.
    before = wait_for(
        lambda: (r := read_record(str(job_dir))).pid != stopped_pid and r.state is RunnerState.RUNNING and r,
        timeout=400,
        what="the restarted query's engine job",
        query=second,
    )
    os.kill(before.pid, signal.SIGKILL)  # the engine job dies without any chance to clean up
    wait_for(
        lambda: (r := read_record(str(job_dir))).pid != before.pid and r.state is RunnerState.RUNNING,
        timeout=120,
        what="the engine job to be resumed",
        query=second,
    )
    resumed_at = rows_written(second)
    wait_for(
        lambda: rows_written(second) >= resumed_at + 200,
        timeout=400,
        what="rows after the engine job resumed",
        query=second,
    )
    second.stop()

    counts = assert_exactly_once_in_order(rows_in_commit_order(out), range(NUM_KEYS), min_per_key=100)
    assert sum(counts.values()) >= 600
    # The job's running count is keyed state restored across both interruptions.
    final = spark.read.format("delta").load(str(out)).groupBy("key").agg({"count": "max", "seq": "max"}).collect()
    assert {(r["key"], r["max(count)"]) for r in final} == {(r["key"], r["max(seq)"] + 1) for r in final}
