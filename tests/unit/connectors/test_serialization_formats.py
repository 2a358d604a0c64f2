"""PyFlink's message formats: SimpleStringSchema, ByteArraySchema, JSON and CSV rows, both ways."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flinklike_spark.common.serialization import ByteArraySchema, SimpleStringSchema
from flinklike_spark.common.typeinfo import Types
from flinklike_spark.common.types import RECORD_KIND_KEY, RecordKind, Row, records_of
from flinklike_spark.datastream.formats.csv import CsvRowDeserializationSchema, CsvRowSerializationSchema
from flinklike_spark.datastream.formats.json import JsonRowDeserializationSchema, JsonRowSerializationSchema
from flinklike_spark.errors import ConfigurationError, MalformedRecordError

ROW = Types.ROW_NAMED(
    ["id", "name", "ts", "price", "tags"],
    [Types.INT(), Types.STRING(), Types.SQL_TIMESTAMP(), Types.BIG_DEC(), Types.LIST(Types.STRING())],
)


def test_simple_string_and_byte_array_round_trip():
    strings = SimpleStringSchema()
    assert records_of(strings.deserialize_batch([b"a", "é".encode()])) == ["a", "é"]
    assert strings.serialize("é") == "é".encode()
    raw = ByteArraySchema()
    assert records_of(raw.deserialize_batch([b"\x00\xff"])) == [b"\x00\xff"]
    assert raw.serialize(b"\x01") == b"\x01"
    with pytest.raises(ConfigurationError, match="bytes records"):
        raw.serialize("text")
    with pytest.raises(ConfigurationError, match="'latin-1'.*UTF-8"):
        SimpleStringSchema("latin-1")


def test_json_rows_round_trip_as_named_rows():
    out = JsonRowSerializationSchema.builder().with_type_info(ROW).build()
    read = JsonRowDeserializationSchema.builder().type_info(ROW).build()
    row = Row(id=7, name="x", ts=dt.datetime(2024, 5, 1, 12, 30), price=Decimal("1.5"), tags=["a", "b"])
    message = out.serialize(row)
    assert message == b'{"id":7,"name":"x","ts":"2024-05-01T12:30:00.000Z","price":1.5,"tags":["a","b"]}'
    [back] = records_of(read.deserialize_batch([message]))
    assert isinstance(back, Row) and back.id == 7 and back[1] == "x"
    assert back.ts == dt.datetime(2024, 5, 1, 12, 30) and back.price == Decimal("1.5") and back.tags == ["a", "b"]
    # tuples and dicts serialize by position / by name
    assert out.serialize((7, "x", None, None, None)) == out.serialize({"name": "x", "id": 7})


def test_json_positional_rows_use_f0_f1_and_missing_fields():
    positional = Types.ROW([Types.INT(), Types.STRING()])
    assert JsonRowSerializationSchema.Builder().with_type_info(positional).build().serialize((1, "hi")) == (
        b'{"f0":1,"f1":"hi"}'
    )
    lenient = JsonRowDeserializationSchema.Builder().type_info(positional).build()
    assert [tuple(r) for r in records_of(lenient.deserialize_batch([b'{"f0": 2}']))] == [(2, None)]
    strict = JsonRowDeserializationSchema.builder().type_info(positional).fail_on_missing_field().build()
    with pytest.raises(MalformedRecordError, match="'f1' is missing"):
        strict.deserialize_batch([b'{"f0": 2}'])


def test_json_parse_errors_fail_or_are_skipped():
    strict = JsonRowDeserializationSchema.builder().type_info(ROW).build()
    with pytest.raises(MalformedRecordError, match=r"not json.*ignore_parse_errors"):
        strict.deserialize_batch([b"not json"])
    with pytest.raises(MalformedRecordError, match="'id'"):
        strict.deserialize_batch([b'{"id": "seven"}'])
    lenient = JsonRowDeserializationSchema.builder().type_info(ROW).ignore_parse_errors().build()
    assert [r.id for r in records_of(lenient.deserialize_batch([b"not json", b'{"id": 3}']))] == [3]
    with pytest.raises(ConfigurationError, match="Types.ROW"):
        JsonRowDeserializationSchema.builder().type_info(Types.STRING()).build()


def test_csv_rows_round_trip_with_quotes_nulls_and_arrays():
    out = CsvRowSerializationSchema.Builder(ROW).set_null_literal("NULL").build()
    read = CsvRowDeserializationSchema.Builder(ROW).set_null_literal("NULL").build()
    message = out.serialize(Row(id=1, name="a,b", ts=None, price=Decimal("2.25"), tags=["x", "y"]))
    assert message == b'1,"a,b",NULL,2.25,x;y\n'
    [back] = records_of(read.deserialize_batch([message]))
    assert (back.id, back.name, back.ts, back.price, back.tags) == (1, "a,b", None, Decimal("2.25"), ["x", "y"])
    piped = CsvRowSerializationSchema.Builder(Types.ROW([Types.INT(), Types.STRING()])).set_field_delimiter("|")
    assert piped.build().serialize((3, "z")) == b"3|z\n"


def test_csv_errors_comments_and_bad_options():
    positional = Types.ROW([Types.INT(), Types.STRING()])
    read = CsvRowDeserializationSchema.Builder(positional).set_allow_comments(True).build()
    assert [tuple(r) for r in records_of(read.deserialize_batch([b"# note", b"4,d"]))] == [(4, "d")]
    with pytest.raises(MalformedRecordError, match="3 fields, the type has 2"):
        read.deserialize_batch([b"1,2,3"])
    skip = CsvRowDeserializationSchema.Builder(positional).set_ignore_parse_errors(True).build()
    assert records_of(skip.deserialize_batch([b"x,1"])) == []
    with pytest.raises(ConfigurationError, match="single character"):
        CsvRowSerializationSchema.Builder(positional).set_field_delimiter("||").build()


def test_string_and_bytes_batches_serialize_as_their_records_do():
    strings, raw = SimpleStringSchema(), ByteArraySchema()
    batch = strings.deserialize_batch([b"a", "\u00e9".encode(), b""])
    assert (
        strings.serialize_batch(batch) == [strings.serialize(r) for r in records_of(batch)] == [b"a", b"\xc3\xa9", b""]
    )
    raw_batch = raw.deserialize_batch([b"\x00", b"\xff"])
    assert raw.serialize_batch(raw_batch) == [b"\x00", b"\xff"]
    # what the vectorized path cannot take goes record by record, with the per-record result or error
    ints = pa.RecordBatch.from_arrays([pa.array([1, 2])], schema=pa.schema([("f0", pa.int64())], metadata=VALUE))
    assert strings.serialize_batch(ints) == [b"1", b"2"]
    with_null = pa.RecordBatch.from_arrays([pa.array(["a", None])], schema=strings.produced_schema())
    assert strings.serialize_batch(with_null) == [b"a", b"None"]
    with pytest.raises(ConfigurationError, match="bytes records"):
        raw.serialize_batch(batch)


VALUE = {RECORD_KIND_KEY: RecordKind.VALUE}
CSV_TYPES = Types.ROW_NAMED(["key", "n", "x"], [Types.STRING(), Types.LONG(), Types.DOUBLE()])
_FIELD = st.one_of(
    st.text(alphabet='ab ,"-+.e1209', max_size=6),
    st.integers(-(2**63), 2**63 - 1).map(str),
    st.floats(allow_nan=False).map(repr),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_FIELD, min_size=2, max_size=4).map(",".join), min_size=1, max_size=6))
def test_a_csv_batch_reads_as_its_lines_do_one_by_one(lines):
    """Arrow's reader of a whole batch gives the records (or the error) of reading line by line."""
    read = CsvRowDeserializationSchema.Builder(CSV_TYPES).build()
    messages = [line.encode() for line in lines]
    try:
        expected = [read.deserialize(m) for m in messages]
    except MalformedRecordError:
        with pytest.raises(MalformedRecordError):
            read.deserialize_batch(messages)
        return
    assert read.deserialize_batch(messages).to_pylist() == expected


