"""The source operator's per-split event time, driven with a scripted reader that reports its splits."""

from __future__ import annotations

import pyarrow as pa
import pytest

from flinklike_spark._runtime.operators.operator_registry import create_operator
from flinklike_spark._runtime.operators.operator_spec import OperatorSpec
from flinklike_spark._runtime.operators.stream_operator import OperatorContext
from flinklike_spark.common.watermark_strategy import WatermarkStrategy
from flinklike_spark.connector_api import ReadResult, Source, SourceReader, SourceSplit

SCHEMA = pa.schema([("v", pa.int64())])


class Scripted(Source):
    """Each poll returns the next ``(split_id, timestamps, splits still active afterwards)`` of the script."""

    def __init__(self, splits: set[str], script: list[tuple[str | None, list[int], set[str]]]) -> None:
        self.splits, self.script = splits, script

    def output_schema(self):
        return SCHEMA

    def create_splits(self, parallelism):
        return []

    def create_reader(self, context):
        return ScriptedReader(self)


class ScriptedReader(SourceReader):
    def __init__(self, source: Scripted) -> None:
        self.active = frozenset(source.splits)
        self.script = list(source.script)

    def add_splits(self, splits: list[SourceSplit]) -> None:
        pass

    def current_split_ids(self):
        return self.active

    def poll_next(self, max_rows):
        if not self.script:
            return ReadResult(wait_seconds=0.01)
        split_id, timestamps, active_after = self.script.pop(0)
        self.active = frozenset(active_after)
        batch = pa.RecordBatch.from_pylist([{"v": t} for t in timestamps], schema=SCHEMA)
        return ReadResult(batch=batch, split_id=split_id, timestamps=pa.array(timestamps, type=pa.int64()))

    def snapshot_state(self, checkpoint_id):
        return []


class Events:
    def __init__(self):
        self.watermarks, self.statuses, self.rows = [], [], 0

    def emit_batch(self, batch):
        self.rows += batch.num_rows

    def emit_watermark(self, timestamp):
        self.watermarks.append(timestamp)

    def emit_watermark_status(self, idle):
        self.statuses.append(idle)


def run(source: Scripted, polls: int, strategy=None) -> Events:
    operator = create_operator(
        OperatorSpec(
            uid="src",
            name="src",
            kind="source",
            function=source,
            timestamp_strategy=strategy or WatermarkStrategy.for_monotonous_timestamps(),
        )
    )
    events = Events()
    operator.setup(OperatorContext(task_name="t", subtask_index=0, parallelism=1, max_parallelism=128,
                                   attempt_number=0, clock_ms=lambda: 0), events)  # fmt: skip
    operator.open()
    for _ in range(polls):
        operator.poll(100)
    return events


def test_a_split_finished_by_its_last_batch_stops_holding_the_watermark():
    # Regression: the finished split was released before its last batch was tracked, which tracked it
    # again until the next poll: the watermark after that batch was the finished split's (9), not 999.
    source = Scripted({"fast", "slow"}, [
        ("fast", [1_000], {"fast", "slow"}),
        ("slow", [10], {"fast"}),  # the last batch of "slow"
        ("fast", [2_000], {"fast"}),
    ])  # fmt: skip
    assert run(source, 3).watermarks == [999, 1_999]


def test_the_watermark_waits_for_every_split_and_no_watermarks_emits_none():
    source = Scripted({"a", "b"}, [("a", [500], {"a", "b"}), ("b", [100], {"a", "b"}), ("b", [700], {"a", "b"})])
    assert run(source, 3).watermarks == [99, 499]
    quiet = run(Scripted({"a"}, [("a", [500], {"a"})]), 1, WatermarkStrategy.no_watermarks())
    assert quiet.rows == 1 and quiet.watermarks == []


def test_a_subtask_without_splits_is_idle_until_it_gets_one():
    events = run(Scripted(set(), [("x", [], set()), ("a", [5], {"a"})]), 2)
    assert events.statuses == [True, False]
    assert run(Scripted(set(), []), 2).statuses == [True]


def test_rows_without_a_split_id_from_a_reader_that_reports_splits_are_refused():
    with pytest.raises(TypeError, match="without ReadResult.split_id"):
        run(Scripted({"a"}, [(None, [1], {"a"})]), 1)
