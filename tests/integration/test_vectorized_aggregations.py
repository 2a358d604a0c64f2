"""Vectorized built-in aggregations on real multi-process clusters: exactly-once across stop, resume, rescale.

A keyed tumbling-window count (``aggregations.count()`` with ``KeyedWindowResult``)
and a rolling ``max_by("seq")`` run on 2 TaskExecutors with checkpoints; the
job is cancelled after a few completed checkpoints and resumed from the latest
one at another parallelism of the keyed operators. Every key's ``seq`` runs 0..N-1, so a window of
100 ms holds exactly 100 records: a lost record shows as 99, a duplicated one
as 101. Per key, what the resumed job emits must be a gap-free suffix of the
windows (and of the max_by records), each window exactly once.
"""

from __future__ import annotations

import collections

import pytest

from checkpointing import list_completed_checkpoints
from connectors import CollectSink, SequenceSource
from flinklike_spark import StreamExecutionEnvironment, WatermarkStrategy
from flinklike_spark._runtime.operators.vectorized_aggregation import vectorized_operator_class
from flinklike_spark.datastream import aggregations as agg
from flinklike_spark.datastream.window import Time, TumblingEventTimeWindows
from tests.support.checkpoint_jobs import checkpoint_config, run_and_cancel

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

NUM_KEYS = 12
RECORDS_PER_KEY = 3_000
WINDOW_MS = 100


def build(config: dict, *, rows_per_second: float | None) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment(config)
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner("seq")
    source = SequenceSource(num_keys=NUM_KEYS, records_per_key=RECORDS_PER_KEY, rows_per_second=rows_per_second)
    # The source keeps 2 readers: one reader of both splits would interleave their timestamps, and its
    # monotonous watermark would make records late. The keyed operators are what is rescaled.
    keyed = env.from_source(source, strategy, name="seq").uid("seq").set_parallelism(2).key_by("key")
    (
        keyed.window(TumblingEventTimeWindows.of(Time.milliseconds(WINDOW_MS)))
        .aggregate(agg.count(), agg.KeyedWindowResult("key"))
        .uid("window-count")
        .sink_to(CollectSink("windows"))
    )
    keyed.max_by("seq").uid("max-by").sink_to(CollectSink("max_by"))
    return env


def test_the_job_graph_runs_both_aggregations_vectorized(tmp_path):
    graph = build(checkpoint_config(str(tmp_path), "aligned"), rows_per_second=None).get_job_graph("plan")
    specs = [spec for vertex in graph.vertices.values() for spec in vertex.operators]
    vectorized = {spec.uid: vectorized_operator_class(spec) for spec in specs}
    assert vectorized["window-count"] is not None and vectorized["max-by"] is not None


@pytest.mark.parametrize(("mode", "new_parallelism"), [("aligned", 1), ("unaligned", 3)])
def test_exactly_once_across_stop_resume_and_rescale(tmp_path, mode, new_parallelism):
    directory = str(tmp_path / "checkpoints")
    job_id = run_and_cancel(build(checkpoint_config(directory, mode), rows_per_second=12_000), directory, checkpoints=3)
    assert list_completed_checkpoints(directory, job_id)
    config = checkpoint_config(directory, mode, new_parallelism) | {"execution.state-recovery.path": directory}
    result = build(config, rows_per_second=None).execute("resumed")

    windows = collections.defaultdict(list)
    for row in CollectSink.rows(result, name="windows"):
        assert row["count"] == WINDOW_MS, f"window {row} lost or duplicated records"
        assert row["window_end"] - row["window_start"] == WINDOW_MS
        windows[row["key"]].append(row["window_start"])
    assert sorted(windows) == list(range(NUM_KEYS))
    last_start = RECORDS_PER_KEY - WINDOW_MS
    for key, starts in windows.items():
        assert starts == sorted(starts), f"key {key}: windows out of order"
        assert starts == list(range(starts[0], last_start + 1, WINDOW_MS)), f"key {key}: a window lost or repeated"
        assert starts[0] > 0, f"key {key}: the resumed job started from scratch"

    seqs = collections.defaultdict(list)
    for row in CollectSink.rows(result, name="max_by"):
        seqs[row["key"]].append(row["seq"])
    for key in range(NUM_KEYS):
        got = seqs[key]
        assert got == list(range(got[0], RECORDS_PER_KEY)), f"key {key}: max_by lost, repeated or reordered records"
