"""Committing what two-phase-commit sinks prepared at the end of a bounded job's input.

A task that reaches the end of its input without a final checkpoint hands its
sinks' committables to the JobMaster with its FINISHED state; once every task
finished, they are committed here, in subtask order, before the job's result
is FINISHED.
"""

from __future__ import annotations

import logging
from typing import Any

from flinklike_spark._runtime.collect_results import CollectResults
from flinklike_spark._runtime.graph.job_graph import JobGraph
from flinklike_spark.connector_api import CommitterContext
from flinklike_spark.errors import JobExecutionError

__all__ = ["commit_final_output"]

log = logging.getLogger(__name__)


def commit_final_output(
    job_graph: JobGraph, committables: dict[str, dict[int, list[Any]]], collect_results: CollectResults
) -> None:
    """Commit ``committables`` (sink uid -> subtask -> committables) with each sink's committer.

    Raises:
        JobExecutionError: a commit failed; it names the sink and has the failure as its cause.
    """
    sinks = {spec.uid: spec.function for vertex in job_graph.vertices.values() for spec in vertex.operators}
    for uid, per_subtask in sorted(committables.items()):
        try:
            committer = sinks[uid].create_committer_with(CommitterContext(result_channel=collect_results))
            try:
                committer.commit([c for subtask in sorted(per_subtask) for c in per_subtask[subtask]])
            finally:
                committer.close()
        except Exception as exc:
            log.error("job %s: committing the final output of sink %r failed: %r", job_graph.job_id, uid, exc)
            raise JobExecutionError(
                f"job {job_graph.name!r} ({job_graph.job_id}) finished but committing the final output of "
                f"sink {uid!r} failed: {type(exc).__name__}: {exc}",
                job_id=job_graph.job_id,
            ) from exc