def test_a_plain_csv_batch_is_read_by_arrow_at_once():
    read = CsvRowDeserializationSchema.Builder(CSV_TYPES).build()
    batch = read._read_at_once([b"a,1,2.5", b"b,2,", b",3,1e3"])
    assert batch is not None and batch.schema == read.produced_schema()
    assert batch.to_pylist() == [{"key": "a", "n": 1, "x": 2.5}, {"key": "b", "n": 2, "x": None},
                                 {"key": "", "n": 3, "x": 1000.0}]  # fmt: skip
    for line_by_line in ([b'"a",1,2'], [b"a,1,2", b""], [b"a,1,2\r"], [b"a,x,2"]):
        assert read._read_at_once(line_by_line) is None


_CSV_TEXT = st.text(alphabet="ab ,;|\"'\\\r\nxé§", max_size=5)
_CSV_OPTIONS = st.fixed_dictionaries({
    "field_delimiter": st.sampled_from([",", ";", "|", "§"]),  # ASCII ones: a byte table finds them; others a regex
    "line_delimiter": st.sampled_from(["\n", "\r\n", ""]),
    "quote_character": st.sampled_from(['"', "'", None]),
    "escape_character": st.sampled_from([None, "\\"]),
})  # fmt: skip


def _bytes_or_error(make):
    try:
        return make()
    except Exception as e:  # noqa: BLE001 - the error itself is compared
        return type(e)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(_CSV_TEXT, st.integers(-(2**63), 2**63 - 1), _CSV_TEXT), min_size=1, max_size=6),
    _CSV_OPTIONS,
    st.sampled_from([None, RecordKind.DICT, RecordKind.NAMED_ROW, RecordKind.TUPLE]),
    st.booleans(),
)
def test_a_csv_batch_is_written_as_its_records_are_one_by_one(rows, options, kind, one_field):
    """Arrow's kernels write a batch as ``serialize`` writes its records (or both fail alike)."""
    names, types = (["key"], [Types.STRING()]) if one_field else (["key", "n", "v"], [Types.STRING(), Types.LONG(),
                                                                                      Types.STRING()])  # fmt: skip
    write = CsvRowSerializationSchema(type_info=Types.ROW_NAMED(names, types), **options)
    arrays = [pa.array([r[i] for r in rows]) for i in range(len(names))]
    metadata = None if kind is None else {RECORD_KIND_KEY: kind}
    batch = pa.RecordBatch.from_arrays(arrays, schema=pa.schema(
        [(name, array.type) for name, array in zip(names, arrays)], metadata=metadata))  # fmt: skip
    for part in (batch, batch.slice(1)):  # a slice's strings start at an offset into the data buffer
        one_by_one = _bytes_or_error(lambda part=part: [write.serialize(r) for r in records_of(part)])
        assert _bytes_or_error(lambda part=part: write.serialize_batch(part)) == one_by_one


