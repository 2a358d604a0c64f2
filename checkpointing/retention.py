"""Retention: keep the newest N completed checkpoints of a job, delete the rest.

Order of operations, chosen so that a crash at any point never leaves a
``checkpoints`` row pointing at deleted files:

1. delete the ``checkpoints`` rows of the dropped checkpoints (they stop being
   restorable first);
2. remove their ``operator_state`` / ``channel_state`` partitions from the
   tables' logs (whole files: one commit of remove actions, no rewrite);
3. delete from storage the files those deletes removed from the tables'
   logs (Flink's discarding of a subsumed checkpoint's files); with
   ``full_vacuum`` also maintain the tables (:mod:`checkpointing.maintenance`):
   vacuum each with ``retention_hours=0`` and ``enforce_retention_duration=False``
   (deltalake's default, non-full vacuum: it deletes only files removed from
   the log, never the uncommitted files of checkpoints still being written),
   which sweeps what an interrupted earlier retention left, then delete the
   expired files of each ``_delta_log``. The vacuum retries every tombstone the
   log still holds (those of the last ``delta.deletedFileRetentionDuration``),
   so the coordinator maintains on a time cadence
   (:class:`~checkpointing.maintenance.MaintenanceSchedule`), not every time.

Incremental checkpoints share files: a checkpoint's partition stays while a
retained checkpoint or savepoint is that checkpoint or names it in a chain
(:func:`checkpointing.chains.live_checkpoint_ids`, Flink's
``SharedStateRegistry``), even after its own ``checkpoints`` row is dropped.

Savepoints are never deleted. Time travel to table versions older than the
retention no longer finds the dropped files (that is the point), and the
maintained logs reach back only about ``delta.logRetentionDuration``
(:mod:`checkpointing.maintenance`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError
from deltalake.transaction import RemoveAction
from fsspec.core import strip_protocol

from flinklike_spark.errors import CheckpointStorageError

from .chains import live_checkpoint_ids
from .layout import CHECKPOINTS, STATE_TABLES, CheckpointLayout, as_layout, check_job_id
from .maintenance import clean_logs
from .reader import _committed_files, list_completed_checkpoints
from .schemas import STATE_PARTITION_COLUMNS, CheckpointKind

__all__ = [
    "RetentionResult",
    "retain",
]

#: Hours after which a file of the ``checkpoints`` table that no version names is deleted.
UNTRACKED_ROW_AGE_HOURS = 1

_log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RetentionResult:
    """What :func:`retain` did.

    Attributes:
        retained: ids of the completed checkpoints kept (savepoints excluded).
        dropped: ids of completed checkpoints whose rows and state were deleted.
        vacuumed_files: paths (relative to their table) deleted from storage.
        orphan_files: uncommitted files of abandoned checkpoints deleted.
        shared: ids of dropped checkpoints whose state was kept because a retained
            checkpoint's incremental chain reads it.
    """

    job_id: str
    retained: tuple[int, ...]
    dropped: tuple[int, ...]
    vacuumed_files: tuple[str, ...]
    orphan_files: tuple[str, ...]
    shared: tuple[int, ...] = ()


def retain(
    base: str | os.PathLike[str] | CheckpointLayout,
    job_id: str,
    num_retained: int,
    *,
    drop_abandoned: bool = True,
    full_vacuum: bool = True,
) -> RetentionResult:
    """Keep the newest ``num_retained`` completed checkpoints of ``job_id``; delete older ones.

    Args:
        num_retained: ``execution.checkpointing.num-retained``, >= 1.
        drop_abandoned: also delete state of checkpoints older than the oldest
            retained one that never completed (committed state without a
            completion row, and uncommitted files left by a crashed
            coordinator). The caller guarantees no such checkpoint can still
            complete, which holds in Flink's model: completing checkpoint n
            subsumes pending checkpoints < n. Pending *savepoints* older than
            the oldest retained checkpoint must not exist when this is True.
        full_vacuum: also vacuum every table (sweeps files that an interrupted
            earlier retention removed from a log but not from storage) and delete
            the expired files of their logs; the files this call's own deletes
            remove are deleted either way.

    Returns:
        What was kept and removed.

    Raises:
        CheckpointStorageError: a Delta delete or vacuum failed; completion rows
            are deleted first, so partly-applied retention never leaves a listed
            checkpoint with missing files.
    """
    if isinstance(num_retained, bool) or not isinstance(num_retained, int) or num_retained < 1:
        raise ValueError(f"num_retained must be an int >= 1, got {num_retained!r}")
    check_job_id(job_id)
    layout = as_layout(base)
    completed = list_completed_checkpoints(layout, job_id)
    savepoints = {c.checkpoint_id for c in completed if c.kind is CheckpointKind.SAVEPOINT}
    checkpoints = [c.checkpoint_id for c in completed if c.kind is not CheckpointKind.SAVEPOINT]
    retained = tuple(checkpoints[-num_retained:])
    dropped = tuple(checkpoints[:-num_retained])
    if not retained:
        return RetentionResult(job_id=job_id, retained=(), dropped=(), vacuumed_files=(), orphan_files=())
    oldest = retained[0]
    kept = [c for c in completed if c.kind is CheckpointKind.SAVEPOINT or c.checkpoint_id in retained]
    # Partitions that retained checkpoints (and savepoints) read: their own and their chains'.
    shared = live_checkpoint_ids((c.checkpoint_id, c.properties) for c in kept)

    removed: dict[str, list[str]] = {}  # table -> files its delete removed from the log
    opened: dict[str, DeltaTable | None] = {}  # a delete leaves the DeltaTable at the new version
    if dropped:
        opened[CHECKPOINTS], removed[CHECKPOINTS] = _delete_rows(layout, job_id, dropped)
    protected = {c for c in shared | savepoints if c < oldest}
    unshared = {c for c in dropped if c not in shared}
    if drop_abandoned or unshared:
        for table in STATE_TABLES:
            opened[table], removed[table] = _remove_partitions(
                layout,
                table,
                job_id,
                (lambda c: c < oldest and c not in protected) if drop_abandoned else unshared.__contains__,
            )
    vacuumed: list[str] = []
    for table, files in removed.items():
        vacuumed.extend(f"{table}/{p}" for p in _delete_files(layout, table, files))
    if full_vacuum:
        for table in (CHECKPOINTS, *STATE_TABLES):
            vacuumed.extend(f"{table}/{p}" for p in _vacuum(layout, table, opened.get(table)))
        vacuumed.extend(f"{CHECKPOINTS}/{p}" for p in _sweep_untracked_rows(layout))
        clean_logs(layout)
    orphans = _delete_orphans(layout, job_id, oldest, savepoints | shared) if drop_abandoned else []
    _log.info(
        "retention of job %s: kept %s, dropped %s, vacuumed %d files, %d orphans",
        job_id,
        retained,
        dropped,
        len(vacuumed),
        len(orphans),
    )
    return RetentionResult(
        job_id=job_id,
        retained=retained,
        dropped=dropped,
        vacuumed_files=tuple(vacuumed),
        orphan_files=tuple(orphans),
        shared=tuple(c for c in dropped if c in shared),
    )


def _ids(ids) -> str:
    return ", ".join(str(int(i)) for i in ids)


def _delete(layout: CheckpointLayout, table: str, predicate: str) -> tuple[DeltaTable | None, list[str]]:
    """Delete the rows matching ``predicate``.

    Returns:
        The table at its new version (None: it does not exist), and the files
        (paths in the layout's filesystem) the delete removed from the log.
    """
    dt = layout.open_table(table)
    if dt is None:
        return None, []
    try:
        before = set(dt.file_uris())
        dt.delete(predicate)
        after = set(dt.file_uris())
    except (DeltaError, OSError) as exc:
        raise CheckpointStorageError(
            f"retention cannot delete from {layout.table_uri(table)!r} ({predicate}): {type(exc).__name__}: {exc}",
            url=layout.table_uri(table),
        ) from exc
    return dt, sorted(strip_protocol(uri) for uri in before - after)


def _delete_rows(
    layout: CheckpointLayout, job_id: str, dropped: tuple[int, ...]
) -> tuple[DeltaTable | None, list[str]]:
    """Delete the ``checkpoints`` rows of the ``dropped`` checkpoints of ``job_id``.

    The committer writes each completion row as a file of its own, so the rows
    usually go as whole files: those whose statistics show only rows of one
    dropped checkpoint of this job, removed in one commit. If any other file may
    hold such a row (several rows, no statistics), a Delta delete rewrites them.

    Returns:
        As :func:`_delete`.
    """
    dt = layout.open_table(CHECKPOINTS)
    if dt is None:
        return None, []
    wanted = sorted(dropped)
    whole: list[tuple[str, int]] = []
    actions = _add_actions(layout, CHECKPOINTS, dt)
    columns = ("min.job_id", "max.job_id", "min.checkpoint_id", "max.checkpoint_id")
    stats = [actions[c].to_pylist() if c in actions.column_names else [None] * actions.num_rows for c in columns]
    for path, size, job_min, job_max, low, high in zip(
        actions["path"].to_pylist(), actions["size_bytes"].to_pylist(), *stats
    ):
        if low is not None and high is not None and not any(low <= c <= high for c in wanted):
            continue  # holds no row of a dropped checkpoint (of any job)
        if job_min is not None and job_min == job_max and job_min != job_id and not job_id.startswith(job_min):
            continue  # another job's rows (a prefix could be a truncated statistic of this job's id)
        if job_min == job_max == job_id and low == high:
            whole.append((path, size))
            continue
        return _delete(layout, CHECKPOINTS, f"job_id = '{job_id}' AND checkpoint_id IN ({_ids(dropped)})")
    removes = [(path, size, None) for path, size in whole]
    return dt, _commit_removes(layout, CHECKPOINTS, dt, removes, f"the rows of checkpoints {wanted} of job {job_id!r}")


def _remove_partitions(
    layout: CheckpointLayout, table: str, job_id: str, selected: Callable[[int], bool]
) -> tuple[DeltaTable | None, list[str]]:
    """Remove from ``table``'s log the partitions ``(job_id, checkpoint_id)`` whose id is ``selected``.

    One commit of remove actions for the partitions' files, taken from the log:
    what a Delta delete with a partition-only predicate commits, without its
    query plan.

    Returns:
        As :func:`_delete`.
    """
    dt = layout.open_table(table)
    if dt is None:
        return None, []
    actions = _add_actions(layout, table, dt)
    if actions.num_rows == 0:
        return dt, []
    ours = actions.filter(pc.equal(actions["partition.job_id"], job_id))
    removes = [
        (path, size, {"job_id": job_id, "checkpoint_id": str(cid)})
        for path, size, cid in zip(
            ours["path"].to_pylist(), ours["size_bytes"].to_pylist(), ours["partition.checkpoint_id"].to_pylist()
        )
        if selected(cid)
    ]
    return dt, _commit_removes(layout, table, dt, removes, f"checkpoints of job {job_id!r}")


def _add_actions(layout: CheckpointLayout, table: str, dt: DeltaTable) -> pa.Table:
    """The add actions of ``dt``'s current version, flattened (partition values and statistics as columns)."""
    try:
        return pa.table(dt.get_add_actions(flatten=True))
    except (DeltaError, OSError) as exc:
        raise CheckpointStorageError(
            f"retention cannot read the log of {layout.table_uri(table)!r}: {type(exc).__name__}: {exc}",
            url=layout.table_uri(table),
        ) from exc


def _commit_removes(
    layout: CheckpointLayout,
    table: str,
    dt: DeltaTable,
    removes: list[tuple[str, int, dict[str, str] | None]],
    what: str,
) -> list[str]:
    """Remove files ``(path, size, partition values)`` from ``table``'s log in one commit; the files it
    removed (paths in the layout's filesystem), which stay in storage."""
    if not removes:
        return []
    now_ms = int(time.time() * 1000)
    actions = [
        RemoveAction(path=path, data_change=True, deletion_timestamp=now_ms, size=size, partition_values=values)
        for path, size, values in removes
    ]
    partition_by = list(STATE_PARTITION_COLUMNS) if table in STATE_TABLES else None
    try:
        before = set(dt.file_uris())
        dt.create_write_transaction(actions, mode="append", schema=dt.schema(), partition_by=partition_by)
        dt.update_incremental()
        after = set(dt.file_uris())
    except (DeltaError, OSError) as exc:
        raise CheckpointStorageError(
            f"retention cannot remove {what} from {layout.table_uri(table)!r}: {type(exc).__name__}: {exc}",
            url=layout.table_uri(table),
        ) from exc
    return sorted(strip_protocol(uri) for uri in before - after)


def _delete_files(layout: CheckpointLayout, table: str, paths: list[str]) -> list[str]:
    """Delete ``paths`` (no longer in ``table``'s log) from storage; those deleted, relative to the table."""
    fs, _ = layout.filesystem()
    root = layout.table_path(table).rstrip("/") + "/"
    deleted = []
    for path in paths:
        try:
            fs.rm_file(path)
        except FileNotFoundError:
            continue  # deleted by a retention that ran concurrently, or by a vacuum
        except OSError as exc:
            raise CheckpointStorageError(
                f"retention cannot delete {path!r} of {layout.table_uri(table)!r}: {type(exc).__name__}: {exc}",
                url=layout.table_uri(table),
            ) from exc
        deleted.append(path[len(root) :] if path.startswith(root) else path)
    return deleted


def _vacuum(layout: CheckpointLayout, table: str, dt: DeltaTable | None = None) -> list[str]:
    """Delete the files the log's tombstones name that are still in storage; those deleted, relative to the table.

    deltalake's vacuum retries every tombstone, and reports the files of tombstones
    an earlier vacuum already deleted too; so the tombstones are first checked
    against one listing of the table's directory (not a request per file), and
    the vacuum, whose two commits add to the log, runs only when one is left.
    """
    dt = dt if dt is not None else layout.open_table(table)
    if dt is None:
        return []
    fs, _ = layout.filesystem()
    root = layout.table_path(table).rstrip("/") + "/"

    def relative(path: str) -> str:
        # deltalake 1.6.6 reports table-relative paths, but absolute ones for
        # tombstones it already vacuumed earlier (they stay listed); normalize.
        return path[len(root) :] if path.startswith(root) else path.lstrip("/")

    def stored() -> set[str]:
        fs.invalidate_cache(root.rstrip("/"))  # object-store clients cache listings
        try:
            return {relative(p) for p in fs.find(root.rstrip("/"))}
        except FileNotFoundError:
            return set()

    try:
        candidates = set(map(relative, dt.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=True)))
        existing = sorted(candidates & stored()) if candidates else []
        if not existing:
            return []
        dt.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
        left = stored()
        return [r for r in existing if r not in left]
    except (DeltaError, OSError) as exc:
        raise CheckpointStorageError(
            f"retention cannot vacuum {layout.table_uri(table)!r}: {type(exc).__name__}: {exc}",
            url=layout.table_uri(table),
        ) from exc


