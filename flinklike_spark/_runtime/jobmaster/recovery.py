"""Resolving ``execution.state-recovery.path`` to a completed checkpoint, and checking it fits the job.

Accepted forms (the checkpoint directory is any fsspec URL or local path)::

    <dir>                        newest completed checkpoint or savepoint of the newest job in <dir>
    <dir>/<job-id>               newest completed checkpoint of that job
    <dir>/<job-id>/chk-<N>       checkpoint N of that job (or an older one if N is corrupt)

A checkpoint that is not completed (no ``checkpoints`` row) or whose files are
damaged is never used: the newest older completed one is taken, with a
warning naming what was skipped; if none is left the job fails with
:class:`~flinklike_spark.errors.CheckpointNotFoundError`.
"""

from __future__ import annotations

import logging
import re

from checkpointing import CompletedCheckpoint, find_restorable_checkpoint, list_completed_checkpoints
from flinklike_spark.errors import CheckpointNotFoundError, IncompatibleCheckpointError
from flinklike_spark._runtime.graph.job_graph import JobGraph

__all__ = ["check_compatible", "resolve_recovery_path"]

log = logging.getLogger(__name__)

_CHECKPOINT = re.compile(r"^(?P<base>.+?)/(?P<job>[0-9a-f]{32})(?:/chk-(?P<id>\d+))?/?$")


def resolve_recovery_path(path: str) -> tuple[str, CompletedCheckpoint]:
    """``(checkpoint directory, checkpoint to restore)`` for a recovery path.

    Raises:
        CheckpointNotFoundError: nothing restorable there (the message names the path).
    """
    match = _CHECKPOINT.match(path)
    if match is not None:
        base, job_id = match["base"], match["job"]
        max_id = int(match["id"]) if match["id"] is not None else None
    else:
        base = path.rstrip("/")
        completed = list_completed_checkpoints(base)
        if not completed:
            raise CheckpointNotFoundError(
                f"execution.state-recovery.path {path!r}: no completed checkpoint or savepoint there", url=path
            )
        job_id = max(completed, key=lambda c: c.completion_time).job_id
        max_id = None
    checkpoint = find_restorable_checkpoint(base, job_id, max_checkpoint_id=max_id, full=True)
    if max_id is not None and checkpoint.checkpoint_id != max_id:
        log.warning(
            "checkpoint %d of job %s is not restorable; restoring the older checkpoint %d instead",
            max_id, job_id, checkpoint.checkpoint_id,
        )  # fmt: skip
    return base, checkpoint


def check_compatible(job_graph: JobGraph, checkpoint: CompletedCheckpoint) -> None:
    """Every operator with state in ``checkpoint`` must exist (by uid) in ``job_graph``.

    Raises:
        IncompatibleCheckpointError: naming the first uid without a home, and the uids the job has.
    """
    uids = {vertex.id for vertex in job_graph} | {op.uid for vertex in job_graph for op in vertex.operators}
    for uid in checkpoint.operator_uids:
        if uid not in uids:
            raise IncompatibleCheckpointError(
                f"checkpoint {checkpoint.checkpoint_id} of job {checkpoint.job_id} holds state of operator uid "
                f"{uid!r}, which the new job does not have (its uids: {sorted(uids)}); set the same .uid(...) "
                f"on the operator, or start without execution.state-recovery.path"
            )
