"""Restore side: list completed checkpoints, validate them, read state back.

Only checkpoints with a ``checkpoints`` row are completed; nothing here reads
state of a checkpoint without one. State files are located through the Delta
log of ``operator_state`` / ``channel_state`` (partition ``job_id``,
``checkpoint_id``) and read one by one, so a missing or damaged file raises
:class:`CorruptCheckpointError` naming the checkpoint and the file instead of
a bare Arrow or object-store error.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import pickle
from collections.abc import Callable, Collection, Iterator, Mapping
from datetime import datetime, timedelta
from typing import Any, NamedTuple, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pds
import pyarrow.parquet as pq
from deltalake.exceptions import DeltaError

from flinklike_spark.errors import (
    CheckpointNotFoundError,
    CheckpointStorageError,
    CorruptCheckpointError,
)

from .chains import decode_chains, resolve_chain_rows
from .format_versions import check_restorable, upgrade_state_rows
from .layout import (
    CHANNEL_STATE,
    CHECKPOINTS,
    OPERATOR_STATE,
    STATE_TABLES,
    CheckpointLayout,
    TableName,
    as_layout,
    check_job_id,
    scan_table,
)
from .savepoint_marker import savepoint_path
from .schemas import (
    CHANNEL_STATE_SCHEMA,
    CHECKPOINTS_SCHEMA,
    FINISHED_VERTICES_PROPERTY,
    LINEAGE_PROPERTY,
    MAX_PARALLELISM_PROPERTY_PREFIX,
    NON_KEYED_KEY_GROUP,
    OPERATOR_STATE_SCHEMA,
    CheckpointKind,
    Direction,
    SnapshotAlignment,
    check_literal,
)

__all__ = [
    "ChannelBuffer",
    "CompletedCheckpoint",
    "StateEntry",
    "decode_operator_state",
    "find_restorable_checkpoint",
    "iter_keyed_state",
    "latest_completed",
    "list_completed_checkpoints",
    "read_channel_state",
    "read_checkpoints_table",
    "read_operator_state",
    "read_state_files",
    "verify_checkpoint",
]

T = TypeVar("T")

_log = logging.getLogger(__name__)

#: Loads of the checkpoints table tried when the version loaded names a file retention vacuumed meanwhile.
_STALE_SNAPSHOT_ATTEMPTS = 5

Base = str | os.PathLike[str] | CheckpointLayout


@dataclasses.dataclass(frozen=True, kw_only=True)
class CompletedCheckpoint:
    """One row of the ``checkpoints`` table, with durations as timedelta."""

    job_id: str
    checkpoint_id: int
    kind: CheckpointKind
    mode: SnapshotAlignment
    trigger_time: datetime
    completion_time: datetime
    duration: timedelta
    max_alignment: timedelta
    state_bytes: int
    channel_state_bytes: int
    parallelism: Mapping[str, int]
    job_graph_fingerprint: str
    operator_uids: tuple[str, ...]
    operator_state_files: int
    channel_state_files: int
    operator_state_version: int | None
    channel_state_version: int | None
    format_version: int
    properties: Mapping[str, str]

    @property
    def max_parallelism(self) -> dict[str, int]:
        """Vertex id -> max parallelism at checkpoint time; empty for checkpoints that did not record it."""
        prefix = MAX_PARALLELISM_PROPERTY_PREFIX
        return {k[len(prefix) :]: int(v) for k, v in self.properties.items() if k.startswith(prefix)}

    @property
    def finished_vertices(self) -> frozenset[str]:
        """Ids of the vertices that had fully finished when the checkpoint was taken (FLIP-147)."""
        return frozenset(json.loads(self.properties.get(FINISHED_VERTICES_PROPERTY) or "[]"))

    @property
    def lineage_id(self) -> str:
        """Id of the first job of this checkpoint's restore lineage (its own job id if not recorded)."""
        return self.properties.get(LINEAGE_PROPERTY) or self.job_id

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> CompletedCheckpoint:
        return cls(
            job_id=row["job_id"],
            checkpoint_id=row["checkpoint_id"],
            kind=CheckpointKind(row["kind"]),
            mode=SnapshotAlignment(row["mode"]),
            trigger_time=row["trigger_time"],
            completion_time=row["completion_time"],
            duration=timedelta(milliseconds=row["duration_ms"]),
            max_alignment=timedelta(milliseconds=row["max_alignment_ms"]),
            state_bytes=row["state_bytes"],
            channel_state_bytes=row["channel_state_bytes"],
            parallelism=dict(row["parallelism"] or ()),
            job_graph_fingerprint=row["job_graph_fingerprint"] or "",
            operator_uids=tuple(row["operator_uids"] or ()),
            operator_state_files=row["operator_state_files"],
            channel_state_files=row["channel_state_files"],
            operator_state_version=row["operator_state_version"],
            channel_state_version=row["channel_state_version"],
            format_version=row["format_version"],
            properties=dict(row["properties"] or ()),
        )


