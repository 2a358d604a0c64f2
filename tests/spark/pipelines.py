"""Pipelines the Spark tests read through ``readStream.format("flinklike")`` (option ``pipeline``).

They must be importable by Spark's Python workers and the engine's runner, so
they live in a module (``tests.spark.pipelines:<function>``), not in a test.
"""

from __future__ import annotations

import os

import pyarrow as pa

from connectors import DeltaSink, SequenceSource
from flinklike_spark import KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor
from flinklike_spark.common.typeinfo import Types

__all__ = [
    "COUNTED",
    "NUM_KEYS",
    "Count",
    "bad_rows",
    "bounded_count",
    "bounded_count_of",
    "fed_count",
    "fed_count_output",
    "fed_failing",
    "fed_returns_stream",
    "keyed_count",
    "no_schema",
    "not_a_stream",
]

NUM_KEYS = 4
COUNTED = pa.schema([("key", pa.int64()), ("seq", pa.int64()), ("count", pa.int64())])


class Count(KeyedProcessFunction):
    """A running count per key (keyed state), emitted with every row."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield {"key": value["key"], "seq": value["seq"], "count": count}


def keyed_count(env: StreamExecutionEnvironment):
    """An unbounded keyed count: every (key, seq) once, seq 0, 1, 2, ... per key."""
    return (
        env.from_source(SequenceSource(num_keys=NUM_KEYS, records_per_key=None, rows_per_second=400), name="seq")
        .uid("seq")
        .key_by("key")
        .process(Count(), output_type=COUNTED)
        .uid("counter")
    )


def bounded_count(env: StreamExecutionEnvironment):
    """A bounded keyed count: 50 rows per key, then the job finishes."""
    return (
        env.from_source(SequenceSource(num_keys=NUM_KEYS, records_per_key=50), name="seq")
        .uid("seq")
        .key_by("key")
        .process(Count(), output_type=COUNTED)
        .uid("counter")
    )


def bounded_count_of(env: StreamExecutionEnvironment, *, records_per_key: int, keys: int = NUM_KEYS):
    """``bounded_count`` with its own parameters, given by option ``pipeline.args``."""
    return (
        env.from_source(SequenceSource(num_keys=keys, records_per_key=records_per_key), name="seq")
        .uid("seq")
        .key_by("key")
        .process(Count(), output_type=COUNTED)
        .uid("counter")
    )


def no_schema(env: StreamExecutionEnvironment):
    """Rows without a declared schema (Spark needs .schema(...))."""
    return env.from_source(SequenceSource(num_keys=2, records_per_key=10), name="seq").map(lambda r: r)


def not_a_stream(env: StreamExecutionEnvironment):
    return "not a stream"


def bad_rows(env: StreamExecutionEnvironment):
    """Declares an int ``count`` but emits text in it."""
    return env.from_source(SequenceSource(num_keys=2, records_per_key=None, rows_per_second=100), name="seq").map(
        lambda r: {"key": r["key"], "seq": r["seq"], "count": "many"}, output_type=COUNTED
    )


FED_KEYS = 4


def fed_count_output(directory: str) -> str:
    """Where :func:`fed_count` writes: ``out`` beside the job directory."""
    return os.path.join(os.path.dirname(directory.rstrip("/")), "out")


def fed_count(env: StreamExecutionEnvironment, stream):
    """A writeStream pipeline: Spark's ``value`` column -> key ``value % 4``, seq ``value // 4`` -> running count -> Delta.

    With Spark's rate sources (numPartitions 2, values striped over partitions), each
    key's values come from one Spark partition, in order: seq 0, 1, 2, ... per key.
    """
    _running_count(stream).sink_to(DeltaSink(fed_count_output(env.config.checkpointing.directory))).uid("out")


def _running_count(stream):
    """Spark's ``value`` -> key ``value % FED_KEYS``, seq ``value // FED_KEYS`` -> the keyed running count."""
    return (
        stream.map(
            lambda r: {"key": r["value"] % FED_KEYS, "seq": r["value"] // FED_KEYS},
            output_type=pa.schema([("key", pa.int64()), ("seq", pa.int64())]),
        )
        .key_by("key")
        .process(Count(), output_type=COUNTED)
        .uid("counter")
    )


class _BadValue(ValueError):
    pass


def _fail_on_five(row: dict) -> dict:
    if row["value"] == 5:
        raise _BadValue(f"bad value {row['value']}")
    return row


def fed_failing(env: StreamExecutionEnvironment, stream):
    """A writeStream pipeline whose map fails on value 5 (run it with restart-strategy.type none)."""
    (
        stream.map(_fail_on_five, output_type=pa.schema([("value", pa.int64())])).sink_to(
            DeltaSink(fed_count_output(env.config.checkpointing.directory))
        )
    )


def fed_returns_stream(env: StreamExecutionEnvironment, stream):
    """A writeStream pipeline returning its stream for a reader on the same directory."""
    return stream.map(lambda r: {"doubled": r["value"] * 2}, output_type=pa.schema([("doubled", pa.int64())]))


def fed_count_to_kafka(env: StreamExecutionEnvironment, stream, *, servers: str, topic: str):
    """:func:`fed_count` into an exactly-once ``KafkaSink`` (``servers`` and ``topic`` from ``pipeline.args``):
    one line ``key,seq,count`` per row, keyed by ``key``, so each key's lines stay in order in one partition."""
    from flinklike_spark.common.serialization import SimpleStringSchema
    from flinklike_spark.datastream.connectors import DeliveryGuarantee
    from flinklike_spark.datastream.connectors.kafka import KafkaRecordSerializationSchema, KafkaSink
    from tests.kafka.kafka_jobs import KeyOfLine

    sink = (
        KafkaSink.builder()
        .set_bootstrap_servers(servers)
        .set_record_serializer(
            KafkaRecordSerializationSchema.builder()
            .set_topic(topic)
            .set_key_serialization_schema(KeyOfLine())
            .set_value_serialization_schema(SimpleStringSchema())
            .build()
        )
        .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE)
        .set_transactional_id_prefix(f"fed-{topic}")
        .build()
    )
    (
        _running_count(stream)
        .map(lambda r: f"{r['key']},{r['seq']},{r['count']}", output_type=Types.STRING())
        .uid("line")
        .sink_to(sink)
        .uid("kafka")
    )
