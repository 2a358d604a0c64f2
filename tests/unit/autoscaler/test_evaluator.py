"""The autoscaler's rules (FLIP-271) on window averages: thresholds, factors, bounds, key groups, forward edges."""

from __future__ import annotations

import math

import pytest

from flinklike_spark._runtime.autoscaler.evaluator import VertexRates, VertexTopology, evaluate, key_group_aligned
from flinklike_spark._runtime.autoscaler.metric_window import MetricWindow, SubtaskCounters, sample_vertex
from flinklike_spark.config import Configuration

pytestmark = pytest.mark.timeout(30)


def options(**values):
    return Configuration({"job.autoscaler.catch-up.duration": "100s", "job.autoscaler.restart.time": "0s",
                          **values}).autoscaler  # fmt: skip


def pipeline(source_p=2, work_p=2, max_parallelism=128):
    return [
        VertexTopology("src", source_p, max_parallelism, True),
        VertexTopology("work", work_p, max_parallelism, False, inputs=("src",)),
    ]


def test_a_vertex_that_cannot_keep_up_is_scaled_to_the_target_utilization():
    # the source reads 1,000 rows/s and its backlog grows by 2,000/s: 3,000 rows/s arrive.
    # work processes 1,000 rows/s while busy all the time: it needs 3,000 / 0.7 = 4,286 rows/s, so 2 -> 9,
    # then up to 10, the next divisor of the max parallelism 100 (key groups spread evenly).
    rates = {"src": VertexRates(1_000, 1_000, 0.3, backlog=0, backlog_growth=2_000),
             "work": VertexRates(1_000, 1_000, 1.0)}  # fmt: skip
    summary = evaluate(pipeline(max_parallelism=100), rates, options())
    assert summary["work"].target_rate == pytest.approx(3_000)
    assert summary["work"].true_processing_rate == pytest.approx(1_000)
    assert math.ceil(2 * 3_000 / 0.7 / 1_000) == 9
    assert summary["work"].new_parallelism == 10
    # the source would read 3,333 rows/s busy all the time: above the 3,000 it needs at utilization 0.7 + 0.3
    assert summary["src"].scale_up_threshold == pytest.approx(3_000)
    assert summary["src"].new_parallelism == 2


def test_the_source_backlog_is_caught_up_within_the_catch_up_duration():
    rates = {"src": VertexRates(1_000, 1_000, 0.5, backlog=50_000, backlog_growth=0),
             "work": VertexRates(1_000, 1_000, 0.5)}  # fmt: skip
    summary = evaluate(pipeline(), rates, options())
    assert summary["work"].catch_up_rate == pytest.approx(500)  # 50,000 rows within 100 s
    wanted = 1_000 / 0.7 + 500  # 1,929 rows/s; work does 2,000 when busy: inside [up, down]? up = 1000/1 + 500
    assert summary["work"].scale_up_threshold == pytest.approx(1_500)
    assert summary["work"].new_parallelism == 2  # 2,000 >= 1,500 and <= (1000/0.4 + 500): kept
    assert wanted < 2_000


def test_utilization_within_the_boundary_keeps_the_parallelism():
    rates = {"src": VertexRates(1_000, 1_000, 0.7), "work": VertexRates(1_000, 1_000, 0.7)}
    summary = evaluate(pipeline(), rates, options())
    assert {v: s.new_parallelism for v, s in summary.items()} == {"src": 2, "work": 2}


def test_an_idle_job_scales_down_by_at_most_the_max_factor_and_not_below_the_minimum():
    rates = {"src": VertexRates(100, 100, 0.01), "work": VertexRates(100, 100, 0.01)}
    summary = evaluate(pipeline(10, 10), rates, options())
    assert summary["work"].new_parallelism == 4  # 10 * (1 - 0.6), not 1
    summary = evaluate(pipeline(10, 10, 90), rates, options(**{"job.autoscaler.vertex.min-parallelism": "6"}))
    assert summary["work"].new_parallelism == 6


