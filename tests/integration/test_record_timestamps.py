"""Event timestamps travel with records, and records may be PyFlink Rows, tuples or typed values (issue 13
item 6), end to end over the network between TaskExecutor processes.

Every expectation is computed in plain Python from the input.
"""

from __future__ import annotations

import collections
import random

import pytest

from connectors import CollectSink
from flinklike_spark import (
    KeyedProcessFunction,
    ProcessFunction,
    Row,
    StreamExecutionEnvironment,
    TimestampAssigner,
    Types,
    WatermarkStrategy,
)
from flinklike_spark.datastream.output_tag import OutputTag
from flinklike_spark.datastream.window import Time, TumblingEventTimeWindows

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

ODD = OutputTag("odd")


def clicks(n=300, seed=7):
    rng = random.Random(seed)
    return [{"u": f"user{rng.randrange(4)}", "ts": 1_000 * i + rng.randrange(500), "v": i} for i in range(n)]


class StampWithTimestamp(KeyedProcessFunction):
    """Yields each record with ``ctx.timestamp()``; odd values also go to a side output."""

    def process_element(self, value, ctx):
        if value["v"] % 2:
            ctx.output(ODD, {"v": value["v"]})
        yield {"who": value["who"], "v": value["v"], "seen": ctx.timestamp()}


class SeenAt(ProcessFunction):
    def process_element(self, value, ctx):
        yield {**value, "seen": ctx.timestamp()}


class TimerEveryRecord(KeyedProcessFunction):
    """An event-time timer 10 ms after each record; the timer's output carries the timer's timestamp."""

    def process_element(self, value, ctx):
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 10)

    def on_timer(self, timestamp, ctx):
        yield {"who": ctx.get_current_key(), "fired": timestamp}


def env(parallelism=2):
    return StreamExecutionEnvironment.get_execution_environment(
        {"parallelism.default": parallelism, "local.number-taskmanager": 2}
    )


def test_timestamps_survive_renaming_maps_the_network_side_outputs_and_timers():
    data = clicks()
    e = env()
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner("ts")
    renamed = (
        e.from_collection(data, watermark_strategy=strategy)
        .map(lambda r: {"who": r["u"], "v": r["v"]})  # the timestamp field is gone
        .rebalance()
        .flat_map(lambda r: [r, r])
        .key_by("who")
    )
    stamped = renamed.process(StampWithTimestamp()).name("stamp")
    stamped.sink_to(CollectSink("main"))
    stamped.get_side_output(ODD).rebalance().process(SeenAt()).sink_to(CollectSink("odd"))
    renamed.process(TimerEveryRecord()).rebalance().process(SeenAt()).sink_to(CollectSink("timers"))
    result = e.execute("timestamps")

    ts_of = {r["v"]: r["ts"] for r in data}
    main = CollectSink.rows(result, name="main")
    assert sorted((r["v"], r["seen"]) for r in main) == sorted((v, ts) for v, ts in ts_of.items() for _ in (0, 1))
    odd = CollectSink.rows(result, name="odd")
    assert sorted((r["v"], r["seen"]) for r in odd) == sorted(
        (v, ts) for v, ts in ts_of.items() if v % 2 for _ in (0, 1)
    )
    timers = CollectSink.rows(result, name="timers")
    expected_timers = {(r["u"], r["ts"] + 10) for r in data}  # one timer per (key, timestamp)
    assert sorted((r["who"], r["fired"]) for r in timers) == sorted(expected_timers)
    assert all(r["seen"] == r["fired"] for r in timers)


