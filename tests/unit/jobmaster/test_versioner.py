"""ExecutionVertexVersioner semantics."""

from __future__ import annotations

from flinklike_spark._runtime.graph.execution_graph import ExecutionVertexID
from flinklike_spark._runtime.jobmaster.versioner import ExecutionVertexVersion, ExecutionVertexVersioner

A = ExecutionVertexID(job_vertex_id="a", subtask_index=0)
B = ExecutionVertexID(job_vertex_id="a", subtask_index=1)
C = ExecutionVertexID(job_vertex_id="c", subtask_index=0)


def test_unmodified_vertex_has_version_zero():
    versioner = ExecutionVertexVersioner()
    assert versioner.get_current_version(A) == ExecutionVertexVersion(execution_vertex_id=A, version=0)
    assert not versioner.is_modified(versioner.get_current_version(A))


def test_each_modification_bumps_and_supersedes_older_versions():
    versioner = ExecutionVertexVersioner()
    first = versioner.record_vertex_modification(A)
    assert first.version == 1
    assert not versioner.is_modified(first)
    second = versioner.record_vertex_modification(A)
    assert second.version == 2
    assert versioner.is_modified(first)
    assert not versioner.is_modified(second)
    assert versioner.get_current_version(A) == second


def test_record_modifications_returns_new_version_per_vertex_once():
    versioner = ExecutionVertexVersioner()
    versioner.record_vertex_modification(B)
    versions = versioner.record_modifications([A, B, A])
    assert versions == {
        A: ExecutionVertexVersion(execution_vertex_id=A, version=1),
        B: ExecutionVertexVersion(execution_vertex_id=B, version=2),
    }
    assert list(versions) == [A, B]


def test_modifications_are_per_vertex():
    versioner = ExecutionVertexVersioner()
    versions = versioner.record_modifications([A, B, C])
    versioner.record_vertex_modification(B)
    assert versioner.get_unmodified_execution_vertices(versions.values()) == {A, C}
    assert versioner.is_modified(versions[B])
    assert not versioner.is_modified(versions[C])
