"""PyFlink's Avro row formats (flinklike_spark.datastream.formats.avro) on fastavro."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json

import pyarrow as pa
import pytest

from flinklike_spark.common import Row
from flinklike_spark.datastream.formats.avro import AvroRowDeserializationSchema, AvroRowSerializationSchema, AvroSchema
from flinklike_spark.errors import ConfigurationError, MalformedRecordError

fastavro = pytest.importorskip("fastavro", reason="the avro extra (fastavro) is part of [test]")
pytestmark = pytest.mark.timeout(30)

SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "item", "type": "string"},
            {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
            {"name": "note", "type": ["null", "string"], "default": None},
            {
                "name": "ship",
                "type": {"type": "record", "name": "Ship", "fields": [{"name": "city", "type": "string"}]},
            },
        ],
    }
)
ORDER = (
    7,
    "tea",
    decimal.Decimal("3.50"),
    dt.date(2026, 11, 29),
    dt.datetime(2026, 11, 29, 6, 0, tzinfo=dt.UTC),
    ["hot"],
    None,
    {"city": "Oslo"},
)


def test_a_row_round_trips_and_is_plain_avro_binary():
    serializer = AvroRowSerializationSchema(avro_schema_string=SCHEMA)
    deserializer = AvroRowDeserializationSchema(avro_schema_string=SCHEMA)
    message = serializer.serialize(Row(*ORDER))
    # what any Avro reader of the schema reads (no container header, no schema id)
    parsed = fastavro.parse_schema(json.loads(SCHEMA))
    assert fastavro.schemaless_reader(io.BytesIO(message), parsed, None)["item"] == "tea"
    assert list(deserializer.deserialize(message).values()) == list(ORDER)
    assert deserializer.produced_schema().field("price").type == pa.decimal128(9, 2)
    assert deserializer.produced_schema().field("note").nullable
    assert deserializer.produced_schema().field("ship").type == pa.struct([pa.field("city", pa.string(), False)])
    named = Row(**dict(zip(deserializer.produced_schema().names, ORDER)))
    assert serializer.serialize(named) == message


def test_bad_schemas_records_and_messages_are_named():
    with pytest.raises(ConfigurationError, match="not JSON"):
        AvroSchema.parse_string("{not json")
    with pytest.raises(ConfigurationError, match="not a valid Avro schema"):
        AvroSchema.parse_string('{"type": "record", "name": "R", "fields": [{"name": "x", "type": "nope"}]}')
    with pytest.raises(ConfigurationError, match="must be a record"):
        AvroRowSerializationSchema(avro_schema_string='"string"')
    with pytest.raises(ConfigurationError, match="record_class='com.example.Order' names a Java SpecificRecord"):
        AvroRowDeserializationSchema(record_class="com.example.Order")
    serializer = AvroRowSerializationSchema(avro_schema_string=SCHEMA)
    with pytest.raises(MalformedRecordError, match="does not fit the Avro schema Order"):
        serializer.serialize(("x", *ORDER[1:]))
    with pytest.raises(MalformedRecordError, match="cannot read .* as a record of Order"):
        AvroRowDeserializationSchema(avro_schema_string=SCHEMA).deserialize(b"\x02")


def test_parse_file_and_str(tmp_path):
    path = tmp_path / "order.avsc"
    path.write_text(SCHEMA)
    assert json.loads(str(AvroSchema.parse_file(str(path)))) == json.loads(SCHEMA)
