"""PrintSink and CollectSink through the SinkWriter call order (open, write..., finish, close)."""

from __future__ import annotations

import dataclasses
import pickle

import pyarrow as pa
import pytest

from connectors import CollectSink, FileSink, PrintSink
from flinklike_spark.connector_api import SinkWriterContext
from flinklike_spark.errors import ConfigurationError, SchemaMismatchError
from flinklike_spark.job_client import JobExecutionResult

BATCH = pa.RecordBatch.from_pylist([{"key": 1, "seq": 0}, {"key": 2, "seq": 5}])


def run_writer(sink, batches, *, subtask=0, parallelism=1):
    writer = sink.create_writer(SinkWriterContext(subtask_index=subtask, parallelism=parallelism))
    writer.open()
    for batch in batches:
        writer.write(batch)
    writer.finish()
    value = writer.accumulator()
    writer.close()
    return value


@pytest.mark.parametrize(
    ("prefix", "subtask", "parallelism", "expected_head"),
    [
        (None, 0, 1, ""),
        (None, 1, 3, "2> "),
        ("out", 0, 1, "out> "),
        ("out", 2, 3, "out:3> "),
    ],
)
def test_print_sink_formats_like_flink(capsys, prefix, subtask, parallelism, expected_head):
    run_writer(PrintSink(prefix=prefix), [BATCH], subtask=subtask, parallelism=parallelism)
    captured = capsys.readouterr()
    assert captured.out == f"{expected_head}{{'key': 1, 'seq': 0}}\n{expected_head}{{'key': 2, 'seq': 5}}\n"
    assert captured.err == ""


def test_print_sink_stderr_and_pickles(capsys):
    sink = pickle.loads(pickle.dumps(PrintSink(stream="stderr")))
    run_writer(sink, [BATCH.slice(0, 1)], subtask=0, parallelism=2)
    captured = capsys.readouterr()
    assert captured.err == "1> {'key': 1, 'seq': 0}\n"
    assert captured.out == ""


def test_print_sink_prints_records_as_emitted(capsys):
    from flinklike_spark import Row, Types
    from flinklike_spark._runtime.operators.rows import RowsConverter
    from flinklike_spark.common.typeinfo import to_arrow_schema

    def converter(type_info=None):
        return RowsConverter(None if type_info is None else to_arrow_schema(type_info), stream_name="s")

    batches = [
        converter(Types.TUPLE([Types.STRING(), Types.INT(), Types.DOUBLE()])).to_batch([("a", 1, 1e7)]),
        converter().to_batch([Row(word="b", n=2), Row("c", 3), ("d", 4), 5, "six"]),
        converter(Types.ROW([Types.STRING(), Types.DOUBLE()])).to_batch([Row("e", 0.5), ("f", None)]),
        converter(Types.ROW_NAMED(["w", "n"], [Types.STRING(), Types.INT()])).to_batch([Row(w="g", n=7)]),
        converter(Types.BOOLEAN()).to_batch([True, None]),
        converter(Types.FLOAT()).to_batch([1.1, 2.5e-5]),
        converter().to_batch([{"key": 1}]),
    ]
    run_writer(PrintSink(), batches)
    # As real PyFlink 2.3 prints them: undeclared (pickled) records with str(), declared Rows as PyFlink's
    # Python side formats them, tuples and basic values as Java's toString of the Flink value.
    assert capsys.readouterr().out.splitlines() == [
        "(a,1,1.0E7)", "Row(word='b', n=2)", "<Row('c', 3)>", "('d', 4)", "5", "six", "+I[e,0.5]", "+I[f,None]",
        "+I[g,7]", "true", "null", "1.1", "2.5E-5", "{'key': 1}",
    ]  # fmt: skip


def test_print_sink_bad_arguments():
    with pytest.raises(ConfigurationError, match=r"stream must be one of \['stderr', 'stdout'\], got 'file'"):
        PrintSink(stream="file")
    with pytest.raises(ConfigurationError, match="prefix must be a str or None, got 3"):
        PrintSink(prefix=3)


@dataclasses.dataclass
class FakeResult:
    accumulators: dict


def collect_result(sink, per_subtask_batches):
    """What the runtime reports: the writer accumulators, one per subtask, keyed by sink name."""
    values = [
        run_writer(pickle.loads(pickle.dumps(sink)), batches, subtask=i, parallelism=len(per_subtask_batches))
        for i, batches in enumerate(per_subtask_batches)
    ]
    return pickle.loads(pickle.dumps(values))


def test_collect_writer_accumulator_is_its_batches():
    value = run_writer(CollectSink(), [BATCH, BATCH.slice(0, 0), BATCH.slice(1)])
    assert isinstance(value, list)
    assert all(isinstance(b, pa.RecordBatch) for b in value)
    assert [b.num_rows for b in value] == [2, 1]


def test_collect_rows_and_table_in_subtask_order():
    sink = CollectSink("out")
    accumulated = collect_result(sink, [[BATCH], [], [BATCH.slice(1), BATCH.slice(0, 1)]])
    result = FakeResult({"out": accumulated, "other": [{"rows": 3}]})
    expected = [
        {"key": 1, "seq": 0},
        {"key": 2, "seq": 5},
        {"key": 2, "seq": 5},
        {"key": 1, "seq": 0},
    ]
    assert sink.rows(result) == expected
    assert CollectSink.rows(result) == expected  # the only CollectSink-shaped accumulator
    table = sink.table(result)
    assert table.num_rows == 4 and table.column_names == ["key", "seq"]
    assert table.to_pylist() == expected


def test_collect_with_real_job_execution_result():
    from datetime import timedelta

    sink = CollectSink("counts")
    result = JobExecutionResult(
        job_id="j",
        job_name="n",
        net_runtime=timedelta(seconds=1),
        accumulators={"counts": collect_result(sink, [[BATCH]])},
    )
    assert CollectSink.rows(result) == BATCH.to_pylist()


def test_collect_empty_and_ambiguous_and_missing():
    a, b = CollectSink("a"), CollectSink("b")
    result = FakeResult({"a": collect_result(a, [[], []]), "b": collect_result(b, [[BATCH]])})
    assert a.rows(result) == []
    assert a.table(result).num_rows == 0
    assert CollectSink.rows(result, name="b") == BATCH.to_pylist()
    with pytest.raises(ConfigurationError, match=r"candidates \['a', 'b'\]"):
        CollectSink.rows(result)
    with pytest.raises(ConfigurationError, match=r"no accumulator named 'c' in the job result; available: \['a', 'b'"):
        CollectSink("c").rows(result)
    with pytest.raises(ConfigurationError, match="not a list \\(over subtasks\\) of lists of pyarrow.RecordBatch"):
        CollectSink("x").rows(FakeResult({"x": [{"rows": 1}]}))
    with pytest.raises(ConfigurationError, match="with an 'accumulators' dict, got dict"):
        CollectSink.rows({"a": []})
    with pytest.raises(ConfigurationError, match="name must be a non-empty str, got ''"):
        CollectSink("")


def test_file_sink_parquet_rejects_changed_schema(tmp_path):
    other = pa.RecordBatch.from_pylist([{"key": "x"}])
    with pytest.raises(SchemaMismatchError, match="differs from the part's schema"):
        run_writer(FileSink(str(tmp_path), format="parquet"), [BATCH, other])
