"""Failover strategies' restart sets on several graph shapes, and the failure handler's decisions."""

from __future__ import annotations

from datetime import timedelta

import pytest

from flinklike_spark._runtime.graph.execution_graph import ExecutionGraph, ExecutionVertexID
from flinklike_spark._runtime.graph.job_graph import JobGraph, JobVertex, PartitionerKind, PartitionerSpec
from flinklike_spark._runtime.graph.regions import compute_pipelined_regions
from flinklike_spark._runtime.jobmaster.failover import (
    ExecutionFailureHandler,
    RestartPipelinedRegionFailoverStrategy,
    create_failover_strategy,
)
from flinklike_spark._runtime.jobmaster.restart_strategy import (
    FixedDelayConfig,
    NoRestartConfig,
    create_restart_strategy,
)
from flinklike_spark.config import FailoverStrategyType
from flinklike_spark.errors import (
    NonRecoverableError,
    NonRecoverableTaskError,
    NoResourceAvailableError,
    mark_non_recoverable,
)

FORWARD = PartitionerSpec(kind=PartitionerKind.FORWARD)
REBALANCE = PartitionerSpec(kind=PartitionerKind.REBALANCE)
HASH = PartitionerSpec(kind=PartitionerKind.HASH, key_field="k")
ERROR = RuntimeError("boom")


def vid(name: str, i: int) -> ExecutionVertexID:
    return ExecutionVertexID(job_vertex_id=name, subtask_index=i)


def execution_graph(vertices: dict[str, int], edges) -> ExecutionGraph:
    g = JobGraph(job_id="j", name="test")
    for name, parallelism in vertices.items():
        g.add_vertex(JobVertex(id=name, name=name.title(), parallelism=parallelism, operators=[name]))
    for source, target, partitioner in edges:
        g.connect(source, target, partitioner)
    return ExecutionGraph.from_job_graph(g)


def restart_set(graph: ExecutionGraph, kind: str, failed: ExecutionVertexID) -> set[str]:
    return {str(v) for v in create_failover_strategy(kind, graph).get_tasks_needing_restart(failed, ERROR)}


def test_forward_pipelines_restart_only_the_failed_subtask_index():
    graph = execution_graph({"src": 4, "map": 4, "sink": 4}, [("src", "map", FORWARD), ("map", "sink", FORWARD)])
    assert restart_set(graph, "region", vid("map", 2)) == {"src-2", "map-2", "sink-2"}
    assert restart_set(graph, "region", vid("src", 0)) == {"src-0", "map-0", "sink-0"}
    assert len(restart_set(graph, "full", vid("map", 2))) == 12


def test_all_to_all_restarts_everything_in_either_strategy():
    graph = execution_graph({"src": 2, "keyed": 3}, [("src", "keyed", HASH)])
    everything = {"src-0", "src-1", "keyed-0", "keyed-1", "keyed-2"}
    assert restart_set(graph, "region", vid("keyed", 1)) == everything
    assert restart_set(graph, "full", vid("src", 0)) == everything


def test_mixed_graph_restarts_the_connected_part_only():
    # one forward pipeline next to a keyed one: a failure in either leaves the other running
    graph = execution_graph(
        {"a": 2, "a_sink": 2, "b": 2, "b_keyed": 2},
        [("a", "a_sink", FORWARD), ("b", "b_keyed", REBALANCE)],
    )
    assert restart_set(graph, "region", vid("a_sink", 1)) == {"a-1", "a_sink-1"}
    assert restart_set(graph, "region", vid("b", 0)) == {"b-0", "b-1", "b_keyed-0", "b_keyed-1"}
    assert len(restart_set(graph, "full", vid("a", 0))) == 8


def test_forward_then_rebalance_is_one_region():
    graph = execution_graph({"src": 2, "map": 2, "sink": 2}, [("src", "map", FORWARD), ("map", "sink", REBALANCE)])
    assert restart_set(graph, "region", vid("src", 1)) == {"src-0", "src-1", "map-0", "map-1", "sink-0", "sink-1"}


def test_union_of_forward_inputs_joins_both_inputs_of_the_same_index():
    graph = execution_graph({"a": 3, "b": 3, "union": 3}, [("a", "union", FORWARD), ("b", "union", FORWARD)])
    assert restart_set(graph, "region", vid("a", 1)) == {"a-1", "b-1", "union-1"}
    assert restart_set(graph, "region", vid("union", 0)) == {"a-0", "b-0", "union-0"}


def test_union_of_a_forward_and_an_all_to_all_input_merges_everything():
    graph = execution_graph({"a": 2, "b": 2, "union": 2}, [("a", "union", FORWARD), ("b", "union", REBALANCE)])
    assert len(restart_set(graph, "region", vid("a", 0))) == 6


def test_consumer_regions_of_blocking_edges_restart_transitively():
    # Flink restarts the regions consuming the failed region's results (only blocking edges separate them)
    graph = execution_graph({"src": 2, "mid": 2, "end": 2}, [("src", "mid", FORWARD), ("mid", "end", FORWARD)])
    topology = compute_pipelined_regions(graph, is_pipelined=lambda edge: False)
    strategy = RestartPipelinedRegionFailoverStrategy(topology)
    restarted = {str(v) for v in strategy.get_tasks_needing_restart(vid("src", 1), ERROR)}
    assert restarted == {"src-1", "mid-1", "end-1"}
    restarted = {str(v) for v in strategy.get_tasks_needing_restart(vid("mid", 0), ERROR)}
    assert restarted == {"mid-0", "end-0"}


