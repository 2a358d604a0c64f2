"""Checkpoint-table maintenance: what keeps a checkpoint's storage cost independent of the job's age.

Each completed checkpoint commits about two Delta versions to every checkpoint
table it touches (its files or row, then retention's removal of the previous
checkpoint's), so a job with short checkpoints makes thousands of versions an
hour. Left to Delta's defaults, three things grow with the job's age and make
every checkpoint dearer (``benchmarks/checkpoint_aging.py``):

* **the log.** ``_delta_log`` keeps every version for ``delta.logRetentionDuration``
  (30 days by default). delta-rs lists the whole log after every commit to find
  expired entries, and every open or incremental update lists it too, so each
  commit cost time in proportion to the job's age (about 26 µs per log file
  and commit locally, more on an object store);
* **tombstones.** A removed file stays as a ``remove`` action in every Delta
  checkpoint of the log for ``delta.deletedFileRetentionDuration`` (a week by
  default): the checkpoint written every ``delta.checkpointInterval`` commits,
  and every open that reads it, grow with every checkpoint retention dropped;
* **the vacuum.** deltalake's vacuum retries every tombstone the log holds, and
  retention checked each one for existence, a request per file on an object store.

What bounds them:

* the tables' properties (:data:`checkpointing.layout.TABLE_PROPERTIES`): the
  log keeps :data:`~checkpointing.layout.LOG_RETENTION` of history, tombstones
  :data:`~checkpointing.layout.TOMBSTONE_RETENTION`, and commits do not clean
  the log themselves;
* :func:`clean_logs`, deltalake's ``cleanup_metadata``: deletes the log files
  older than ``LOG_RETENTION`` that precede the newest Delta checkpoint older
  than that (a version stays reconstructable from that checkpoint on);
* :class:`MaintenanceSchedule`: retention vacuums and cleans the logs on a time
  cadence (:data:`MAINTENANCE_INTERVAL`, shorter than both retentions), not per
  checkpoint; its vacuum checks the tombstones against one listing of each
  table and commits only when a file is left
  (:func:`checkpointing.retention.retain`).

A table's log then holds at most the versions of the last
``LOG_RETENTION + MAINTENANCE_INTERVAL``, those back to the Delta checkpoint
before them, the Delta checkpoints among them, and ``_last_checkpoint``:
:func:`log_file_bound`, whatever the job's age.

Nothing restorable depends on old log versions: retained checkpoints and
savepoints are rows and files of each table's *latest* version. What the short
log takes away is time travel (``VERSION AS OF``) to versions older than about
``LOG_RETENTION`` (docs/checkpoints.md). A reader in another process that
loaded a version whose log files were cleaned meanwhile re-reads the table
(:meth:`checkpointing.layout.CheckpointLayout.open_table`).

Short tombstones cost a sweep: a file that an interrupted retention removed
from a log but not from storage can leave the log before a vacuum sees it. A
job's next retention deletes its own state tables' such files as files no
version names (``retention._delete_orphans``); the maintenance deletes the
``checkpoints`` table's once they are an hour old (deltalake's full vacuum: a
younger one could be a commit in progress).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Final

from deltalake.exceptions import DeltaError

from flinklike_spark.errors import CheckpointStorageError

from .layout import CHECKPOINT_INTERVAL, CHECKPOINTS, LOG_RETENTION, STATE_TABLES, CheckpointLayout, as_layout

__all__ = [
    "MAINTENANCE_INTERVAL",
    "MaintenanceSchedule",
    "clean_logs",
    "log_file_bound",
]

#: Time between two maintenance runs (vacuum and log cleanup) of a checkpoint coordinator.
MAINTENANCE_INTERVAL: Final = timedelta(seconds=5)


class MaintenanceSchedule:
    """When a checkpoint coordinator's retention also maintains the tables: at its first retention,
    then once :data:`MAINTENANCE_INTERVAL` passed since the last maintenance.

    Not thread-safe: the coordinator asks from its one storage thread.

    Args:
        interval: time between two maintenance runs.
        clock: monotonic seconds (injectable for tests).
    """

    def __init__(
        self, *, interval: timedelta = MAINTENANCE_INTERVAL, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if not isinstance(interval, timedelta) or interval < timedelta(0):
            raise ValueError(f"interval must be a timedelta >= 0, got {interval!r}")
        self._interval = interval.total_seconds()
        self._clock = clock
        self._last: float | None = None

    def due(self) -> bool:
        """Whether this retention maintains the tables; a True answer starts the next interval."""
        now = self._clock()
        if self._last is not None and now - self._last < self._interval:
            return False
        self._last = now
        return True


def clean_logs(base: str | os.PathLike[str] | CheckpointLayout) -> None:
    """Delete the expired ``_delta_log`` files of every checkpoint table (deltalake's ``cleanup_metadata``).

    Expired: older than the table's ``delta.logRetentionDuration`` and older than
    the newest Delta checkpoint of that age, so the latest version, and every
    version of the retention period, stay reconstructable.

    Raises:
        CheckpointStorageError: a table's log cannot be listed or its files deleted.
    """
    layout = as_layout(base)
    for table in (CHECKPOINTS, *STATE_TABLES):
        dt = layout.open_table(table)
        if dt is None:
            continue
        try:
            dt.cleanup_metadata()
        except (DeltaError, OSError) as exc:
            raise CheckpointStorageError(
                f"cannot clean the log of {layout.table_uri(table)!r}: {type(exc).__name__}: {exc}",
                url=layout.table_uri(table),
            ) from exc


def log_file_bound(
    commits_per_second: float,
    *,
    interval: timedelta = MAINTENANCE_INTERVAL,
    log_retention: timedelta = LOG_RETENTION,
    checkpoint_interval: int = CHECKPOINT_INTERVAL,
) -> int:
    """The most files a maintained table's ``_delta_log`` holds at ``commits_per_second`` commits to it.

    A maintenance run keeps the versions younger than ``log_retention`` and those
    back to the newest Delta checkpoint before them (fewer than
    ``checkpoint_interval``); the next run comes after ``interval`` and at most
    one checkpoint's commits later. So at most
    ``n = r * (log_retention + interval) + 2 * checkpoint_interval`` versions
    remain, each a JSON commit, with a Delta checkpoint every
    ``checkpoint_interval`` of them and one more, plus ``_last_checkpoint``:
    ``ceil(n * (1 + 1 / checkpoint_interval)) + 2`` files.
    """
    versions = commits_per_second * (log_retention + interval).total_seconds() + 2 * checkpoint_interval
    return math.ceil(versions * (1 + 1 / checkpoint_interval)) + 2
