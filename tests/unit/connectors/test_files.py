"""FileSource and FileSink through the connector interface, on local paths and memory://."""

from __future__ import annotations

import json
import pickle
import uuid

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from connectors import FileSink, FileSource, FileSplit
from flinklike_spark.connector_api import SinkWriterContext, SourceReaderContext
from flinklike_spark.errors import ConfigurationError, FlinklikeError, InputFilesNotFoundError, MalformedRecordError


@pytest.fixture(params=["local", "memory"])
def base(request, tmp_path):
    """A directory URL on the local disk or in fsspec's in-process memory filesystem."""
    if request.param == "local":
        yield str(tmp_path)
        return
    url = f"memory://flinklike-test-{uuid.uuid4().hex}"
    yield url
    fs, root = fsspec.core.url_to_fs(url)
    if fs.exists(root):
        fs.rm(root, recursive=True)


def put(base: str, name: str, data: str | bytes) -> str:
    path = f"{base}/{name}"
    with fsspec.open(path, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    return path


def start_reader(source, splits, *, subtask=0, parallelism=1):
    reader = source.create_reader(SourceReaderContext(subtask_index=subtask, parallelism=parallelism))
    reader.add_splits(splits)
    reader.open()
    return reader


def drain(reader, max_rows=1000):
    rows = []
    for _ in range(10_000):
        result = reader.poll_next(max_rows)
        if result.end_of_input:
            return rows
        assert result.batch is not None and 0 < result.batch.num_rows <= max_rows
        rows.extend(result.batch.to_pylist())
    raise AssertionError("no end_of_input")


def read_all(source, parallelism=1):
    splits = source.create_splits(parallelism)
    rows = []
    for subtask in range(parallelism):
        reader = start_reader(source, splits[subtask::parallelism], subtask=subtask, parallelism=parallelism)
        rows.extend(drain(reader))
        reader.close()
    return rows


def test_lines_one_row_per_line(base):
    put(base, "a.txt", "first\nsecond\r\n\nlast without newline")
    put(base, "b.txt", "")
    put(base, "c.txt", "only\n")
    source = FileSource(f"{base}/*.txt")
    assert source.output_schema() == pa.schema([("line", pa.string())])
    lines = [row["line"] for row in read_all(source)]
    assert lines == ["first", "second", "", "last without newline", "only"]


def test_splits_are_sorted_files_and_parallel_readers_split_them(base):
    for name in ["c.txt", "a.txt", "b.txt", "d.log"]:
        put(base, name, f"{name}-1\n{name}-2\n")
    source = FileSource(f"{base}/*.txt")
    splits = source.create_splits(2)
    assert [s.path.rsplit("/", 1)[-1] for s in splits] == ["a.txt", "b.txt", "c.txt"]
    assert all(s.offset == 0 and s.line_number == 1 for s in splits)
    reader0 = start_reader(source, splits[0::2], subtask=0, parallelism=2)
    assert [r["line"] for r in drain(reader0)] == ["a.txt-1", "a.txt-2", "c.txt-1", "c.txt-2"]
    # a list of patterns, duplicates removed, and a directory means every file under it
    both = FileSource([f"{base}/a.txt", f"{base}/*.txt", f"{base}/d.log"])
    assert len(both.create_splits(1)) == 4
    assert len(FileSource(base).create_splits(3)) == 4


def test_batch_size_and_max_rows_cap_batches(base):
    put(base, "n.txt", "".join(f"{i}\n" for i in range(100)))
    source = FileSource(f"{base}/n.txt", batch_size=30)
    reader = start_reader(source, source.create_splits(1))
    assert reader.poll_next(1000).batch.num_rows == 30
    assert reader.poll_next(7).batch.num_rows == 7
    assert [r["line"] for r in drain(reader, max_rows=1000)] == [str(i) for i in range(37, 100)]


@pytest.mark.parametrize("first_polls", [0, 1, 3, 4])
def test_restore_from_snapshot_mid_file_continues_exactly(base, first_polls):
    put(base, "a.txt", "".join(f"a{i}-{'x' * (i % 7)}\r\n" for i in range(10)))
    put(base, "b.txt", "".join(f"b{i}\n" for i in range(5)) + "b-last")
    expected = [f"a{i}-{'x' * (i % 7)}" for i in range(10)] + [f"b{i}" for i in range(5)] + ["b-last"]
    source = FileSource(f"{base}/*.txt", batch_size=4)
    reader = start_reader(source, source.create_splits(1))
    before = []
    for _ in range(first_polls):
        before.extend(r["line"] for r in reader.poll_next(4).batch.to_pylist())
    state = reader.snapshot_state(checkpoint_id=7)
    reader.poll_next(4)  # read past the checkpoint, then "fail"
    reader.close()
    restored = start_reader(source, pickle.loads(pickle.dumps(state)))
    after = [r["line"] for r in drain(restored)]
    assert before + after == expected


def test_snapshot_names_file_offset_and_line(base):
    put(base, "a.txt", "aa\nbbb\ncccc\n")
    source = FileSource(f"{base}/a.txt")
    reader = start_reader(source, source.create_splits(1))
    assert reader.poll_next(2).batch.num_rows == 2
    (split,) = reader.snapshot_state(1)
    assert isinstance(split, FileSplit)
    assert split.path.endswith("a.txt")
    assert (split.offset, split.line_number) == (len("aa\nbbb\n"), 3)
    drain(reader)
    assert reader.snapshot_state(2) == []  # finished files are dropped


def test_json_inferred_schema(base):
    records = [{"id": 1, "name": "a", "score": 1.5}, {"id": 2, "name": "b", "tags": ["x"]}]
    put(base, "r1.jsonl", "\n".join(json.dumps(r) for r in records) + "\n\n")
    put(base, "r2.jsonl", '  \n{"id": 3, "name": "c", "extra": true}\n')
    source = FileSource(f"{base}/*.jsonl", format="json")
    schema = source.output_schema()
    assert schema.names == ["id", "name", "score", "tags"]
    assert schema.field("id").type == pa.int64()
    assert schema.field("tags").type == pa.list_(pa.string())
    rows = read_all(source)
    assert rows == [
        {"id": 1, "name": "a", "score": 1.5, "tags": None},
        {"id": 2, "name": "b", "score": None, "tags": ["x"]},
        {"id": 3, "name": "c", "score": None, "tags": None},
    ]


def test_json_explicit_schema_and_restore(base):
    put(base, "r.json", "".join(json.dumps({"k": i, "v": str(i)}) + "\n" for i in range(20)))
    schema = pa.schema([("v", pa.string()), ("k", pa.int32())])
    source = FileSource(f"{base}/r.json", format="json", schema=schema, batch_size=6)
    assert source.output_schema() == schema
    reader = start_reader(source, source.create_splits(1))
    first = reader.poll_next(6).batch
    assert first.schema == schema
    state = reader.snapshot_state(1)
    reader.close()
    rest = drain(start_reader(source, state))
    assert [r["k"] for r in first.to_pylist() + rest] == list(range(20))


def test_malformed_json_names_file_line_and_text(base):
    bad = '{"id": 3, "name": oops' + "z" * 500
    put(base, "bad.jsonl", '{"id": 1, "name": "a"}\n{"id": 2, "name": "b"}\n' + bad + "\n")
    source = FileSource(f"{base}/bad.jsonl", format="json", schema=pa.schema([("id", pa.int64())]))
    reader = start_reader(source, source.create_splits(1))
    with pytest.raises(MalformedRecordError) as info:
        drain(reader)
    message = str(info.value)
    assert "bad.jsonl" in message
    assert "line 3" in message
    assert '{"id": 3, "name": oops' in message
    assert "z" * 200 not in message  # truncated
    assert info.value.line_number == 3
    assert pickle.loads(pickle.dumps(info.value)).line_number == 3


def test_json_line_that_is_not_an_object_or_does_not_fit_schema(base):
    put(base, "list.jsonl", '{"id": 1}\n[1, 2]\n')
    source = FileSource(f"{base}/list.jsonl", format="json", schema=pa.schema([("id", pa.int64())]))
    with pytest.raises(MalformedRecordError, match=r"expected a JSON object in .*list.jsonl line 2, got list"):
        read_all(source)
    put(base, "types.jsonl", '{"id": 1}\n{"id": 2}\n{"id": "three"}\n')
    source = FileSource(f"{base}/types.jsonl", format="json", schema=pa.schema([("id", pa.int64())]))
    with pytest.raises(MalformedRecordError, match=r"types.jsonl line 3 does not match the schema"):
        read_all(source)


def test_missing_path_raises_file_not_found_naming_it(base):
    put(base, "a.txt", "x\n")
    for pattern in [f"{base}/nothing-*.txt", f"{base}/missing.txt"]:
        source = FileSource(pattern)
        with pytest.raises(InputFilesNotFoundError) as info:
            source.create_splits(1)
        assert isinstance(info.value, FileNotFoundError) and isinstance(info.value, FlinklikeError)
        assert pattern in str(info.value)
    with pytest.raises(InputFilesNotFoundError, match="nope.json"):
        FileSource(f"{base}/nope.json", format="json").output_schema()


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (("x",), {"format": "csv"}, "format must be one of ['json', 'lines', 'text'], got 'csv'"),
        (("x",), {"batch_size": 0}, "batch_size must be a positive int (>= 1), got 0"),
        (("x",), {"schema": pa.schema([("a", pa.int64())])}, "schema applies only to format='json'"),
        (([],), {}, "path_or_glob must be a non-empty path"),
    ],
)
def test_source_bad_arguments(args, kwargs, message):
    with pytest.raises(ConfigurationError) as info:
        FileSource(*args, **kwargs)
    assert message in str(info.value)


