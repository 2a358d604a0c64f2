"""The resumable window job of the window and incremental-checkpoint tests.

Per key, event-time tumbling windows (checked to hold exactly their seqs once,
in order) and count windows of 700 records; ``expected_resumable`` gives what
an uninterrupted run emits, ``assert_resumed`` checks a resumed run against it.
"""

from __future__ import annotations

import collections
from datetime import timedelta

from connectors import CollectSink, SequenceSource
from flinklike_spark import StreamExecutionEnvironment, WatermarkStrategy
from flinklike_spark.datastream.functions import ProcessWindowFunction
from flinklike_spark.datastream.window import Time, TumblingEventTimeWindows

__all__ = [
    "NUM_KEYS",
    "RECORDS_PER_KEY",
    "WINDOW",
    "ExactWindow",
    "assert_resumed",
    "build_resumable",
    "expected_resumable",
    "observed_resumable",
]

NUM_KEYS = 8
RECORDS_PER_KEY = 3_000
WINDOW = 500  # ms of "seq" time: 6 windows per key


class ExactWindow(ProcessWindowFunction):
    """Emits the window's count and checks it holds exactly its seqs once, in order."""

    def process(self, key, context, elements):
        seqs = [row["seq"] for row in elements]
        window = context.window()
        if seqs != list(range(window.start, window.end)):
            raise AssertionError(f"key {key} window {window}: seqs {seqs[:5]}... are not exactly once, in order")
        yield {"key": key, "start": window.start, "n": len(seqs)}


def build_resumable(config: dict, *, rows_per_second: float | None) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment(config)
    # seq is the event time; a watermark delay beyond the data keeps every window open until the end
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(hours=1)).with_timestamp_assigner("seq")
    source = SequenceSource(num_keys=NUM_KEYS, records_per_key=RECORDS_PER_KEY, rows_per_second=rows_per_second)
    keyed = env.from_source(source, strategy, name="seq").uid("seq").key_by("key")
    (
        keyed.window(TumblingEventTimeWindows.of(Time.milliseconds(WINDOW)))
        .process(ExactWindow())
        .uid("windows")
        .sink_to(CollectSink("windows"))
    )
    keyed.count_window(700).reduce(lambda a, b: {**a, "seq": a["seq"] + b["seq"]}).uid("counts").sink_to(
        CollectSink("count-windows")
    )
    return env


def expected_resumable():
    windows = {(k, s): WINDOW for k in range(NUM_KEYS) for s in range(0, RECORDS_PER_KEY, WINDOW)}
    # count windows of 700 consecutive records per key; the last 200 never fill a window
    count_windows = collections.Counter(
        (k, sum(range(i, i + 700))) for k in range(NUM_KEYS) for i in range(0, RECORDS_PER_KEY - 699, 700)
    )
    return windows, count_windows


def assert_resumed(result, uninterrupted_windows):
    """Time windows all fire after the resume: identical. Count windows fire as they fill, so those
    full before the stop were emitted by the stopped job: the resumed job must emit exactly the
    remaining ones per key (a lost per-key count would shift every later window's contents)."""
    windows, count_windows = observed_resumable(result)
    assert windows == uninterrupted_windows
    _, expected_counts = expected_resumable()
    for key in range(NUM_KEYS):
        want = sorted(total for k, total in expected_counts if k == key)
        got = sorted(total for k, total in count_windows.elements() if k == key)
        assert got and got == want[len(want) - len(got) :], (
            f"key {key}: count windows {got}, expected a suffix of {want}"
        )


def observed_resumable(result):
    windows = {(r["key"], r["start"]): r["n"] for r in CollectSink.rows(result, name="windows")}
    count_windows = collections.Counter((r["key"], r["seq"]) for r in CollectSink.rows(result, name="count-windows"))
    return windows, count_windows