class ChannelBuffer(NamedTuple):
    """One persisted in-flight buffer, in replay order."""

    gate: int
    channel: int
    sequence: int
    batch: pa.RecordBatch


class StateEntry(NamedTuple):
    """One decoded ``operator_state`` row."""

    state_name: str
    state_kind: str
    key_group: int
    key: Any
    value: Any


def _storage_error(layout: CheckpointLayout, what: str, exc: BaseException) -> CheckpointStorageError:
    return CheckpointStorageError(
        f"cannot {what} under {layout.base_url!r}: {type(exc).__name__}: {exc}", url=layout.base_url
    )


def read_checkpoints_table(base: Base, job_id: str | None = None) -> pa.Table:
    """The ``checkpoints`` rows (of ``job_id``, or all), sorted by job_id, checkpoint_id.

    An absent table reads as empty (nothing was ever committed there).
    """
    layout = as_layout(base)
    if job_id is not None:
        check_job_id(job_id)
    for attempt in range(1, _STALE_SNAPSHOT_ATTEMPTS + 1):
        dt = layout.open_table(CHECKPOINTS)
        if dt is None:
            return CHECKPOINTS_SCHEMA.empty_table()
        try:
            table = scan_table(dt, filter=None if job_id is None else pds.field("job_id") == job_id)
            break
        except FileNotFoundError as exc:
            # Retention (another process) rewrote the table and vacuumed a file of the version loaded here:
            # it keeps no removed file for readers, so a newer version is read instead.
            if attempt == _STALE_SNAPSHOT_ATTEMPTS:
                raise _storage_error(layout, "read the checkpoints table", exc) from exc
            _log.debug("checkpoints table version %s lost a file to retention; reading the latest", dt.version())
        except (DeltaError, OSError, pa.ArrowException) as exc:
            raise _storage_error(layout, "read the checkpoints table", exc) from exc
    table = table.select(CHECKPOINTS_SCHEMA.names).cast(CHECKPOINTS_SCHEMA)
    return table.sort_by([("job_id", "ascending"), ("checkpoint_id", "ascending")])


def list_completed_checkpoints(
    base: Base, job_id: str | None = None, *, include_savepoints: bool = True
) -> list[CompletedCheckpoint]:
    """Completed checkpoints (those with a ``checkpoints`` row), oldest first.

    Sorted by ``(job_id, checkpoint_id)``. Listing does not validate files; use
    :func:`verify_checkpoint` or :func:`find_restorable_checkpoint` for that.
    Only retained checkpoints have a row: retention removes those beyond
    ``execution.checkpointing.num-retained`` (default 1). To wait until a job's
    N-th checkpoint completed, compare :func:`latest_completed`'s id, not the
    length of this list.
    """
    rows = read_checkpoints_table(base, job_id).to_pylist()
    found = [CompletedCheckpoint.from_row(r) for r in rows]
    if not include_savepoints:
        found = [c for c in found if c.kind is not CheckpointKind.SAVEPOINT]
    return found


