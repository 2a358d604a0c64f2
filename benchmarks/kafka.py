"""Kafka -> keyed count -> Kafka on one local broker, in one run: this engine against Spark Structured Streaming.

Measured, each on the same input topic of the same local KRaft broker:

1. Throughput. ``--records`` records (``"key,seq"``, ``--keys`` keys, 4
   partitions) are written first; then each job reads them all, counts per key
   in keyed state and writes one ``"key,count"`` record per input record:
   - this engine, ``KafkaSource`` (bounded) -> ``key_by`` -> ``KeyedProcessFunction``
     -> ``KafkaSink`` with ``EXACTLY_ONCE`` and with ``AT_LEAST_ONCE``
     (parallelism 2 on 2 TaskExecutors, checkpoints every second);
   - Spark, ``readStream.format("kafka")`` -> ``groupBy(key).applyInPandasWithState``
     -> ``writeStream.format("kafka")`` (``local[2]``, 2 shuffle partitions,
     ``availableNow``), swept over ``maxOffsetsPerTrigger`` (all records in one
     micro-batch, and in 4), the best reported.
   Time is *busy time*: from the first to the last output record's Kafka
   timestamp (the producer's create time) for this engine, the sum of the
   micro-batches' ``triggerExecution`` for Spark; start-up is excluded from both.
   Every run's output is checked: one record per input record, and each key's
   last count equal to its number of input records.
   And the batch path (issue 41 item 5), where no Python runs per record:
   - the same keyed count with built-ins: CSV rows (``CsvRowDeserializationSchema``)
     -> ``map_batches`` (a column of ones) -> ``key_by("key").sum("n")`` (the
     rolling aggregation runs on Arrow kernels) -> ``KafkaSink`` ``EXACTLY_ONCE``
     with ``CsvRowSerializationSchema`` (Arrow writes each batch's lines), one
     ``"key,count"`` record per input record as above;
   - the same input read as CSV rows
   (``CsvRowDeserializationSchema``: Arrow reads each fetched batch at once)
   -> ``key_by("key")`` -> 1 s tumbling event-time windows (the input's record
   timestamps spread it over ``WINDOWS`` seconds) aggregated with the built-in
   ``count`` (Arrow kernels, no Python per record) -> ``KafkaSink``
   ``EXACTLY_ONCE``; its busy time runs from the first window's output to the
   last, so its rate counts the records after the first window. Against it, a
   plain confluent-kafka consumer in this process reads the whole topic
   (``consume(10000)``, each message's value touched): what the broker serves
   one consumer here, from its first message to its last. And against the
   keyed count, a plain pipe (:func:`plain_pipe`): one process copies the topic
   exactly once with a consumer and a transactional producer, no work per
   record; what moving these records costs here without an engine.
   CPU: the machine's and the broker's busy CPU time are sampled every 0.1 s
   (:class:`CpuSampler`); over the busy windows of the plain pipe and of the
   built-in count the CPU per record is printed, and the CPU ceiling: what all
   cores move doing nothing but the pipe's work per record, which every job
   that reads and writes each record through confluent-kafka does at least.
2. Latency at a fixed input rate (``--rate`` records/s for ``--seconds``): each
   input record carries its send time; latency is the time from sending to a
   consumer receiving the result (``read_committed`` for exactly-once output).
   This engine with ``AT_LEAST_ONCE`` (output as records come) and
   ``EXACTLY_ONCE`` (output at each checkpoint: 500 ms), Spark with its default
   trigger (a micro-batch as soon as the previous one ends).

Targets (printed with a verdict only for a quiet run, see ``quiet.py``): the
exactly-once keyed count on the batch path (built-ins) at least 10x Spark's,
and the windowed count at least 1,000,000 records/s or 70% of the plain
consumer's rate.

    python benchmarks/kafka.py [--records N] [--keys K] [--rate R] [--seconds S] [--no-latency] [--quick]
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import os
import platform
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
from confluent_kafka import Consumer, Producer, TopicPartition
from quiet import QuietWatch, system_busy

from connectors.kafka.source import READER_PREFETCH
from connectors.kafka.testing import LocalKafkaBroker
from flinklike_spark.common import Types, WatermarkStrategy
from flinklike_spark.common.serialization import SimpleStringSchema
from flinklike_spark.datastream import StreamExecutionEnvironment, aggregations
from flinklike_spark.datastream.aggregations import KeyedWindowResult
from flinklike_spark.datastream.connectors.kafka import (
    DeliveryGuarantee,
    KafkaOffsetsInitializer,
    KafkaRecordSerializationSchema,
    KafkaSink,
    KafkaSource,
)
from flinklike_spark.datastream.formats.csv import CsvRowDeserializationSchema, CsvRowSerializationSchema
from flinklike_spark.datastream.functions import KeyedProcessFunction
from flinklike_spark.datastream.state import ValueStateDescriptor
from flinklike_spark.datastream.window import Time, TumblingEventTimeWindows
from flinklike_spark.errors import JobCancelledError

PARTITIONS = 4
SPARK_KAFKA_PACKAGE = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"


# -- input and output -------------------------------------------------------------------------------------


#: the input's record timestamps spread it evenly over this many seconds of event time (1 s windows)
WINDOWS = 20
BASE_TS = 1_700_000_000_000


def input_timestamp(i: int, records: int) -> int:
    return BASE_TS + i * WINDOWS * 1000 // records


def write_input(servers: str, topic: str, records: int, keys: int) -> None:
    producer = Producer(
        {
            "bootstrap.servers": servers,
            "linger.ms": 20,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    for i in range(records):
        key = i % keys
        while True:
            try:
                producer.produce(
                    topic, f"{key},{i // keys}".encode(), key=str(key).encode(), timestamp=input_timestamp(i, records)
                )
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise RuntimeError("the input was not written")


def read_output(servers: str, topic: str, *, committed: bool) -> list[tuple[bytes, int]]:
    """(value, create timestamp ms) of every record of ``topic`` up to its end."""
    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed" if committed else "read_uncommitted",
            "enable.auto.commit": False,
        }
    )
    try:
        parts = [TopicPartition(topic, p, 0) for p in range(PARTITIONS)]
        ends = {tp.partition: consumer.get_watermark_offsets(tp, timeout=30)[1] for tp in parts}
        consumer.assign(parts)
        out: list[tuple[bytes, int]] = []
        done = {p for p, end in ends.items() if end == 0}
        deadline = time.monotonic() + 300
        while len(done) < len(ends) and time.monotonic() < deadline:
            for message in consumer.consume(10000, 0.5):
                if message.error() is None:
                    out.append((message.value(), message.timestamp()[1]))
                    if message.offset() + 1 >= ends[message.partition()]:
                        done.add(message.partition())
            for p, end in ends.items():
                if p not in done and consumer.position([TopicPartition(topic, p)])[0].offset >= end:
                    done.add(p)
        return out
    finally:
        consumer.close()


def check_counts(output: list[tuple[bytes, int]], records: int, keys: int, what: str) -> None:
    if len(output) != records:
        raise AssertionError(f"{what}: {len(output)} output records for {records} input records")
    last: dict[str, int] = {}
    for value, _ in output:
        key, count = value.decode().split(",")[:2]
        last[key] = max(last.get(key, 0), int(count))
    expected = {str(k): records // keys + (1 if k < records % keys else 0) for k in range(keys)}
    if last != expected:
        wrong = [k for k in expected if last.get(k) != expected[k]][:5]
        raise AssertionError(f"{what}: wrong final counts for keys {wrong}")


def create_topics(servers: str, *names: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": servers})
    for future in admin.create_topics([NewTopic(n, PARTITIONS, 1) for n in names]).values():
        future.result(60)


class CpuSampler:
    """Busy CPU seconds of the whole machine and of the broker's JVM, sampled every 0.1 s while it runs.

    A run's busy window is known only after it (from its output's timestamps),
    so the samples are kept and :meth:`per_record` reads any window of them.
    """

    def __init__(self, broker_pid: int) -> None:
        self._broker = psutil.Process(broker_pid)
        self._samples: list[tuple[float, float, float]] = []  # (epoch s, machine busy s, broker s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            b = self._broker.cpu_times()
            self._samples.append((time.time(), system_busy(), b.user + b.system))
            if self._stop.wait(0.1):
                return

    def per_record(self, window: tuple[float, float], records: int) -> dict:
        """Microseconds of busy CPU per record over ``window`` (epoch seconds): the machine's and the broker's."""
        times, machine, broker = (np.array(column) for column in zip(*self._samples, strict=True))
        spent = [float(np.diff(np.interp(window, times, series))[0]) for series in (machine, broker)]
        return {"machine_us": spent[0] / records * 1e6, "broker_us": spent[1] / records * 1e6}


# -- this engine ------------------------------------------------------------------------------------------


class Count(KeyedProcessFunction):
    """A count per key; the output keeps the input's third field (its send time) for latency runs."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield f"{value[0]},{count}{value[1]}"