def test_a_scale_up_is_capped_by_the_factor_and_the_vertex_maxima():
    rates = {"src": VertexRates(1_000, 1_000, 0.1, backlog_growth=100_000), "work": VertexRates(1_000, 1_000, 1.0)}
    assert evaluate(pipeline(), rates, options(**{"job.autoscaler.scale-up.max-factor": "1.0"}))[
        "work"].new_parallelism == 4  # fmt: skip
    assert evaluate(pipeline(), rates, options(**{"job.autoscaler.vertex.max-parallelism": "5"}))[
        "work"].new_parallelism == 5  # fmt: skip
    assert evaluate(pipeline(max_parallelism=8), rates, options())["work"].new_parallelism == 8


def test_parallelism_moves_up_to_a_divisor_of_the_max_parallelism():
    assert key_group_aligned(5, 128) == 8
    assert key_group_aligned(9, 128) == 16
    assert key_group_aligned(7, 10) == 7  # no divisor between 7 and 5: kept
    assert key_group_aligned(3, 12) == 3


def test_a_downstream_target_follows_its_inputs_output_ratio():
    topology = [*pipeline(), VertexTopology("sink", 2, 128, False, inputs=("work",))]
    rates = {"src": VertexRates(1_000, 1_000, 0.7), "work": VertexRates(1_000, 100, 0.7),
             "sink": VertexRates(100, 100, 0.07)}  # fmt: skip
    summary = evaluate(topology, rates, options())
    assert summary["sink"].target_rate == pytest.approx(100)


def test_forward_joined_vertices_keep_one_parallelism():
    topology = [VertexTopology("src", 2, 100, True, forward_peers=("work",)),
                VertexTopology("work", 2, 100, False, inputs=("src",), forward_peers=("src",))]  # fmt: skip
    rates = {"src": VertexRates(1_000, 1_000, 0.1, backlog_growth=2_000), "work": VertexRates(1_000, 1_000, 1.0)}
    summary = evaluate(topology, rates, options())
    assert summary["src"].new_parallelism == summary["work"].new_parallelism == 10


def counters(uptime, records_in, busy, backlog=0.0, records_out=None):
    return SubtaskCounters(uptime, records_in, records_in if records_out is None else records_out, busy, backlog)


def test_the_window_takes_rates_from_counter_differences_and_measures_backlog_growth():
    now = [0.0]
    window = MetricWindow(10.0, clock=lambda: now[0])
    for t, backlog in [(0, 0), (5, 500), (10, 1_000)]:
        now[0] = t
        # subtask a: 100 rows/s, busy half the time; b: 300 rows/s, busy 90% (reported 2 s late: uptime lags)
        window.add({"src": {"a": counters(t + 3, 100 * (t + 3), 0.5 * (t + 3), backlog),
                            "b": counters(max(0, t - 2), 300 * max(0, t - 2), 0.9 * max(0, t - 2))}})  # fmt: skip
    assert window.full()
    rates = window.averages()["src"]
    assert rates.records_in == pytest.approx(400) and rates.busy == pytest.approx(0.9)
    assert rates.backlog == 1_000 and rates.backlog_growth == pytest.approx(100)
    now[0] = 30  # a new attempt (a restart) replaces b: its counters start again
    window.add({"src": {"a": counters(33, 3_300, 16.5), "c": counters(1, 50, 0.2)}})
    now[0] = 31
    window.add({"src": {"a": counters(34, 3_400, 17.0), "c": counters(2, 100, 0.4)}})
    rates = window.averages()["src"]
    assert rates.records_in == pytest.approx(100 + 50) and rates.busy == pytest.approx(0.5)
    window.clear()
    assert not window.full()


def test_a_sample_needs_every_subtask_and_counts_busy_as_neither_idle_nor_backpressured():
    raw = {"uptime_seconds": 10.0, "records_in": 100, "records_out": 90, "idle_seconds": 2.0,
           "backpressured_seconds": 3.0, "pending_records": 7}  # fmt: skip
    assert sample_vertex([("a", raw)]) == {"a": SubtaskCounters(10.0, 100.0, 90.0, 5.0, 7.0)}
    assert sample_vertex([("a", raw), ("b", None)]) is None