def write_with(sink, batches, *, subtask=0, attempt=0, finish=True):
    writer = sink.create_writer(SinkWriterContext(subtask_index=subtask, parallelism=2, attempt_number=attempt))
    writer.open()
    for batch in batches:
        writer.write(batch)
    if finish:
        writer.finish()
    writer.close()


def listing(base):
    fs, root = fsspec.core.url_to_fs(base)
    return sorted(p.rsplit("/", 1)[-1] for p in fs.find(root))


BATCH = pa.RecordBatch.from_pylist([{"k": 1, "v": "a"}, {"k": 2, "v": None}])


def test_file_sink_json_roundtrips_through_file_source(base):
    out = f"{base}/out"
    sink = FileSink(out, format="json")
    write_with(sink, [BATCH, BATCH.slice(0, 1)], subtask=1, attempt=2)
    write_with(sink, [], subtask=0)
    assert listing(out) == ["part-1-2-0.json"]
    rows = read_all(FileSource(f"{out}/*.json", format="json", schema=BATCH.schema))
    assert rows == BATCH.to_pylist() + BATCH.slice(0, 1).to_pylist()


def test_file_sink_parquet_and_lines(base):
    write_with(FileSink(f"{base}/pq", format="parquet"), [BATCH, BATCH])
    (name,) = listing(f"{base}/pq")
    assert name == "part-0-0-0.parquet"
    with fsspec.open(f"{base}/pq/{name}", "rb") as f:
        table = pq.read_table(f)
    assert table.to_pylist() == BATCH.to_pylist() * 2
    write_with(FileSink(f"{base}/txt", format="lines"), [BATCH.select(["v"])])
    assert [r["line"] for r in read_all(FileSource(f"{base}/txt"))] == ["a", ""]
    with pytest.raises(ConfigurationError, match=r"exactly one column, got \['k', 'v'\]"):
        write_with(FileSink(f"{base}/txt2", format="lines"), [BATCH])