def _sweep_untracked_rows(layout: CheckpointLayout) -> list[str]:
    """Delete the ``checkpoints`` table's files that no version names, once an hour old (deltalake's full vacuum).

    Those are completion rows a retention removed from the log but, interrupted,
    not from storage, whose tombstones expired before a vacuum saw them
    (``delta.deletedFileRetentionDuration`` is short), and rows of commits that
    died before committing. A row file is written and committed in one call, so
    an hour-old file that no version names belongs to no commit in progress.
    The state tables' leftovers are swept by :func:`_delete_orphans`.
    """
    dt = layout.open_table(CHECKPOINTS)
    if dt is None:
        return []
    root = layout.table_path(CHECKPOINTS).rstrip("/") + "/"
    try:
        deleted = dt.vacuum(
            retention_hours=UNTRACKED_ROW_AGE_HOURS, enforce_retention_duration=False, dry_run=False, full=True
        )
    except (DeltaError, OSError) as exc:
        raise CheckpointStorageError(
            f"retention cannot vacuum {layout.table_uri(CHECKPOINTS)!r}: {type(exc).__name__}: {exc}",
            url=layout.table_uri(CHECKPOINTS),
        ) from exc
    return [p[len(root) :] if p.startswith(root) else p.lstrip("/") for p in deleted]