def latest_completed(base: Base, job_id: str, *, include_savepoints: bool = True) -> CompletedCheckpoint | None:
    """The completed checkpoint of ``job_id`` with the highest id, or None. Not validated."""
    found = list_completed_checkpoints(base, job_id, include_savepoints=include_savepoints)
    return found[-1] if found else None


def _completed(layout: CheckpointLayout, job_id: str, checkpoint_id: int) -> CompletedCheckpoint:
    for c in list_completed_checkpoints(layout, job_id):
        if c.checkpoint_id == checkpoint_id:
            return c
    raise CheckpointNotFoundError(
        f"checkpoint {checkpoint_id} of job {job_id!r} is not completed under {layout.base_url!r} "
        f"(no row in the checkpoints table)",
        url=layout.base_url,
    )


def _committed_files(
    layout: CheckpointLayout,
    table: TableName,
    job_id: str | None,
    checkpoint_id: int | None,
    checkpoint_ids: Collection[int] | None = None,
) -> list[tuple[str, int, str, int]]:
    """``(relative path, size, job_id, checkpoint_id)`` of the committed files of a table."""
    dt = layout.open_table(table)
    if dt is None:
        return []
    try:
        actions = pa.table(dt.get_add_actions(flatten=True))
    except (DeltaError, OSError) as exc:
        raise _storage_error(layout, f"read the Delta log of {table}", exc) from exc
    if actions.num_rows == 0:
        return []
    selected = actions
    if job_id is not None:
        selected = selected.filter(pc.equal(selected["partition.job_id"], job_id))
    if checkpoint_id is not None:
        selected = selected.filter(pc.equal(selected["partition.checkpoint_id"], checkpoint_id))
    if checkpoint_ids is not None:
        wanted = pa.array(sorted(checkpoint_ids), selected.schema.field("partition.checkpoint_id").type)
        selected = selected.filter(pc.is_in(selected["partition.checkpoint_id"], value_set=wanted))
    out = list(
        zip(
            selected["path"].to_pylist(),
            selected["size_bytes"].to_pylist(),
            selected["partition.job_id"].to_pylist(),
            selected["partition.checkpoint_id"].to_pylist(),
        )
    )
    return sorted(out)


def _corrupt(layout: CheckpointLayout, job_id: str, checkpoint_id: int, path: str, what: str) -> CorruptCheckpointError:
    return CorruptCheckpointError(
        f"checkpoint {checkpoint_id} of job {job_id!r} under {layout.base_url!r} is corrupt: file {path} {what}",
        url=layout.base_url,
        job_id=job_id,
        checkpoint_id=checkpoint_id,
        path=path,
    )


def _read_parquet(layout: CheckpointLayout, job_id: str, checkpoint_id: int, path: str, read: Callable[[Any], T]) -> T:
    """``read`` (e.g. ``pq.read_table``) of the committed file ``path``; CorruptCheckpointError if it is unreadable."""
    try:
        with layout.open_input_file(path) as f:
            return read(f)
    except (OSError, pa.ArrowException) as exc:
        raise _corrupt(layout, job_id, checkpoint_id, path, f"is damaged ({type(exc).__name__}: {exc})") from exc


def _check_file(
    layout: CheckpointLayout, job_id: str, checkpoint_id: int, path: str, size: int, *, footer: bool
) -> None:
    fs, _ = layout.filesystem()
    try:
        actual = fs.size(path)
    except FileNotFoundError:
        raise _corrupt(layout, job_id, checkpoint_id, path, "is missing") from None
    except OSError as exc:
        raise _storage_error(layout, f"stat {path}", exc) from exc
    if actual != size:
        raise _corrupt(layout, job_id, checkpoint_id, path, f"has {actual} bytes, the Delta log says {size}")
    if footer:
        _read_parquet(layout, job_id, checkpoint_id, path, pq.read_metadata)


