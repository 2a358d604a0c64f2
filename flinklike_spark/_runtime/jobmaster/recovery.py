"""Resolving ``execution.state-recovery.path`` to a completed checkpoint, and checking it fits the job.

Accepted forms (the checkpoint directory is any fsspec URL or local path)::

    <dir>                        newest restorable checkpoint or savepoint of the newest job in <dir>
    <dir>/<job-id>               newest restorable checkpoint of that job
    <dir>/<job-id>/chk-<N>       exactly checkpoint N of that job
    <any directory>              with a savepoint's ``_metadata`` file (a copy of a ``chk-<N>``
                                 directory): exactly the savepoint that file names

With the first two forms, a checkpoint that is not completed (no
``checkpoints`` row) or whose files are damaged is never used: the newest
older completed one is taken, with a warning naming what was skipped. A
checkpoint named with ``chk-<N>`` is taken or refused, never replaced: when
it does not exist (never completed, or removed by retention) or is damaged,
the job fails with an error naming it and the completed checkpoints there.

Before any task runs, the restore is also checked against the job
(:func:`check_compatible`, :func:`check_max_parallelism`, :func:`check_in_flight_data`) and against what
its exactly-once sinks already committed (:func:`check_committed_sink_output`).
"""

from __future__ import annotations

import dataclasses
import logging
import re
from typing import TYPE_CHECKING

from checkpointing import (
    CheckpointLayout,
    CompletedCheckpoint,
    find_restorable_checkpoint,
    list_completed_checkpoints,
    verify_checkpoint,
)
from checkpointing.savepoint_marker import read_savepoint_marker
from checkpointing.schemas import CheckpointKind
from flinklike_spark._runtime.deployment import RestoreDeployment
from flinklike_spark._runtime.graph.job_graph import JobGraph, JobVertex
from flinklike_spark._runtime.operators.operator_spec import OperatorKind
from flinklike_spark._runtime.operators.sink_operator import transactional_id_prefix
from flinklike_spark.connector_api import END_OF_INPUT, TwoPhaseCommittingSink
from flinklike_spark.errors import (
    CheckpointNotFoundError,
    CommittedSinkOutputError,
    CorruptCheckpointError,
    IncompatibleCheckpointError,
)
from flinklike_spark.storage import StorageConfig

if TYPE_CHECKING:
    from flinklike_spark.config import CheckpointingOptions

__all__ = [
    "ACCEPT_DUPLICATES_KEY",
    "InitialRestore",
    "check_committed_sink_output",
    "check_compatible",
    "check_in_flight_data",
    "check_max_parallelism",
    "plan_restore",
    "recovery_directory",
    "resolve_recovery_path",
]

log = logging.getLogger(__name__)

#: The option that lets a restore go ahead although a sink committed newer output.
ACCEPT_DUPLICATES_KEY = "execution.state-recovery.accept-duplicate-sink-output"

_CHECKPOINT = re.compile(r"^(?P<base>.+?)/(?P<job>[0-9a-f]{32})(?:/chk-(?P<id>\d+))?/?$")


def recovery_directory(path: str) -> str:
    """The checkpoint directory of a recovery path (``<dir>`` of each accepted form), which must exist."""
    match = _CHECKPOINT.match(path)
    return match["base"] if match is not None else path.rstrip("/")


