"""Pipelined regions: forward edges keep per-subtask regions, all-to-all edges merge."""

from __future__ import annotations

import pytest

from flinklike_spark._runtime.graph.execution_graph import ExecutionGraph, ExecutionVertexID
from flinklike_spark._runtime.graph.job_graph import JobGraph, JobVertex, PartitionerKind, PartitionerSpec
from flinklike_spark._runtime.graph.regions import PipelinedRegion, compute_pipelined_regions

FORWARD = PartitionerSpec(kind=PartitionerKind.FORWARD)
REBALANCE = PartitionerSpec(kind=PartitionerKind.REBALANCE)
HASH = PartitionerSpec(kind=PartitionerKind.HASH, key_field="k")


def vid(name: str, i: int) -> ExecutionVertexID:
    return ExecutionVertexID(job_vertex_id=name, subtask_index=i)


def graph(vertices: dict[str, int], edges: list[tuple[str, str, PartitionerSpec]]) -> JobGraph:
    g = JobGraph(job_id="j", name="test")
    for name, parallelism in vertices.items():
        g.add_vertex(JobVertex(id=name, name=name.title(), parallelism=parallelism, operators=[name]))
    for source, target, partitioner in edges:
        g.connect(source, target, partitioner)
    return g


def members(topology) -> list[set[str]]:
    return [{str(v) for v in region.vertices} for region in topology]


def test_pointwise_chain_keeps_one_region_per_subtask():
    g = graph({"src": 3, "map": 3, "sink": 3}, [("src", "map", FORWARD), ("map", "sink", FORWARD)])
    topology = compute_pipelined_regions(g)
    assert len(topology) == 3
    assert members(topology) == [{f"src-{i}", f"map-{i}", f"sink-{i}"} for i in range(3)]
    assert [r.id for r in topology] == [0, 1, 2]
    assert topology.region_of(vid("map", 1)) is topology.regions[1]


def test_key_by_merges_everything():
    g = graph({"src": 2, "sink": 3}, [("src", "sink", HASH)])
    topology = compute_pipelined_regions(g)
    assert members(topology) == [{"src-0", "src-1", "sink-0", "sink-1", "sink-2"}]


def test_forward_then_rebalance_is_one_region():
    g = graph(
        {"src": 2, "map": 2, "sink": 3, "post": 3},
        [("src", "map", FORWARD), ("map", "sink", REBALANCE), ("sink", "post", FORWARD)],
    )
    topology = compute_pipelined_regions(g)
    assert len(topology) == 1
    assert len(topology.regions[0]) == 10


def test_union_of_two_pointwise_pipelines_joins_by_subtask_index():
    g = graph({"a": 2, "b": 2, "union": 2, "sink": 2}, [
        ("a", "union", FORWARD), ("b", "union", FORWARD), ("union", "sink", FORWARD),
    ])  # fmt: skip
    topology = compute_pipelined_regions(g)
    assert members(topology) == [{f"a-{i}", f"b-{i}", f"union-{i}", f"sink-{i}"} for i in range(2)]


def test_mixed_graph():
    g = graph(
        {"src": 2, "map": 2, "agg": 2, "sink": 2, "x": 2, "y": 2},
        [("src", "map", FORWARD), ("map", "agg", HASH), ("agg", "sink", FORWARD), ("x", "y", FORWARD)],
    )
    topology = compute_pipelined_regions(g)
    assert members(topology) == [
        {f"{v}-{i}" for v in ("src", "map", "agg", "sink") for i in range(2)},
        {"x-0", "y-0"},
        {"x-1", "y-1"},
    ]
    assert topology.region_of(vid("y", 1)).id == 2
    assert vid("x", 1) in topology.region_of(vid("y", 1))
    with pytest.raises(KeyError, match="nope-0"):
        topology.region_of(vid("nope", 0))


def test_execution_graph_and_job_graph_give_the_same_stable_regions():
    def build():
        return graph({"s": 2, "m": 2, "k": 2}, [("s", "m", FORWARD), ("m", "k", FORWARD)])

    from_job = compute_pipelined_regions(build())
    from_execution = compute_pipelined_regions(ExecutionGraph.from_job_graph(build()))
    assert from_job.regions == from_execution.regions
    assert from_job.regions[0] == PipelinedRegion(id=0, vertices=frozenset({vid("s", 0), vid("m", 0), vid("k", 0)}))


def test_consumer_regions():
    g = graph({"a": 2, "b": 2, "c": 2}, [("a", "b", FORWARD), ("b", "c", REBALANCE)])
    pipelined = compute_pipelined_regions(g)
    assert len(pipelined) == 1
    assert pipelined.consumer_regions(pipelined.regions[0]) == ()

    # treat the rebalance edge as blocking: each c subtask is its own region and consumes from both b regions
    blocking = compute_pipelined_regions(g, is_pipelined=lambda e: e.partitioner.kind is not PartitionerKind.REBALANCE)
    assert members(blocking) == [{"a-0", "b-0"}, {"a-1", "b-1"}, {"c-0"}, {"c-1"}]
    c_regions = (blocking.region_of(vid("c", 0)), blocking.region_of(vid("c", 1)))
    assert blocking.consumer_regions(blocking.regions[0]) == c_regions
    assert blocking.consumer_regions(blocking.regions[1]) == c_regions
    assert blocking.consumer_regions(c_regions[0]) == ()


def test_rejects_other_inputs():
    with pytest.raises(TypeError, match="dict"):
        compute_pipelined_regions({})
