"""A job's resource requirements: per vertex, the parallelism it may run at (FLIP-291).

The adaptive scheduler runs every vertex at the highest parallelism within its
bounds that the cluster's slots allow (all vertices share slots: a job needs as
many slots as its widest vertex). ``GET``/``PUT /jobs/:jobid/resource-requirements``
read and change the bounds of a running job in Flink's JSON shape::

    {"<vertex id>": {"parallelism": {"lowerBound": 1, "upperBound": 4}}}
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from flinklike_spark._runtime.graph.job_graph import JobGraph, PartitionerKind
from flinklike_spark.errors import RescaleRefusedError

__all__ = ["JobResourceRequirements", "ParallelismBounds"]


@dataclasses.dataclass(frozen=True)
class ParallelismBounds:
    """The parallelism a vertex may run at: ``lower <= parallelism <= upper``."""

    lower: int
    upper: int

    def to_json(self) -> dict[str, Any]:
        return {"parallelism": {"lowerBound": self.lower, "upperBound": self.upper}}


@dataclasses.dataclass(frozen=True)
class JobResourceRequirements:
    """Bounds per vertex id, for every vertex of one job graph (validated by :meth:`of`/:meth:`from_json`)."""

    bounds: Mapping[str, ParallelismBounds]

    @classmethod
    def of(cls, job_graph: JobGraph) -> JobResourceRequirements:
        """A submitted job's requirements: each vertex at exactly its parallelism (Flink's default upper bound)."""
        return cls({v.id: ParallelismBounds(1, v.parallelism) for v in job_graph})

    @classmethod
    def reactive(cls, job_graph: JobGraph) -> JobResourceRequirements:
        """Reactive mode's requirements: each vertex from 1 up to its max parallelism (every slot it can use).

        Vertices joined by a forward edge run at one parallelism: they share the lower of their maxima.
        """
        upper = {v.id: v.max_parallelism for v in job_graph}
        forward = [
            (e.source_id, e.target_id) for e in job_graph.edges() if e.partitioner.kind is PartitionerKind.FORWARD
        ]
        changed = True
        while changed:
            changed = False
            for a, b in forward:
                if upper[a] != upper[b]:
                    upper[a] = upper[b] = min(upper[a], upper[b])
                    changed = True
        return cls({vertex_id: ParallelismBounds(1, most) for vertex_id, most in upper.items()})

    @classmethod
    def from_json(cls, body: Any, job_graph: JobGraph) -> JobResourceRequirements:
        """Parse and check a ``PUT`` body against ``job_graph``.

        Raises:
            RescaleRefusedError: the body is not FLIP-291's shape, names a vertex the job
                does not have or leaves one out, has bounds outside ``1 <= lower <= upper <=
                max parallelism``, or gives vertices joined by a forward edge different bounds.
        """
        if not isinstance(body, dict):
            raise RescaleRefusedError(f"resource requirements must be a JSON object by vertex id, got {body!r}")
        vertices = {v.id: v for v in job_graph}
        unknown, missing = sorted(set(body) - set(vertices)), sorted(set(vertices) - set(body))
        if unknown or missing:
            raise RescaleRefusedError(
                f"resource requirements must name every vertex of job {job_graph.job_id} exactly: "
                f"unknown {unknown}, missing {missing}; the vertices are {sorted(vertices)}"
            )
        bounds = {}
        for vertex_id, entry in body.items():
            try:
                parallelism = entry["parallelism"]
                lower, upper = parallelism["lowerBound"], parallelism["upperBound"]
            except (TypeError, KeyError):
                raise RescaleRefusedError(
                    f"vertex {vertex_id}: expected {{'parallelism': {{'lowerBound': int, 'upperBound': int}}}}, "
                    f"got {entry!r}"
                ) from None
            ceiling = vertices[vertex_id].max_parallelism
            if not all(isinstance(b, int) and not isinstance(b, bool) for b in (lower, upper)) or not (
                1 <= lower <= upper <= ceiling
            ):
                raise RescaleRefusedError(
                    f"vertex {vertex_id}: bounds lowerBound={lower!r}, upperBound={upper!r} must be integers "
                    f"with 1 <= lowerBound <= upperBound <= {ceiling} (its max parallelism)"
                )
            bounds[vertex_id] = ParallelismBounds(lower, upper)
        for edge in job_graph.edges():
            if edge.partitioner.kind is PartitionerKind.FORWARD and bounds[edge.source_id] != bounds[edge.target_id]:
                raise RescaleRefusedError(
                    f"vertices {edge.source_id} and {edge.target_id} are joined by a forward edge and need equal "
                    f"bounds, got {bounds[edge.source_id]} and {bounds[edge.target_id]}"
                )
        return cls(bounds)

    def to_json(self) -> dict[str, Any]:
        return {vertex_id: b.to_json() for vertex_id, b in self.bounds.items()}

    def parallelism_for(self, slots: int) -> dict[str, int]:
        """Each vertex's parallelism with ``slots`` slots: its upper bound, capped by the slots.

        Raises:
            RescaleRefusedError: ``slots`` is below a vertex's lower bound.
        """
        short = {v: b.lower for v, b in self.bounds.items() if b.lower > slots}
        if short:
            raise RescaleRefusedError(
                f"the cluster has {slots} slots for this job, fewer than the lower bounds {short}; "
                f"add TaskExecutors or lower the bounds"
            )
        return {v: min(b.upper, slots) for v, b in self.bounds.items()}