def test_a_window_after_a_window_uses_the_first_windows_result_timestamps():
    """Window results carry ``window.max_timestamp()`` (as in Flink), so a second event-time window needs
    no new timestamp assigner."""
    data = clicks(400, seed=3)
    e = env()
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner("ts")
    per_user = (
        e.from_collection(data, watermark_strategy=strategy)
        .map(lambda r: {"user": r["u"], "n": 1})
        .key_by("user")
        .window(TumblingEventTimeWindows.of(Time.seconds(10)))
        .reduce(lambda a, b: {"user": a["user"], "n": a["n"] + b["n"]})
    )
    totals = per_user.window_all(TumblingEventTimeWindows.of(Time.seconds(30))).reduce(
        lambda a, b: {"user": "all", "n": a["n"] + b["n"]}
    )
    totals.process(SeenAt()).sink_to(CollectSink("totals"))
    result = e.execute("window after window")

    expected = collections.Counter(r["ts"] // 30_000 for r in data)
    rows = CollectSink.rows(result, name="totals")
    assert sorted((r["seen"] // 30_000, r["n"]) for r in rows) == sorted(expected.items())
    assert all(r["seen"] % 30_000 == 29_999 for r in rows)  # the outer window's max timestamp


class PreviousPlusOne(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return record_timestamp + 1


def test_a_timestamp_assigner_downstream_gets_the_record_timestamp():
    data = clicks(50)
    e = env(1)
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner("ts")
    (
        e.from_collection(data, watermark_strategy=strategy)
        .map(lambda r: {"v": r["v"]})
        .assign_timestamps_and_watermarks(
            WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(PreviousPlusOne())
        )
        .process(SeenAt())
        .sink_to(CollectSink("out"))
    )
    rows = CollectSink.rows(e.execute("reassigned"), name="out")
    assert sorted((r["v"], r["seen"]) for r in rows) == sorted((r["v"], r["ts"] + 1) for r in data)


class CountWords(KeyedProcessFunction):
    def process_element(self, value, ctx):
        yield Row(word=value.word, length=len(value.word))


def test_pyflink_word_count_with_tuples_rows_and_typed_values_runs_unchanged():
    lines = ["to be or not to be", "that is the question", "to be is to do"]
    e = env()
    counts = (
        e.from_collection(lines, type_info=Types.STRING())
        .flat_map(lambda line: line.split(), output_type=Types.STRING())
        .map(lambda word: (word, 1), output_type=Types.TUPLE([Types.STRING(), Types.INT()]))
        .key_by(lambda pair: pair[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
    )
    final = list(counts.execute_and_collect("word count"))
    expected = collections.Counter(word for line in lines for word in line.split())
    last = {}
    for word, count in final:  # tuples come back as tuples
        assert count > last.get(word, 0)
        last[word] = count
    assert last == dict(expected)
    assert all(type(pair) is tuple for pair in final)

    e = env()
    rows = (
        e.from_collection([Row(word=w) for line in lines for w in line.split()])
        .key_by(lambda row: row.word)
        .process(CountWords())
        .map(lambda row: Row(row.length, row["word"]), output_type=Types.ROW([Types.INT(), Types.STRING()]))
        .execute_and_collect("rows")
    )
    collected = list(rows)
    assert sorted((r[0], r[1]) for r in collected) == sorted((len(w), w) for line in lines for w in line.split())
    assert all(isinstance(r, Row) and r.get_field_names() == ["f0", "f1"] for r in collected)  # PyFlink's names


def test_pyflink_intro_example_with_rows_from_a_typed_collection():
    """PyFlink's "Intro to the DataStream API" example, only the imports changed."""
    e = env()
    ds = e.from_collection(
        collection=[(1, "aaa|bb"), (2, "bb|a"), (3, "aaa|a")], type_info=Types.ROW([Types.INT(), Types.STRING()])
    )

    def split(s):
        splits = s[1].split("|")
        for sp in splits:
            yield s[0], sp

    ds = (
        ds.map(lambda i: (i[0] + 1, i[1]))
        .flat_map(split)
        .key_by(lambda i: i[1])
        .reduce(lambda i, j: (i[0] + j[0], i[1]))
    )
    got = list(ds.execute_and_collect("intro"))

    running: dict[str, int] = {}
    expected = []
    for number, text in [(1, "aaa|bb"), (2, "bb|a"), (3, "aaa|a")]:
        for word in text.split("|"):
            running[word] = running.get(word, 0) + number + 1
            expected.append((running[word], word))
    assert sorted(got) == sorted(expected)
    for word in running:  # per key, in order
        assert [n for n, w in got if w == word] == [n for n, w in expected if w == word]

    e = env()
    named = e.from_collection(
        [(1, "aaa"), (2, "bb")], type_info=Types.ROW_NAMED(["id", "info"], [Types.INT(), Types.STRING()])
    )
    assert sorted(named.map(lambda r: Row(id=r.id * 10, info=r.info.upper())).execute_and_collect("named"),
                  key=lambda r: r.id) == [Row(id=10, info="AAA"), Row(id=20, info="BB")]  # fmt: skip

    e = env()
    sets = e.from_collection([{1, 2}, {3}, {4, 5}], type_info=Types.PICKLED_BYTE_ARRAY())
    grouped = sets.map(frozenset, output_type=Types.PICKLED_BYTE_ARRAY()).key_by(len, key_type=Types.INT())
    collected = list(grouped.execute_and_collect("pickled"))  # a keyed stream's: Row(f0=key, f1=record), as PyFlink
    assert all(row.f0 == len(row.f1) for row in collected), collected
    assert sorted((row.f1 for row in collected), key=min) == [{1, 2}, {3}, {4, 5}]