def _delete_orphans(layout: CheckpointLayout, job_id: str, oldest: int, savepoints: set[int]) -> list[str]:
    """Delete never-committed files in partitions of checkpoints older than ``oldest``."""
    fs, _ = layout.filesystem()
    removed: list[str] = []
    for table in STATE_TABLES:
        job_dir = f"{layout.table_path(table)}/job_id={job_id}"
        # Object-store clients cache listings; vacuum has just deleted files behind this one's back.
        fs.invalidate_cache(job_dir)
        try:
            partitions = fs.ls(job_dir, detail=False)
        except FileNotFoundError:
            continue
        committed = {p for p, *_ in _committed_files(layout, table, job_id, None)}
        for partition in partitions:
            name = partition.rstrip("/").rsplit("/", 1)[-1]
            if not name.startswith("checkpoint_id="):
                continue
            try:
                cid = int(name.split("=", 1)[1])
            except ValueError:
                continue
            if cid >= oldest or cid in savepoints:
                continue
            try:
                files = fs.ls(partition, detail=False)
            except FileNotFoundError:
                continue  # on an object store a "directory" is a key prefix: it went with its last file
            for path in files:
                relative = f"job_id={job_id}/{name}/{path.rstrip('/').rsplit('/', 1)[-1]}"
                if relative not in committed:
                    fs.rm_file(path)
                    removed.append(f"{table}/{relative}")
            try:
                if not fs.ls(partition, detail=False):
                    fs.rmdir(partition)
            except FileNotFoundError:
                pass
    return removed
