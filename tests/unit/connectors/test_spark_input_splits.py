"""SparkInputSource reads the ``input`` table as splits (per Spark partition) and removes consumed files.

Real Delta tables written as the stream writer writes them (one file per Spark
task, named for its partition, one commit per micro-batch); the readers are
driven as the source operator drives them (add_splits, poll, snapshot, notify).
"""

from __future__ import annotations

import time

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from flinklike_spark.connector_api import SourceReaderContext
from flinklike_spark.errors import ConfigurationError
from flinklike_spark.spark.bridge_tables import (
    BridgeTable,
    SparkInputSource,
    SparkInputSplit,
    spark_partition_of,
    stage_batches,
)

pytestmark = pytest.mark.timeout(60)

SCHEMA = pa.schema([("part", pa.int64()), ("n", pa.int64())])
PARTITIONS = 3


def commit_micro_batch(path, batch_id: int, per_partition: int = 4) -> None:
    """Spark partition p writes rows (p, batch_id * per_partition + i) into its own file."""
    table = BridgeTable(str(path))
    files = []
    for part in range(PARTITIONS):
        values = list(range(batch_id * per_partition, (batch_id + 1) * per_partition))
        batch = pa.record_batch([pa.array([part] * per_partition), pa.array(values)], schema=SCHEMA)
        files.append(stage_batches(table, [batch], SCHEMA, what="rows", partition=part))
    assert table.commit_once(SCHEMA, files, "spark/q", batch_id)


def reader_for(source, splits):
    reader = source.create_reader(SourceReaderContext(subtask_index=0, parallelism=1))
    reader.add_splits(splits)
    reader.open()
    return reader


def drain(reader, expected_rows: int) -> list[dict]:
    rows: list[dict] = []
    deadline = time.monotonic() + 30
    while len(rows) < expected_rows:
        assert time.monotonic() < deadline, f"read only {len(rows)} of {expected_rows} rows"
        result = reader.poll_next(3)
        if result.batch is not None:
            rows.extend(result.batch.to_pylist())
        else:
            time.sleep(0.01)
    return rows


def test_file_names_carry_the_spark_partition():
    assert spark_partition_of("s3://b/input/part-00007-" + "a" * 32 + "-c000.zstd.parquet") == 7
    assert spark_partition_of("/x/input/part-" + "b" * 32 + "-c000.zstd.parquet") == 0  # feed_job's files


def test_splits_partition_the_spark_partitions_and_keep_each_ones_order(tmp_path):
    path = tmp_path / "input"
    for batch_id in range(3):
        commit_micro_batch(path, batch_id)
    source = SparkInputSource(path, SCHEMA, poll_interval="10 ms")
    splits = source.create_splits(2)
    assert [(s.index, s.count) for s in splits] == [(0, 2), (1, 2)]
    readers = [reader_for(source, [split]) for split in splits]
    # Split 0 reads partitions 0 and 2, split 1 partition 1: 12 rows per partition.
    by_reader = [drain(readers[0], 24), drain(readers[1], 12)]
    assert {r["part"] for r in by_reader[0]} == {0, 2} and {r["part"] for r in by_reader[1]} == {1}
    for rows in by_reader:
        for part in {r["part"] for r in rows}:
            assert [r["n"] for r in rows if r["part"] == part] == list(range(12))  # commit order per partition
    # Positions are per split and restore exactly: two new micro-batches after a snapshot.
    states = [reader.snapshot_state(1) for reader in readers]
    for reader in readers:
        reader.close()
    commit_micro_batch(path, 3)
    restored = reader_for(source, states[0] + states[1])  # one reader takes both splits (parallelism 1)
    rows = drain(restored, 12)
    assert sorted((r["part"], r["n"]) for r in rows) == [(p, n) for p in range(PARTITIONS) for n in range(12, 16)]
    assert restored.poll_next(100).batch is None


def test_one_reader_reads_a_restored_single_split_as_before(tmp_path):
    path = tmp_path / "input"
    commit_micro_batch(path, 0)
    source = SparkInputSource(path, SCHEMA, poll_interval="10 ms")
    old_state = SparkInputSplit(split_id="spark-input", version=1, file_index=1)  # before splits existed
    rows = drain(reader_for(source, [old_state]), 8)
    assert sorted({r["part"] for r in rows}) == [1, 2]


def live_files(path) -> set[str]:
    return set(DeltaTable(str(path)).file_uris())


@pytest.mark.parametrize("retained", [1, 2])
def test_files_every_retained_checkpoint_has_read_are_removed(tmp_path, retained):
    path = tmp_path / "input"
    commit_micro_batch(path, 0)
    commit_micro_batch(path, 1)
    source = SparkInputSource(path, SCHEMA, poll_interval="10 ms", num_retained_checkpoints=retained)
    reader = reader_for(source, source.create_splits(1))
    first = set(BridgeTable(str(path)).open(1).file_uris())
    second = live_files(path) - first
    drain(reader, 12)  # micro-batch 0 (version 1)
    reader.snapshot_state(1)
    reader.notify_checkpoint_complete(1)
    if retained == 2:
        assert live_files(path) == first | second, "removed before every retained checkpoint read it"
    drain(reader, 12)  # micro-batch 1
    reader.snapshot_state(2)
    reader.notify_checkpoint_complete(2)
    # Every retained checkpoint is past micro-batch 0: its files are gone from the table and the storage.
    assert live_files(path) == (second if retained == 2 else set())
    assert not any((path / uri.rsplit("/", 1)[-1]).exists() for uri in first)
    if retained == 2:
        reader.snapshot_state(3)
        reader.notify_checkpoint_complete(3)
        assert live_files(path) == set()
    reader.close()


def test_a_restored_reader_removes_what_the_restored_checkpoint_had_read(tmp_path):
    path = tmp_path / "input"
    for batch_id in range(2):
        commit_micro_batch(path, batch_id)
    source = SparkInputSource(path, SCHEMA, poll_interval="10 ms", num_retained_checkpoints=1)
    first = reader_for(source, source.create_splits(1))
    drain(first, 24)
    state = first.snapshot_state(1)  # the job dies before checkpoint 1's notification
    first.close()
    restored = reader_for(source, state)
    commit_micro_batch(path, 2)
    drain(restored, 12)
    restored.snapshot_state(2)
    restored.notify_checkpoint_complete(2)
    assert len(live_files(path)) == 0
    restored.close()


def test_bad_retention_setting():
    with pytest.raises(ConfigurationError, match="num_retained_checkpoints must be None or >= 1, got 0"):
        SparkInputSource("/tmp/x", SCHEMA, num_retained_checkpoints=0)
