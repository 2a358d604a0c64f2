"""The driver-side owner of writeStream pipelines' jobs, driven as Spark drives it (no SparkSession needed).

Query start/stop events go to :class:`WriterJobOwner` as Spark's listener bus
delivers them; micro-batches go through :class:`FlinklikeStreamWriter` as
Spark's write tasks and driver-side commit do. The job is a real engine job
in a real runner process.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import types
import uuid

import pyarrow as pa
import pytest
from deltalake import DeltaTable

pytest.importorskip("pyspark", reason="the bridge needs pyspark (the [spark] or [test] extra)")

from pyspark.sql.types import LongType, StructField, StructType  # noqa: E402

from connectors import read_delta_table  # noqa: E402
from flinklike_spark.errors import ConfigurationError  # noqa: E402
from flinklike_spark.spark import writer, writer_jobs  # noqa: E402
from flinklike_spark.spark.job_record_table import JobRecordTable, RunnerState, read_record  # noqa: E402
from flinklike_spark.spark.job_runner import BridgeJobError  # noqa: E402
from flinklike_spark.spark.options import WriteOptions  # noqa: E402
from flinklike_spark.spark.writer import FlinklikeStreamWriter  # noqa: E402
from flinklike_spark.spark.writer_jobs import RunState, WriterJobOwner, run_status  # noqa: E402
from tests.spark.bridge_helpers import wait_for  # noqa: E402
from tests.spark.pipelines import fed_count_output  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SCHEMA = StructType([StructField("value", LongType())])


def options_for(job_dir, pipeline: str, **flink) -> WriteOptions:
    return WriteOptions.parse(
        {
            "execution.checkpointing.dir": str(job_dir),
            "pipeline": pipeline,
            "checkpointLocation": "/ckpt/a",
            "execution.checkpointing.interval": "200 ms",
            **flink,
        }
    )


def writer_for(job_dir, pipeline: str, **flink) -> FlinklikeStreamWriter:
    return FlinklikeStreamWriter(options_for(job_dir, pipeline, **flink), SCHEMA)


def owner_of(job_dir, pipeline: str, **flink) -> WriterJobOwner:
    """An owner whose queries all write to ``job_dir`` (Spark's listener finds that in the query's plan)."""
    return WriterJobOwner(lambda event: options_for(job_dir, pipeline, **flink))


def status(job_dir, run_id: str):
    return run_status(read_record(str(job_dir)), run_id)


def micro_batch(w: FlinklikeStreamWriter, run_id: str, batch_id: int, values: list[int]) -> None:
    batch = pa.RecordBatch.from_pylist([{"value": v} for v in values], schema=pa.schema([("value", pa.int64())]))
    message = dataclasses.replace(w.write(iter([batch])), run_id=run_id)  # as a Spark task of that run
    w.commit([message], batch_id)


def event(run_id: str):
    return types.SimpleNamespace(id=uuid.uuid4(), runId=run_id, name=None, exception=None)


def test_the_owner_runs_the_job_of_a_run_and_stops_it_with_the_query(tmp_path):
    job_dir = tmp_path / "job"
    owner = owner_of(job_dir, "tests.spark.pipelines:fed_count")
    run_id = str(uuid.uuid4())
    try:
        owner.onQueryStarted(event(run_id))
        w = writer_for(job_dir, "tests.spark.pipelines:fed_count")
        micro_batch(w, run_id, 0, list(range(0, 40)))  # returns once the job runs
        assert status(job_dir, run_id).state is RunState.RUNNING
        assert read_record(str(job_dir)).state is RunnerState.RUNNING
        micro_batch(w, run_id, 1, list(range(40, 80)))
        out = fed_count_output(str(job_dir))
        wait_for(
            lambda: read_delta_table(out).num_rows == 80 if DeltaTable.is_deltatable(out) else False,
            timeout=120,
            what="the job's output",
        )
        owner.onQueryTerminated(event(run_id))
        wait_for(
            lambda: read_record(str(job_dir)).state is RunnerState.STOPPED,
            timeout=120,
            what="the job to stop with the query",
        )
        assert status(job_dir, run_id).state is RunState.STOPPED
    finally:
        owner.close()


def test_a_failed_job_fails_the_next_commit_with_its_root_cause(tmp_path):
    job_dir = tmp_path / "job"
    owner = owner_of(job_dir, "tests.spark.pipelines:fed_failing", **{"restart-strategy.type": "none"})
    run_id = str(uuid.uuid4())
    try:
        owner.onQueryStarted(event(run_id))
        w = writer_for(job_dir, "tests.spark.pipelines:fed_failing", **{"restart-strategy.type": "none"})
        micro_batch(w, run_id, 0, [1, 2, 3])
        micro_batch(w, run_id, 1, [4, 5, 6])  # value 5 fails the job
        wait_for(lambda: status(job_dir, run_id).state is RunState.FAILED, timeout=120, what="the job to fail")
        with pytest.raises(BridgeJobError, match=r"bad value 5"):
            micro_batch(w, run_id, 2, [7])
        # The batch's input was committed before the job's failure was reported.
        assert DeltaTable(str(job_dir / "input")).transaction_version("spark/default") == 2
    finally:
        owner.close()


def test_a_commit_without_an_owner_names_the_fix(tmp_path, monkeypatch):
    monkeypatch.setattr(writer, "_CLAIM_TIMEOUT_SECONDS", 0.5)
    w = writer_for(tmp_path / "job", "tests.spark.pipelines:fed_count")
    with pytest.raises(BridgeJobError, match=r"no driver process took the query run .*register\(spark\)"):
        micro_batch(w, str(uuid.uuid4()), 0, [1])


@pytest.mark.parametrize(
    ("pipeline", "message"),
    [
        ("tests.spark.pipelines:not_a_stream", r"called as function\(env, stream\).*not_a_stream\(env"),
        ("tests.spark.pipelines:fed_count_output", r"called as function\(env, stream\)"),
        ("tests.spark.pipelines:no_such", r"has no attribute 'no_such'"),
    ],
)
def test_a_bad_pipeline_fails_the_writer(tmp_path, pipeline, message):
    with pytest.raises(ConfigurationError, match=message):
        writer_for(tmp_path / "job", pipeline)


def test_a_pipeline_returning_a_stream_commits_its_rows_for_a_reader(tmp_path):
    job_dir = tmp_path / "job"
    owner = owner_of(job_dir, "tests.spark.pipelines:fed_returns_stream")
    run_id = str(uuid.uuid4())
    try:
        owner.onQueryStarted(event(run_id))
        w = writer_for(job_dir, "tests.spark.pipelines:fed_returns_stream")
        micro_batch(w, run_id, 0, [1, 2, 3])

        def doubled():
            path = str(job_dir / "output")
            return (
                sorted(read_delta_table(path).column("doubled").to_pylist()) if DeltaTable.is_deltatable(path) else []
            )

        assert wait_for(lambda: doubled() == [2, 4, 6] and doubled(), timeout=120, what="the output table")
    finally:
        owner.close()


def test_close_returns_only_once_the_owners_thread_is_out_of_delta(tmp_path, monkeypatch):
    """Interpreter exit closes the owner: a thread of it left inside deltalake crashed the process (SIGSEGV)."""
    inside = threading.Event()

    class SlowRecordTable(JobRecordTable):
        def update(self, change):
            inside.set()
            time.sleep(1.0)  # the owner's thread is in the record's update when close() is called
            return super().update(change)

    monkeypatch.setattr(writer_jobs, "JobRecordTable", SlowRecordTable)
    others = set(threading.enumerate())  # e.g. the owner of a SparkSession of an earlier test in this process
    owner = owner_of(tmp_path / "job", "tests.spark.pipelines:fed_count")
    run_id = str(uuid.uuid4())
    owner.onQueryStarted(event(run_id))
    owner.onQueryTerminated(event(run_id))  # the owner's thread now marks the run's request ended
    assert inside.wait(30), "the owner's thread did not update the record"
    owner.close()
    alive = [
        t.name for t in set(threading.enumerate()) - others if t.name.startswith(("flinklike-writer-jobs", "stop-"))
    ]
    assert alive == [], f"close() returned while {alive} still ran"