def read_state_files(
    base: Base,
    table: TableName,
    *,
    job_id: str | None = None,
    checkpoint_id: int | None = None,
    filter: pds.Expression | None = None,
    columns: list[str] | None = None,
    checkpoint_ids: Collection[int] | None = None,
    per_file: bool = False,
) -> pa.Table | list[pa.Table]:
    """Read committed rows of ``operator_state`` or ``channel_state``, file by file.

    ``checkpoint_ids`` (with or instead of ``checkpoint_id``) selects several
    partitions; ``per_file`` returns one table per file instead of one table.
    Files written before the ``change`` column existed read it as null. Rows are
    the stored ones: incremental chains are not resolved here
    (:func:`read_operator_state` does that). Does not check for a completion row
    (inspection reads partial commits too); the restore functions do. Each file
    is checked for existence and size first.

    Raises:
        CorruptCheckpointError: a committed file is missing, truncated or unreadable.
    """
    layout = as_layout(base)
    if table not in STATE_TABLES:
        raise ValueError(f"invalid state table {table!r}; valid choices: {STATE_TABLES}")
    schema = OPERATOR_STATE_SCHEMA if table == OPERATOR_STATE else CHANNEL_STATE_SCHEMA
    parts = list(_iter_state_files(layout, table, job_id, checkpoint_id, checkpoint_ids, filter))
    if per_file:
        return [p.select(columns) if columns is not None else p for p in parts]
    result = pa.concat_tables(parts) if parts else schema.empty_table()
    return result.select(columns) if columns is not None else result


def _iter_state_files(
    layout: CheckpointLayout,
    table: TableName,
    job_id: str | None,
    checkpoint_id: int | None,
    checkpoint_ids: Collection[int] | None,
    filter: pds.Expression | None,
) -> Iterator[pa.Table]:
    """The rows of each committed file of ``table`` (after ``filter``), one file at a time."""
    schema = OPERATOR_STATE_SCHEMA if table == OPERATOR_STATE else CHANNEL_STATE_SCHEMA
    for relative, size, job, cid in _committed_files(layout, table, job_id, checkpoint_id, checkpoint_ids):
        path = layout.file_path(table, relative)
        _check_file(layout, job, cid, path, size, footer=False)
        data = _read_parquet(layout, job, cid, path, lambda f: pq.read_table(f, filters=filter))
        n = data.num_rows
        for name in schema.names:
            if name not in data.column_names and name not in ("job_id", "checkpoint_id"):
                data = data.append_column(schema.field(name), pa.nulls(n, schema.field(name).type))
        data = data.add_column(0, "checkpoint_id", pa.repeat(pa.scalar(cid, pa.int64()), n))
        data = data.add_column(0, "job_id", pa.repeat(pa.scalar(job, pa.string()), n))
        yield data.select(schema.names).cast(schema)


def verify_checkpoint(base: Base, job_id: str, checkpoint_id: int, *, full: bool = False) -> CompletedCheckpoint:
    """Check that a completed checkpoint is restorable; return its row.

    Checks: the completion row exists; the Delta logs list as many files for it
    as the row recorded; every file exists with the logged size and a readable
    Parquet footer. With ``full=True`` every file is also read completely
    (catches damage inside pages, at the cost of reading all state).

    Raises:
        CheckpointNotFoundError: no completion row.
        UnsupportedSnapshotFormatError: its format is one this code cannot restore
            (see :mod:`checkpointing.format_versions`).
        CorruptCheckpointError: names the first bad file (or the missing count).
    """
    layout = as_layout(base)
    check_job_id(job_id)
    completed = _completed(layout, job_id, checkpoint_id)
    check_restorable(
        completed.format_version, completed.properties, savepoint_path(layout.base_url, job_id, checkpoint_id)
    )
    expected = {
        OPERATOR_STATE: completed.operator_state_files,
        CHANNEL_STATE: completed.channel_state_files,
    }
    parents = {c for chain in decode_chains(completed.properties).values() for c in chain[:-1]}
    if parents:
        # Files shared with older checkpoints of its incremental chains: present and readable.
        for relative, size, _, cid in _committed_files(layout, OPERATOR_STATE, job_id, None, parents):
            path = layout.file_path(OPERATOR_STATE, relative)
            try:
                _check_file(layout, job_id, cid, path, size, footer=True)
            except CorruptCheckpointError as exc:
                raise _corrupt(
                    layout,
                    job_id,
                    checkpoint_id,
                    path,
                    f"(shared with checkpoint {cid} in its incremental chain) is bad: {exc}",
                ) from exc
            if full:
                _read_parquet(layout, job_id, checkpoint_id, path, pq.read_table)
    for table in STATE_TABLES:
        files = _committed_files(layout, table, job_id, checkpoint_id)
        if len(files) != expected[table]:
            raise _corrupt(
                layout,
                job_id,
                checkpoint_id,
                layout.table_path(table),
                f"lists {len(files)} committed files for it, the checkpoint recorded {expected[table]}",
            )
        for relative, size, _, _ in files:
            path = layout.file_path(table, relative)
            _check_file(layout, job_id, checkpoint_id, path, size, footer=True)
            if full:
                _read_parquet(layout, job_id, checkpoint_id, path, pq.read_table)
    return completed