def split_line(line: str):
    key, _, rest = line.partition(",")
    _, _, sent = rest.partition(",")
    return key, f",{sent}" if sent else ""


class KeyOfLine:
    def serialize(self, line: str) -> bytes:
        return line.partition(",")[0].encode()


def job_environment(work: Path, checkpoint_ms: int) -> StreamExecutionEnvironment:
    """Parallelism 2 on 2 TaskExecutors, checkpoints every ``checkpoint_ms`` into ``work``."""
    env = StreamExecutionEnvironment.get_execution_environment(
        {
            "parallelism.default": 2,
            "local.number-taskmanager": 2,
            "execution.checkpointing.dir": str(work / f"cp-{uuid.uuid4().hex[:6]}"),
        }
    )
    env.enable_checkpointing(checkpoint_ms)
    return env


def kafka_source(servers: str, topic: str, deserializer, *, bounded: bool) -> KafkaSource:
    builder = (
        KafkaSource.builder()
        .set_bootstrap_servers(servers)
        .set_topics(topic)
        .set_starting_offsets(KafkaOffsetsInitializer.earliest())
        .set_value_only_deserializer(deserializer)
    )
    if bounded:
        builder.set_bounded(KafkaOffsetsInitializer.latest())
    return builder.build()


def kafka_sink(servers: str, topic: str, guarantee: DeliveryGuarantee, *, key_schema=None) -> KafkaSink:
    records = (
        KafkaRecordSerializationSchema.builder().set_topic(topic).set_value_serialization_schema(SimpleStringSchema())
    )
    if key_schema is not None:
        records.set_key_serialization_schema(key_schema)
    return (
        KafkaSink.builder()
        .set_bootstrap_servers(servers)
        .set_record_serializer(records.build())
        .set_delivery_guarantee(guarantee)
        .set_property("linger.ms", "5")
        .build()
    )


