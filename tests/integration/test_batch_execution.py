"""``execution.runtime-mode: batch`` (``set_runtime_mode(RuntimeExecutionMode.BATCH)``) gives Flink's batch
results: keyed rolling aggregations emit only each key's final value, nothing is late (no watermark
before the end of the input), no checkpoints are taken, and unbounded sources are refused."""

from __future__ import annotations

from collections import Counter

import pytest

from connectors import CollectSink, SequenceSource
from flinklike_spark import ConfigurationError, RuntimeExecutionMode, StreamExecutionEnvironment, Types
from flinklike_spark.common import Duration, TimestampAssigner, WatermarkStrategy
from flinklike_spark.datastream.window import TumblingEventTimeWindows

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


class SecondField(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value[1]


LINES = ["to be or not to be", "that is the question", "to die to sleep", "no more and by a sleep"]


def word_count(mode: RuntimeExecutionMode) -> list:
    env = StreamExecutionEnvironment.get_execution_environment({"flinklike.local.taskmanager-mode": "thread"})
    env.set_runtime_mode(mode)
    env.set_parallelism(2)
    (env.from_collection(LINES)
        .flat_map(lambda line: line.split())
        .map(lambda word: (word, 1), output_type=Types.TUPLE([Types.STRING(), Types.INT()]))
        .key_by(lambda pair: pair[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .sink_to(CollectSink("counts")))  # fmt: skip
    return CollectSink.rows(env.execute("word count"))


def test_batch_word_count_emits_each_words_final_count_once_streaming_every_update():
    expected = Counter(word for line in LINES for word in line.split())
    batch = word_count(RuntimeExecutionMode.BATCH)
    assert sorted(batch) == sorted(expected.items())
    streaming = word_count(RuntimeExecutionMode.STREAMING)
    assert len(streaming) == sum(expected.values())  # one rolling update per word
    assert {word: max(n for w, n in streaming if w == word) for word in expected} == dict(expected)


def test_in_batch_mode_nothing_is_late():
    def windowed(mode: RuntimeExecutionMode) -> list:
        env = StreamExecutionEnvironment.get_execution_environment({"flinklike.local.taskmanager-mode": "thread"})
        env.set_runtime_mode(mode)
        strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(SecondField())
        events = [("a", 1_000), ("a", 12_000), ("a", 2_000)]  # the last is late for a streaming watermark
        (env.from_collection(events, type_info=Types.TUPLE([Types.STRING(), Types.LONG()]), batch_size=1)
            .assign_timestamps_and_watermarks(strategy)
            .key_by(lambda e: e[0])
            .window(TumblingEventTimeWindows.of(Duration.of_seconds(10)))
            .reduce(lambda x, y: (x[0], x[1] + y[1]))
            .sink_to(CollectSink("windows")))  # fmt: skip
        return sorted(CollectSink.rows(env.execute("windows")))

    assert windowed(RuntimeExecutionMode.BATCH) == [("a", 3_000), ("a", 12_000)]
    assert windowed(RuntimeExecutionMode.STREAMING) == [("a", 1_000), ("a", 12_000)]  # 2_000 dropped as late


def test_batch_mode_refuses_an_unbounded_source_naming_it(tmp_path):
    env = StreamExecutionEnvironment.get_execution_environment({
        "flinklike.local.taskmanager-mode": "thread", "execution.runtime-mode": "batch",
        "execution.checkpointing.interval": "100 ms", "execution.checkpointing.dir": str(tmp_path),
    })  # fmt: skip
    env.from_source(SequenceSource(num_keys=1, records_per_key=None), name="endless").sink_to(CollectSink("out"))
    with pytest.raises(ConfigurationError, match=r"batch needs bounded sources; Source: endless \(SequenceSource\)"):
        env.execute("unbounded")


def test_batch_mode_takes_no_checkpoints(tmp_path):
    env = StreamExecutionEnvironment.get_execution_environment({
        "flinklike.local.taskmanager-mode": "thread", "execution.runtime-mode": "batch",
        "execution.checkpointing.interval": "10 ms", "execution.checkpointing.dir": str(tmp_path / "ck"),
    })  # fmt: skip
    env.from_source(SequenceSource(num_keys=3, records_per_key=2000), name="seq").key_by("key").sum("seq").sink_to(
        CollectSink("sums")
    )
    rows = CollectSink.rows(env.execute("no checkpoints"))
    assert sorted(r["key"] for r in rows) == [0, 1, 2]  # one final sum per key
    assert not (tmp_path / "ck").exists() or not any((tmp_path / "ck").iterdir())