def find_restorable_checkpoint(
    base: Base,
    job_id: str,
    *,
    include_savepoints: bool = True,
    max_checkpoint_id: int | None = None,
    full: bool = False,
) -> CompletedCheckpoint:
    """The newest completed checkpoint of ``job_id`` that passes :func:`verify_checkpoint`.

    Walks back from the newest (at most ``max_checkpoint_id``), logging a
    warning naming each corrupt checkpoint and its bad file, and skipping it.

    Raises:
        CheckpointNotFoundError: no completed checkpoint is left (none, or all corrupt).
    """
    layout = as_layout(base)
    completed = list_completed_checkpoints(layout, job_id, include_savepoints=include_savepoints)
    candidates = completed
    if max_checkpoint_id is not None:
        candidates = [c for c in completed if c.checkpoint_id <= max_checkpoint_id]
    skipped: list[int] = []
    for candidate in reversed(candidates):
        try:
            return verify_checkpoint(layout, job_id, candidate.checkpoint_id, full=full)
        except CorruptCheckpointError as exc:
            skipped.append(candidate.checkpoint_id)
            _log.warning(
                "skipping corrupt checkpoint %d of job %r, falling back to an older one: %s",
                candidate.checkpoint_id,
                job_id,
                exc,
            )
    ids = [c.checkpoint_id for c in completed]
    detail = f"completed: {ids}" if ids else "none completed"
    if max_checkpoint_id is not None:
        detail += f"; {len(candidates)} of them at or below checkpoint {max_checkpoint_id}"
    if skipped:
        detail += f"; corrupt: {skipped}"
    raise CheckpointNotFoundError(
        f"no restorable checkpoint of job {job_id!r} under {layout.base_url!r} ({detail})",
        url=layout.base_url,
    )


