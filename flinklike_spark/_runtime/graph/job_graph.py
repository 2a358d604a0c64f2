"""The JobGraph: the chained, parallel plan of a job, before it is scheduled.

A :class:`JobGraph` holds :class:`JobVertex` objects in topological order. A
vertex is one *operator chain* (operators fused over forward edges of equal
parallelism) and runs as ``parallelism`` subtasks. :class:`JobEdge` connects a
producing vertex to a consuming one with a partitioner; the partitioner decides
the distribution pattern: FORWARD is POINTWISE (subtask i feeds subtask i),
everything else is ALL_TO_ALL.

The graph itself does not interpret operators: ``JobVertex.operators`` is an
opaque, picklable list the StreamTask turns into an operator chain.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Iterable, Iterator
from enum import Enum
from typing import Any

from flinklike_spark._runtime.operators.operator_spec import OperatorSpec

__all__ = [
    "DistributionPattern",
    "JobEdge",
    "JobGraph",
    "JobVertex",
    "PartitionerKind",
    "PartitionerSpec",
]


class DistributionPattern(Enum):
    """How producer subtasks connect to consumer subtasks."""

    POINTWISE = "pointwise"  # subtask i -> subtask i (equal parallelism)
    ALL_TO_ALL = "all_to_all"  # every producer subtask -> every consumer subtask


class PartitionerKind(Enum):
    """Which consumer subtask(s) a record goes to."""

    FORWARD = "forward"
    HASH = "hash"
    REBALANCE = "rebalance"
    BROADCAST = "broadcast"

    @property
    def distribution_pattern(self) -> DistributionPattern:
        if self is PartitionerKind.FORWARD:
            return DistributionPattern.POINTWISE
        return DistributionPattern.ALL_TO_ALL


@dataclasses.dataclass(frozen=True, kw_only=True)
class PartitionerSpec:
    """A partitioner as data: its kind and, for HASH, the key.

    Attributes:
        kind: the partitioning strategy.
        key_field: for HASH by field name, the column holding the key.
        key_selector: for HASH by function, ``row dict -> key``.
        max_parallelism: number of key groups for HASH (Flink's default 128).
    """

    kind: PartitionerKind
    key_field: str | None = None
    key_selector: Callable[[dict], Any] | None = None
    max_parallelism: int = 128

    def __post_init__(self) -> None:
        if self.kind is PartitionerKind.HASH and (self.key_field is None) == (self.key_selector is None):
            raise ValueError("a HASH partitioner needs exactly one of key_field or key_selector")
        if self.max_parallelism < 1:
            raise ValueError(f"max_parallelism must be >= 1, got {self.max_parallelism}")


@dataclasses.dataclass(kw_only=True)
class JobEdge:
    """A connection from ``source_id``'s output to ``target_id``'s input number ``input_index``."""

    source_id: str
    target_id: str
    partitioner: PartitionerSpec
    input_index: int = 0

    @property
    def distribution_pattern(self) -> DistributionPattern:
        return self.partitioner.kind.distribution_pattern


@dataclasses.dataclass(kw_only=True)
class JobVertex:
    """One operator chain that runs as ``parallelism`` parallel subtasks.

    Attributes:
        id: stable id (derived from the head operator's uid).
        name: display name, e.g. ``"Source: numbers -> Map"``.
        parallelism: number of subtasks.
        max_parallelism: number of key groups for keyed state in this vertex.
        operators: opaque, picklable operator descriptions, head first.
        inputs: incoming edges, in input order.
        outputs: outgoing edges.
        is_source: the head operator is a source (no inputs; checkpoints are
            triggered here).
    """

    id: str
    name: str
    parallelism: int
    max_parallelism: int = 128
    operators: list[OperatorSpec] = dataclasses.field(default_factory=list)
    inputs: list[JobEdge] = dataclasses.field(default_factory=list)
    outputs: list[JobEdge] = dataclasses.field(default_factory=list)
    is_source: bool = False

    def __post_init__(self) -> None:
        if self.parallelism < 1:
            raise ValueError(f"vertex {self.name!r}: parallelism must be >= 1, got {self.parallelism}")
        if self.max_parallelism < self.parallelism:
            raise ValueError(
                f"vertex {self.name!r}: max_parallelism {self.max_parallelism} is below parallelism {self.parallelism}"
            )


@dataclasses.dataclass(kw_only=True)
class JobGraph:
    """Vertices in topological order plus the job's identity.

    Attributes:
        job_id: unique id of this job (hex string).
        name: the name given to ``execute``.
        vertices: ``id -> JobVertex`` in topological order (sources first).
    """

    job_id: str
    name: str
    vertices: dict[str, JobVertex] = dataclasses.field(default_factory=dict)

    def add_vertex(self, vertex: JobVertex) -> JobVertex:
        if vertex.id in self.vertices:
            raise ValueError(f"duplicate job vertex id {vertex.id!r}")
        self.vertices[vertex.id] = vertex
        return vertex

    def connect(self, source_id: str, target_id: str, partitioner: PartitionerSpec) -> JobEdge:
        """Add an edge; its ``input_index`` is the target's next free input number."""
        source, target = self.vertices[source_id], self.vertices[target_id]
        if partitioner.kind is PartitionerKind.FORWARD and source.parallelism != target.parallelism:
            raise ValueError(
                f"forward edge {source.name!r} -> {target.name!r} needs equal parallelism, "
                f"got {source.parallelism} and {target.parallelism}; use rebalance() or key_by()"
            )
        edge = JobEdge(
            source_id=source_id, target_id=target_id, partitioner=partitioner, input_index=len(target.inputs)
        )
        source.outputs.append(edge)
        target.inputs.append(edge)
        return edge

    def __iter__(self) -> Iterator[JobVertex]:
        return iter(self.vertices.values())

    def sources(self) -> list[JobVertex]:
        return [v for v in self.vertices.values() if not v.inputs]

    def edges(self) -> Iterable[JobEdge]:
        for vertex in self.vertices.values():
            yield from vertex.outputs

    def with_parallelism(self, parallelism: dict[str, int]) -> JobGraph:
        """A copy of this graph (same job id, operators and edges, in the same order) with each
        vertex at ``parallelism[id]`` (vertices not named keep theirs).

        Raises:
            ValueError: a forward edge would join vertices of different parallelism.
        """
        copies = {id(e): dataclasses.replace(e) for e in self.edges()}
        graph = JobGraph(job_id=self.job_id, name=self.name)
        for vertex in self.vertices.values():
            graph.add_vertex(dataclasses.replace(
                vertex, parallelism=parallelism.get(vertex.id, vertex.parallelism),
                inputs=[copies[id(e)] for e in vertex.inputs], outputs=[copies[id(e)] for e in vertex.outputs],
            ))  # fmt: skip
        for edge in graph.edges():
            source, target = graph.vertices[edge.source_id], graph.vertices[edge.target_id]
            if edge.partitioner.kind is PartitionerKind.FORWARD and source.parallelism != target.parallelism:
                raise ValueError(
                    f"forward edge {source.name!r} -> {target.name!r} needs equal parallelism, "
                    f"got {source.parallelism} and {target.parallelism}"
                )
        return graph

    def fingerprint(self) -> str:
        """A hash of the topology (vertex ids, parallelism-independent), used to match restores."""
        h = hashlib.sha256()
        for vertex in self.vertices.values():
            h.update(vertex.id.encode())
            for edge in vertex.inputs:
                h.update(f"<{edge.source_id}:{edge.partitioner.kind.value}".encode())
        return h.hexdigest()[:16]
