"""Windows, keyed transformations and side outputs end to end on real multi-process clusters.

Every expectation is computed independently in plain Python. The resume tests
hold every window open until the end of input (a watermark delay longer than
the data), so the whole output is produced by the resumed job and must equal
an uninterrupted run's exactly: window contents, trigger timers and the
per-key count assigner's state all went through the checkpoint (and a rescale).
"""

from __future__ import annotations

import collections
import time
from datetime import timedelta

import pytest

from connectors import CollectSink
from flinklike_spark import (
    MapFunction,
    ProcessFunction,
    StreamExecutionEnvironment,
    ValueStateDescriptor,
    WatermarkStrategy,
)
from flinklike_spark.datastream.functions import AllWindowFunction, WindowFunction
from flinklike_spark.datastream.output_tag import OutputTag
from flinklike_spark.datastream.window import (
    EventTimeSessionWindows,
    SlidingEventTimeWindows,
    Time,
    TumblingEventTimeWindows,
)
from flinklike_spark.errors import ConfigurationError, JobExecutionError
from tests.support.checkpoint_jobs import MODES, checkpoint_config, run_and_cancel
from tests.support.window_jobs import assert_resumed, build_resumable, expected_resumable, observed_resumable

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

LATE = OutputTag("late")


def add_n(a, b):
    return {**a, "n": a["n"] + b["n"]}


class Count(WindowFunction):
    def apply(self, key, window, inputs):
        yield {"user": key, "start": window.start, "end": window.end, "n": sum(1 for _ in inputs)}


class RunningIndex(MapFunction):
    """Keyed map with state: numbers each user's records 0, 1, 2, ..."""

    def open(self, runtime_context):
        self.seen = runtime_context.get_state(ValueStateDescriptor("seen"))

    def map(self, value):
        index = self.seen.value() or 0
        self.seen.update(index + 1)
        return {"user": value["user"], "index": index}


class Total(AllWindowFunction):
    def apply(self, window, inputs):
        yield {"start": window.start, "n": sum(row["n"] for row in inputs)}


def events():
    """Out-of-order clicks of four users, with some far too late (two seconds behind)."""
    rows = []
    for i in range(240):
        user = f"u{i % 4}"
        ts = i * 50 + (i * 37) % 400  # up to 400 ms out of order
        if i % 23 == 0:
            ts = max(0, ts - 2_000)  # late: the watermark is already past its window
        rows.append({"user": user, "ts": ts, "n": 1})
    return rows


def expected_tumbling(rows, size, delay):
    """Plain Python: per element the watermark before it decides whether it is late."""
    watermark = -(2**63)
    max_ts = -(2**63)
    counts = collections.Counter()
    late = []
    for row in rows:
        start = row["ts"] - row["ts"] % size
        if start + size - 1 <= watermark:
            late.append(row)
        else:
            counts[(row["user"], start)] += 1
        max_ts = max(max_ts, row["ts"])
        watermark = max_ts - delay - 1
    return counts, late


def expected_sessions(rows, gap, delay):
    """Plain Python sessions: a live (unfired) session absorbs an element whose ``[ts, ts + gap)``
    touches it, even a late one (Flink merges before the lateness check); a session fires when the
    watermark reaches its last ms; an element that touches no live session and is late is dropped."""
    live = collections.defaultdict(list)  # user -> [start, end, n]
    fired = collections.Counter()
    watermark = max_ts = -(2**63)
    for row in rows:
        start, end, n = row["ts"], row["ts"] + gap, 1
        touching = [w for w in live[row["user"]] if w[0] <= end and w[1] >= start]
        if touching or end - 1 > watermark:
            for w in touching:
                live[row["user"]].remove(w)
                start, end, n = min(start, w[0]), max(end, w[1]), n + w[2]
            live[row["user"]].append([start, end, n])
        max_ts = max(max_ts, row["ts"])
        watermark = max(watermark, max_ts - delay - 1)
        for user, sessions in live.items():
            for w in [w for w in sessions if w[1] - 1 <= watermark]:
                sessions.remove(w)
                fired[(user, *w)] += 1
    for user, sessions in live.items():
        for w in sessions:
            fired[(user, *w)] += 1
    return fired


