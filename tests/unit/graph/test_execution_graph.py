"""ExecutionGraph: expansion of a JobGraph, attempts, and the input/output wiring."""

from __future__ import annotations

import pytest

from flinklike_spark._runtime.graph.execution_graph import (
    ExecutionAttemptID,
    ExecutionGraph,
    ExecutionVertexID,
    IntermediateResultPartitionID,
)
from flinklike_spark._runtime.graph.execution_state import ExecutionState, JobStatus
from flinklike_spark._runtime.graph.job_graph import (
    DistributionPattern,
    JobGraph,
    JobVertex,
    PartitionerKind,
    PartitionerSpec,
)
from flinklike_spark.errors import IllegalStateTransition

FORWARD = PartitionerSpec(kind=PartitionerKind.FORWARD)
REBALANCE = PartitionerSpec(kind=PartitionerKind.REBALANCE)
HASH = PartitionerSpec(kind=PartitionerKind.HASH, key_field="k")


def vid(name: str, i: int) -> ExecutionVertexID:
    return ExecutionVertexID(job_vertex_id=name, subtask_index=i)


def pid(name: str, i: int, out: int = 0) -> IntermediateResultPartitionID:
    return IntermediateResultPartitionID(producer=vid(name, i), output_index=out)


def pipeline() -> JobGraph:
    """src(2) -forward-> map(2) -hash-> sink(3)."""
    g = JobGraph(job_id="j1", name="pipeline")
    g.add_vertex(JobVertex(id="src", name="Source", parallelism=2, operators=["src"], is_source=True))
    g.add_vertex(JobVertex(id="map", name="Map", parallelism=2, operators=["map"]))
    g.add_vertex(JobVertex(id="sink", name="Sink", parallelism=3, operators=["sink"]))
    g.connect("src", "map", FORWARD)
    g.connect("map", "sink", HASH)
    return g


def two_inputs() -> JobGraph:
    """a(2) -forward-> join(2) <-rebalance- b(3); b also -forward-> side(3)."""
    g = JobGraph(job_id="j2", name="two inputs")
    g.add_vertex(JobVertex(id="a", name="A", parallelism=2, is_source=True))
    g.add_vertex(JobVertex(id="b", name="B", parallelism=3, is_source=True))
    g.add_vertex(JobVertex(id="join", name="Join", parallelism=2))
    g.add_vertex(JobVertex(id="side", name="Side", parallelism=3))
    g.connect("a", "join", FORWARD)
    g.connect("b", "join", REBALANCE)
    g.connect("b", "side", FORWARD)
    return g


def test_expansion_one_vertex_per_subtask_in_topological_order():
    eg = ExecutionGraph.from_job_graph(pipeline())
    assert [str(v) for v in eg.vertex_ids()] == ["src-0", "src-1", "map-0", "map-1", "sink-0", "sink-1", "sink-2"]
    assert eg.job_status is JobStatus.CREATED
    assert eg.get_job_vertex("sink").parallelism == 3
    assert eg.get_vertex(vid("sink", 2)).name == "Sink (3/3)"
    for vertex in eg.vertices():
        execution = vertex.current_execution
        assert execution.state is ExecutionState.CREATED
        assert execution.attempt_number == 0
        assert execution.vertex_id == vertex.id


def test_unknown_vertex_lookups_name_the_bad_value():
    eg = ExecutionGraph.from_job_graph(pipeline())
    with pytest.raises(KeyError, match="nope"):
        eg.get_vertex(vid("nope", 0))
    with pytest.raises(KeyError, match="sink-5"):
        eg.get_vertex(vid("sink", 5))


def test_attempt_id_string_and_uniqueness():
    a = ExecutionAttemptID(job_vertex_id="map", subtask_index=1, attempt_number=2, token="ab12cd34")
    assert str(a) == "map-1#2/ab12"
    assert a.full_id == "map-1#2/ab12cd34"
    assert a.execution_vertex_id == vid("map", 1)
    b = ExecutionAttemptID(job_vertex_id="map", subtask_index=1, attempt_number=2)
    c = ExecutionAttemptID(job_vertex_id="map", subtask_index=1, attempt_number=2)
    assert b != c and b.token != c.token
    with pytest.raises(ValueError, match="-1"):
        ExecutionAttemptID(job_vertex_id="map", subtask_index=-1, attempt_number=0)


@pytest.mark.parametrize("vertex", ["map", "my-op#2/x", "a-b"])
def test_attempt_id_full_id_round_trips(vertex):
    attempt = ExecutionAttemptID(job_vertex_id=vertex, subtask_index=3, attempt_number=7)
    assert ExecutionAttemptID.from_full_id(attempt.full_id) == attempt


@pytest.mark.parametrize("bad", ["", "map-1#2", "map#2/ab", "map-x#2/ab", "map-1#-1/ab"])
def test_attempt_id_from_full_id_rejects_garbage(bad):
    with pytest.raises(ValueError):
        ExecutionAttemptID.from_full_id(bad)


