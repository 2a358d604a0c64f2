"""Coordinator side: make a checkpoint's files visible, then mark it complete.

Protocol of :meth:`CheckpointCommitter.commit` (docs/architecture.md, "Checkpointing"):

1. Check every handle's files exist with their recorded size (a Delta commit
   does not check; committing a missing file would create a corrupt checkpoint).
2. ``operator_state`` then ``channel_state``: one Delta transaction per table
   adding all files of the checkpoint, carrying the app transaction
   ``(f"{job_id}/{table}", checkpoint_id)``.
3. Append the ``checkpoints`` row (app transaction ``f"{job_id}/checkpoints"``):
   the completion marker. Restore trusts no checkpoint without it.

A crash or error between steps leaves no ``checkpoints`` row, so the
checkpoint is invisible to restore; calling :meth:`commit` again with the same
handles finishes it without duplicating rows (each step is skipped when the
table's app transaction version shows it is done and its files/row are present).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pds
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError
from deltalake.transaction import AddAction, CommitProperties, Transaction

from flinklike_spark.errors import CheckpointCommitConflictError, CheckpointStorageError, CorruptCheckpointError

from .app_transactions import commit_files, is_committed
from .chains import encode_chains, live_checkpoint_ids
from .format_versions import WRITER_VERSION_PROPERTY, writer_version
from .layout import (
    CHANNEL_STATE,
    CHECKPOINTS,
    OPERATOR_STATE,
    STATE_TABLES,
    CheckpointLayout,
    TableName,
    as_layout,
    check_checkpoint_id,
    check_job_id,
    scan_table,
)
from .savepoint_marker import write_savepoint_marker
from .schemas import (
    CHECKPOINTS_SCHEMA,
    FORMAT_VERSION,
    LINEAGE_PROPERTY,
    MAX_PARALLELISM_PROPERTY_PREFIX,
    STATE_CHAINS_PROPERTY,
    STATE_PARTITION_COLUMNS,
    CheckpointKind,
    SnapshotAlignment,
    as_enum,
)
from .writer import StateFile, StateHandle, discard_handles

__all__ = [
    "CheckpointCommitter",
    "CheckpointRecord",
    "CommitResult",
]

_log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointRecord:
    """What the coordinator knows about a checkpoint; becomes its ``checkpoints`` row.

    Byte counts, operator uids and file counts are derived from the handles.
    Stored as ``duration_ms`` / ``max_alignment_ms`` columns.

    Attributes:
        trigger_time: when the coordinator triggered the checkpoint (aware or UTC).
        completion_time: when all acknowledgements arrived; defaults to now.
        kind: a checkpoint or a savepoint (savepoints survive retention); its value also accepted.
        mode: how the snapshot was actually taken (a :class:`SnapshotAlignment`; its value also accepted).
        max_alignment: longest alignment time of any subtask.
        parallelism: job vertex (name or uid) -> parallelism.
        max_parallelism: job vertex -> max parallelism (number of key groups),
            to refuse restores that would map keyed state to other key groups.
        lineage_id: id of the first job of the restore lineage (sinks derive
            their transactional ids from it); empty when unknown.
        job_graph_fingerprint: identifies the job graph, to detect incompatible restores.
        properties: free-form string metadata (e.g. ``restored_from``).

    ``max_parallelism`` and ``lineage_id`` are stored in the row's ``properties``
    (keys :data:`~checkpointing.schemas.MAX_PARALLELISM_PROPERTY_PREFIX` + vertex,
    :data:`~checkpointing.schemas.LINEAGE_PROPERTY`), which keeps the table
    format unchanged.
    """

    trigger_time: datetime
    completion_time: datetime | None = None
    kind: CheckpointKind = CheckpointKind.CHECKPOINT
    mode: SnapshotAlignment = SnapshotAlignment.ALIGNED
    max_alignment: timedelta = timedelta(0)
    parallelism: Mapping[str, int] = dataclasses.field(default_factory=dict)
    max_parallelism: Mapping[str, int] = dataclasses.field(default_factory=dict)
    lineage_id: str = ""
    job_graph_fingerprint: str = ""
    properties: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def stored_properties(self) -> dict[str, str]:
        """``properties`` plus the encoded ``max_parallelism`` and ``lineage_id``."""
        stored = {str(k): str(v) for k, v in self.properties.items()}
        stored.update({f"{MAX_PARALLELISM_PROPERTY_PREFIX}{v}": str(int(n)) for v, n in self.max_parallelism.items()})
        if self.lineage_id:
            stored[LINEAGE_PROPERTY] = self.lineage_id
        return stored

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", as_enum(self.kind, CheckpointKind, "checkpoint kind"))
        object.__setattr__(self, "mode", as_enum(self.mode, SnapshotAlignment, "checkpoint mode"))
        if not isinstance(self.trigger_time, datetime):
            raise TypeError(f"trigger_time must be a datetime, got {self.trigger_time!r}")
        if self.completion_time is not None and not isinstance(self.completion_time, datetime):
            raise TypeError(f"completion_time must be a datetime or None, got {self.completion_time!r}")
        if not isinstance(self.max_alignment, timedelta) or self.max_alignment < timedelta(0):
            raise ValueError(f"max_alignment must be a timedelta >= 0, got {self.max_alignment!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class CommitResult:
    """Outcome of :meth:`CheckpointCommitter.commit`.

    Attributes:
        table_versions: table -> a Delta version at which the checkpoint is visible
            (absent when the checkpoint wrote nothing to that table).
        skipped: tables whose step had already been done by an earlier attempt.
    """

    job_id: str
    checkpoint_id: int
    table_versions: Mapping[str, int]
    skipped: frozenset[str]

    @property
    def already_committed(self) -> bool:
        """True when an earlier attempt had already written the completion row."""
        return CHECKPOINTS in self.skipped


def _utc(ts: datetime) -> datetime:
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)


def _ms(delta: timedelta) -> int:
    return int(delta / timedelta(milliseconds=1))


class CheckpointCommitter:
    """Commits and aborts checkpoints under one base URL (runs in the JobMaster).

    Creates the three tables on construction if they do not exist. Methods are
    not meant to run concurrently for the same job (the coordinator's main
    thread calls them); concurrent commits of different jobs are safe (Delta
    optimistic concurrency, retried by deltalake).

    Raises (construction and every method):
        CheckpointStorageError: the base URL cannot be written or read.
    """

    def __init__(self, base: str | os.PathLike[str] | CheckpointLayout) -> None:
        self._layout = as_layout(base)
        for table in (CHECKPOINTS, *STATE_TABLES):
            self._layout.open_table(table, create=True)

    @property
    def layout(self) -> CheckpointLayout:
        return self._layout

    def commit(
        self,
        job_id: str,
        checkpoint_id: int,
        handles: Sequence[StateHandle],
        checkpoint_row: CheckpointRecord | Mapping[str, Any],
    ) -> CommitResult:
        """Make the checkpoint's files visible and write its completion row; idempotent.

        Args:
            handles: every subtask's handle for this checkpoint (all acknowledged).
            checkpoint_row: a :class:`CheckpointRecord` or a mapping of its fields.

        Returns:
            Which table versions hold the checkpoint and which steps were skipped.

        Raises:
            ValueError: a handle belongs to another job or checkpoint.
            CorruptCheckpointError: a handle's file is missing or has the wrong size;
                nothing was committed for the table that holds it.
            CheckpointStorageError: a Delta commit failed; no completion row exists,
                and a retry of ``commit`` continues where this one stopped.
        """
        check_job_id(job_id)
        check_checkpoint_id(checkpoint_id)
        record = (
            checkpoint_row if isinstance(checkpoint_row, CheckpointRecord) else CheckpointRecord(**dict(checkpoint_row))
        )
        for h in handles:
            if h.job_id != job_id or h.checkpoint_id != checkpoint_id:
                raise ValueError(
                    f"handle of job {h.job_id!r} checkpoint {h.checkpoint_id} passed to the "
                    f"commit of job {job_id!r} checkpoint {checkpoint_id}"
                )
        files = {t: [f for h in handles for f in h.files if f.table == t] for t in STATE_TABLES}
        versions: dict[str, int] = {}
        skipped: set[str] = set()

        if self._completion_row_exists(job_id, checkpoint_id):
            # Completed by an earlier attempt; state files were committed before the row.
            skipped.update((CHECKPOINTS, *STATE_TABLES))
            return CommitResult(
                job_id=job_id, checkpoint_id=checkpoint_id, table_versions={}, skipped=frozenset(skipped)
            )

        self._check_chains(job_id, checkpoint_id, handles, record)
        for table in STATE_TABLES:
            if not files[table]:
                continue
            version, was_done = self._commit_state_files(job_id, checkpoint_id, table, files[table])
            versions[table] = version
            if was_done:
                skipped.add(table)

        row = self._row(job_id, checkpoint_id, handles, record, files, versions)
        versions[CHECKPOINTS] = self._append_completion_row(job_id, checkpoint_id, row)
        _log.info("committed checkpoint %s of job %s (versions %s)", checkpoint_id, job_id, versions)
        if record.kind is CheckpointKind.SAVEPOINT:
            write_savepoint_marker(self._layout, job_id, checkpoint_id)
        return CommitResult(
            job_id=job_id,
            checkpoint_id=checkpoint_id,
            table_versions=versions,
            skipped=frozenset(skipped),
        )

    def abort(self, handles: Iterable[StateHandle]) -> None:
        """Delete the uncommitted files of an aborted checkpoint; missing files are ignored.

        Only for checkpoints whose :meth:`commit` never succeeded in any table;
        files already committed are left alone (they belong to a table version).
        """
        handles = list(handles)
        if not handles:
            return
        committed: set[tuple[str, str]] = set()
        for table in STATE_TABLES:
            dt = self._layout.open_table(table)
            if dt is None:
                continue
            for h in handles:
                committed.update((table, p) for p in self._paths_in(dt, h.job_id, h.checkpoint_id))
        keep = [
            dataclasses.replace(h, files=tuple(f for f in h.files if (f.table, f.path) not in committed))
            for h in handles
        ]
        discard_handles(self._layout, keep)

    # -- steps ---------------------------------------------------------------

    def _check_chains(
        self, job_id: str, checkpoint_id: int, handles: Sequence[StateHandle], record: CheckpointRecord
    ) -> None:
        """Refuse an incremental checkpoint whose chain names a checkpoint that is not alive.

        Alive: retained (it has a completion row) or named by a retained checkpoint's
        chain; retention keeps exactly those partitions (:mod:`checkpointing.retention`),
        so an alive chain's files exist. A chain on a checkpoint that never completed,
        or whose state retention already deleted, would restore wrong state.

        Raises:
            CorruptCheckpointError: naming the checkpoint and the dead ids.
        """
        parents = {c for h in handles if h.chain is not None for c in h.chain[:-1]}
        if not parents:
            return
        if record.kind is CheckpointKind.SAVEPOINT:
            raise ValueError(
                f"savepoint {checkpoint_id} of job {job_id!r} has incremental state; savepoints are self-contained"
            )
        from .reader import read_checkpoints_table

        rows = read_checkpoints_table(self._layout, job_id).select(["checkpoint_id", "properties"]).to_pylist()
        live = live_checkpoint_ids((r["checkpoint_id"], dict(r["properties"] or ())) for r in rows)
        dead = sorted(parents - live)
        if dead:
            raise CorruptCheckpointError(
                f"cannot commit incremental checkpoint {checkpoint_id} of job {job_id!r}: its state builds on "
                f"checkpoints {dead}, which are neither retained nor shared by a retained checkpoint "
                f"(aborted, or deleted by retention); the next checkpoint writes a full snapshot",
                url=self._layout.base_url,
                job_id=job_id,
                checkpoint_id=checkpoint_id,
                path=self._layout.table_path(OPERATOR_STATE),
            )

    def _check_files(self, job_id: str, checkpoint_id: int, files: list[StateFile]) -> None:
        fs, _ = self._layout.filesystem()
        for f in files:
            path = self._layout.file_path(f.table, f.path)
            try:
                size = fs.size(path)
            except FileNotFoundError:
                size = None
            except OSError as exc:
                raise CheckpointStorageError(
                    f"cannot stat checkpoint file {path!r}: {exc}", url=self._layout.base_url
                ) from exc
            if size != f.size:
                what = "is missing" if size is None else f"has {size} bytes, expected {f.size}"
                raise CorruptCheckpointError(
                    f"cannot commit checkpoint {checkpoint_id} of job {job_id!r}: file {path} {what}",
                    url=self._layout.base_url,
                    job_id=job_id,
                    checkpoint_id=checkpoint_id,
                    path=path,
                )

    @staticmethod
    def _paths_in(dt: DeltaTable, job_id: str, checkpoint_id: int) -> set[str]:
        actions = pa.table(dt.get_add_actions(flatten=True))
        if actions.num_rows == 0:
            return set()
        mask = pc.and_(
            pc.equal(actions["partition.job_id"], job_id),
            pc.equal(actions["partition.checkpoint_id"], checkpoint_id),
        )
        return set(actions.filter(mask)["path"].to_pylist())

    def _commit_state_files(
        self, job_id: str, checkpoint_id: int, table: TableName, files: list[StateFile]
    ) -> tuple[int, bool]:
        dt = self._layout.open_table(table, create=True)
        app_id = f"{job_id}/{table}"
        txn_version = dt.transaction_version(app_id)
        wanted = {f.path for f in files}
        app_version = checkpoint_id
        if is_committed(dt, app_id, checkpoint_id):
            present = self._paths_in(dt, job_id, checkpoint_id) & wanted
            if present == wanted:
                return dt.version(), True
            if present:
                raise CheckpointStorageError(
                    f"checkpoint {checkpoint_id} of job {job_id!r} is partly committed in {table} "
                    f"with other files ({len(present)} of {len(wanted)}); refusing to mix attempts",
                    url=self._layout.table_uri(table),
                )
            if txn_version == checkpoint_id:
                raise CheckpointStorageError(
                    f"checkpoint {checkpoint_id} of job {job_id!r} was committed to {table} with "
                    f"different files than these handles",
                    url=self._layout.table_uri(table),
                )
            # A newer checkpoint committed first (e.g. a late savepoint). Keep the app
            # transaction at its newer version: lowering it would let a retry of the
            # newer checkpoint commit its files twice.
            app_version = txn_version
        self._check_files(job_id, checkpoint_id, files)
        actions = [
            AddAction(
                path=f.path,
                size=f.size,
                partition_values=dict(f.partition_values),
                modification_time=int(f.modification_time.timestamp() * 1000),
                data_change=True,
                stats=f.stats,
            )
            for f in files
        ]
        with self._translating_commit_errors(table, f"the files of checkpoint {checkpoint_id} of job {job_id!r}"):
            commit_files(
                dt,
                actions,
                {app_id: app_version},
                partition_by=STATE_PARTITION_COLUMNS,
                custom_metadata={"flinklike.checkpoint": f"{job_id}/{checkpoint_id}"},
            )
            dt.update_incremental()
        return dt.version(), False

    def _completion_row_exists(self, job_id: str, checkpoint_id: int) -> bool:
        dt = self._layout.open_table(CHECKPOINTS, create=True)
        txn = dt.transaction_version(f"{job_id}/{CHECKPOINTS}")
        if txn is None or txn < checkpoint_id:
            return False
        try:
            rows = scan_table(
                dt,
                columns=["checkpoint_id"],
                filter=(pds.field("job_id") == job_id) & (pds.field("checkpoint_id") == checkpoint_id),
            )
        except (DeltaError, OSError, pa.ArrowException) as exc:
            raise CheckpointStorageError(
                f"cannot read {self._layout.table_uri(CHECKPOINTS)!r}: {exc}",
                url=self._layout.table_uri(CHECKPOINTS),
            ) from exc
        return rows.num_rows > 0

    def _append_completion_row(self, job_id: str, checkpoint_id: int, row: dict[str, Any]) -> int:
        dt = self._layout.open_table(CHECKPOINTS, create=True)
        app_id = f"{job_id}/{CHECKPOINTS}"
        txn = dt.transaction_version(app_id)
        app_version = max(checkpoint_id, txn) if txn is not None else checkpoint_id
        data = pa.Table.from_pylist([row], schema=CHECKPOINTS_SCHEMA)
        what = f"the completion row of checkpoint {checkpoint_id} of job {job_id!r}"
        with self._translating_commit_errors(CHECKPOINTS, what):
            write_deltalake(
                dt,
                data,
                mode="append",
                commit_properties=CommitProperties(
                    app_transactions=[Transaction(app_id, app_version)],
                    custom_metadata={"flinklike.checkpoint": f"{job_id}/{checkpoint_id}"},
                ),
            )  # leaves ``dt`` at the version it committed: no update (a listing of the log) needed
        return dt.version()

    @contextlib.contextmanager
    def _translating_commit_errors(self, table: TableName, what: str) -> Iterator[None]:
        """Commit ``what`` to ``table`` inside: a lost commit race becomes
        :class:`CheckpointCommitConflictError`, any other Delta or I/O failure :class:`CheckpointStorageError`,
        both naming ``what`` and the table's URL."""
        url = self._layout.table_uri(table)
        try:
            yield
        except CommitFailedError as exc:
            raise CheckpointCommitConflictError(
                f"the commit of {what} to {url!r} lost a race with a concurrent writer: {exc}", url=url
            ) from exc
        except (DeltaError, OSError) as exc:
            raise CheckpointStorageError(
                f"cannot commit {what} to {url!r}: {type(exc).__name__}: {exc}", url=url
            ) from exc

    @staticmethod
    def _row(
        job_id: str,
        checkpoint_id: int,
        handles: Sequence[StateHandle],
        record: CheckpointRecord,
        files: Mapping[str, list[StateFile]],
        versions: Mapping[str, int],
    ) -> dict[str, Any]:
        trigger = _utc(record.trigger_time)
        completion = _utc(record.completion_time or datetime.now(UTC))
        return {
            "job_id": job_id,
            "checkpoint_id": checkpoint_id,
            "kind": record.kind.value,
            "mode": record.mode.value,
            "trigger_time": trigger,
            "completion_time": completion,
            "duration_ms": max(0, _ms(completion - trigger)),
            "max_alignment_ms": _ms(record.max_alignment),
            "state_bytes": sum(h.state_bytes for h in handles),
            "channel_state_bytes": sum(h.channel_state_bytes for h in handles),
            "parallelism": [(str(k), int(v)) for k, v in sorted(record.parallelism.items())],
            "job_graph_fingerprint": record.job_graph_fingerprint,
            "operator_uids": sorted({h.operator_uid for h in handles}),
            "num_subtask_handles": len(handles),
            "operator_state_files": len(files[OPERATOR_STATE]),
            "channel_state_files": len(files[CHANNEL_STATE]),
            "operator_state_version": versions.get(OPERATOR_STATE),
            "channel_state_version": versions.get(CHANNEL_STATE),
            "format_version": FORMAT_VERSION,
            "properties": sorted(_properties(record, handles).items()),
        }


def _properties(record: CheckpointRecord, handles: Sequence[StateHandle]) -> dict[str, str]:
    """The row's ``properties``: the record's, plus the chains of incremental subtasks."""
    stored = record.stored_properties()
    stored[WRITER_VERSION_PROPERTY] = writer_version()
    chains = {(h.operator_uid, h.subtask): h.chain for h in handles if h.chain is not None and len(h.chain) > 1}
    if chains:
        stored[STATE_CHAINS_PROPERTY] = encode_chains(chains)
    return stored
