"""The PyFlink-compatible API of issue 13: translation, configuration views, keyed operators, sources.

Keyed operators are driven directly (in process); end-to-end runs are in
tests/integration/test_windows.py.
"""

from __future__ import annotations

import random
from datetime import timedelta

import pyarrow as pa
import pytest

from connectors import CollectSink, SequenceSource
from connectors.collection import CollectionSource, CollectionSplit
from connectors.number_sequence import NumberSequenceSource
from flinklike_spark import (
    CheckpointingMode,
    ConfigurationError,
    MapFunction,
    StreamExecutionEnvironment,
    ValueStateDescriptor,
    WatermarkStrategy,
)
from flinklike_spark._runtime.operators.keyed_operators import FieldAggregation
from flinklike_spark._runtime.operators.operator_registry import create_operator
from flinklike_spark._runtime.operators.operator_spec import OperatorSpec
from flinklike_spark._runtime.operators.stream_operator import OperatorContext, Output, RestoredEntry, RestoredState
from flinklike_spark.common.types import PICKLED_FIELD_KEY
from flinklike_spark.common.watermark_strategy import TimestampAssigner
from flinklike_spark.connector_api import SourceReaderContext
from flinklike_spark.datastream.checkpoint_config import RuntimeExecutionMode
from flinklike_spark.datastream.output_tag import OutputTag
from flinklike_spark.datastream.window import Time, TumblingEventTimeWindows


class ListOutput(Output):
    def __init__(self) -> None:
        self.rows: list = []

    def emit_rows(self, rows, timestamps=None):
        self.rows.extend(rows)

    def emit_batch(self, batch):
        self.rows.extend(batch.to_pylist())

    def emit_watermark(self, timestamp):
        pass


def env(parallelism=2, **config):
    return StreamExecutionEnvironment.get_execution_environment({"parallelism.default": parallelism, **config})


def source(e):
    return e.from_source(SequenceSource(num_keys=2, records_per_key=3), name="seq")


def test_window_side_output_is_chained_and_tagged():
    e = env()
    late = OutputTag("late")
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner("seq")
    windowed = (
        e.from_source(SequenceSource(num_keys=2, records_per_key=3), strategy, name="seq")
        .key_by("key")
        .window(TumblingEventTimeWindows.of(Time.seconds(1)))
        .side_output_late_data(late)
        .reduce(lambda a, b: a)
    )
    windowed.sink_to(CollectSink("main"))
    windowed.get_side_output(late).sink_to(CollectSink("late"))
    vertices = list(e.get_job_graph("t"))
    window_vertex = vertices[1]
    names = [op.name for op in window_vertex.operators]
    assert names[0].startswith("Window(TumblingEventTimeWindows(1000, 0), EventTimeTrigger()")
    assert "SideOutput: late" in names
    window_spec = window_vertex.operators[0]
    side_index = names.index("SideOutput: late")
    assert window_spec.chained_output_tags == {side_index: "late"}
    assert window_spec.side_output_schemas["late"] == pa.schema([("key", pa.int64()), ("seq", pa.int64())])


def test_window_all_runs_with_parallelism_one_and_event_time_needs_timestamps():
    e = env(3)
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner("seq")
    stream = e.from_source(SequenceSource(num_keys=2, records_per_key=3), strategy, name="seq")
    stream.window_all(TumblingEventTimeWindows.of(Time.seconds(1))).reduce(lambda a, b: a).sink_to(CollectSink("c"))
    assert [v.parallelism for v in e.get_job_graph("t")] == [3, 1, 3]  # source, window, sink
    with pytest.raises(ConfigurationError, match="has no timestamps"):
        source(e).key_by("key").window(TumblingEventTimeWindows.of(Time.seconds(1)))


def test_only_pipelines_defined_after_the_last_execute_are_translated():
    e = env()
    numbers = source(e)
    numbers.map(lambda r: r).sink_to(CollectSink("first"))
    e._executed_upto = len(e.transformations)  # what execute() does once the job is submitted
    numbers.filter(lambda r: True).sink_to(CollectSink("second"))
    names = [v.name for v in e.get_job_graph("t")]
    assert names == ["Source: seq -> Filter -> Sink: CollectSink"], "the source is re-read, the map is not run"


def test_two_collect_sinks_with_one_name_are_rejected():
    e = env()
    source(e).sink_to(CollectSink("x"))
    source(e).add_sink(CollectSink("x"))  # PyFlink's add_sink is sink_to
    with pytest.raises(ConfigurationError, match="two sinks named 'x'"):
        e.get_job_graph("t")


