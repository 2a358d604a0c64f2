"""Inspection for humans and the ``flinklike`` CLI: checkpoint history and stored state.

These functions read committed data (including state of checkpoints that
never got a completion row, so a failed commit can be examined); restore code
uses :mod:`checkpointing.reader` instead, which trusts completed checkpoints only.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Sequence
from datetime import timedelta
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pds

from .chains import decode_chains
from .layout import (
    CHANNEL_STATE,
    OPERATOR_STATE,
    STATE_TABLES,
    CheckpointLayout,
    TableName,
    as_layout,
    check_job_id,
)
from .reader import _committed_files, read_checkpoints_table, read_operator_state, read_state_files

__all__ = [
    "StoredCheckpoint",
    "channel_state",
    "format_history",
    "format_rows",
    "format_table",
    "list_checkpoints",
    "operator_state",
    "operator_uids",
    "stored_checkpoints",
]

Base = str | os.PathLike[str] | CheckpointLayout


def list_checkpoints(base: Base, job_id: str | None = None) -> pa.Table:
    """The ``checkpoints`` table (of ``job_id``, or all jobs), sorted by job and id."""
    return read_checkpoints_table(base, job_id)


class StoredCheckpoint(NamedTuple):
    """A checkpoint id present in a checkpoint directory; see :func:`stored_checkpoints`."""

    job_id: str
    checkpoint_id: int
    completed: bool


def stored_checkpoints(base: Base, job_id: str | None = None) -> list[StoredCheckpoint]:
    """Checkpoints with a ``checkpoints`` row or committed state files, sorted by job and id.

    ``completed`` is False for ids that only have committed state (a commit that
    failed before its completion row): inspectable, but never restored.
    """
    layout = as_layout(base)
    completed = read_checkpoints_table(layout, job_id).select(["job_id", "checkpoint_id"]).to_pylist()
    found = {(row["job_id"], row["checkpoint_id"]): True for row in completed}
    for table in STATE_TABLES:
        for _, _, job, checkpoint_id in _committed_files(layout, table, job_id, None):
            found.setdefault((job, checkpoint_id), False)
    return [StoredCheckpoint(job, cid, done) for (job, cid), done in sorted(found.items())]


def operator_uids(base: Base, table: TableName, checkpoint_id: int, *, job_id: str | None = None) -> list[str]:
    """Sorted uids of the operators with committed rows in ``table`` for a checkpoint id."""
    if table not in STATE_TABLES:
        raise ValueError(f"invalid state table {table!r}; valid choices: {STATE_TABLES}")
    if job_id is not None:
        check_job_id(job_id)
    uids = read_state_files(base, table, job_id=job_id, checkpoint_id=checkpoint_id, columns=["operator_uid"])
    return sorted(set(uids["operator_uid"].to_pylist()))


def _filter(operator_uid: str | None) -> pds.Expression | None:
    return None if operator_uid is None else pds.field("operator_uid") == operator_uid


def operator_state(
    base: Base,
    checkpoint_id: int,
    operator_uid: str | None = None,
    *,
    job_id: str | None = None,
    resolve: bool = True,
) -> pa.Table:
    """Committed ``operator_state`` rows of a checkpoint id (every job unless ``job_id``).

    With ``resolve`` (the default) the keyed state of an incremental checkpoint is
    resolved from its chain (the full state, as a restore reads it) and the
    ``change`` column is left out; ``resolve=False`` shows the stored rows, with
    ``change`` (``put`` / ``delete``, null in full snapshots).
    """
    if job_id is not None:
        check_job_id(job_id)
    table = read_state_files(
        base, OPERATOR_STATE, job_id=job_id, checkpoint_id=checkpoint_id, filter=_filter(operator_uid)
    )
    if resolve:
        table = _resolved(as_layout(base), table, checkpoint_id, job_id, operator_uid).drop_columns(["change"])
    return table.sort_by(
        [
            ("job_id", "ascending"),
            ("operator_uid", "ascending"),
            ("key_group", "ascending"),
            ("state_name", "ascending"),
            ("subtask", "ascending"),
        ]
    )


def _resolved(layout, table: pa.Table, checkpoint_id: int, job_id: str | None, operator_uid: str | None) -> pa.Table:
    """``table`` with the rows of every chained (job, operator) replaced by its resolved state."""
    rows = read_checkpoints_table(layout, job_id).filter(pc.equal(pc.field("checkpoint_id"), checkpoint_id))
    for row in rows.select(["job_id", "properties"]).to_pylist():
        uids = {uid for uid, _ in decode_chains(dict(row["properties"] or ()))}
        for uid in sorted(uids):
            if operator_uid is not None and uid != operator_uid:
                continue
            resolved = read_operator_state(layout, row["job_id"], checkpoint_id, uid)
            others = pc.invert(pc.and_(pc.equal(table["job_id"], row["job_id"]), pc.equal(table["operator_uid"], uid)))
            table = pa.concat_tables([table.filter(others), resolved])
    return table


def channel_state(
    base: Base,
    checkpoint_id: int,
    operator_uid: str | None = None,
    *,
    job_id: str | None = None,
    include_payload: bool = False,
) -> pa.Table:
    """Committed ``channel_state`` rows of a checkpoint id; ``payload`` only if asked.

    Without the payload a ``payload_bytes`` column tells how big each buffer is.
    """
    if job_id is not None:
        check_job_id(job_id)
    table = read_state_files(
        base, CHANNEL_STATE, job_id=job_id, checkpoint_id=checkpoint_id, filter=_filter(operator_uid)
    )
    table = table.sort_by(
        [
            ("job_id", "ascending"),
            ("operator_uid", "ascending"),
            ("subtask", "ascending"),
            ("direction", "ascending"),
            ("gate", "ascending"),
            ("channel", "ascending"),
            ("sequence", "ascending"),
        ]
    )
    if include_payload:
        return table
    sizes = pc.binary_length(table["payload"]).cast(pa.int64())
    return table.drop_columns(["payload"]).append_column("payload_bytes", sizes)


def _bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _duration(ms: int) -> str:
    delta = timedelta(milliseconds=ms)
    if delta < timedelta(seconds=1):
        return f"{ms} ms"
    return f"{delta.total_seconds():.1f} s"


def format_table(header: Sequence[str], rows: Iterable[Sequence[str]], *, right: Collection[int] = ()) -> str:
    """Fixed-width text: a header line, then one line per row, columns two spaces apart.

    Cells of the column indexes in ``right`` are right-aligned (numbers), the
    others left-aligned; trailing blanks are stripped.
    """
    lines = [tuple(header), *(tuple(row) for row in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = []
    for line in lines:
        cells = [cell.rjust(widths[i]) if i in right else cell.ljust(widths[i]) for i, cell in enumerate(line)]
        out.append("  ".join(cells).rstrip())
    return "\n".join(out)


def format_rows(table: pa.Table) -> str:
    """Any Arrow table as :func:`format_table` text: column names as header, numbers
    right-aligned, nulls blank. Drop binary columns first; they print as Python bytes."""
    numeric = {
        i for i, field in enumerate(table.schema) if pa.types.is_integer(field.type) or pa.types.is_floating(field.type)
    }
    rows = [tuple("" if v is None else str(v) for v in row.values()) for row in table.to_pylist()]
    return format_table(table.column_names, rows, right=numeric)


def format_history(table: pa.Table) -> str:
    """Render a :func:`list_checkpoints` table as a fixed-width text table, oldest first.

    Columns: JOB, ID, KIND, MODE, COMPLETED (UTC), DURATION, ALIGNMENT, STATE,
    CHANNEL STATE, OPERATORS. An empty table renders as ``"no completed checkpoints"``.
    """
    if table.num_rows == 0:
        return "no completed checkpoints"
    header = (
        "JOB",
        "ID",
        "KIND",
        "MODE",
        "COMPLETED (UTC)",
        "DURATION",
        "ALIGNMENT",
        "STATE",
        "CHANNEL STATE",
        "OPERATORS",
    )
    rows = [
        (
            row["job_id"],
            str(row["checkpoint_id"]),
            row["kind"],
            row["mode"],
            row["completion_time"].strftime("%Y-%m-%d %H:%M:%S"),
            _duration(row["duration_ms"]),
            _duration(row["max_alignment_ms"]),
            _bytes(row["state_bytes"]),
            _bytes(row["channel_state_bytes"]),
            str(len(row["operator_uids"] or ())),
        )
        for row in table.to_pylist()
    ]
    return format_table(header, rows, right={1, 5, 6, 7, 8, 9})
