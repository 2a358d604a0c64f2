"""Inspection for humans and the ``flinklike`` CLI: checkpoint history and stored state.

These functions read committed data (including state of checkpoints that
never got a completion row, so a failed commit can be examined); restore code
uses :mod:`checkpointing.reader` instead, which trusts completed checkpoints only.
"""

from __future__ import annotations

import os
from datetime import timedelta

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pds

from .layout import CHANNEL_STATE, OPERATOR_STATE, CheckpointLayout, check_job_id
from .reader import read_checkpoints_table, read_state_files

__all__ = [
    "channel_state",
    "format_history",
    "list_checkpoints",
    "operator_state",
]

Base = str | os.PathLike[str] | CheckpointLayout


def list_checkpoints(base: Base, job_id: str | None = None) -> pa.Table:
    """The ``checkpoints`` table (of ``job_id``, or all jobs), sorted by job and id."""
    return read_checkpoints_table(base, job_id)


def _filter(operator_uid: str | None) -> pds.Expression | None:
    return None if operator_uid is None else pds.field("operator_uid") == operator_uid


def operator_state(
    base: Base, checkpoint_id: int, operator_uid: str | None = None, *, job_id: str | None = None
) -> pa.Table:
    """Committed ``operator_state`` rows of a checkpoint id (every job unless ``job_id``)."""
    if job_id is not None:
        check_job_id(job_id)
    table = read_state_files(
        base, OPERATOR_STATE, job_id=job_id, checkpoint_id=checkpoint_id, filter=_filter(operator_uid)
    )
    return table.sort_by(
        [("job_id", "ascending"), ("operator_uid", "ascending"), ("key_group", "ascending"),
         ("state_name", "ascending"), ("subtask", "ascending")]
    )


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
        [("job_id", "ascending"), ("operator_uid", "ascending"), ("subtask", "ascending"),
         ("direction", "ascending"), ("gate", "ascending"), ("channel", "ascending"),
         ("sequence", "ascending")]
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


def format_history(table: pa.Table) -> str:
    """Render a :func:`list_checkpoints` table as a fixed-width text table, oldest first.

    Columns: JOB, ID, KIND, MODE, COMPLETED (UTC), DURATION, ALIGNMENT, STATE,
    CHANNEL STATE, OPERATORS. An empty table renders as ``"no completed checkpoints"``.
    """
    if table.num_rows == 0:
        return "no completed checkpoints"
    header = ("JOB", "ID", "KIND", "MODE", "COMPLETED (UTC)", "DURATION", "ALIGNMENT", "STATE",
              "CHANNEL STATE", "OPERATORS")
    lines = [header]
    for row in table.to_pylist():
        lines.append(
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
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    numeric = {1, 5, 6, 7, 8, 9}
    out = []
    for line in lines:
        cells = [
            cell.rjust(widths[i]) if i in numeric else cell.ljust(widths[i]) for i, cell in enumerate(line)
        ]
        out.append("  ".join(cells).rstrip())
    return "\n".join(out)