def resolve_recovery_path(
    path: str, storage: StorageConfig | None = None
) -> tuple[CheckpointLayout, CompletedCheckpoint]:
    """``(checkpoint directory, checkpoint to restore)`` for a recovery path.

    ``storage`` (the job's object-store settings) is applied to the directory.

    Raises:
        CheckpointNotFoundError: the directory does not exist, holds no
            completed checkpoint (of the job), or the named checkpoint does not
            exist; the message names the path and the completed checkpoint ids.
        CorruptCheckpointError: the named checkpoint (``chk-<N>``) is damaged.
    """
    match = _CHECKPOINT.match(path)
    if match is None:
        pointed = read_savepoint_marker(path, storage)
        if pointed is not None:
            log.info("execution.state-recovery.path %s holds a savepoint marker naming %s", path, pointed)
            path, match = pointed, _CHECKPOINT.match(pointed)
    base_url = recovery_directory(path)
    base = CheckpointLayout(base_url=base_url, storage=storage)
    if not base.exists():
        raise CheckpointNotFoundError(f"execution.state-recovery.path {path!r}: {base_url!r} does not exist", url=path)
    if match is None:
        completed = list_completed_checkpoints(base)
        if not completed:
            raise CheckpointNotFoundError(
                f"execution.state-recovery.path {path!r}: no completed checkpoint or savepoint there", url=path
            )
        job_id = max(completed, key=lambda c: c.completion_time).job_id
        return base, find_restorable_checkpoint(base, job_id, full=True)
    job_id = match["job"]
    ids = [c.checkpoint_id for c in list_completed_checkpoints(base, job_id)]
    if not ids:
        jobs = sorted({c.job_id for c in list_completed_checkpoints(base)})
        raise CheckpointNotFoundError(
            f"execution.state-recovery.path {path!r}: job {job_id} has no completed checkpoint under {base_url!r} "
            f"(jobs with completed checkpoints there: {jobs})",
            url=path,
        )
    if match["id"] is None:
        return base, find_restorable_checkpoint(base, job_id, full=True)
    checkpoint_id = int(match["id"])
    if checkpoint_id not in ids:
        raise CheckpointNotFoundError(
            f"execution.state-recovery.path {path!r}: checkpoint {checkpoint_id} of job {job_id} does not exist "
            f"(it never completed, or retention removed it); completed checkpoints of that job: {ids}",
            url=path,
        )
    try:
        return base, verify_checkpoint(base, job_id, checkpoint_id, full=True)
    except CorruptCheckpointError as exc:
        others = [i for i in ids if i != checkpoint_id]
        raise CorruptCheckpointError(
            f"execution.state-recovery.path {path!r}: {exc}; the other completed checkpoints of that job: {others}",
            url=exc.url,
            job_id=exc.job_id,
            checkpoint_id=exc.checkpoint_id,
            path=exc.path,
        ) from exc


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


def _has_state(vertex: JobVertex, checkpoint: CompletedCheckpoint) -> bool:
    uids = set(checkpoint.operator_uids)
    return vertex.id in uids or any(op.uid in uids for op in vertex.operators)


def _is_keyed(vertex: JobVertex) -> bool:
    return any(op.key_field is not None or op.key_selector is not None for op in vertex.operators)


def check_max_parallelism(job_graph: JobGraph, checkpoint: CompletedCheckpoint) -> None:
    """A keyed vertex with state in ``checkpoint`` must keep the max parallelism it was taken with.

    Keyed state is stored by key group (``hash(key) % max_parallelism``), so
    with another number of key groups a subtask would look for a key's state
    in the wrong group and silently start it from nothing. Flink refuses such
    a restore too. Non-keyed state does not depend on key groups; checkpoints
    that did not record the value (older ones) are not checked.

    Raises:
        IncompatibleCheckpointError: naming the vertex, both values and the fix.
    """
    recorded = checkpoint.max_parallelism
    for vertex in job_graph:
        old = recorded.get(vertex.id)
        if old is None or old == vertex.max_parallelism or not _is_keyed(vertex) or not _has_state(vertex, checkpoint):
            continue
        raise IncompatibleCheckpointError(
            f"cannot restore checkpoint {checkpoint.checkpoint_id} of job {checkpoint.job_id}: operator "
            f"{vertex.name!r} (vertex {vertex.id!r}) has keyed state taken with max parallelism {old} "
            f"(key groups), the new job has max parallelism {vertex.max_parallelism}; keyed state cannot move "
            f"to another number of key groups. Set pipeline.max-parallelism: {old} (parallelism can change up "
            f"to it), or start without execution.state-recovery.path"
        )