class SessionInfo(WindowFunction):
    def apply(self, key, window, inputs):
        [reduced] = inputs
        yield {"user": key, "start": window.start, "end": window.end, "n": reduced["n"]}


def test_windows_keyed_transformations_and_side_outputs_against_python():
    rows = events()
    delay = 100
    env = StreamExecutionEnvironment.get_execution_environment({"parallelism.default": 2})
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(milliseconds=delay)).with_timestamp_assigner(
        "ts"
    )
    clicks = env.from_collection(rows, watermark_strategy=strategy, batch_size=1)
    windowed = (
        clicks.key_by("user")
        .window(TumblingEventTimeWindows.of(Time.seconds(1)))
        .side_output_late_data(LATE)
        .apply(Count())
    )
    windowed.sink_to(CollectSink("tumbling"))
    windowed.get_side_output(LATE).sink_to(CollectSink("late"))
    (
        clicks.key_by("user")
        .window(EventTimeSessionWindows.with_gap(Time.milliseconds(60)))
        .reduce(add_n, window_function=SessionInfo())
        .sink_to(CollectSink("sessions"))
    )
    (
        clicks.window_all(SlidingEventTimeWindows.of(Time.seconds(4), Time.seconds(2)))
        .allowed_lateness(10_000)
        .apply(Total())
        .sink_to(CollectSink("all"))
    )
    clicks.key_by("user").sum("n").sink_to(CollectSink("sum"))
    clicks.key_by("user").max_by("ts").sink_to(CollectSink("max_by"))
    clicks.key_by("user").map(RunningIndex()).sink_to(CollectSink("index"))
    result = env.execute("windows")

    counts, late = expected_tumbling(rows, 1000, delay)
    got = CollectSink.rows(result, name="tumbling")
    assert collections.Counter({(r["user"], r["start"]): r["n"] for r in got}) == counts
    assert len(got) == len(counts), "each window fired once (no allowed lateness)"
    assert sorted(CollectSink.rows(result, name="late"), key=repr) == sorted(late, key=repr)
    assert late, "the data has late elements"

    sessions = collections.Counter(
        (r["user"], r["start"], r["end"], r["n"]) for r in CollectSink.rows(result, name="sessions")
    )
    assert sessions == expected_sessions(rows, 60, delay)
    assert any(n > 1 for *_, n in sessions), "some sessions merged"

    # window_all with 10 s allowed lateness: nothing is dropped, the last (largest) firing of each
    # window counts all its elements (the sink's two subtasks interleave the firings)
    last_firing = collections.defaultdict(int)
    for r in CollectSink.rows(result, name="all"):
        last_firing[r["start"]] = max(last_firing[r["start"]], r["n"])
    for start, n in last_firing.items():
        assert n == sum(1 for row in rows if start <= row["ts"] < start + 4_000)

    sums = collections.defaultdict(list)
    for r in CollectSink.rows(result, name="sum"):
        sums[r["user"]].append(r["n"])
    assert {u: sorted(v) for u, v in sums.items()} == {f"u{k}": list(range(1, 61)) for k in range(4)}
    max_by = collections.defaultdict(list)
    for r in CollectSink.rows(result, name="max_by"):
        max_by[r["user"]].append(r["ts"])
    for user, seen in max_by.items():
        user_ts = [row["ts"] for row in rows if row["user"] == user]
        assert seen == [max(user_ts[: i + 1]) for i in range(len(user_ts))]
    index = collections.defaultdict(list)
    for r in CollectSink.rows(result, name="index"):
        index[r["user"]].append(r["index"])
    assert {u: v for u, v in index.items()} == {f"u{k}": list(range(60)) for k in range(4)}


def test_execute_runs_only_the_new_pipeline_and_duplicate_sink_names_fail():
    env = StreamExecutionEnvironment.get_execution_environment({"parallelism.default": 1})
    numbers = env.from_collection([{"x": i} for i in range(5)])
    numbers.map(lambda r: {"x": r["x"] * 10}).sink_to(CollectSink("first"))
    first = env.execute("first")
    numbers.map(lambda r: {"x": r["x"] + 1}).sink_to(CollectSink("second"))
    second = env.execute("second")
    assert sorted(r["x"] for r in CollectSink.rows(first, name="first")) == [0, 10, 20, 30, 40]
    assert set(second.accumulators) == {"second"}, "the first pipeline did not run again"
    assert sorted(r["x"] for r in CollectSink.rows(second)) == [1, 2, 3, 4, 5]

    numbers.sink_to(CollectSink("same"))
    numbers.map(lambda r: r).sink_to(CollectSink("same"))
    with pytest.raises(ConfigurationError, match="two sinks named 'same'"):
        env.execute("duplicate")


