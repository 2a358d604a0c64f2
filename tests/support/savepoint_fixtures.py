"""The savepoints kept for every snapshot format version, and the job that writes and restores them.

``python -m tests.support.savepoint_fixtures write tests/resources/savepoints`` runs
:func:`build` once per state backend until its input is in state, stops it with a
savepoint, and keeps the checkpoint directory as
``tests/resources/savepoints/<format version>/<backend>/``. The savepoints of
every earlier version stay there: ``tests/integration/test_savepoint_compatibility.py``
restores each with the current code (see :mod:`checkpointing.format_versions`).

What a savepoint holds, all with values :func:`expected` computes in plain Python:

* ``keyed-state`` (:class:`EveryKind`): per user a value, a list, a map, a
  reducing and an aggregating state, a value with time-to-live, and an
  event-time timer that fires only at the end of input;
* ``windows``: event-time tumbling windows of 10 s, the second one open (its
  elements in window state, its end-of-window timer pending);
* ``broadcast`` (:class:`ScaledCount`): broadcast state (rules) and keyed state;
* ``events`` and ``rules``: the sources' split positions (operator state).

``<format version>/kafka/`` (:func:`write_kafka`, against a broker of its own)
holds a Kafka source's partition splits and an exactly-once Kafka sink's
pre-committed transactions, taken while records flowed. Its broker is gone, so
the test decodes them with the reader instead of restoring a job.

The restoring job reads the same sources with rows appended; the restored
positions make it skip the rows it read before the savepoint.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from datetime import timedelta
from pathlib import Path
from typing import Any

from checkpointing.schemas import FORMAT_VERSION
from connectors import CollectSink
from flinklike_spark import (
    KeyedBroadcastProcessFunction,
    KeyedProcessFunction,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StreamExecutionEnvironment,
    Time,
    ValueStateDescriptor,
    WatermarkStrategy,
)
from flinklike_spark.common.typeinfo import Types
from flinklike_spark.common.watermark_strategy import TimestampAssigner
from flinklike_spark.connector_api import ReadResult, SourceReaderContext
from flinklike_spark.datastream.collection_source import CollectionReader, CollectionSource
from flinklike_spark.datastream.functions import ProcessFunction, WindowFunction
from flinklike_spark.datastream.state import AggregatingStateDescriptor, StateTtlConfig
from flinklike_spark.datastream.window import TumblingEventTimeWindows
from tests.support.state_processor_jobs import MeanOfSeq

BACKENDS = ("hashmap", "rocksdb")
USERS = 4
#: rows before the savepoint: ts 0 .. 14,750 ms, so the window [10 s, 20 s) is open at the savepoint
FIRST_RUN_ROWS = 60
#: rows the restoring job adds (ts up to 19,750 ms: still in the open window)
RESTORED_RUN_ROWS = 20
WINDOW_MS = 10_000
END_TIMER = 1_000_000
RULES = MapStateDescriptor("rules", Types.STRING(), Types.LONG())


def events(n: int) -> list[dict[str, Any]]:
    return [{"user": f"u{i % USERS}", "ts": i * 250, "v": i} for i in range(n)]


def rules(n: int) -> list[dict[str, Any]]:
    return [{"rule": f"r{i}", "factor": i + 1} for i in range(n)]


class HeldOpenSource(CollectionSource):
    """A collection source that stays open after its rows (``hold_open``), as an unbounded source does.

    Checkpoints are only taken while every source runs, and a source that ended
    would also advance the watermark to the end of time. With ``reached`` set,
    the reader creates that file once it has emitted every row.
    """

    def __init__(self, rows: list[dict[str, Any]], *, hold_open: bool, reached: str | None = None) -> None:
        super().__init__(rows)
        self.hold_open, self.reached = hold_open, reached

    def create_reader(self, context: SourceReaderContext) -> CollectionReader:
        return _HeldOpenReader(self)


class _HeldOpenReader(CollectionReader):
    def poll_next(self, max_rows: int) -> ReadResult:
        result = super().poll_next(max_rows)
        if not result.end_of_input or not self._source.hold_open:
            return result
        if self._source.reached is not None and self._splits:
            Path(self._source.reached).touch()
        return ReadResult(wait_seconds=0.05)


class ByTs(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value["ts"]


def _add(a: int, b: int) -> int:
    return a + b


class EveryKind(KeyedProcessFunction):
    """Per user: every kind of keyed state and a timer at :data:`END_TIMER`, which reports them all."""

    def open(self, runtime_context):
        ttl = ValueStateDescriptor("last_seen", Types.LONG())
        ttl.enable_time_to_live(StateTtlConfig.new_builder(Time.days(365)).build())
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))
        self.values = runtime_context.get_list_state(ListStateDescriptor("values", Types.LONG()))
        self.by_parity = runtime_context.get_map_state(MapStateDescriptor("by_parity", Types.STRING(), Types.LONG()))
        self.total = runtime_context.get_reducing_state(ReducingStateDescriptor("total", _add, Types.LONG()))
        self.mean = runtime_context.get_aggregating_state(
            AggregatingStateDescriptor("mean", MeanOfSeq(), Types.TUPLE([Types.LONG(), Types.LONG()]))
        )
        self.last_seen = runtime_context.get_state(ttl)

    def process_element(self, value, ctx):
        if self.count.value() is None:
            ctx.timer_service().register_event_time_timer(END_TIMER)
        self.count.update((self.count.value() or 0) + 1)
        self.values.add(value["v"])
        self.by_parity.put("even" if value["v"] % 2 == 0 else "odd", value["v"])
        self.total.add(value["v"])
        self.mean.add(value["v"])
        self.last_seen.update(value["ts"])

    def on_timer(self, timestamp, ctx):
        yield {
            "user": ctx.get_current_key(),
            "timer": timestamp,
            "count": self.count.value(),
            "values": list(self.values.get()),
            "by_parity": dict(self.by_parity.items()),
            "total": self.total.get(),
            "mean": self.mean.get(),
            "last_seen": self.last_seen.value(),
        }


class WindowContents(WindowFunction):
    def apply(self, key, window, inputs):
        yield {"user": key, "start": window.start, "vs": sorted(row["v"] for row in inputs)}


class MarkFired(ProcessFunction):
    """Creates ``<directory>/<user>-<start>`` for each window result (when ``directory`` is set)."""

    def __init__(self, directory: str | None) -> None:
        self.directory = directory

    def process_element(self, value, ctx):
        if self.directory is not None:
            Path(self.directory, f"{value['user']}-{value['start']}").touch()
        yield value


class ScaledCount(KeyedBroadcastProcessFunction):
    """Counts per user; at the end multiplies by the sum of the rules' factors (broadcast state)."""

    def open(self, runtime_context):
        self.seen = runtime_context.get_state(ValueStateDescriptor("seen", Types.LONG()))

    def process_element(self, value, ctx):
        if self.seen.value() is None:
            ctx.timer_service().register_event_time_timer(END_TIMER)
        self.seen.update((self.seen.value() or 0) + 1)

    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(RULES).put(value["rule"], value["factor"])

    def on_timer(self, timestamp, ctx):
        factors = sum(v for _, v in ctx.get_broadcast_state(RULES).items())
        yield {"user": ctx.get_current_key(), "scaled": self.seen.value() * factors}


