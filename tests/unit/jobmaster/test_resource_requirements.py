"""Resource requirements (FLIP-291's JSON) checked against a job graph, and a job graph at a new parallelism."""

from __future__ import annotations

import pytest

from flinklike_spark._runtime.graph.job_graph import JobGraph, JobVertex, PartitionerKind, PartitionerSpec
from flinklike_spark._runtime.jobmaster.resource_requirements import JobResourceRequirements, ParallelismBounds
from flinklike_spark.errors import RescaleRefusedError

FORWARD, REBALANCE = PartitionerSpec(kind=PartitionerKind.FORWARD), PartitionerSpec(kind=PartitionerKind.REBALANCE)
HASH = PartitionerSpec(kind=PartitionerKind.HASH, key_field="key")


def graph() -> JobGraph:
    """src(2) -forward-> map(2) -hash-> sink(3), map -rebalance-> side(1); sink's max parallelism is 4."""
    g = JobGraph(job_id="j", name="requirements")
    g.add_vertex(JobVertex(id="src", name="Source", parallelism=2, operators=["src"], is_source=True))
    g.add_vertex(JobVertex(id="map", name="Map", parallelism=2, operators=["map"]))
    g.add_vertex(JobVertex(id="sink", name="Sink", parallelism=3, max_parallelism=4, operators=["sink"]))
    g.add_vertex(JobVertex(id="side", name="Side", parallelism=1, operators=["side"]))
    g.connect("src", "map", FORWARD)
    g.connect("map", "sink", HASH)
    g.connect("map", "side", REBALANCE)
    return g


def body(**bounds: tuple[int, int]) -> dict:
    return {v: {"parallelism": {"lowerBound": lo, "upperBound": hi}} for v, (lo, hi) in bounds.items()}


def test_a_submitted_job_is_bounded_by_one_and_its_parallelism_in_flip_291_json():
    requirements = JobResourceRequirements.of(graph())
    assert requirements.to_json() == body(src=(1, 2), map=(1, 2), sink=(1, 3), side=(1, 1))
    assert JobResourceRequirements.from_json(requirements.to_json(), graph()) == requirements


def test_each_vertex_runs_at_its_upper_bound_capped_by_the_slots():
    requirements = JobResourceRequirements.from_json(body(src=(1, 4), map=(1, 4), sink=(2, 4), side=(1, 1)), graph())
    assert requirements.parallelism_for(8) == {"src": 4, "map": 4, "sink": 4, "side": 1}
    assert requirements.parallelism_for(3) == {"src": 3, "map": 3, "sink": 3, "side": 1}
    with pytest.raises(
        RescaleRefusedError, match=r"has 1 slots for this job, fewer than the lower bounds \{'sink': 2\}"
    ):
        requirements.parallelism_for(1)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ([1, 2], r"must be a JSON object by vertex id, got \[1, 2\]"),
        (body(src=(1, 2), map=(1, 2), sink=(1, 3)), r"unknown \[\], missing \['side'\]"),
        (body(src=(1, 2), map=(1, 2), sink=(1, 3), side=(1, 1), extra=(1, 1)), r"unknown \['extra'\], missing \[\]"),
        (body(src=(1, 2), map=(1, 2), sink=(1, 5), side=(1, 1)), r"sink: bounds lowerBound=1, upperBound=5 .* <= 4"),
        (body(src=(0, 2), map=(0, 2), sink=(1, 3), side=(1, 1)), r"src: bounds lowerBound=0, upperBound=2"),
        (body(src=(2, 1), map=(2, 1), sink=(1, 3), side=(1, 1)), r"src: bounds lowerBound=2, upperBound=1"),
        (body(src=(1, 2), map=(1, 3), sink=(1, 3), side=(1, 1)), r"src and map are joined by a forward edge"),
        ({**body(src=(1, 2), map=(1, 2), sink=(1, 3)), "side": {"parallelism": 2}}, r"side: expected \{'parallelism'"),
        (
            {
                **body(src=(1, 2), map=(1, 2), sink=(1, 3)),
                "side": {"parallelism": {"lowerBound": True, "upperBound": 1}},
            },
            r"side: bounds lowerBound=True",
        ),
    ],
    ids=["not-an-object", "missing", "unknown", "above-max", "zero", "crossed", "forward", "shape", "bool"],
)
def test_requirements_the_job_cannot_meet_are_refused_naming_the_value(bad, message):
    with pytest.raises(RescaleRefusedError, match=message):
        JobResourceRequirements.from_json(bad, graph())


def test_a_graph_at_a_new_parallelism_keeps_its_id_operators_and_edges_in_order():
    original = graph()
    rescaled = original.with_parallelism({"src": 4, "map": 4, "sink": 2})
    assert rescaled.job_id == original.job_id and rescaled.fingerprint() == original.fingerprint()
    assert {v.id: v.parallelism for v in rescaled} == {"src": 4, "map": 4, "sink": 2, "side": 1}
    assert {v.id: v.parallelism for v in original} == {"src": 2, "map": 2, "sink": 3, "side": 1}  # untouched
    for old, new in zip(original, rescaled, strict=True):
        assert new.operators == old.operators and new.max_parallelism == old.max_parallelism
        assert [(e.source_id, e.target_id, e.partitioner.kind, e.input_index) for e in new.outputs] == [
            (e.source_id, e.target_id, e.partitioner.kind, e.input_index) for e in old.outputs
        ]
        assert [id(e) for e in new.inputs] == [id(e) for t in rescaled for e in t.outputs if e.target_id == new.id]
    with pytest.raises(ValueError, match="forward edge 'Source' -> 'Map' needs equal parallelism, got 3 and 2"):
        original.with_parallelism({"src": 3})
    assert ParallelismBounds(1, 2).to_json() == {"parallelism": {"lowerBound": 1, "upperBound": 2}}
