"""Columnar sinks (Delta, Parquet and JSON files) get an undeclared stream's Rows and tuples as columns.

Without a declared type, Rows and tuples travel pickled between operators, as in
PyFlink; a sink that writes columns (``Sink.columnar_input``) gets a named Row's
fields, or a tuple's ``f0, f1, ...``, as columns, not one binary column of pickles.
"""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from connectors import DeltaSink, FileSink, SequenceSource, read_delta_table
from flinklike_spark import StreamExecutionEnvironment
from flinklike_spark.common.types import Row

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

NUM_KEYS, PER_KEY = 3, 4


def run(sink, to_record) -> None:
    env = StreamExecutionEnvironment.get_execution_environment({"parallelism.default": 1})
    env.from_source(SequenceSource(num_keys=NUM_KEYS, records_per_key=PER_KEY), name="seq").map(to_record).sink_to(sink)
    env.execute("columnar sink")


EXPECTED = sorted((k, s) for k in range(NUM_KEYS) for s in range(PER_KEY))


def test_named_rows_reach_a_delta_table_as_its_columns(tmp_path):
    run(DeltaSink(str(tmp_path / "t")), lambda r: Row(key=r["key"], seq=r["seq"]))
    table = read_delta_table(tmp_path / "t")
    assert table.schema.names == ["key", "seq"]
    assert sorted(zip(table.column("key").to_pylist(), table.column("seq").to_pylist())) == EXPECTED


def test_tuples_reach_parquet_files_as_f0_f1_columns(tmp_path):
    run(FileSink(str(tmp_path / "out"), format="parquet"), lambda r: (r["key"], r["seq"]))
    table = pq.read_table(sorted((tmp_path / "out").glob("*.parquet")))
    assert table.schema.names == ["f0", "f1"]
    assert sorted(zip(table.column("f0").to_pylist(), table.column("f1").to_pylist())) == EXPECTED


def test_named_rows_reach_json_files_as_objects(tmp_path):
    run(FileSink(str(tmp_path / "out"), format="json"), lambda r: Row(key=r["key"], seq=r["seq"]))
    lines = [json.loads(line) for path in (tmp_path / "out").glob("*.json") for line in path.read_text().splitlines()]
    assert sorted((o["key"], o["seq"]) for o in lines) == EXPECTED