def test_unknown_strategy_type_is_rejected():
    graph = execution_graph({"src": 1}, [])
    with pytest.raises(ValueError, match="nearby"):
        create_failover_strategy("nearby", graph)
    assert isinstance(
        create_failover_strategy(FailoverStrategyType.REGION, graph), RestartPipelinedRegionFailoverStrategy
    )


_RESTART_TWICE = FixedDelayConfig(attempts=2, delay=timedelta(milliseconds=10))


def _handler(graph, restart_config=_RESTART_TWICE, kind="region"):
    return ExecutionFailureHandler(
        graph, create_failover_strategy(kind, graph), create_restart_strategy(restart_config), wall_clock=lambda: 0.0
    )


def test_handler_restarts_the_region_until_the_strategy_is_exhausted_then_names_every_cause():
    graph = execution_graph({"src": 2, "map": 2}, [("src", "map", FORWARD)])
    handler = _handler(graph)
    first = handler.get_failure_handling_result(vid("map", 1), RuntimeError("first"))
    assert first.can_restart and first.restart_delay == timedelta(milliseconds=10)
    assert {str(v) for v in first.vertices_to_restart} == {"src-1", "map-1"}
    assert handler.get_failure_handling_result(vid("src", 0), RuntimeError("second")).can_restart
    last = handler.get_failure_handling_result(vid("map", 0), RuntimeError("third"))
    assert not last.can_restart and not last.vertices_to_restart
    assert str(last.error) == "third"
    assert "FixedDelayRestartBackoffTimeStrategy" in last.reason
    assert all(word in last.reason for word in ("first", "second", "third"))
    assert handler.number_of_restarts == 2
    history = handler.exception_history
    assert [str(e.root_cause) for e in history] == ["first", "second", "third"]
    assert [e.will_restart for e in history] == [True, True, False]
    assert history[0].task == "Map (2/2)#0" and history[0].restarted == {"src-1", "map-1"}
    assert history[2].restarted == frozenset()


@pytest.mark.parametrize(
    "cause",
    [
        NonRecoverableError("stop it"),
        NonRecoverableTaskError("a task raised a non-recoverable error"),
        NoResourceAvailableError("no slot within slot.request.timeout"),
    ],
)
def test_unrecoverable_failures_fail_at_once_whatever_the_strategy(cause):
    graph = execution_graph({"src": 1}, [])
    handler = _handler(graph, FixedDelayConfig(attempts=100, delay=timedelta(0)))
    result = handler.get_failure_handling_result(vid("src", 0), cause)
    assert not result.can_restart
    assert "not recoverable" in result.reason and result.error is cause
    assert handler.number_of_restarts == 0


def test_user_types_marked_non_recoverable_and_their_chains_are_unrecoverable():
    @mark_non_recoverable
    class BadInput(ValueError):
        pass

    graph = execution_graph({"src": 1}, [])
    handler = _handler(graph, FixedDelayConfig(attempts=100, delay=timedelta(0)))
    assert not handler.get_failure_handling_result(vid("src", 0), BadInput("x")).can_restart
    try:
        try:
            raise BadInput("inner")
        except BadInput as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as outer:
        assert not handler.get_failure_handling_result(vid("src", 0), outer).can_restart
    assert handler.get_failure_handling_result(vid("src", 0), ValueError("plain")).can_restart


def test_no_restart_strategy_fails_the_first_failure():
    graph = execution_graph({"src": 1}, [])
    result = _handler(graph, NoRestartConfig()).get_failure_handling_result(vid("src", 0), ERROR)
    assert not result.can_restart and "NoRestartBackoffTimeStrategy" in result.reason


def test_global_failure_restarts_everything():
    graph = execution_graph({"src": 2, "map": 2}, [("src", "map", FORWARD)])
    handler = _handler(graph)
    result = handler.get_global_failure_handling_result(RuntimeError("restore failed"))
    assert result.global_failure and len(result.vertices_to_restart) == 4
    assert handler.exception_history[0].task is None


def test_failures_merged_into_a_pending_exponential_delay_attempt_are_not_new_restarts():
    from flinklike_spark._runtime.jobmaster.restart_strategy import ExponentialDelayConfig

    now = [0.0]
    graph = execution_graph({"a": 2}, [])
    config = ExponentialDelayConfig(initial_backoff=timedelta(seconds=1), jitter_factor=0.0)
    handler = ExecutionFailureHandler(
        graph, create_failover_strategy("region", graph), create_restart_strategy(config, clock=lambda: now[0])
    )
    assert handler.get_failure_handling_result(vid("a", 0), ERROR).can_restart
    now[0] = 0.5
    merged = handler.get_failure_handling_result(vid("a", 1), ERROR)
    assert merged.can_restart and merged.restart_delay == timedelta(seconds=0.5)
    assert handler.number_of_restarts == 1 and len(handler.exception_history) == 2
