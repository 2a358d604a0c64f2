"""The Spark bridge's engine-side tables on S3 and Azure: the ``output`` table a job commits to and the ``input`` table it tails.

Reading them with Spark itself from S3 needs Hadoop's s3a filesystem
(hadoop-aws and the AWS SDK bundle, ~300 MB of jars), from Azure hadoop-azure;
that is not part of this suite (see docs/storage.md).
"""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from checkpointing.layout import scan_table
from connectors import SequenceSource
from flinklike_spark import StreamExecutionEnvironment
from flinklike_spark.connector_api import SourceReaderContext
from flinklike_spark.spark.bridge_tables import (
    CHECKPOINT_COLUMN,
    BridgeTable,
    SparkInputSource,
    SparkOutputSink,
    stage_batches,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_a_job_commits_the_output_table_exactly_once(store):
    output = store.url("job") + "/output"
    schema = pa.schema([("key", pa.int64()), ("seq", pa.int64())])
    env = StreamExecutionEnvironment.get_execution_environment({"parallelism.default": 1, **store.config})
    env.from_source(SequenceSource(num_keys=3, records_per_key=50), name="seq").sink_to(
        SparkOutputSink(output, schema)
    ).set_parallelism(1)
    env.execute("to spark")
    rows = scan_table(BridgeTable(output, storage=store.storage).open()).to_pylist()
    assert sorted((r["key"], r["seq"]) for r in rows) == [(k, s) for k in range(3) for s in range(50)]
    assert all(r[CHECKPOINT_COLUMN] is not None for r in rows)


def test_a_job_reads_the_input_table(store):
    path = store.url("job") + "/input"
    schema = pa.schema([("n", pa.int64())])
    table = BridgeTable(path, storage=store.storage)
    for batch_id in range(3):
        batch = pa.record_batch([pa.array(range(batch_id * 10, batch_id * 10 + 10))], schema=schema)
        assert table.commit_once(schema, [stage_batches(table, [batch], schema, what="rows")], "spark/q", batch_id)
    source = SparkInputSource(path, schema).with_storage(store.storage)  # as execute() binds it
    reader = source.create_reader(SourceReaderContext(subtask_index=0, parallelism=1))
    reader.add_splits(source.create_splits(1))
    reader.open()
    seen: list[int] = []
    deadline = time.monotonic() + 60
    while len(seen) < 30:
        assert time.monotonic() < deadline, f"read only {seen}"
        result = reader.poll_next(100)
        if result.batch is not None:
            seen.extend(result.batch.column("n").to_pylist())
        else:
            time.sleep(0.05)
    reader.close()
    assert seen == list(range(30))