def engine_job(
    servers: str,
    source_topic: str,
    sink_topic: str,
    guarantee: DeliveryGuarantee,
    *,
    bounded: bool,
    checkpoint_ms: int,
    work: Path,
) -> StreamExecutionEnvironment:
    env = job_environment(work, checkpoint_ms)
    (
        env.from_source(kafka_source(servers, source_topic, SimpleStringSchema(), bounded=bounded),
                        WatermarkStrategy.no_watermarks(), "in")
        .map(split_line, output_type=Types.TUPLE([Types.STRING(), Types.STRING()]))
        .key_by(lambda t: t[0], key_type=Types.STRING())
        .process(Count(), output_type=Types.STRING())
        .sink_to(kafka_sink(servers, sink_topic, guarantee, key_schema=KeyOfLine()))
    )  # fmt: skip
    return env


def engine_throughput(
    servers: str, source: str, records: int, keys: int, guarantee: DeliveryGuarantee, work: Path
) -> dict:
    output, wall = run_into_new_topic(
        servers,
        lambda out: engine_job(servers, source, out, guarantee, bounded=True, checkpoint_ms=1000, work=work),
        committed=guarantee is DeliveryGuarantee.EXACTLY_ONCE,
    )
    check_counts(output, records, keys, f"engine {guarantee.name}")
    busy = busy_seconds(output)
    return {"busy_s": busy, "wall_s": wall, "rate": records / busy}