@dataclasses.dataclass(frozen=True)
class Markers:
    """Files the first run creates: its input is all read, and the first window fired for every user."""

    directory: Path

    @property
    def events_read(self) -> Path:
        return self.directory / "events-read"

    @property
    def rules_read(self) -> Path:
        return self.directory / "rules-read"

    @property
    def fired(self) -> Path:
        return self.directory / "fired"

    def all_in_state(self) -> bool:
        fired = self.fired.is_dir() and len(list(self.fired.iterdir())) == USERS
        return self.events_read.exists() and self.rules_read.exists() and fired


def build(config: dict, *, restored: bool, markers: Markers | None = None) -> StreamExecutionEnvironment:
    """The fixture job: held open and marking its progress (first run), or ending after its rows (restored)."""
    env = StreamExecutionEnvironment.get_execution_environment(config)
    n_events = FIRST_RUN_ROWS + (RESTORED_RUN_ROWS if restored else 0)
    n_rules = 3 + (1 if restored else 0)
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(0)).with_timestamp_assigner(ByTs())
    source = HeldOpenSource(events(n_events), hold_open=not restored, reached=_path(markers, "events_read"))
    rule_source = HeldOpenSource(rules(n_rules), hold_open=not restored, reached=_path(markers, "rules_read"))
    stream = env.from_source(source, strategy, "events").uid("events").set_parallelism(1)
    rule_stream = env.from_source(rule_source, WatermarkStrategy.no_watermarks(), "rules").uid("rules")
    rule_stream = rule_stream.set_parallelism(1)
    keyed = stream.key_by(lambda row: row["user"])
    keyed.process(EveryKind()).uid("keyed-state").sink_to(CollectSink("every-kind"))
    (
        keyed.window(TumblingEventTimeWindows.of(Time.milliseconds(WINDOW_MS)))
        .apply(WindowContents())
        .uid("windows")
        .process(MarkFired(_path(markers, "fired")))
        .uid("mark-fired")
        .sink_to(CollectSink("windows"))
    )
    keyed.connect(rule_stream.broadcast(RULES)).process(ScaledCount()).uid("broadcast").sink_to(CollectSink("scaled"))
    return env


