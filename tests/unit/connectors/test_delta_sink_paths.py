"""DeltaSink explains a path that cannot hold a table; read_delta_table reads any local table path."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import TableNotFoundError

from checkpointing.layout import delta_dataset
from connectors.delta import DeltaSink, read_delta_table
from flinklike_spark.connector_api import SinkWriterContext
from flinklike_spark.errors import ConfigurationError

pytestmark = pytest.mark.timeout(60)


def test_a_regular_file_is_reported_as_a_file_not_as_missing(tmp_path):
    path = tmp_path / "report.csv"
    path.write_text("not a table\n")
    sink = DeltaSink(path)
    writer = sink.create_writer(SinkWriterContext(subtask_index=0, parallelism=1, job_id="job", operator_uid="s"))
    with pytest.raises(ConfigurationError) as info:
        writer.open()
    message = str(info.value)
    assert str(path) in message and "is a regular file, not a directory" in message
    assert "does not exist" not in message
    assert path.read_text() == "not a table\n", "the file is left alone"


@pytest.mark.parametrize("name", ["plain", "with space", "ünïcode"])
def test_read_delta_table_reads_a_table_whose_path_needs_escaping_in_a_uri(tmp_path, name):
    path = tmp_path / name
    write_deltalake(str(path), pa.table({"k": ["a b", "c%d"], "v": [1, 2]}), partition_by=["k"])
    write_deltalake(str(path), pa.table({"k": ["a b"], "v": [3]}), partition_by=["k"], mode="append")
    rows = read_delta_table(path).to_pylist()
    assert sorted((r["k"], r["v"]) for r in rows) == [("a b", 1), ("a b", 3), ("c%d", 2)]
    assert read_delta_table(path, columns=["v"]).column_names == ["v"]


def test_read_delta_table_of_a_directory_without_a_table_raises_table_not_found(tmp_path):
    with pytest.raises(TableNotFoundError):
        read_delta_table(tmp_path)


def test_local_tables_are_scanned_without_python_in_arrows_io_threads(tmp_path):
    """delta-rs's own dataset reads through a Python filesystem handler (a ``PyFileSystem``): Arrow's
    I/O threads then call into Python and can abort the interpreter at exit (delta-rs#2184). A local
    table must be scanned through Arrow's native filesystem instead."""
    write_deltalake(str(tmp_path / "t"), pa.table({"v": [1, 2]}))
    table = DeltaTable(str(tmp_path / "t"))
    assert isinstance(table.to_pyarrow_dataset().filesystem, pafs.PyFileSystem)  # what is avoided
    filesystem = delta_dataset(table).filesystem
    assert isinstance(filesystem, pafs.SubTreeFileSystem)
    assert isinstance(filesystem.base_fs, pafs.LocalFileSystem)