#: the plain consumer's settings tried (the best counts): librdkafka's defaults, and the prefetch the
#: KafkaSource's readers use
PLAIN_CONSUMER_SETTINGS = ({}, dict(READER_PREFETCH))


def plain_consumer(servers: str, topic: str, records: int) -> dict:
    """The best of :data:`PLAIN_CONSUMER_SETTINGS`: one consumer reads ``topic`` to its end."""
    runs = [plain_consumer_run(servers, topic, records, settings) for settings in PLAIN_CONSUMER_SETTINGS]
    return max(runs, key=lambda r: r["rate"]) | {"tried": [round(r["rate"]) for r in runs]}


def plain_consumer_run(servers: str, topic: str, records: int, settings: dict) -> dict:
    """A plain confluent-kafka consumer reads ``topic`` to its end: the rate from its first message to its last."""
    consumer = Consumer(
        {"bootstrap.servers": servers, "group.id": f"plain-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False}
        | settings
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        seen = size = 0
        first = None
        deadline = time.monotonic() + 300
        while seen < records and time.monotonic() < deadline:
            messages = consumer.consume(10000, 1.0)
            if messages and first is None:
                first = time.perf_counter()
            for message in messages:
                if message.error() is None:
                    size += len(message.value())
                    seen += 1
        last = time.perf_counter()
    finally:
        consumer.close()
    if seen != records:
        raise AssertionError(f"plain consumer: read {seen} of {records} records")
    return {"busy_s": last - first, "rate": records / (last - first), "bytes": size, "settings": settings}


#: the built-in keyed count's stream: the key and a one per record, summed per key
ONES = pa.schema([("key", pa.string()), ("n", pa.int64())])


def ones(batch: pa.RecordBatch) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([batch.column(0), pa.array(np.ones(batch.num_rows, np.int64))], schema=ONES)


def csv_line(names: list[str], types: list) -> CsvRowSerializationSchema:
    """The fields as one CSV line without a line delimiter (``"key,count"``, as the per-record job writes)."""
    return CsvRowSerializationSchema.Builder(Types.ROW_NAMED(names, types)).set_line_delimiter("").build()


def builtin_job(servers: str, source_topic: str, sink_topic: str, work: Path) -> StreamExecutionEnvironment:
    env = job_environment(work, 1000)
    rows = CsvRowDeserializationSchema.Builder(Types.ROW_NAMED(["key", "seq"], [Types.STRING(), Types.LONG()])).build()
    records = (
        KafkaRecordSerializationSchema.builder()
        .set_topic(sink_topic)
        .set_key_serialization_schema(csv_line(["key"], [Types.STRING()]))
        .set_value_serialization_schema(csv_line(["key", "n"], [Types.STRING(), Types.LONG()]))
        .build()
    )
    sink = (
        KafkaSink.builder()
        .set_bootstrap_servers(servers)
        .set_record_serializer(records)
        .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE)
        .set_property("linger.ms", "5")
        .build()
    )
    (
        env.from_source(kafka_source(servers, source_topic, rows, bounded=True), WatermarkStrategy.no_watermarks(),
                        "in")
        .map_batches(ones, output_type=ONES)
        .key_by("key")
        .sum("n")
        .sink_to(sink)
    )  # fmt: skip
    return env


def builtin_throughput(servers: str, source: str, records: int, keys: int, work: Path) -> dict:
    output, wall = run_into_new_topic(servers, lambda out: builtin_job(servers, source, out, work), committed=True)
    check_counts(output, records, keys, "engine built-in keyed count")
    busy = busy_seconds(output)
    return {"busy_s": busy, "wall_s": wall, "rate": records / busy, "window": busy_window(output)}


def run_into_new_topic(servers: str, job, *, committed: bool) -> tuple[list[tuple[bytes, int]], float]:
    """Run ``job(output topic)``'s environment to its end; its output records and the wall-clock seconds taken."""
    out = f"out-{uuid.uuid4().hex[:8]}"
    create_topics(servers, out)
    started = time.perf_counter()
    job(out).execute("kafka bench")
    wall = time.perf_counter() - started
    return read_output(servers, out, committed=committed), wall


def busy_window(output: list[tuple[bytes, int]]) -> tuple[float, float]:
    """The first and the last output record's Kafka timestamps, in seconds since the epoch."""
    stamps = [ts for _, ts in output]
    return min(stamps) / 1000, max(stamps) / 1000


def busy_seconds(output: list[tuple[bytes, int]]) -> float:
    """From the first output record's Kafka timestamp to the last one's."""
    start, end = busy_window(output)
    return end - start


def plain_pipe(servers: str, source: str, records: int) -> dict:
    """A plain confluent-kafka program copies ``source`` to a new topic exactly once, record by record unchanged:
    one process, a consumer with the readers' prefetch and a transactional producer (``produce_batch`` per
    ``consume(10000)``, a transaction committed each second, as the engine's 1 s checkpoints). Its rate, from
    the first message read to the last commit, is what moving these records through this broker costs from
    Python with no engine and no work per record: a reference for the keyed count, which moves as many."""
    out = f"pipe-{uuid.uuid4().hex[:8]}"
    create_topics(servers, out)
    consumer = Consumer(
        {"bootstrap.servers": servers, "group.id": f"pipe-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False}
        | dict(READER_PREFETCH)
    )
    producer = Producer({"bootstrap.servers": servers, "transactional.id": out, "linger.ms": 5,
                         "queue.buffering.max.messages": 2_000_000})  # fmt: skip
    try:
        producer.init_transactions(30)
        producer.begin_transaction()
        consumer.assign([TopicPartition(source, p, 0) for p in range(PARTITIONS)])
        seen, first, committed_at = 0, None, time.monotonic()
        deadline = time.monotonic() + 300
        while seen < records and time.monotonic() < deadline:
            messages = consumer.consume(10000, 1.0)
            if messages and first is None:
                first = time.time()
            batch = [{"key": m.key(), "value": m.value()} for m in messages if m.error() is None]
            if producer.produce_batch(out, batch) != len(batch):
                raise AssertionError(
                    f"plain pipe: produce_batch refused {[m['_error'] for m in batch if '_error' in m][:3]}"
                )
            seen += len(batch)
            producer.poll(0)
            if time.monotonic() - committed_at >= 1:
                producer.commit_transaction(60)
                producer.begin_transaction()
                committed_at = time.monotonic()
        producer.commit_transaction(60)
        last = time.time()
    finally:
        consumer.close()
    copied = len(read_output(servers, out, committed=True))
    if seen != records or copied != records:
        raise AssertionError(f"plain pipe: read {seen}, copied {copied} of {records} records")
    return {"busy_s": last - first, "rate": records / (last - first), "window": (first, last)}


def window_job(servers: str, source_topic: str, sink_topic: str, work: Path) -> StreamExecutionEnvironment:
    env = job_environment(work, 1000)
    rows = CsvRowDeserializationSchema.Builder(Types.ROW_NAMED(["key", "seq"], [Types.STRING(), Types.LONG()])).build()
    (
        env.from_source(kafka_source(servers, source_topic, rows, bounded=True),
                        WatermarkStrategy.for_monotonous_timestamps(), "in")
        .key_by("key")
        .window(TumblingEventTimeWindows.of(Time.seconds(1)))
        .aggregate(aggregations.count(), KeyedWindowResult())
        .sink_to(kafka_sink(servers, sink_topic, DeliveryGuarantee.EXACTLY_ONCE))
    )  # fmt: skip
    return env


def window_throughput(servers: str, source: str, records: int, keys: int, work: Path) -> dict:
    output, wall = run_into_new_topic(servers, lambda out: window_job(servers, source, out, work), committed=True)
    counts: dict[str, int] = {}
    for value, _ in output:
        row = ast.literal_eval(value.decode())
        counts[row["key"]] = counts.get(row["key"], 0) + row["count"]
    expected = {str(k): records // keys + (1 if k < records % keys else 0) for k in range(keys)}
    if counts != expected:
        wrong = [k for k in expected if counts.get(k) != expected[k]][:5]
        raise AssertionError(f"windowed count: wrong totals for keys {wrong}")
    if len(output) != WINDOWS * keys:
        raise AssertionError(f"windowed count: {len(output)} results, expected {WINDOWS * keys}")
    busy = busy_seconds(output)
    after_first_window = records - records // WINDOWS
    return {"busy_s": busy, "wall_s": wall, "rate": after_first_window / busy}


# -- Spark ------------------------------------------------------------------------------------------------


def spark_session():
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return (
        SparkSession.builder.master("local[2]")
        .appName("kafka-bench")
        .config("spark.jars.packages", SPARK_KAFKA_PACKAGE)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )


def _spark_count(key, frames, state):
    import numpy as np
    import pandas as pd

    count = state.get[0] if state.exists else 0
    for frame in frames:
        n = len(frame)
        counts = pd.Series(np.arange(count + 1, count + n + 1), index=frame.index).astype(str)
        count += n
        sent = frame["sent"].astype(str)
        keys = frame["key"].astype(str)
        yield pd.DataFrame({"key": keys, "value": keys + "," + counts + sent.where(sent == "", "," + sent)})
    state.update((count,))


def spark_query(
    spark, servers: str, source: str, sink: str, work: Path, *, max_offsets: int | None, available_now: bool
):
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
    )
    if max_offsets:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
    lines = reader.load().select(F.col("value").cast("string").alias("line"))
    parts = F.split("line", ",")
    rows = lines.select(F.get(parts, 0).alias("key"), F.coalesce(F.get(parts, 2), F.lit("")).alias("sent"))
    counted = rows.groupBy("key").applyInPandasWithState(
        _spark_count, "key string, value string", "count long", "Update", GroupStateTimeout.NoTimeout
    )
    writer = (
        counted.writeStream.format("kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("topic", sink)
        .option("checkpointLocation", str(work / f"spark-{uuid.uuid4().hex[:6]}"))
        .outputMode("update")
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    return writer.start()


def spark_throughput(spark, servers: str, source: str, records: int, keys: int, work: Path) -> dict:
    results = []
    for batches in (1, 4):
        out = f"spark-out-{uuid.uuid4().hex[:8]}"
        create_topics(servers, out)
        started = time.perf_counter()
        query = spark_query(spark, servers, source, out, work, max_offsets=-(-records // batches), available_now=True)
        query.awaitTermination()
        wall = time.perf_counter() - started
        busy = sum(p["durationMs"].get("triggerExecution", 0) for p in query.recentProgress if p["numInputRows"]) / 1000
        check_counts(read_output(servers, out, committed=False), records, keys, f"spark ({batches} batches)")
        results.append({"busy_s": busy, "wall_s": wall, "rate": records / busy, "batches": batches})
    return max(results, key=lambda r: r["rate"]) | {"sweep": results}


# -- latency ----------------------------------------------------------------------------------------------


def feed_at_rate(servers: str, topic: str, keys: int, rate: int, seconds: float, stop: threading.Event) -> int:
    producer = Producer({"bootstrap.servers": servers, "linger.ms": 0})
    sent, started = 0, time.perf_counter()
    while not stop.is_set() and time.perf_counter() - started < seconds:
        due = int((time.perf_counter() - started) * rate)
        while sent < due:
            key = sent % keys
            producer.produce(topic, f"{key},{sent // keys},{time.time_ns()}".encode(), key=str(key).encode())
            sent += 1
        producer.poll(0)
        time.sleep(0.001)
    producer.flush(30)
    return sent


def measure_latency(servers: str, topic: str, committed: bool, until: threading.Event, warmup_s: float) -> list[float]:
    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": f"lat-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed" if committed else "read_uncommitted",
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 5,
        }
    )
    consumer.subscribe([topic])
    latencies, started = [], time.monotonic()
    try:
        while not until.is_set():
            for message in consumer.consume(1000, 0.1):
                if message.error() is None:
                    sent = int(message.value().decode().rsplit(",", 1)[1])
                    if time.monotonic() - started > warmup_s:
                        latencies.append((time.time_ns() - sent) / 1e6)
    finally:
        consumer.close()
    return latencies


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q * len(ordered))) - 1))]


