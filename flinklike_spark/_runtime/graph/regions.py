"""Pipelined regions: the units of region failover.

A pipelined region is a connected component of execution vertices over
pipelined edges. Every edge of a streaming job is pipelined, so:

* a POINTWISE (forward) edge joins producer subtask ``i`` with consumer subtask
  ``i`` only — a chain of forward edges keeps one region per subtask index;
* an ALL_TO_ALL edge (key_by, rebalance, broadcast) joins every subtask of the
  producer with every subtask of the consumer.

Regions are computed with union-find over the JobGraph's edges, so the same
function serves a :class:`JobGraph` and an :class:`ExecutionGraph`. An
``is_pipelined`` predicate may declare some edges blocking; blocking edges do
not merge regions and instead make the consumer's region a *consumer region*
of the producer's (region failover restarts those too). With the default (all
pipelined) no region consumes from another.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

from flinklike_spark._runtime.graph.execution_graph import ExecutionGraph, ExecutionVertexID
from flinklike_spark._runtime.graph.job_graph import DistributionPattern, JobEdge, JobGraph

__all__ = ["PipelinedRegion", "PipelinedRegionTopology", "compute_pipelined_regions"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class PipelinedRegion:
    """One pipelined region.

    Attributes:
        id: stable ordinal: regions are numbered by their first vertex in
            (topological job vertex order, subtask index), starting at 0, so the
            same graph always yields the same ids.
        vertices: the execution vertices in this region.
    """

    id: int
    vertices: frozenset[ExecutionVertexID]

    def __contains__(self, vertex_id: object) -> bool:
        return vertex_id in self.vertices

    def __len__(self) -> int:
        return len(self.vertices)


class PipelinedRegionTopology:
    """The regions of one graph plus lookups; immutable once built."""

    def __init__(
        self,
        regions: tuple[PipelinedRegion, ...],
        consumers: dict[int, frozenset[int]],
    ) -> None:
        self._regions = regions
        self._by_vertex = {v: r for r in regions for v in r.vertices}
        self._consumers = consumers

    @property
    def regions(self) -> tuple[PipelinedRegion, ...]:
        """Regions ordered by id."""
        return self._regions

    def __iter__(self) -> Iterator[PipelinedRegion]:
        return iter(self._regions)

    def __len__(self) -> int:
        return len(self._regions)

    def region_of(self, vertex_id: ExecutionVertexID) -> PipelinedRegion:
        """The region containing ``vertex_id``.

        Raises:
            KeyError: the vertex is not part of the graph.
        """
        try:
            return self._by_vertex[vertex_id]
        except KeyError:
            raise KeyError(f"execution vertex {vertex_id} is in no region of this graph") from None

    def consumer_regions(self, region: PipelinedRegion) -> tuple[PipelinedRegion, ...]:
        """Regions (other than ``region``) that read a partition produced in ``region``, by id.

        Always empty when every edge is pipelined (consumers then share the region).
        """
        return tuple(self._regions[i] for i in sorted(self._consumers.get(region.id, frozenset())))


class _UnionFind:
    def __init__(self) -> None:
        self._parent: dict[ExecutionVertexID, ExecutionVertexID] = {}

    def add(self, x: ExecutionVertexID) -> None:
        self._parent.setdefault(x, x)

    def find(self, x: ExecutionVertexID) -> ExecutionVertexID:
        root = x
        while self._parent[root] != root:
            root = self._parent[root]
        while self._parent[x] != root:  # path compression
            self._parent[x], x = root, self._parent[x]
        return root

    def union(self, a: ExecutionVertexID, b: ExecutionVertexID) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self._parent[rb] = ra


def _edge_pairs(edge: JobEdge, job_graph: JobGraph) -> Iterator[tuple[ExecutionVertexID, ExecutionVertexID]]:
    source = job_graph.vertices[edge.source_id]
    target = job_graph.vertices[edge.target_id]
    if edge.distribution_pattern is DistributionPattern.POINTWISE:
        for i in range(min(source.parallelism, target.parallelism)):
            yield (
                ExecutionVertexID(job_vertex_id=source.id, subtask_index=i),
                ExecutionVertexID(job_vertex_id=target.id, subtask_index=i),
            )
    else:
        for i in range(source.parallelism):
            for j in range(target.parallelism):
                yield (
                    ExecutionVertexID(job_vertex_id=source.id, subtask_index=i),
                    ExecutionVertexID(job_vertex_id=target.id, subtask_index=j),
                )


def compute_pipelined_regions(
    graph: ExecutionGraph | JobGraph,
    *,
    is_pipelined: Callable[[JobEdge], bool] = lambda edge: True,
) -> PipelinedRegionTopology:
    """Compute the pipelined regions of ``graph``.

    Args:
        graph: a JobGraph or an ExecutionGraph (its JobGraph is used).
        is_pipelined: which edges merge regions; default every edge.

    Returns:
        the regions with stable ids and the consumer-region relation.

    Raises:
        TypeError: ``graph`` is neither kind of graph.
    """
    if isinstance(graph, ExecutionGraph):
        job_graph = graph.job_graph
    elif isinstance(graph, JobGraph):
        job_graph = graph
    else:
        raise TypeError(f"expected an ExecutionGraph or a JobGraph, got {type(graph).__name__}")

    order: list[ExecutionVertexID] = [
        ExecutionVertexID(job_vertex_id=jv.id, subtask_index=i) for jv in job_graph for i in range(jv.parallelism)
    ]
    uf = _UnionFind()
    for vertex_id in order:
        uf.add(vertex_id)
    blocking: list[JobEdge] = []
    for edge in job_graph.edges():
        if not is_pipelined(edge):
            blocking.append(edge)
            continue
        if edge.distribution_pattern is DistributionPattern.ALL_TO_ALL:
            # a complete bipartite join is connected: joining every member to one suffices
            source = job_graph.vertices[edge.source_id]
            target = job_graph.vertices[edge.target_id]
            members = [ExecutionVertexID(job_vertex_id=source.id, subtask_index=i) for i in range(source.parallelism)]
            members += [ExecutionVertexID(job_vertex_id=target.id, subtask_index=j) for j in range(target.parallelism)]
            for member in members[1:]:
                uf.union(members[0], member)
        else:
            for a, b in _edge_pairs(edge, job_graph):
                uf.union(a, b)

    groups: dict[ExecutionVertexID, list[ExecutionVertexID]] = {}
    for vertex_id in order:  # dict insertion order = order of each group's first vertex
        groups.setdefault(uf.find(vertex_id), []).append(vertex_id)
    regions = tuple(PipelinedRegion(id=i, vertices=frozenset(members)) for i, members in enumerate(groups.values()))
    region_index = {v: r.id for r in regions for v in r.vertices}

    consumers: dict[int, set[int]] = {}
    for edge in blocking:
        for a, b in _edge_pairs(edge, job_graph):
            ra, rb = region_index[a], region_index[b]
            if ra != rb:
                consumers.setdefault(ra, set()).add(rb)
    return PipelinedRegionTopology(regions, {k: frozenset(v) for k, v in consumers.items()})