def _path(markers: Markers | None, name: str) -> str | None:
    return None if markers is None else str(getattr(markers, name))


def expected() -> dict[str, list[dict[str, Any]]]:
    """What the restored job emits, from the rows of both runs (in plain Python)."""
    rows = events(FIRST_RUN_ROWS + RESTORED_RUN_ROWS)
    per_user: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        per_user[row["user"]].append(row)
    every_kind, windows, scaled = [], [], []
    factors = sum(rule["factor"] for rule in rules(4))
    for user, mine in sorted(per_user.items()):
        vs = [row["v"] for row in mine]
        by_parity = {}
        for v in vs:
            by_parity["even" if v % 2 == 0 else "odd"] = v
        every_kind.append({
            "user": user, "timer": END_TIMER, "count": len(vs), "values": vs, "by_parity": by_parity,
            "total": sum(vs), "mean": sum(vs) / len(vs), "last_seen": mine[-1]["ts"],
        })  # fmt: skip
        # the first window fired before the savepoint; the restored job emits the second
        windows.append({"user": user, "start": WINDOW_MS, "vs": [r["v"] for r in mine if r["ts"] >= WINDOW_MS]})
        scaled.append({"user": user, "scaled": len(vs) * factors})
    return {"every-kind": every_kind, "windows": windows, "scaled": scaled}


def fixture_config(directory: Path, backend: str) -> dict:
    return {
        "parallelism.default": 2,
        "local.number-taskmanager": 2,
        "execution.checkpointing.dir": str(directory),
        "state.backend.type": backend,
    }


def write(target: Path, backend: str, *, timeout: float = 120.0) -> Path:
    """Run the fixture job until its input is in state, stop it with a savepoint; keep its directory as ``target``."""
    with tempfile.TemporaryDirectory() as scratch:
        checkpoints, markers = Path(scratch) / "checkpoints", Markers(Path(scratch) / "markers")
        markers.fired.mkdir(parents=True)
        client = build(fixture_config(checkpoints, backend), restored=False, markers=markers).execute_async(
            f"savepoint fixture ({backend})"
        )
        deadline = time.monotonic() + timeout
        while not markers.all_in_state():
            if client.done():
                client.wait()  # raises the job's failure
            if time.monotonic() > deadline:
                client.cancel()
                raise RuntimeError(f"the fixture job did not read its input into state within {timeout} s")
            time.sleep(0.1)
        savepoint = client.stop_with_savepoint(timeout=timeout)
        print(f"{backend}: savepoint {savepoint.checkpoint_id} of job {savepoint.job_id}", file=sys.stderr)
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(checkpoints, target)
    return target