def latency_run(servers: str, keys: int, rate: int, seconds: float, start_job, committed: bool) -> dict:
    source, out = f"lat-in-{uuid.uuid4().hex[:8]}", f"lat-out-{uuid.uuid4().hex[:8]}"
    create_topics(servers, source, out)
    stop_job = start_job(source, out)
    time.sleep(8)  # the job is up and idle before input starts
    until = threading.Event()
    measured: list[float] = []
    consumer = threading.Thread(target=lambda: measured.extend(measure_latency(servers, out, committed, until, 3)))
    consumer.start()
    sent = feed_at_rate(servers, source, keys, rate, seconds, until)
    time.sleep(5)
    until.set()
    consumer.join()
    stop_job()
    if not measured:
        raise AssertionError("no output measured")
    return {
        "sent": sent,
        "measured": len(measured),
        "p50_ms": percentile(measured, 0.5),
        "p99_ms": percentile(measured, 0.99),
    }


def engine_latency_starter(servers: str, guarantee: DeliveryGuarantee, work: Path):
    def start(source: str, out: str):
        client = engine_job(servers, source, out, guarantee, bounded=False, checkpoint_ms=500, work=work).execute_async(
            "latency"
        )

        def stop():
            client.cancel()
            with contextlib.suppress(JobCancelledError):
                client.wait(60)

        return stop

    return start


