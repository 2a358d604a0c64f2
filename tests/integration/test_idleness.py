"""``WatermarkStrategy.with_idleness``: an idle source subtask does not hold event time back (issue 13 item 5).

Two source subtasks: one reads a record every 10 ms with growing timestamps,
the other one record and then nothing, without ending. Without idleness the
second one's watermark holds every window back for ever (the test would time
out); with it, the windows of the busy subtask fire while the job runs.
Expected counts are computed from the source's definition.
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest

from flinklike_spark import Duration, StreamExecutionEnvironment, WatermarkStrategy
from flinklike_spark.connector_api import Boundedness, ReadResult, Source, SourceReader, SourceSplit
from flinklike_spark.datastream.functions import WindowFunction
from flinklike_spark.datastream.window import Time, TumblingEventTimeWindows

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

SCHEMA = pa.schema([("user", pa.string()), ("ts", pa.int64())])
STEP_MS = 100  # event time between two busy records
PER_POLL = 10


@dataclasses.dataclass(frozen=True, kw_only=True)
class Position(SourceSplit):
    next_row: int = 0


class BusyAndQuiet(Source):
    """Split "busy": records ``{"user": "b", "ts": 100 * i}``, 10 per poll, for ever; split "quiet":
    ``{"user": "q", "ts": 0}`` once, then nothing, for ever."""

    def boundedness(self):
        return Boundedness.CONTINUOUS_UNBOUNDED

    def output_schema(self):
        return SCHEMA

    def create_splits(self, parallelism):
        return [Position(split_id="busy"), Position(split_id="quiet")]

    def create_reader(self, context):
        return Reader()


class Reader(SourceReader):
    def __init__(self):
        self.splits = []

    def add_splits(self, splits):
        self.splits.extend(splits)

    def poll_next(self, max_rows):
        rows = []
        for i, split in enumerate(self.splits):
            if split.split_id == "busy":
                rows += [{"user": "b", "ts": STEP_MS * (split.next_row + k)} for k in range(PER_POLL)]
                self.splits[i] = dataclasses.replace(split, next_row=split.next_row + PER_POLL)
            elif split.next_row == 0:
                rows.append({"user": "q", "ts": 0})
                self.splits[i] = dataclasses.replace(split, next_row=1)
        if not rows:
            return ReadResult(wait_seconds=0.01)
        return ReadResult(batch=pa.RecordBatch.from_pylist(rows, schema=SCHEMA), wait_seconds=0.01)

    def snapshot_state(self, checkpoint_id):
        return list(self.splits)


class WithStart(WindowFunction):
    def apply(self, key, window, inputs):
        for value in inputs:
            yield {"user": key, "start": window.start, "n": value["n"]}


def count(a, b):
    return {"user": a["user"], "n": a["n"] + b["n"]}


def test_an_idle_source_subtask_does_not_hold_back_event_time_windows():
    env = StreamExecutionEnvironment.get_execution_environment(
        {"parallelism.default": 2, "local.number-taskmanager": 2}
    )
    strategy = (
        WatermarkStrategy.for_monotonous_timestamps()
        .with_timestamp_assigner("ts")
        .with_idleness(Duration.of_millis(300))
    )
    windows = (
        env.from_source(BusyAndQuiet(), strategy, name="busy and quiet")
        .map(lambda r: {"user": r["user"], "n": 1})
        .key_by("user")
        .window(TumblingEventTimeWindows.of(Time.seconds(1)))
        .reduce(count, window_function=WithStart())
    )
    results = windows.execute_and_collect("idleness", limit=8)
    busy = [r for r in results if r["user"] == "b"]
    quiet = [r for r in results if r["user"] == "q"]
    per_window = 1_000 // STEP_MS
    assert busy and [r["start"] for r in busy] == [1_000 * i for i in range(len(busy))]
    assert all(r["n"] == per_window for r in busy)
    assert quiet in ([], [{"user": "q", "start": 0, "n": 1}])
