"""WatermarkValve with watermark statuses (Flink's StatusWatermarkValve), and the status event's encoding."""

from __future__ import annotations

import pytest

from flinklike_spark._runtime.network.events import WatermarkStatus, decode_event, encode_event
from flinklike_spark._runtime.tasks.watermark_valve import WatermarkValve
from flinklike_spark.errors import EventDecodingError


def test_an_idle_channel_is_left_out_and_rejoins_once_it_caught_up():
    valve = WatermarkValve(3)
    assert valve.input_watermark(0, 100) is None
    assert valve.input_watermark(1, 50) is None
    assert valve.input_watermark(2, 70) == 50
    # channel 1 goes idle: the minimum of the others
    assert valve.input_status(1, True) == (70, None)
    assert valve.input_watermark(1, 60) is None  # an idle channel's watermarks are ignored
    assert valve.input_watermark(2, 120) == 100
    # active again but behind (60 < 100): not aligned, it does not pull the watermark back
    assert valve.input_status(1, False) == (None, None)
    assert valve.input_watermark(0, 200) == 120
    assert valve.input_watermark(1, 110) is None  # still behind 120
    assert valve.input_watermark(1, 130) is None  # caught up: aligned again, now holds the minimum
    assert valve.input_watermark(2, 300) == 130
    assert valve.current == 130


def test_all_channels_idle_makes_the_output_idle_at_the_highest_watermark():
    valve = WatermarkValve(2)
    valve.input_watermark(0, 10)
    assert valve.input_watermark(1, 40) == 10
    assert valve.input_status(0, True) == (40, None)
    assert valve.input_status(1, True) == (None, True)
    assert valve.idle
    assert valve.input_status(0, False) == (None, False)  # the first active channel: active again
    assert valve.input_status(0, False) == (None, None)  # no change


def test_an_idle_channel_that_finished_does_not_count():
    valve = WatermarkValve(2)
    valve.input_watermark(0, 10)
    valve.input_status(1, True)
    assert valve.channel_finished(1) == (None, None)
    assert valve.input_status(1, False) == (None, None)
    assert valve.input_watermark(0, 20) == 20


def test_when_the_channels_left_open_are_all_idle_the_output_is_idle():
    valve = WatermarkValve(2)
    valve.input_watermark(0, 10)
    valve.input_watermark(1, 30)
    valve.input_status(1, True)
    assert valve.channel_finished(0) == (30, True)
    assert valve.idle


def test_watermark_status_events_round_trip_and_bad_codes_are_named():
    for status in (WatermarkStatus.IDLE, WatermarkStatus.ACTIVE):
        assert decode_event(encode_event(status)) == status
    with pytest.raises(EventDecodingError, match="status code 7"):
        decode_event(encode_event(WatermarkStatus.IDLE)[:-1] + b"\x07")


class StatusOutput:
    def __init__(self):
        self.events = []

    def emit_rows(self, rows, timestamps=None):
        self.events.append(("rows", len(rows)))

    def emit_batch(self, batch):
        self.events.append(("rows", batch.num_rows))

    def emit_watermark(self, timestamp):
        self.events.append(("watermark", timestamp))

    def emit_watermark_status(self, idle):
        self.events.append(("idle" if idle else "active",))


def test_assign_timestamps_and_watermarks_with_idleness_marks_its_output_idle_on_the_clock():
    import pyarrow as pa

    from flinklike_spark import Duration, WatermarkStrategy
    from flinklike_spark._runtime.operators.operator_registry import create_operator
    from flinklike_spark._runtime.operators.operator_spec import OperatorSpec
    from flinklike_spark._runtime.operators.stream_operator import OperatorContext

    now = [1_000]
    strategy = WatermarkStrategy().with_timestamp_assigner("t").with_idleness(Duration.of_millis(500))
    op = create_operator(OperatorSpec(uid="wm", name="wm", kind="timestamps_watermarks", function=strategy))
    out = StatusOutput()
    op.setup(OperatorContext(task_name="t", subtask_index=0, parallelism=1, max_parallelism=128, attempt_number=0,
                             clock_ms=lambda: now[0]), out)  # fmt: skip
    op.open()
    op.process_batch(pa.RecordBatch.from_pylist([{"t": 5}]))
    assert op.next_processing_timer() == 1_500
    now[0] = 1_499
    op.on_processing_time(now[0])
    assert ("idle",) not in out.events
    now[0] = 1_500
    op.on_processing_time(now[0])
    assert out.events[-1] == ("idle",) and op.next_processing_timer() is None
    now[0] = 2_000
    op.process_batch(pa.RecordBatch.from_pylist([{"t": 9}]))
    assert out.events[-3:] == [("active",), ("rows", 1), ("watermark", 8)]
    now[0] = 3_000
    op.on_processing_time(now[0])
    op.process_watermark(2**63 - 1)  # the end: active again first, so the final watermark counts
    assert out.events[-3:] == [("idle",), ("active",), ("watermark", 2**63 - 1)]


def test_a_source_polled_late_emits_its_splits_watermark_before_it_goes_idle():
    # One split with records and one without, both idle by the next poll: the watermark the records
    # reached goes out before the IDLE status (downstream ignores an idle channel's watermarks).
    import pyarrow as pa

    from flinklike_spark import Duration, WatermarkStrategy
    from flinklike_spark._runtime.operators.operator_registry import create_operator
    from flinklike_spark._runtime.operators.operator_spec import OperatorSpec
    from flinklike_spark._runtime.operators.stream_operator import OperatorContext
    from flinklike_spark.connector_api import ReadResult, Source, SourceReader

    class TwoSplitReader(SourceReader):
        def __init__(self):
            self.results = [ReadResult(batch=pa.record_batch([pa.array([1, 2])], names=["v"]), split_id="p0",
                                       timestamps=pa.array([100, 200], type=pa.int64()))]  # fmt: skip

        def add_splits(self, splits):
            pass

        def poll_next(self, max_rows):
            return self.results.pop(0) if self.results else ReadResult()

        def snapshot_state(self, checkpoint_id):
            return []

        def current_split_ids(self):
            return frozenset({"p0", "p1"})

    class TwoSplitSource(Source):
        def create_splits(self, parallelism):
            return []

        def output_schema(self):
            return pa.schema([("v", pa.int64())])

        def create_reader(self, context):
            return TwoSplitReader()

    now = [1_000]
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_idleness(Duration.of_millis(500))
    spec = OperatorSpec(uid="src", name="src", kind="source", function=TwoSplitSource(), timestamp_strategy=strategy)
    op = create_operator(spec)
    out = StatusOutput()
    op.setup(OperatorContext(task_name="t", subtask_index=0, parallelism=1, max_parallelism=128, attempt_number=0,
                             clock_ms=lambda: now[0]), out)  # fmt: skip
    op.open()
    now[0] = 1_010
    op.poll(100)
    assert out.events == [("rows", 2)]  # p1 has no records yet: it holds the watermark
    now[0] = 9_000
    op.poll(100)
    assert out.events == [("rows", 2), ("watermark", 199), ("idle",)]