def spark_latency_starter(spark, servers: str, work: Path):
    def start(source: str, out: str):
        query = spark_query(spark, servers, source, out, work, max_offsets=None, available_now=False)
        return query.stop

    return start


# -- main -------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--no-latency", action="store_true", help="throughput only")
    parser.add_argument("--quick", action="store_true", help="small sizes, to check the harness")
    args = parser.parse_args(argv)
    if args.quick:
        args.records, args.keys, args.rate, args.seconds = 50_000, 100, 2_000, 5.0
    print(
        f"machine: {platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"records {args.records:,}, keys {args.keys:,}",
        flush=True,
    )
    work = Path(tempfile.mkdtemp(prefix="kafka-bench-"))
    # The broker keeps the test fixture's JVM flags (client JIT, serial collector): with the JVM's defaults it
    # spent more CPU per record in runs this short (its JIT compiling), CPU that the two cores share with the jobs.
    with QuietWatch() as quiet, LocalKafkaBroker(heap="1g") as broker, CpuSampler(broker.pid) as cpu:
        servers = broker.bootstrap_servers
        source = "input"
        create_topics(servers, source)
        started = time.perf_counter()
        write_input(servers, source, args.records, args.keys)
        print(f"input: {args.records:,} records in {time.perf_counter() - started:.1f} s", flush=True)

        results = {"plain": plain_consumer(servers, source, args.records)}
        print(
            f"plain consumer          : {results['plain']['rate']:>10,.0f} rec/s (one confluent-kafka consumer, best "
            f"of {results['plain']['tried']} rec/s with {PLAIN_CONSUMER_SETTINGS})",
            flush=True,
        )
        results["window"] = r = window_throughput(servers, source, args.records, args.keys, work)
        report("engine windowed count", r, "CSV rows, 1 s windows, built-in count, EXACTLY_ONCE")
        results["pipe"] = r = plain_pipe(servers, source, args.records)
        report("plain pipe", r, "one process copies the topic exactly once: consume(10000) -> produce_batch, "
               "a transaction a second")  # fmt: skip
        results["builtin"] = r = builtin_throughput(servers, source, args.records, args.keys, work)
        report("engine built-in count", r, "CSV rows, map_batches, key_by().sum(), CSV lines, EXACTLY_ONCE")
        for guarantee in (DeliveryGuarantee.EXACTLY_ONCE, DeliveryGuarantee.AT_LEAST_ONCE):
            results[guarantee.name] = r = engine_throughput(servers, source, args.records, args.keys, guarantee, work)
            report(f"engine {guarantee.name}", r)
        spark = spark_session()
        spark.sparkContext.setLogLevel("ERROR")
        results["spark"] = r = spark_throughput(spark, servers, source, args.records, args.keys, work)
        sweep = ", ".join(f"{s['batches']} batch(es): {s['rate']:,.0f}" for s in r["sweep"])
        print(
            f"spark (best of sweep)   : {r['rate']:>10,.0f} rec/s busy ({r['busy_s']:.2f} s busy, "
            f"{r['wall_s']:.1f} s wall; sweep {sweep})",
            flush=True,
        )
        for name in ("EXACTLY_ONCE", "AT_LEAST_ONCE"):
            print(f"ratio engine {name} (per record) / spark: {results[name]['rate'] / r['rate']:.2f}x")
        builtin, pipe = results["builtin"]["rate"], results["pipe"]["rate"]
        eo = builtin / r["rate"]
        costs = {name: cpu.per_record(results[name]["window"], args.records) for name in ("pipe", "builtin")}
        print(
            "CPU per record over the busy window (all processes; of it, the broker's): "
            + ", ".join(f"{name} {c['machine_us']:.2f} us ({c['broker_us']:.2f} us)" for name, c in costs.items())
        )
        ceiling = (os.cpu_count() or 1) / (costs["pipe"]["machine_us"] / 1e6)
        print(
            f"CPU ceiling: {os.cpu_count()} cores doing nothing but the plain pipe's work per record move at most "
            f"{ceiling:,.0f} rec/s = {ceiling / r['rate']:.2f}x Spark (10x Spark is {10 * r['rate']:,.0f} rec/s)",
            flush=True,
        )
        quiet.target(
            f"keyed count EXACTLY_ONCE, built-ins: {eo:.2f}x Spark (target >= 10x; the plain pipe is "
            f"{pipe / r['rate']:.2f}x Spark, the built-in count {builtin / pipe:.0%} of the pipe)",
            eo >= 10,
        )
        window, plain = results["window"]["rate"], results["plain"]["rate"]
        quiet.target(
            f"windowed count {window:,.0f} rec/s, {window / plain:.0%} of the plain consumer "
            f"(target >= 1,000,000 rec/s or >= 70%)",
            window >= 1_000_000 or window >= 0.7 * plain,
        )

        if not args.no_latency:
            latency(args, servers, spark, work)
        spark.stop()
    quiet.report()


