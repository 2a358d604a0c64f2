"""ExecutionVertexVersioner: detects deployments and restarts that were superseded.

Every time the scheduler starts an asynchronous operation on a vertex (deploy,
restart, cancel) it records a modification, bumping the vertex's version, and
keeps the returned :class:`ExecutionVertexVersion`. When the operation's result
arrives later (a slot, the end of a restart backoff), the scheduler asks
:meth:`ExecutionVertexVersioner.is_modified`: if another modification happened
in between, the result belongs to a superseded operation and is dropped.

Thread rule: not thread-safe; used only on the JobMaster's main thread.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from flinklike_spark._runtime.graph.execution_graph import ExecutionVertexID

__all__ = ["ExecutionVertexVersion", "ExecutionVertexVersioner"]

_NOT_MODIFIED = 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExecutionVertexVersion:
    """The version ``version`` of vertex ``execution_vertex_id`` at the time it was recorded."""

    execution_vertex_id: ExecutionVertexID
    version: int


class ExecutionVertexVersioner:
    """Per-vertex modification counters.

    A vertex that was never modified has version 0; each recorded modification
    adds one.
    """

    def __init__(self) -> None:
        self._versions: dict[ExecutionVertexID, int] = {}

    def record_vertex_modification(self, vertex_id: ExecutionVertexID) -> ExecutionVertexVersion:
        """Bump ``vertex_id``'s version and return the new version."""
        version = self._versions.get(vertex_id, _NOT_MODIFIED) + 1
        self._versions[vertex_id] = version
        return ExecutionVertexVersion(execution_vertex_id=vertex_id, version=version)

    def record_modifications(
        self, vertex_ids: Iterable[ExecutionVertexID]
    ) -> dict[ExecutionVertexID, ExecutionVertexVersion]:
        """Bump every vertex in ``vertex_ids`` (once each); return ``id -> new version``."""
        return {vertex_id: self.record_vertex_modification(vertex_id) for vertex_id in dict.fromkeys(vertex_ids)}

    def get_current_version(self, vertex_id: ExecutionVertexID) -> ExecutionVertexVersion:
        """The vertex's current version (0 if never modified)."""
        return ExecutionVertexVersion(
            execution_vertex_id=vertex_id, version=self._versions.get(vertex_id, _NOT_MODIFIED)
        )

    def is_modified(self, version: ExecutionVertexVersion) -> bool:
        """True if the vertex was modified after ``version`` was recorded."""
        return self._versions.get(version.execution_vertex_id, _NOT_MODIFIED) != version.version

    def get_unmodified_execution_vertices(self, versions: Iterable[ExecutionVertexVersion]) -> set[ExecutionVertexID]:
        """The vertices of ``versions`` that were not modified since."""
        return {v.execution_vertex_id for v in versions if not self.is_modified(v)}
