"""``df.writeStream.format("flinklike").option("pipeline", ...)``: one Spark query runs the engine job it feeds.

Spark's rate-micro-batch source (2 partitions, values 0..N-1, 100 per micro-batch) -> the bridge's input table
-> the job ``tests.spark.pipelines:fed_count`` (key_by, keyed running count,
DeltaSink), whose runner the driver owns. The query is stopped and started
again from its checkpointLocation twice, and one of the job's TaskExecutors is
killed with SIGKILL while it runs. The job's Delta output must hold every
value exactly once, in order per key, with the running count (keyed state)
unbroken: count == seq + 1 on every row.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from deltalake import DeltaTable

from connectors import read_delta_table
from flinklike_spark.spark.job_record_table import RunnerState, read_record
from tests.spark.bridge_helpers import (
    assert_exactly_once_in_order,
    rows_in_commit_order,
    start_fed_query,
    wait_for,
)
from tests.spark.pipelines import FED_KEYS, fed_count_output
from tests.support.processes import task_executors_under

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(1500)]

TOTAL = 6000  # values 0 .. TOTAL-1: 1500 per key
# rate-micro-batch: fixed rows per micro-batch, whatever the wall time (a loaded machine). 200 (was 50, then
# 100): 30 micro-batches, each a Spark job of about a CPU-second; every step below still spans two or more.
ROWS_PER_BATCH = 200


def start_query(spark, job_dir: Path, checkpoint: Path):
    return start_fed_query(spark, total=TOTAL, rows_per_batch=ROWS_PER_BATCH, pipeline="tests.spark.pipelines:fed_count",
                           job_dir=job_dir, checkpoint=checkpoint, query_id="rate")  # fmt: skip


def output_rows(out: Path) -> int:
    try:
        return read_delta_table(out).num_rows
    except Exception:  # noqa: BLE001 - not created yet
        return 0


def input_rows_ever(job_dir: Path) -> int:
    """Rows of every file ever committed to the input table (removed ones too: retention removes consumed files)."""
    rows = 0
    for commit in sorted((job_dir / "input" / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            add = json.loads(line).get("add")
            if add is not None:
                rows += json.loads(add["stats"])["numRecords"]
    return rows


def task_executors(runner_pid: int) -> list[int]:
    return [process.pid for process in task_executors_under(runner_pid)]


def test_a_query_runs_its_job_exactly_once_across_restarts_and_a_task_executor_kill(spark, tmp_path):
    job_dir, checkpoint = tmp_path / "job", tmp_path / "spark-checkpoint"
    out = Path(fed_count_output(str(job_dir)))

    def running_job(other_than: int | None = None, query=None):
        return wait_for(
            lambda: (
                (r := read_record(str(job_dir))) is not None
                and r.pid != other_than
                and r.state is RunnerState.RUNNING
                and r
            ),
            timeout=400,
            what="the query's engine job to run",
            query=query,
        )

    first = start_query(spark, job_dir, checkpoint)
    record = running_job(query=first)
    wait_for(lambda: output_rows(out) >= 300, timeout=400, what="output of the first run", query=first)
    first.stop()
    wait_for(
        lambda: read_record(str(job_dir)).state is RunnerState.STOPPED,
        timeout=120,
        what="the engine job to stop with its query",
    )

    second = start_query(spark, job_dir, checkpoint)
    record = running_job(other_than=record.pid, query=second)
    before = output_rows(out)
    wait_for(lambda: output_rows(out) >= before + 300, timeout=400, what="output of the second run", query=second)
    victims = task_executors(record.pid)
    assert victims, f"no TaskExecutor processes under the runner {record.pid}"
    os.kill(victims[0], signal.SIGKILL)
    after_kill = output_rows(out)
    wait_for(
        lambda: output_rows(out) >= after_kill + 300,
        timeout=400,
        what="output after the TaskExecutor was killed",
        query=second,
    )
    assert read_record(str(job_dir)).pid == record.pid, "the engine recovers in place; the runner did not restart"
    second.stop()
    wait_for(
        lambda: read_record(str(job_dir)).state is RunnerState.STOPPED,
        timeout=120,
        what="the engine job to stop with its query",
    )

    third = start_query(spark, job_dir, checkpoint)
    running_job(other_than=record.pid, query=third)
    wait_for(lambda: output_rows(out) >= TOTAL, timeout=600, what=f"all {TOTAL} rows in the output", query=third)
    third.stop()

    assert input_rows_ever(job_dir) == TOTAL, "a micro-batch reached the job twice or not at all"
    rows = rows_in_commit_order(out)
    counts = assert_exactly_once_in_order(rows, range(FED_KEYS), min_per_key=TOTAL // FED_KEYS)
    assert counts == {key: TOTAL // FED_KEYS for key in range(FED_KEYS)}
    broken = [r for r in rows if r["count"] != r["seq"] + 1]
    assert not broken, f"the keyed running count broke (state lost or doubled): {broken[:5]}"
    # Input that every retained checkpoint had read was removed (the last checkpoints' may remain).
    adds = DeltaTable(str(job_dir / "input")).get_add_actions(flatten=True)
    live = sum(adds.column("num_records").to_pylist())
    assert live < TOTAL // 2, f"{live} of {TOTAL} input rows were never removed"