def check_in_flight_data(job_graph: JobGraph, checkpoint: CompletedCheckpoint) -> None:
    """The in-flight data of an unaligned ``checkpoint`` must map onto ``job_graph``'s channels.

    Channel state is stored per task (the vertex of chained operators) and
    per input gate / output partition index. If the tasks are chained
    differently (a changed parallelism changes which operators chain) or
    edges were added or removed, those indexes name other edges: replayed
    records would reach the wrong operator. Checkpoints without in-flight
    data (aligned ones, savepoints) and older ones that did not record their
    topology are not checked.

    Raises:
        IncompatibleCheckpointError: naming the checkpoint, its in-flight bytes and the ways out.
    """
    recorded = checkpoint.job_graph_fingerprint
    if checkpoint.channel_state_bytes == 0 or not recorded or recorded == job_graph.fingerprint():
        return
    raise IncompatibleCheckpointError(
        f"cannot restore checkpoint {checkpoint.checkpoint_id} of job {checkpoint.job_id}: it holds "
        f"{checkpoint.channel_state_bytes} bytes of in-flight data (an unaligned checkpoint) recorded per task and "
        f"channel of a job whose tasks were chained or connected differently (operators chain only at equal "
        f"parallelism, so changing one operator's parallelism can change the tasks); that data cannot be "
        f"mapped onto the new job's channels. Restore a savepoint or an aligned checkpoint (no in-flight "
        f"data), or keep the job's operators and their parallelism relations as they were"
    )


def check_committed_sink_output(
    job_graph: JobGraph, base: str | CheckpointLayout, checkpoint: CompletedCheckpoint, *, accept_duplicates: bool
) -> str:
    """Fence older jobs of the lineage, refuse a restore point older than committed sink output; return the lineage.

    When the restore may go ahead, each exactly-once sink takes over the
    lineage's transactional ids (:meth:`TwoPhaseCommittingSink.fence_older_writers`;
    the job graph's sink is replaced by the fenced one), so that a job of the
    same lineage still running fails at its next commit instead of committing
    beside this one; the committed output is then checked once more.

    A sink's transactional ids derive from the lineage id (the first job of a
    chain of restores), so a resumed job's sinks can tell which checkpoints of
    the lineage they committed. If one committed a checkpoint newer than
    ``checkpoint`` (of directory ``base``), the rows of that checkpoint would be written again: the
    new run cannot skip exactly them, as its barriers fall elsewhere in the
    input. That is refused unless ``accept_duplicates``, in which case the
    job starts a new lineage (its own job id), so its sinks commit everything
    from ``checkpoint`` on again: no row is lost, some are duplicated.

    Returns:
        The lineage id the job's sinks and checkpoints use.

    Raises:
        CommittedSinkOutputError: naming the restored and the committed
            checkpoint, the sink and the option that accepts duplicates.
    """
    lineage = checkpoint.lineage_id
    sinks = [
        (vertex, op) for vertex in job_graph for op in vertex.operators
        if op.kind is OperatorKind.SINK and isinstance(op.function, TwoPhaseCommittingSink)
    ]  # fmt: skip

    def committed_ahead() -> list[tuple[str, TwoPhaseCommittingSink, int]]:
        ahead = []
        for vertex, op in sinks:
            subtasks = max(vertex.max_parallelism, checkpoint.parallelism.get(vertex.id, 0))
            committed = op.function.committed_checkpoint(transactional_id_prefix(lineage, op.uid), subtasks)
            log.info(
                "restoring checkpoint %d: sink %r last committed %s", checkpoint.checkpoint_id, op.uid,
                "nothing" if committed is None else f"the output of checkpoint {committed}",
            )  # fmt: skip
            if committed is not None and committed > checkpoint.checkpoint_id:
                ahead.append((op.uid, op.function, committed))
        return ahead

    # Check, fence, check again: a refused restore writes nothing (no fence commit), and an
    # older job of the lineage that committed between the first check and the fence is seen
    # by the second; after the fence it cannot commit, so the answer stays true while this runs.
    ahead = committed_ahead()
    if not ahead:
        for _, op in sinks:
            op.function = op.function.fence_older_writers(transactional_id_prefix(lineage, op.uid))
        ahead = committed_ahead()
    if not ahead:
        return lineage
    uid, sink, committed = ahead[0]
    what = (
        "the final output (end of input) of the finished job"
        if committed == END_OF_INPUT
        else f"the output of checkpoint {committed}"
    )
    if accept_duplicates:
        log.warning(
            "restoring checkpoint %d of job %s although sink %r (%r) already committed %s; %s is set, so the "
            "output from checkpoint %d on is written again (duplicates) under a new transactional id",
            checkpoint.checkpoint_id, checkpoint.job_id, uid, sink, what, ACCEPT_DUPLICATES_KEY,
            checkpoint.checkpoint_id,
        )  # fmt: skip
        return job_graph.job_id
    newer = [c.checkpoint_id for c in list_completed_checkpoints(base, checkpoint.job_id)
             if c.checkpoint_id > checkpoint.checkpoint_id]  # fmt: skip
    raise CommittedSinkOutputError(
        f"cannot restore checkpoint {checkpoint.checkpoint_id} of job {checkpoint.job_id}: sink {uid!r} ({sink!r}) "
        f"already committed {what} (transactional ids {transactional_id_prefix(lineage, uid)}/<subtask>), so "
        f"restoring the older checkpoint would write that output a second time. Completed checkpoints of job "
        f"{checkpoint.job_id} newer than {checkpoint.checkpoint_id}: {newer} (a newer one is skipped when it is "
        f"damaged or not named). Restore the checkpoint the sink committed, or set {ACCEPT_DUPLICATES_KEY}: true "
        f"to accept duplicated rows (at-least-once output)"
    )