# -- resume ------------------------------------------------------------------------------------


def test_window_job_stopped_with_savepoint_resumes_at_another_parallelism_identically(tmp_path):
    uninterrupted = build_resumable({"parallelism.default": 2}, rows_per_second=None).execute("whole")
    assert observed_resumable(uninterrupted) == expected_resumable()

    directory = str(tmp_path / "checkpoints")
    config = checkpoint_config(directory, "aligned")
    del config["execution.checkpointing.interval"]  # savepoints only
    client = build_resumable(config, rows_per_second=6_000).execute_async("stopped")
    deadline = time.monotonic() + 60
    while len([m for m in client.task_metrics().values() if m]) < 6:
        assert time.monotonic() < deadline, "tasks did not start"
        time.sleep(0.1)
    time.sleep(1.0)  # part of the input is in window state when the savepoint is taken
    savepoint = client.stop_with_savepoint(timeout=120)
    with pytest.raises(JobExecutionError):
        client.wait(60)
    resumed_config = checkpoint_config(directory, "aligned", parallelism=3) | {
        "execution.state-recovery.path": savepoint.path
    }
    del resumed_config["execution.checkpointing.interval"]
    resumed = build_resumable(resumed_config, rows_per_second=None).execute("resumed")
    assert_resumed(resumed, observed_resumable(uninterrupted)[0])


@pytest.mark.parametrize("mode", MODES)
def test_window_job_resumes_from_checkpoints_exactly_once(tmp_path, mode):
    directory = str(tmp_path / "checkpoints")
    # slow enough that two checkpoints complete before the input ends, even on a loaded machine
    run_and_cancel(build_resumable(checkpoint_config(directory, mode), rows_per_second=2_500), directory, checkpoints=2)
    config = checkpoint_config(directory, mode) | {"execution.state-recovery.path": directory}
    resumed = build_resumable(config, rows_per_second=None).execute("resumed")
    assert_resumed(resumed, expected_resumable()[0])


class Route(ProcessFunction):
    """Evens to the main output, odds by ctx.output, multiples of 5 also by PyFlink's yielded pair."""

    def process_element(self, value, ctx):
        if value["x"] % 2:
            ctx.output(OutputTag("odd"), {"odd": value["x"]})
        else:
            yield value
        if value["x"] % 5 == 0:
            yield OutputTag("five"), {"five": value["x"]}


@pytest.mark.parametrize("chaining", [True, False])
def test_side_outputs_of_process_functions_chained_and_over_the_network(chaining):
    env = StreamExecutionEnvironment.get_execution_environment({"parallelism.default": 2})
    if not chaining:
        env.disable_operator_chaining()  # side outputs then leave over tagged network edges
    routed = env.from_collection([{"x": i} for i in range(50)]).rebalance().process(Route())
    routed.sink_to(CollectSink("main"))
    routed.get_side_output(OutputTag("odd")).sink_to(CollectSink("odd"))
    routed.get_side_output(OutputTag("five")).map(lambda r: {"five": r["five"] * 10}).sink_to(CollectSink("five"))
    graph = env.get_job_graph("routes")
    tagged = [op for v in graph for op in v.operators if op.chained_output_tags or op.network_output_tags]
    assert tagged and all(bool(op.network_output_tags) != chaining for op in tagged)
    result = env.execute("routes")
    assert sorted(r["x"] for r in CollectSink.rows(result, name="main")) == list(range(0, 50, 2))
    assert sorted(r["odd"] for r in CollectSink.rows(result, name="odd")) == list(range(1, 50, 2))
    assert sorted(r["five"] for r in CollectSink.rows(result, name="five")) == [10 * x for x in range(0, 50, 5)]