def test_a_plain_csv_batch_is_written_by_arrow_at_once():
    write = CsvRowSerializationSchema.Builder(Types.ROW_NAMED(["key", "n"], [Types.STRING(), Types.LONG()])).build()
    # a dict stream with more fields than the type: the type's fields, by name, in the type's order
    batch = pa.RecordBatch.from_pydict({"n": [1, -2], "other": [0.5, 1.5], "key": ["a", "é"]})
    assert write._plain_columns(batch) is not None
    assert write.serialize_batch(batch) == [b"a,1\n", "é,-2\n".encode()]
    quoted = pa.RecordBatch.from_pydict({"key": ["a,b"], "n": [1]})
    nulls = pa.RecordBatch.from_pydict({"key": [None], "n": [1]})
    floats = pa.RecordBatch.from_pydict({"key": ["a"], "n": [1.5]})
    for record_by_record in (quoted, nulls, floats):
        assert write._plain_columns(record_by_record) is None
    assert write.serialize_batch(quoted) == [b'"a,b",1\n']
    assert write.serialize_batch(nulls) == [b",1\n"]


_JSON_TYPES = Types.ROW_NAMED(["k", "n", "b", "é"], [Types.STRING(), Types.LONG(), Types.BOOLEAN(), Types.STRING()])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.none() | st.text(alphabet='a "\\/\n\x01\x1fé\u2028\U0001f600', max_size=4),
            st.none() | st.integers(-(2**63), 2**63 - 1),
            st.none() | st.booleans(),
            st.text(alphabet="xyz", max_size=2),
        ),
        min_size=1, max_size=6,
    ),
    st.sampled_from([None, RecordKind.DICT, RecordKind.NAMED_ROW, RecordKind.TUPLE]),
)  # fmt: skip
def test_a_json_batch_is_written_as_its_records_are_one_by_one(rows, kind):
    write = JsonRowSerializationSchema.builder().with_type_info(_JSON_TYPES).build()
    names = ["k", "n", "b", "é"]
    arrays = [pa.array([r[i] for r in rows], type) for i, type in
              enumerate([pa.string(), pa.int64(), pa.bool_(), pa.string()])]  # fmt: skip
    metadata = None if kind is None else {RECORD_KIND_KEY: kind}
    batch = pa.RecordBatch.from_arrays(arrays, schema=pa.schema(
        [(name, array.type) for name, array in zip(names, arrays)], metadata=metadata))  # fmt: skip
    assert write.serialize_batch(batch) == [write.serialize(r) for r in records_of(batch)]


def test_a_plain_json_batch_is_written_by_arrow_at_once():
    write = JsonRowSerializationSchema.builder().with_type_info(_JSON_TYPES).build()
    batch = pa.RecordBatch.from_pydict({"é": ["x"], "b": [True], "n": [None], "k": ["a/é"]})
    assert write.serialize_batch(batch) == ['{"k":"a/é","n":null,"b":true,"é":"x"}'.encode()]
    floats = pa.RecordBatch.from_pydict({"k": ["a"], "n": [1.5], "b": [True], "é": [""]})
    assert write.serialize_batch(floats) == [b'{"k":"a","n":1.5,"b":true,"\xc3\xa9":""}']


def test_add_jars_of_a_kafka_connector_is_accepted_and_logged(caplog):
    import logging

    from flinklike_spark.datastream import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()
    with caplog.at_level(logging.INFO, logger="flinklike_spark.datastream.stream_execution_environment"):
        env.add_jars("file:///path/to/flink-sql-connector-kafka-1.15.0.jar")
    assert "flink-sql-connector-kafka-1.15.0.jar" in caplog.text and "not needed" in caplog.text