def test_file_sink_in_progress_until_finish_and_removed_on_failure(base):
    out = f"{base}/out"
    sink = FileSink(out, format="json")
    writer = sink.create_writer(SinkWriterContext(subtask_index=0, parallelism=1))
    writer.open()
    writer.write(BATCH)
    assert listing(out) == ["part-0-0-0.json.inprogress"]
    writer.finish()
    assert listing(out) == ["part-0-0-0.json"]
    writer.close()
    write_with(sink, [BATCH], attempt=1, finish=False)  # a failed attempt leaves nothing behind
    assert listing(out) == ["part-0-0-0.json"]


def test_file_sink_rolls_parts(base):
    write_with(FileSink(f"{base}/roll", format="json", max_rows_per_part=3), [BATCH] * 3)
    assert listing(f"{base}/roll") == ["part-0-0-0.json", "part-0-0-1.json"]
    assert len(read_all(FileSource(f"{base}/roll/*.json", format="json"))) == 6


def test_file_sink_bad_arguments():
    with pytest.raises(
        ConfigurationError, match="format must be one of \\['json', 'lines', 'parquet', 'string'\\], got 'csv'"
    ):
        FileSink("x", format="csv")
    with pytest.raises(ConfigurationError, match="max_rows_per_part must be a positive int"):
        FileSink("x", max_rows_per_part=0)
