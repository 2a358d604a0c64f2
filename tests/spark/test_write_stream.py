"""``df.writeStream.format("flinklike")`` and ``foreachBatch(feed_job(...))``: Spark feeds an engine job.

A Spark rate source writes into the job's ``input`` table; the job
(SparkInputSource -> key_by -> running count -> DeltaSink) runs on the engine
in this process. The Spark query is stopped, its last commit-log entry is
removed (so Spark replays that micro-batch on restart, as after a crash
between the sink's commit and Spark's own), and started again. The job's
output must hold every value exactly once, in order per key.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from checkpointing.layout import scan_table
from connectors import DeltaSink, read_delta_table
from flinklike_spark import StreamExecutionEnvironment
from flinklike_spark.errors import JobCancelledError
from flinklike_spark.spark import feed_job
from flinklike_spark.spark.bridge_tables import INPUT_TABLE, SparkInputSource
from flinklike_spark.spark.writer import input_app_id
from tests.spark.bridge_helpers import assert_exactly_once_in_order, rows_in_commit_order, wait_for
from tests.spark.pipelines import Count

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(1500)]

KEYS = 3


def start_job(job_dir, out):
    env = StreamExecutionEnvironment.get_execution_environment(
        {
            "parallelism.default": 2,
            "execution.checkpointing.interval": "300 ms",
            "execution.checkpointing.dir": str(job_dir),
        }
    )
    (
        env.from_source(SparkInputSource(job_dir / INPUT_TABLE, pa.schema([("value", pa.int64())])), name="spark")
        .uid("spark-input")
        .set_parallelism(1)
        .map(lambda r: {"key": r["value"] % KEYS, "seq": r["value"] // KEYS})
        .key_by("key")
        .process(Count())
        .uid("counter")
        .sink_to(DeltaSink(out))
        .uid("out")
    )
    return env.execute_async("fed by spark")


def rate(spark):
    return (
        spark.readStream.format("rate").option("rowsPerSecond", 100).option("numPartitions", 1).load().select("value")
    )


def input_rows(job_dir) -> int:
    try:
        table = DeltaTable(str(job_dir / INPUT_TABLE))
    except Exception:  # noqa: BLE001 - not created yet
        return 0
    return scan_table(table).num_rows


def commits_of(job_dir, app_version: str) -> int:
    """How many commits of the job's input table carry app transaction ``app_id@version``."""
    history = DeltaTable(str(job_dir / INPUT_TABLE)).history()
    return sum(1 for commit in history if commit.get("flinklike.app") == app_version)


def run_with_replay(spark, tmp_path, start_query, app_id: str) -> None:
    job_dir, out, spark_checkpoint = tmp_path / "job", tmp_path / "out", tmp_path / "spark-checkpoint"
    client = start_job(job_dir, out)
    try:
        first = start_query(spark_checkpoint)
        wait_for(
            lambda: len([p for p in first.recentProgress if p["numInputRows"]]) >= 3,
            timeout=400,
            what="three micro-batches with rows",
            query=first,
        )
        first.stop()
        # Simulate a crash after the sink committed micro-batch N but before Spark's commit log
        # recorded it: Spark re-runs its latest planned batch when its commit entry is missing.
        # (stop() may have interrupted a later batch before it reached the job: forget that one.)
        replayed = DeltaTable(str(job_dir / INPUT_TABLE)).transaction_version(app_id)
        assert replayed is not None, "no micro-batch reached the job"
        for log in ("offsets", "commits"):
            for entry in (spark_checkpoint / log).glob("[0-9]*"):
                if int(entry.name) > replayed or (log == "commits" and int(entry.name) == replayed):
                    entry.unlink()
                    (entry.parent / f".{entry.name}.crc").unlink(missing_ok=True)  # else a new entry's rename fails
        written = input_rows(job_dir)

        second = start_query(spark_checkpoint)
        wait_for(
            lambda: any(p["batchId"] == replayed for p in second.recentProgress),
            timeout=400,
            what=f"Spark to replay micro-batch {replayed}",
            query=second,
        )
        # Spark goes on with new micro-batches right after the replay, so count the input
        # table's commits of the replayed batch rather than its rows.
        assert commits_of(job_dir, f"{app_id}@{replayed}") == 1, "the replayed micro-batch must not add input"
        wait_for(lambda: input_rows(job_dir) > written + 100, timeout=400, what="new input", query=second)
        second.stop()
        total = input_rows(job_dir)

        def output_rows():
            try:
                return read_delta_table(out).num_rows
            except Exception:  # noqa: BLE001 - not created yet
                return 0

        wait_for(lambda: output_rows() >= total, timeout=120, what=f"the job to output all {total} rows")
    finally:
        client.cancel()
        with pytest.raises(JobCancelledError):
            client.wait(60)
    counts = assert_exactly_once_in_order(rows_in_commit_order(out), range(KEYS), min_per_key=total // KEYS)
    assert sum(counts.values()) == total


def test_write_stream_replayed_batch_is_ignored(spark, tmp_path):
    def start_query(checkpoint):
        return (
            rate(spark)
            .writeStream.format("flinklike")
            .option("execution.checkpointing.dir", str(tmp_path / "job"))
            .option("queryId", "rate")
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="500 milliseconds")
            .start()
        )

    run_with_replay(spark, tmp_path, start_query, input_app_id("rate"))
    assert DeltaTable(str(tmp_path / "job" / INPUT_TABLE)).transaction_version(input_app_id("rate")) is not None


def test_foreach_batch_feeder_replayed_batch_is_ignored(spark, tmp_path):
    def start_query(checkpoint):
        return (
            rate(spark)
            .writeStream.foreachBatch(feed_job(tmp_path / "job", "rate-feeder"))
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="500 milliseconds")
            .start()
        )

    run_with_replay(spark, tmp_path, start_query, input_app_id("rate-feeder"))


def test_write_stream_with_a_new_checkpoint_location_under_the_same_query_id_fails_instead_of_dropping(spark, tmp_path):
    job_dir = tmp_path / "job"

    def start_query(checkpoint):
        return (
            rate(spark)
            .writeStream.format("flinklike")
            .option("execution.checkpointing.dir", str(job_dir))
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="500 milliseconds")
            .start()
        )

    first = start_query(tmp_path / "spark-a")
    try:
        wait_for(lambda: input_rows(job_dir) > 0, timeout=300, what="input from the first query", query=first)
    finally:
        first.stop()
    second = start_query(tmp_path / "spark-b")  # Spark's batch ids start again at 0
    try:
        wait_for(lambda: second.exception() is not None, timeout=300, what="the second query to fail")
    finally:
        second.stop()
    message = str(second.exception())
    assert "spark-a" in message and "spark-b" in message and "own queryId" in message, message