def read_operator_state(
    base: Base,
    job_id: str,
    checkpoint_id: int,
    operator_uid: str,
    *,
    key_groups: range | None = None,
    subtask: int | None = None,
    keyed: bool | None = None,
    state_name: str | None = None,
) -> pa.Table:
    """Rows of ``operator_state`` of one operator in a completed checkpoint: its full state.

    For an incremental checkpoint the keyed state of each chained subtask is
    resolved from its chain (base rows plus later changes, newest wins, deletes
    dropped; see :mod:`checkpointing.chains`), so the result reads like a full
    snapshot's rows, all with this ``checkpoint_id``.

    Args:
        key_groups: keep keyed rows whose key group lies in this range (step 1),
            whichever subtask wrote them: a restored subtask asks for its own
            range, so a changed parallelism redistributes keyed state. Implies
            ``keyed=True``.
        subtask: keep rows written by this subtask (of the checkpointed job).
        keyed: True keeps keyed rows (key_group >= 0), False keeps operator
            state rows (key_group -1), None keeps both.
        state_name: keep rows of this state only.

    Returns:
        A table with :data:`checkpointing.schemas.OPERATOR_STATE_SCHEMA`, sorted
        by (key_group, state_name, subtask); ``key`` / ``value`` are pickles
        (see :func:`decode_operator_state`).

    Raises:
        CheckpointNotFoundError: the checkpoint is not completed.
        CorruptCheckpointError: a file of it is missing or damaged.
    """
    layout = as_layout(base)
    check_job_id(job_id)
    completed = _completed(layout, job_id, checkpoint_id)
    expr = _operator_state_filter(operator_uid, key_groups, subtask, keyed, state_name)
    table = read_state_files(layout, OPERATOR_STATE, job_id=job_id, checkpoint_id=checkpoint_id, filter=expr)
    chains = {s: c for (uid, s), c in decode_chains(completed.properties).items() if uid == operator_uid}
    if subtask is not None:
        chains = {s: c for s, c in chains.items() if s == subtask}
    if chains and keyed is not False:
        table = _resolve_chains(layout, job_id, checkpoint_id, table, chains, expr)
    table = upgrade_state_rows(completed.format_version, table)
    return table.sort_by([("key_group", "ascending"), ("state_name", "ascending"), ("subtask", "ascending")])


def iter_keyed_state(
    base: Base, job_id: str, checkpoint_id: int, operator_uid: str, *, key_groups: range
) -> Iterator[pa.Table]:
    """:func:`read_operator_state`'s keyed rows of ``key_groups``, one committed file at a time.

    For restores of state larger than memory: only one file's rows are in memory
    at once (rows are sorted within a file, not across files). An operator with
    incremental chains in this checkpoint is resolved first and comes as one table.

    Raises:
        CheckpointNotFoundError: the checkpoint is not completed (when called, not when iterated).
        CorruptCheckpointError: a file of it is missing or damaged (when iterated).
    """
    layout = as_layout(base)
    check_job_id(job_id)
    completed = _completed(layout, job_id, checkpoint_id)
    if any(uid == operator_uid for uid, _ in decode_chains(completed.properties)):
        return iter([read_operator_state(layout, job_id, checkpoint_id, operator_uid, key_groups=key_groups)])
    expr = _operator_state_filter(operator_uid, key_groups, None, True, None)
    files = _iter_state_files(layout, OPERATOR_STATE, job_id, checkpoint_id, None, expr)
    return (upgrade_state_rows(completed.format_version, rows) for rows in files)


def _operator_state_filter(
    operator_uid: str, key_groups: range | None, subtask: int | None, keyed: bool | None, state_name: str | None
) -> pds.Expression:
    expr = pds.field("operator_uid") == operator_uid
    if key_groups is not None:
        if not isinstance(key_groups, range) or key_groups.step != 1:
            raise ValueError(f"key_groups must be a range with step 1, got {key_groups!r}")
        if keyed is False:
            raise ValueError("key_groups selects keyed state; it contradicts keyed=False")
        expr &= (pds.field("key_group") >= max(key_groups.start, 0)) & (pds.field("key_group") < key_groups.stop)
    if keyed is True:
        expr &= pds.field("key_group") >= 0
    elif keyed is False:
        expr &= pds.field("key_group") == NON_KEYED_KEY_GROUP
    if subtask is not None:
        expr &= pds.field("subtask") == subtask
    if state_name is not None:
        expr &= pds.field("state_name") == state_name
    return expr