def report(name: str, r: dict, detail: str = "") -> None:
    """One result line: the rate, its busy (and wall) seconds, and what ran."""
    times = f"{r['busy_s']:.2f} s busy" + (f", {r['wall_s']:.1f} s wall" if "wall_s" in r else "")
    print(f"{name:24}: {r['rate']:>10,.0f} rec/s ({times}{'; ' + detail if detail else ''})", flush=True)


def latency(args, servers: str, spark, work: Path) -> None:
    print(f"latency at {args.rate:,} rec/s for {args.seconds:.0f} s:")
    starters = {
        "engine AT_LEAST_ONCE": (engine_latency_starter(servers, DeliveryGuarantee.AT_LEAST_ONCE, work), False),
        "engine EXACTLY_ONCE (500 ms checkpoints)": (
            engine_latency_starter(servers, DeliveryGuarantee.EXACTLY_ONCE, work),
            True,
        ),
        "spark (default trigger)": (spark_latency_starter(spark, servers, work), False),
    }
    lat = {
        name: latency_run(servers, args.keys, args.rate, args.seconds, start, committed=committed)
        for name, (start, committed) in starters.items()
    }
    for name, r in lat.items():
        print(
            f"  {name:42}: p50 {r['p50_ms']:8.1f} ms, p99 {r['p99_ms']:8.1f} ms "
            f"({r['measured']:,} of {r['sent']:,} records measured)"
        )
    spark_p99 = lat["spark (default trigger)"]["p99_ms"]
    print(f"ratio p99 spark / engine AT_LEAST_ONCE: {spark_p99 / lat['engine AT_LEAST_ONCE']['p99_ms']:.1f}x")


if __name__ == "__main__":
    main()