KAFKA_UIDS = ("kafka-source", "kafka-sink")


def write_kafka(target: Path, *, timeout: float = 120.0) -> Path:
    """A savepoint of Kafka -> Kafka (exactly once), stopped while a producer keeps writing its input."""
    import threading

    from confluent_kafka import Producer

    from connectors.kafka.testing import LocalKafkaBroker, default_cache_dir
    from flinklike_spark.common.serialization import SimpleStringSchema
    from flinklike_spark.datastream.connectors.kafka import (
        DeliveryGuarantee,
        KafkaOffsetsInitializer,
        KafkaRecordSerializationSchema,
        KafkaSink,
        KafkaSource,
    )

    with (
        tempfile.TemporaryDirectory() as scratch,
        LocalKafkaBroker(cache_dir=default_cache_dir(), data_dir=Path(scratch) / "broker") as broker,
    ):
        servers = broker.bootstrap_servers
        source_topic, sink_topic = broker.create_topic("in", partitions=2), broker.create_topic("out", partitions=2)
        stop = threading.Event()

        def produce() -> None:
            producer, i = Producer({"bootstrap.servers": servers, "linger.ms": 5}), 0
            while not stop.is_set():
                producer.produce(source_topic, f"record {i}".encode(), partition=i % 2)
                producer.poll(0)
                i += 1
                time.sleep(0.002)
            producer.flush(30)

        checkpoints = Path(scratch) / "checkpoints"
        env = StreamExecutionEnvironment.get_execution_environment(fixture_config(checkpoints, "hashmap"))
        source = (
            KafkaSource.builder().set_bootstrap_servers(servers).set_topics(source_topic).set_group_id("fixture")
            .set_starting_offsets(KafkaOffsetsInitializer.earliest())
            .set_value_only_deserializer(SimpleStringSchema()).build()
        )  # fmt: skip
        sink = (
            KafkaSink.builder().set_bootstrap_servers(servers)
            .set_record_serializer(KafkaRecordSerializationSchema.builder().set_topic(sink_topic)
                                   .set_value_serialization_schema(SimpleStringSchema()).build())
            .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE).set_transactional_id_prefix("fixture").build()
        )  # fmt: skip
        stream = env.from_source(source, WatermarkStrategy.no_watermarks(), "kafka").uid(KAFKA_UIDS[0])
        stream.map(str.upper).sink_to(sink).uid(KAFKA_UIDS[1])
        writer = threading.Thread(target=produce, daemon=True)
        writer.start()
        try:
            client = env.execute_async("savepoint fixture (kafka)")
            deadline = time.monotonic() + timeout
            while client.get_job_status().name != "RUNNING":
                if client.done() or time.monotonic() > deadline:
                    client.wait(1)
                    raise RuntimeError("the Kafka fixture job did not start")
                time.sleep(0.1)
            time.sleep(3.0)  # records flow: each sink subtask has a transaction open
            savepoint = client.stop_with_savepoint(timeout=timeout)
        finally:
            stop.set()
            writer.join(60)
        print(f"kafka: savepoint {savepoint.checkpoint_id} of job {savepoint.job_id}", file=sys.stderr)
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(checkpoints, target)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["write"])
    parser.add_argument("root", type=Path, help="tests/resources/savepoints")
    args = parser.parse_args(argv)
    for backend in BACKENDS:
        write(args.root / str(FORMAT_VERSION) / backend, backend)
    write_kafka(args.root / str(FORMAT_VERSION) / "kafka")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