def _resolve_chains(
    layout: CheckpointLayout,
    job_id: str,
    checkpoint_id: int,
    own: pa.Table,
    chains: Mapping[int, tuple[int, ...]],
    expr: pds.Expression,
) -> pa.Table:
    """``own`` (the checkpoint's selected rows) with each chained subtask's keyed state resolved."""
    parent_ids = {c for chain in chains.values() for c in chain[:-1]}
    # Read per file (a file holds one subtask's rows of one checkpoint), so that the
    # large base needs no filtering to split it by checkpoint and subtask.
    parts: dict[tuple[int, int], list[pa.Table]] = {}
    files = read_state_files(
        layout, OPERATOR_STATE, job_id=job_id, checkpoint_ids=parent_ids,
        filter=expr & (pds.field("key_group") >= 0) & pds.field("subtask").isin(sorted(chains)),
        per_file=True,
    )  # fmt: skip
    for table in files:
        if table.num_rows:
            parts.setdefault((table["checkpoint_id"][0].as_py(), table["subtask"][0].as_py()), []).append(table)
    chained = pa.array(sorted(chains), pa.int32())
    out = [own.filter(pc.invert(pc.is_in(own["subtask"], value_set=chained)))]
    for subtask, chain in sorted(chains.items()):
        links = [
            (position, pa.concat_tables(parts[(cid, subtask)]))
            for position, cid in enumerate(chain[:-1])
            if (cid, subtask) in parts
        ]
        links.append((len(chain) - 1, own.filter(pc.equal(own["subtask"], subtask))))
        out.append(resolve_chain_rows(links))
    table = pa.concat_tables([t.select(OPERATOR_STATE_SCHEMA.names).cast(OPERATOR_STATE_SCHEMA) for t in out])
    # Every resolved row belongs to this checkpoint's state, wherever it was stored.
    field = OPERATOR_STATE_SCHEMA.field("checkpoint_id")
    return table.set_column(1, field, pa.repeat(pa.scalar(checkpoint_id, pa.int64()), table.num_rows))


def decode_operator_state(table: pa.Table) -> Iterator[StateEntry]:
    """Unpickle the rows of an ``operator_state`` table into :class:`StateEntry` tuples."""
    for row in table.select(["state_name", "state_kind", "key_group", "key", "value"]).to_pylist():
        yield StateEntry(
            row["state_name"],
            row["state_kind"],
            row["key_group"],
            None if row["key"] is None else pickle.loads(row["key"]),
            None if row["value"] is None else pickle.loads(row["value"]),
        )


def read_channel_state(
    base: Base,
    job_id: str,
    checkpoint_id: int,
    operator_uid: str,
    subtask: int,
    direction: Direction,
) -> list[ChannelBuffer]:
    """In-flight buffers of one subtask and direction, ordered by (gate, channel, sequence).

    Raises:
        CheckpointNotFoundError: the checkpoint is not completed.
        CorruptCheckpointError: a file is missing or damaged, or a payload is not
            a one-batch Arrow IPC stream.
    """
    layout = as_layout(base)
    check_job_id(job_id)
    check_literal(direction, Direction, "direction")
    _completed(layout, job_id, checkpoint_id)
    expr = (
        (pds.field("operator_uid") == operator_uid)
        & (pds.field("subtask") == subtask)
        & (pds.field("direction") == direction)
    )
    table = read_state_files(layout, CHANNEL_STATE, job_id=job_id, checkpoint_id=checkpoint_id, filter=expr)
    table = table.sort_by([("gate", "ascending"), ("channel", "ascending"), ("sequence", "ascending")])
    out: list[ChannelBuffer] = []
    for row in table.select(["gate", "channel", "sequence", "rows", "payload"]).to_pylist():
        try:
            batches = list(pa.ipc.open_stream(row["payload"]))
        except pa.ArrowException as exc:
            raise _corrupt(
                layout,
                job_id,
                checkpoint_id,
                layout.table_path(CHANNEL_STATE),
                f"has an unreadable payload at gate {row['gate']} channel {row['channel']} "
                f"sequence {row['sequence']} ({exc})",
            ) from exc
        if len(batches) != 1 or batches[0].num_rows != row["rows"]:
            raise _corrupt(
                layout,
                job_id,
                checkpoint_id,
                layout.table_path(CHANNEL_STATE),
                f"has a payload at gate {row['gate']} channel {row['channel']} sequence "
                f"{row['sequence']} that is not one batch of {row['rows']} rows",
            )
        out.append(ChannelBuffer(row["gate"], row["channel"], row["sequence"], batches[0]))
    return out