@dataclasses.dataclass(frozen=True)
class InitialRestore:
    """What a JobMaster restores when it starts: nothing, or a checked checkpoint or savepoint.

    ``lineage_id`` names the job whose sink output this job continues (the restored
    checkpoint's lineage, else the job's own id); ``first_checkpoint_id`` continues after the
    restored checkpoint's id.
    """

    restore: RestoreDeployment | None
    first_checkpoint_id: int
    lineage_id: str
    kind: CheckpointKind | None


def plan_restore(job_graph: JobGraph, options: CheckpointingOptions, storage: StorageConfig) -> InitialRestore:
    """Resolve and check ``execution.state-recovery.path`` for ``job_graph``, if it is set.

    Raises:
        CheckpointNotFoundError, CorruptCheckpointError, IncompatibleCheckpointError,
        CommittedSinkOutputError: as :func:`resolve_recovery_path` and the ``check_*`` functions.
    """
    if options.recovery_path is None:
        return InitialRestore(restore=None, first_checkpoint_id=1, lineage_id=job_graph.job_id, kind=None)
    base, checkpoint = resolve_recovery_path(options.recovery_path, storage)
    check_compatible(job_graph, checkpoint)
    check_max_parallelism(job_graph, checkpoint)
    check_in_flight_data(job_graph, checkpoint)
    lineage_id = check_committed_sink_output(
        job_graph, base, checkpoint, accept_duplicates=options.accept_duplicate_sink_output
    )
    log.info("job %s restores checkpoint %d of job %s from %s", job_graph.job_id, checkpoint.checkpoint_id,
             checkpoint.job_id, base.base_url)  # fmt: skip
    restore = RestoreDeployment(
        storage=base,
        job_id=checkpoint.job_id,
        checkpoint_id=checkpoint.checkpoint_id,
        parallelism=dict(checkpoint.parallelism),
        gates=(),
        finished_vertices=checkpoint.finished_vertices,
    )
    return InitialRestore(
        restore=restore, first_checkpoint_id=checkpoint.checkpoint_id + 1, lineage_id=lineage_id, kind=checkpoint.kind
    )