def test_execute_and_collect_of_a_job_that_cannot_start_leaves_no_result_directory(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    # filesystem checkpoint storage without its directory: refused at submission
    e = env(**{"execution.checkpointing.interval": "1 s", "execution.checkpointing.storage": "filesystem"})
    with pytest.raises(ConfigurationError, match="'filesystem' but execution.checkpointing.dir is not set"):
        source(e).execute_and_collect("refused")
    assert list(tmp_path.iterdir()) == []


def test_add_sink_is_sink_to():
    e = env()
    source(e).add_sink(CollectSink("y")).name("out")
    assert [v.name for v in e.get_job_graph("t")] == ["Source: seq -> out"]
    with pytest.raises(TypeError, match="expects a flinklike_spark Sink"):
        source(e).add_sink(lambda row: None)


def test_checkpoint_config_and_runtime_mode_are_views_over_the_keys():
    e = env()
    assert not e.get_checkpoint_config().is_checkpointing_enabled()
    assert e.get_checkpoint_interval() == -1
    e.enable_checkpointing(500, CheckpointingMode.AT_LEAST_ONCE)
    config = e.get_checkpoint_config()
    config.set_checkpoint_timeout(60_000).enable_unaligned_checkpoints().set_max_concurrent_checkpoints(2)
    config.set_aligned_checkpoint_timeout(timedelta(milliseconds=20)).set_tolerable_checkpoint_failure_number(3)
    assert e.config.get("execution.checkpointing.interval") == timedelta(milliseconds=500)
    assert e.config.get("execution.checkpointing.mode") is CheckpointingMode.AT_LEAST_ONCE
    assert e.config.get("execution.checkpointing.timeout") == timedelta(minutes=1)
    assert e.config.get("execution.checkpointing.unaligned.enabled") is True
    assert config.get_checkpoint_interval() == 500 and config.get_max_concurrent_checkpoints() == 2
    assert config.get_tolerable_checkpoint_failure_number() == 3
    with pytest.raises(ConfigurationError, match="max-concurrent"):
        config.set_max_concurrent_checkpoints(0)
    e.set_runtime_mode(RuntimeExecutionMode.STREAMING)
    assert e.set_runtime_mode(RuntimeExecutionMode.BATCH).config.get("execution.runtime-mode") == "batch"
    with pytest.raises(ConfigurationError, match="'bulk'; valid values: streaming, batch, automatic"):
        env(**{"execution.runtime-mode": "bulk"})
    assert env(**{"execution.runtime-mode": "automatic"}).config.get("execution.runtime-mode") == "streaming"


def make_keyed(kind, function, *, key_field="user", restored=None):
    spec = OperatorSpec(uid="op", name="op", kind=kind, function=function, key_field=key_field)
    op = create_operator(spec)
    out = ListOutput()
    op.setup(OperatorContext(task_name="t", subtask_index=0, parallelism=1, max_parallelism=128, attempt_number=0), out)
    op.initialize_state(restored)
    op.open()
    return op, out


def test_field_aggregations_follow_flink_semantics_against_python():
    rng = random.Random(3)
    rows = [{"user": rng.choice("ab"), "score": rng.randint(0, 9), "i": i} for i in range(200)]
    for aggregation in ("sum", "min", "max", "min_by", "max_by"):
        op, out = make_keyed("keyed_reduce", FieldAggregation(aggregation, "score"))
        op.process_rows(rows)
        first = {}
        expected = []
        for row in rows:
            prefix = [r for r in rows[: row["i"] + 1] if r["user"] == row["user"]]
            first.setdefault(row["user"], row)
            scores = [r["score"] for r in prefix]
            if aggregation == "sum":
                expected.append({**first[row["user"]], "score": sum(scores)})
            elif aggregation in ("min", "max"):
                expected.append({**first[row["user"]], "score": (min if aggregation == "min" else max)(scores)})
            else:
                best = (min if aggregation == "min_by" else max)(scores)
                expected.append(next(r for r in prefix if r["score"] == best))  # the earliest on ties
        assert out.rows == expected, aggregation
    assert FieldAggregation("sum", 1).reduce({"user": "a", "score": 1}, {"user": "a", "score": 2})["score"] == 3


def test_keyed_map_has_the_record_keys_state_and_restores_it():
    class Numbering(MapFunction):
        def open(self, runtime_context):
            self.count = runtime_context.get_state(ValueStateDescriptor("count"))

        def map(self, value):
            n = (self.count.value() or 0) + 1
            self.count.update(n)
            return {"user": value["user"], "n": n}

    op, out = make_keyed("keyed_map", Numbering())
    op.process_rows([{"user": u} for u in "abab"])
    assert [r["n"] for r in out.rows] == [1, 1, 2, 2]
    snapshot = op.snapshot_state(1)
    restored = RestoredState(
        checkpoint_id=1,
        keyed=tuple(
            RestoredEntry(state_name=name, state_kind=kind, key_group=g, key=k, value=v, subtask=0)
            for name, kind, entries in ((s.name, s.kind, s.entries) for s in snapshot.keyed)
            for g, k, v in entries
        ),
    )
    op2, out2 = make_keyed("keyed_map", Numbering(), restored=restored)
    op2.process_rows([{"user": "b"}])
    assert out2.rows == [{"user": "b", "n": 3}]
    op3, out3 = make_keyed("keyed_filter", lambda r: r["user"] == "a")
    op3.process_rows([{"user": u} for u in "abab"])
    assert out3.rows == [{"user": "a"}, {"user": "a"}]


def test_timestamp_assigner_objects():
    class FromField(TimestampAssigner):
        def extract_timestamp(self, value, record_timestamp):
            return value["t"] * 1000

    generator = (
        WatermarkStrategy.for_bounded_out_of_orderness(timedelta(seconds=1))
        .with_timestamp_assigner(FromField())
        .create_generator()
    )
    assert generator.assign(pa.RecordBatch.from_pylist([{"t": 5}, {"t": 3}])) == [5000, 3000]
    assert generator.current_watermark() == 5000 - 1000 - 1
    assert generator.assign(pa.RecordBatch.from_pylist([{"t": 2}])) == [2000]
    assert generator.current_watermark() == 5000 - 1000 - 1


def read_all(source, parallelism, max_rows=3):
    rows = []
    for split_owner in range(parallelism):
        reader = source.create_reader(SourceReaderContext(subtask_index=split_owner, parallelism=parallelism))
        reader.add_splits(
            [s for i, s in enumerate(source.create_splits(parallelism)) if i % parallelism == split_owner]
        )
        while not (result := reader.poll_next(max_rows)).end_of_input:
            rows.extend(result.batch.to_pylist())
    return rows


def test_number_sequence_and_collection_sources():
    assert sorted(r["value"] for r in read_all(NumberSequenceSource(5, 17), 3)) == list(range(5, 18))
    rows = [{"x": i} for i in range(7)]
    source = CollectionSource(rows, batch_size=2)
    assert read_all(source, 2) == rows
    reader = source.create_reader(SourceReaderContext(subtask_index=0, parallelism=1))
    reader.add_splits(source.create_splits(1))
    reader.poll_next(10)
    [split] = reader.snapshot_state(1)
    assert split == CollectionSplit(split_id="collection", next_row=2)
    resumed = source.create_reader(SourceReaderContext(subtask_index=0, parallelism=1))
    resumed.add_splits([split])
    assert resumed.poll_next(10).batch.to_pylist() == rows[2:4]


def test_types_row_named_is_the_declared_arrow_schema():
    from flinklike_spark.common.typeinfo import Types, to_arrow_schema

    row = Types.ROW_NAMED(["user", "n", "tags", "when"],
                          [Types.STRING(), Types.LONG(), Types.LIST(Types.STRING()), Types.SQL_TIMESTAMP()])  # fmt: skip
    assert to_arrow_schema(row) == pa.schema(
        [("user", pa.string()), ("n", pa.int64()), ("tags", pa.list_(pa.string())), ("when", pa.timestamp("ms"))]
    )
    e = env()
    mapped = source(e).map(lambda r: {"user": str(r["key"]), "n": r["seq"]},
                           output_type=Types.ROW_NAMED(["user", "n"], [Types.STRING(), Types.LONG()]))  # fmt: skip
    assert mapped.get_transformation().output_schema == pa.schema([("user", pa.string()), ("n", pa.int64())])
    assert to_arrow_schema(Types.TUPLE([Types.STRING(), Types.INT()])).names == ["f0", "f1"]
    pickled = to_arrow_schema(Types.ROW_NAMED(["x"], [Types.PICKLED_BYTE_ARRAY()])).field("x")
    assert pickled.type == pa.binary() and pickled.metadata == {PICKLED_FIELD_KEY: b"1"}  # pickled values
    with pytest.raises(ConfigurationError, match="differs from the schema"):
        e.from_source(SequenceSource(num_keys=2, records_per_key=3), type_info=Types.ROW_NAMED(["x"], [Types.LONG()]))