def test_pointwise_wiring():
    eg = ExecutionGraph.from_job_graph(pipeline())
    for i in range(2):
        (partition,) = eg.result_partitions(vid("src", i))
        assert partition.partition_id == pid("src", i)
        assert partition.num_subpartitions == 1
        assert partition.consumers == (vid("map", i),)
        (gate,) = eg.input_gates(vid("map", i))
        assert gate.input_index == 0
        assert gate.distribution_pattern is DistributionPattern.POINTWISE
        assert [(c.producer, c.partition_id, c.subpartition_index) for c in gate.channels] == [
            (vid("src", i), pid("src", i), 0)
        ]
    assert eg.input_gates(vid("src", 0)) == ()


def test_all_to_all_wiring():
    eg = ExecutionGraph.from_job_graph(pipeline())
    for i in range(2):
        (partition,) = eg.result_partitions(vid("map", i))
        assert partition.num_subpartitions == 3
        assert partition.consumers == tuple(vid("sink", j) for j in range(3))
        assert partition.partitioner.kind is PartitionerKind.HASH
    for j in range(3):
        (gate,) = eg.input_gates(vid("sink", j))
        assert gate.distribution_pattern is DistributionPattern.ALL_TO_ALL
        assert [(c.producer, c.partition_id, c.subpartition_index) for c in gate.channels] == [
            (vid("map", 0), pid("map", 0), j),
            (vid("map", 1), pid("map", 1), j),
        ]
    assert eg.result_partitions(vid("sink", 0)) == ()


def test_multiple_inputs_and_outputs():
    eg = ExecutionGraph.from_job_graph(two_inputs())
    gates = eg.input_gates(vid("join", 1))
    assert [g.input_index for g in gates] == [0, 1]
    assert [g.producer_job_vertex_id for g in gates] == ["a", "b"]
    assert [c.producer for c in gates[0].channels] == [vid("a", 1)]
    assert [(c.producer, c.subpartition_index) for c in gates[1].channels] == [(vid("b", i), 1) for i in range(3)]
    partitions = eg.result_partitions(vid("b", 2))
    assert [p.partition_id for p in partitions] == [pid("b", 2, 0), pid("b", 2, 1)]
    assert [p.num_subpartitions for p in partitions] == [2, 1]
    assert [p.consumer_job_vertex_id for p in partitions] == ["join", "side"]
    # the consumer's channel names the partition of the right output edge of the producer
    (side_gate,) = eg.input_gates(vid("side", 2))
    assert side_gate.channels[0].partition_id == pid("b", 2, 1)


def test_consumers_and_producers():
    eg = ExecutionGraph.from_job_graph(two_inputs())
    assert eg.get_consumers(vid("b", 0)) == [vid("join", 0), vid("join", 1), vid("side", 0)]
    assert eg.get_consumers(vid("a", 1)) == [vid("join", 1)]
    assert eg.get_producers(vid("join", 0)) == [vid("a", 0), vid("b", 0), vid("b", 1), vid("b", 2)]
    assert eg.get_producers(vid("a", 0)) == []
    assert eg.get_consumers(vid("side", 0)) == []


def test_reset_for_new_execution_creates_next_attempt():
    eg = ExecutionGraph.from_job_graph(pipeline())
    vertex = eg.get_vertex(vid("map", 0))
    first = vertex.current_execution
    with pytest.raises(IllegalStateTransition, match="CREATED"):
        vertex.reset_for_new_execution()
    first.transition(ExecutionState.SCHEDULED)
    assert first.mark_failed(RuntimeError("boom"))
    assert not first.mark_failed(RuntimeError("again"))
    assert str(first.failure_cause) == "boom"
    second = vertex.reset_for_new_execution()
    assert vertex.current_execution is second
    assert second.attempt_number == 1 and second.state is ExecutionState.CREATED
    assert vertex.prior_executions == (first,)
    assert eg.find_current_execution(second.attempt_id) is second
    assert eg.find_current_execution(first.attempt_id) is None
    unknown = ExecutionAttemptID(job_vertex_id="zzz", subtask_index=0, attempt_number=0)
    assert eg.find_current_execution(unknown) is None


def test_execution_timestamps_and_slot_assignment():
    ticks = iter(range(100))
    eg = ExecutionGraph.from_job_graph(pipeline(), clock=lambda: float(next(ticks)))
    execution = eg.get_vertex(vid("src", 0)).current_execution
    with pytest.raises(IllegalStateTransition, match="SCHEDULED"):
        execution.assign_slot("slot-1")
    execution.transition(ExecutionState.SCHEDULED)
    execution.assign_slot("slot-1")
    with pytest.raises(IllegalStateTransition, match="slot-1"):
        execution.assign_slot("slot-2")
    execution.transition(ExecutionState.DEPLOYING)
    stamps = execution.state_timestamps
    assert list(stamps) == [ExecutionState.CREATED, ExecutionState.SCHEDULED, ExecutionState.DEPLOYING]
    assert stamps[ExecutionState.CREATED] < stamps[ExecutionState.SCHEDULED] < stamps[ExecutionState.DEPLOYING]
    assert execution.take_slot() == "slot-1"
    assert execution.take_slot() is None


def test_job_status_transitions_are_checked():
    eg = ExecutionGraph.from_job_graph(pipeline())
    eg.transition_job_status(JobStatus.RUNNING)
    with pytest.raises(IllegalStateTransition, match="RUNNING -> CREATED"):
        eg.transition_job_status(JobStatus.CREATED)
    assert eg.job_status is JobStatus.RUNNING
    assert [s for _, s in eg.job_status_history] == [JobStatus.CREATED, JobStatus.RUNNING]
