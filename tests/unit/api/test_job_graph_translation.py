import pyarrow as pa
import pytest

from connectors import CollectSink, SequenceSource
from flinklike_spark import KeyedProcessFunction, StreamExecutionEnvironment
from flinklike_spark._runtime.graph.job_graph import DistributionPattern, PartitionerKind


class Noop(KeyedProcessFunction):
    def process_element(self, value, ctx):
        return None


def env(parallelism=2):
    return StreamExecutionEnvironment.get_execution_environment({"parallelism.default": parallelism})


def source(e):
    return e.from_source(SequenceSource(num_keys=2, records_per_key=3), name="seq")


def test_forward_operators_chain_and_key_by_cuts_the_chain():
    e = env()
    source(e).map(lambda r: r).filter(lambda r: True).key_by("key").process(Noop()).uid("count").sink_to(
        CollectSink("c")
    )
    graph = e.get_job_graph("t")
    vertices = list(graph)
    assert [v.name for v in vertices] == [
        "Source: seq -> Map -> Filter",
        "KeyedProcess -> Sink: CollectSink",
    ]
    (edge,) = list(graph.edges())
    assert edge.partitioner.kind is PartitionerKind.HASH
    assert edge.partitioner.key_field == "key"
    assert edge.distribution_pattern is DistributionPattern.ALL_TO_ALL
    assert vertices[1].id == "count", "a vertex is named by its head's uid"
    head_ops = vertices[0].operators
    assert head_ops[0].chained_outputs == [1] and head_ops[1].chained_outputs == [2]
    assert head_ops[2].network_outputs == [0]


def test_different_parallelism_becomes_rebalance_and_forward_is_rejected():
    e = env()
    source(e).map(lambda r: r).set_parallelism(1).sink_to(CollectSink("c"))
    graph = e.get_job_graph("t")
    # source (2) -> map (1) -> sink (default 2): both parallelism changes rebalance, as in Flink.
    edges = list(graph.edges())
    assert [edge.partitioner.kind for edge in edges] == [PartitionerKind.REBALANCE] * 2

    e = env()
    source(e).forward().map(lambda r: r).set_parallelism(1).sink_to(CollectSink("c"))
    with pytest.raises(ValueError, match="needs equal parallelism"):
        e.get_job_graph("t")


def test_disable_chaining_makes_a_vertex_per_operator():
    e = env().disable_operator_chaining()
    source(e).map(lambda r: r).sink_to(CollectSink("c"))
    assert len(list(e.get_job_graph("t"))) == 3


def test_union_gives_a_vertex_with_several_inputs():
    e = env()
    a, b = source(e), source(e)
    a.union(b).map(lambda r: r).sink_to(CollectSink("c"))
    graph = e.get_job_graph("t")
    consumer = [v for v in graph if len(v.inputs) == 2]
    assert len(consumer) == 1
    assert [edge.input_index for edge in consumer[0].inputs] == [0, 1]


def test_bad_uses_fail_with_clear_errors():
    e = env()
    with pytest.raises(KeyError, match="has no field 'nope'"):
        source(e).key_by("nope")
    with pytest.raises(TypeError, match="needs a KeyedStream"):
        source(e).process(Noop())
    with pytest.raises(TypeError, match="expects a callable"):
        source(e).map(42)
    with pytest.raises(ValueError, match="No operators defined in streaming topology"):
        e.get_job_graph("t")  # only sources, which nothing reads from: as in Flink, no job
    e2 = env()
    source(e2).map(lambda r: r).uid("same").map(lambda r: r).uid("same").sink_to(CollectSink("c"))
    with pytest.raises(ValueError, match="duplicate operator uid 'same'"):
        e2.get_job_graph("t")


def test_declared_schema_flows_to_next_operator():
    e = env()
    schema = pa.schema([("k", pa.int64())])
    source(e).map(lambda r: {"k": r["key"]}, output_type=schema).filter(lambda r: True).sink_to(CollectSink("c"))
    ops = list(e.get_job_graph("t"))[0].operators
    assert ops[2].input_schema == schema


def test_operators_without_a_sink_run_as_in_flink():
    e = env()
    source(e).map(lambda r: r)
    source(e)  # read by nothing: not part of the job
    assert [v.name for v in e.get_job_graph("t")] == ["Source: seq -> Map"]
