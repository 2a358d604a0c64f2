"""The writeStream side of the bridge, driven as Spark's Python worker drives it (write on tasks, commit on the driver).

Real Delta tables; no Spark session is needed to call the writer's methods.
"""

from __future__ import annotations

import logging

import pyarrow as pa
import pytest

pytest.importorskip("pyspark", reason="the Spark writer needs pyspark (the [spark] or [test] extra)")

from pyspark.sql.types import LongType, StructField, StructType  # noqa: E402

from connectors import read_delta_table  # noqa: E402
from flinklike_spark.errors import ConfigurationError  # noqa: E402
from flinklike_spark.spark.bridge_tables import INPUT_TABLE  # noqa: E402
from flinklike_spark.spark.options import WriteOptions  # noqa: E402
from flinklike_spark.spark.writer import FlinklikeStreamWriter  # noqa: E402

pytestmark = pytest.mark.timeout(60)

SCHEMA = StructType([StructField("key", LongType()), StructField("value", LongType())])


def micro_batch(writer: FlinklikeStreamWriter, batch_id: int, rows: list[dict]) -> None:
    batch = pa.RecordBatch.from_pylist(rows, schema=pa.schema([("key", pa.int64()), ("value", pa.int64())]))
    writer.commit([writer.write(iter([batch]))], batch_id)


def writer_for(directory, checkpoint_location: str | None, query_id: str | None = None) -> FlinklikeStreamWriter:
    options = {"execution.checkpointing.dir": str(directory)}
    if checkpoint_location is not None:
        options["checkpointLocation"] = checkpoint_location
    if query_id is not None:
        options["queryId"] = query_id
    return FlinklikeStreamWriter(WriteOptions.parse(options), SCHEMA)


def input_rows(directory) -> int:
    return read_delta_table(directory / INPUT_TABLE).num_rows


def test_a_replay_of_the_same_query_is_ignored(tmp_path):
    first = writer_for(tmp_path, "/ckpt/a")
    micro_batch(first, 0, [{"key": 1, "value": 1}])
    micro_batch(writer_for(tmp_path, "/ckpt/a"), 0, [{"key": 1, "value": 1}])  # restarted from /ckpt/a: a replay
    assert input_rows(tmp_path) == 1


def test_a_new_checkpoint_location_under_the_same_query_id_is_refused_not_dropped(tmp_path):
    micro_batch(writer_for(tmp_path, "/ckpt/a"), 0, [{"key": 1, "value": 1}])
    micro_batch(writer_for(tmp_path, "/ckpt/a"), 1, [{"key": 1, "value": 2}])
    restarted = writer_for(tmp_path, "/ckpt/b")  # batch ids start at 0 again
    with pytest.raises(ConfigurationError, match=r"checkpointLocation '/ckpt/a'.*'/ckpt/b'.*own queryId"):
        micro_batch(restarted, 0, [{"key": 2, "value": 1}])
    assert input_rows(tmp_path) == 2
    # With its own queryId the new query's rows are accepted.
    micro_batch(writer_for(tmp_path, "/ckpt/b", query_id="second"), 0, [{"key": 2, "value": 1}])
    assert input_rows(tmp_path) == 3


def test_an_unknown_checkpoint_location_warns_when_it_drops_a_batch(tmp_path, caplog):
    micro_batch(writer_for(tmp_path, None), 0, [{"key": 1, "value": 1}])
    with caplog.at_level(logging.WARNING):
        micro_batch(writer_for(tmp_path, None), 0, [{"key": 1, "value": 9}])
    assert input_rows(tmp_path) == 1
    assert any("ignored as a replay" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
