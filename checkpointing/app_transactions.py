"""Idempotent Delta appends: add files in one transaction that records an app transaction.

Delta's ``txn`` action stores, per application id, the highest version an
application committed. A writer that commits unit ``n`` of its output with
app transaction ``(app_id, n)`` and skips any unit ``n <= txn version`` never
commits a unit twice, however often a commit is retried. Spark's idempotent
``foreachBatch`` writes (``txnAppId``/``txnVersion``) use the same action, so
tables written here tell a Spark user what was committed.

Used by the checkpoint committer, DeltaSink and the Spark bridge
(``flinklike_spark.spark.bridge_tables``, ``flinklike_spark.spark``).
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import AddAction, CommitProperties, Transaction

from flinklike_spark.errors import SinkFencedError

__all__ = [
    "DataFile",
    "check_fence",
    "claim_fence",
    "commit_files",
    "fence_app_id",
    "is_committed",
    "retry_lost_races",
]

T = TypeVar("T")
_log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataFile:
    """A Parquet file inside a table directory that no table version names yet.

    Attributes:
        path: relative to the table root, as the Delta ``add`` action names it.
        size: bytes.
        num_records: rows in the file.
        modification_time: epoch milliseconds.
        partition_values: partition column -> value as text (Delta stores them in the log, not the file).
    """

    path: str
    size: int
    num_records: int
    modification_time: int = dataclasses.field(default_factory=lambda: int(time.time() * 1000))
    partition_values: Mapping[str, str | None] = dataclasses.field(default_factory=dict)

    def add_action(self) -> AddAction:
        return AddAction(
            path=self.path,
            size=self.size,
            partition_values=dict(self.partition_values),
            modification_time=self.modification_time,
            data_change=True,
            stats=f'{{"numRecords":{self.num_records}}}',
        )


def is_committed(table: DeltaTable, app_id: str, version: int) -> bool:
    """Whether ``table`` records app transaction ``app_id`` at ``version`` or later."""
    done = table.transaction_version(app_id)
    return done is not None and done >= version


def commit_files(
    table: DeltaTable,
    actions: Sequence[AddAction],
    app_versions: Mapping[str, int],
    *,
    partition_by: Sequence[str] = (),
    custom_metadata: Mapping[str, str] | None = None,
) -> None:
    """Append ``actions`` to ``table`` in one transaction recording every ``(app_id, version)``.

    The caller checks :func:`is_committed` first (on the same table snapshot)
    and leaves out what is done; Delta's conflict detection rejects the commit
    (``CommitFailedError``) if another writer committed the same app id meanwhile.
    """
    table.create_write_transaction(
        list(actions),
        mode="append",
        schema=table.schema(),
        partition_by=list(partition_by),
        commit_properties=CommitProperties(
            app_transactions=[Transaction(app_id, version) for app_id, version in sorted(app_versions.items())],
            custom_metadata=dict(custom_metadata) if custom_metadata else None,
        ),
    )


def fence_app_id(transactional_id_prefix: str) -> str:
    """The app id whose transaction version is the epoch of the job that owns ``transactional_id_prefix``."""
    return f"{transactional_id_prefix}/fence"


def claim_fence(table: DeltaTable, transactional_id_prefix: str) -> int:
    """Record a new epoch for ``transactional_id_prefix`` in ``table`` (one commit); return it.

    Flink's transactional sinks fence an older producer of the same
    transactional id; here the newest job of a restore lineage does so. Every
    commit of a writer under the prefix carries the fence's app transaction
    with its own epoch (see :func:`check_fence`), so once this commit landed,
    an older job's commits fail: the ones racing this commit lose the race
    (Delta rejects concurrent commits of one app id) and see the new epoch on
    their retry. Call it through :func:`retry_lost_races` on a fresh snapshot.
    """
    fence = fence_app_id(transactional_id_prefix)
    epoch = (table.transaction_version(fence) or 0) + 1
    commit_files(table, [], {fence: epoch}, custom_metadata={"flinklike.fence": f"{fence}={epoch}"})
    return epoch


def check_fence(table: DeltaTable, transactional_id_prefix: str, epoch: int, *, what: str) -> dict[str, int]:
    """Raise SinkFencedError if a newer epoch owns ``transactional_id_prefix``; else its app transaction to commit.

    The returned ``{fence app id: epoch}`` goes into the same commit as the
    writer's output, so that the commit conflicts with a concurrent claim.
    """
    fence = fence_app_id(transactional_id_prefix)
    current = table.transaction_version(fence)
    if current is not None and current > epoch:
        raise SinkFencedError(
            f"{what}: a newer job resumed the same checkpoint lineage and owns transactional ids "
            f"{transactional_id_prefix}/<subtask> (epoch {current}, this job has epoch {epoch}); this job must "
            f"not commit, or both jobs would skip each other's output. Run one job per lineage: cancel this "
            f"one, or resume the other from its own checkpoints"
        )
    return {fence: epoch}


def retry_lost_races(attempt: Callable[[], T], *, attempts: int, table_uri: str) -> T:
    """``attempt()``, called again (after a short, growing pause) while it loses a race with another writer.

    Two races are retried: a commit conflict (``CommitFailedError``), and a file of
    the table's ``_delta_log`` that vanished while the attempt read the log
    (another writer's expired-log cleanup, ``delta.logRetentionDuration``, deleted
    it; a fresh load of the table no longer needs it). ``attempt`` must re-read the
    table each time, so that a retry sees what the winner committed (with
    :func:`is_committed`, a unit already committed, by the winner or by an attempt
    that failed after its commit, is then skipped). The last error propagates after
    ``attempts`` tries.
    """
    for number in range(1, attempts + 1):
        try:
            return attempt()
        except (CommitFailedError, FileNotFoundError) as exc:
            if number == attempts or not (isinstance(exc, CommitFailedError) or _log_file_vanished(exc)):
                raise
            _log.info("commit to %s lost a race (%s); retrying on the latest version", table_uri, exc)
            time.sleep(random.uniform(0.01, 0.05 * number))  # jitter: racing subtasks do not retry in lockstep
    raise AssertionError("unreachable")


def _log_file_vanished(exc: FileNotFoundError) -> bool:
    """Whether ``exc`` is deltalake's "not found" of a file of a table's log (not of a data or staged file)."""
    return "_delta_log/" in str(exc)
