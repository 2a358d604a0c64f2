"""A savepoint's own directory: ``<dir>/<job-id>/chk-<N>/_metadata``.

A savepoint's state lives in the Delta tables of its checkpoint directory
(``<dir>``), shared by every checkpoint there. So that the path a savepoint is
known by (``CompletedCheckpointInfo.path``, ``SavepointWriter.write``'s result)
is a directory, as Flink's savepoint directories are, the committer writes a
small JSON file, ``_metadata``, at that path when a savepoint completes. It
names the checkpoint directory, the job and the checkpoint; a restore given a
directory that holds such a file (the original, or a copy of it elsewhere)
reads the savepoint it names. The state stays in ``<dir>``: copying the
``chk-<N>`` directory copies the pointer, not the state (a self-contained copy
is what ``SavepointWriter.from_existing_savepoint(path).write(other_dir)`` makes).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from flinklike_spark.storage import StorageConfig

from .layout import CheckpointLayout, resolve_storage

__all__ = ["MARKER_FILE", "read_savepoint_marker", "savepoint_path", "write_savepoint_marker"]

_log = logging.getLogger(__name__)

MARKER_FILE = "_metadata"
_FORMAT = "flinklike-savepoint"
_VERSION = 1


def savepoint_path(base_url: str, job_id: str, checkpoint_id: int) -> str:
    """``<dir>/<job-id>/chk-<N>``: the path a savepoint is known by (``execution.state-recovery.path`` takes it)."""
    return f"{base_url.rstrip('/')}/{job_id}/chk-{checkpoint_id}"


def write_savepoint_marker(layout: CheckpointLayout, job_id: str, checkpoint_id: int) -> None:
    """Write ``<dir>/<job-id>/chk-<N>/_metadata`` for a committed savepoint.

    Best effort: the savepoint is committed and restorable by its path without
    the file, so a storage error is logged, not raised.
    """
    document = {
        "format": _FORMAT,
        "version": _VERSION,
        "checkpoint_directory": layout.base_url,
        "job_id": job_id,
        "checkpoint_id": checkpoint_id,
        "restore_path": savepoint_path(layout.base_url, job_id, checkpoint_id),
        "note": "The savepoint's state is in the Delta tables of checkpoint_directory; restore it with "
        "execution.state-recovery.path set to this directory or to restore_path.",
    }
    try:
        fs, root = layout.filesystem()
        directory = f"{root}/{job_id}/chk-{checkpoint_id}"
        fs.makedirs(directory, exist_ok=True)
        with fs.open(f"{directory}/{MARKER_FILE}", "w") as out:
            json.dump(document, out, indent=2)
    except (OSError, ValueError) as exc:
        _log.warning("savepoint %s of job %s: could not write its %s file: %s", checkpoint_id, job_id, MARKER_FILE, exc)


def read_savepoint_marker(path: str, storage: StorageConfig | None = None) -> str | None:
    """The ``restore_path`` named by ``<path>/_metadata``, or None where ``path`` holds no savepoint marker."""
    options = (storage or StorageConfig()).options(path)
    try:
        fs, root = resolve_storage(path.rstrip("/"), options.fsspec)
        with fs.open(f"{root}/{MARKER_FILE}", "r") as file:
            document: Any = json.load(file)
    except (OSError, ValueError):
        return None
    if not isinstance(document, dict) or document.get("format") != _FORMAT:
        return None
    restore_path = document.get("restore_path")
    return restore_path if isinstance(restore_path, str) else None
