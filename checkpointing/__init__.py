"""Delta-table checkpoint storage (docs/architecture.md, "Checkpointing").

Under a base URL (``execution.checkpointing.dir``; any fsspec URL that
delta-rs also supports, or a local path) live three Delta tables:

* ``checkpoints``: one row per completed checkpoint or savepoint — the
  completion marker. Restore trusts no checkpoint without it.
* ``operator_state``: one row per state entry (partitioned by ``job_id``,
  ``checkpoint_id``); ``key``/``value`` are pickles, ``key_repr``/``value_repr``
  readable text, ``key_group`` -1 for non-keyed operator state.
* ``channel_state``: one row per in-flight buffer (same partitioning);
  ``payload`` is an Arrow IPC stream of one RecordBatch.

Column schemas: :mod:`checkpointing.schemas`. Any Delta reader (delta-spark,
DuckDB, polars) can query them with SQL.

Protocol, by process:

Task (async snapshot phase)::

    with SnapshotWriter(base_url, job_id, checkpoint_id, operator_uid, subtask) as w:
        w.add_keyed_state("count", [(key_group, key, value), ...], kind="value")
        w.add_operator_state("offsets", [(split_id, offset)], kind="source_split")
        w.add_channel_state("input", gate, channel, sequence, record_batch)
        w.add_keyed_changes("count", upserts, deletes)   # incremental: KeyedColumns of changes
        write_state_snapshots(w, parts)   # the runtime's typed snapshots (KeyedStateSnapshot, ...)
        handle = w.finish()     # picklable StateHandle -> acknowledge to the JobMaster
                                # (incremental: w.finish(chain=(base, ..., checkpoint_id)))
    # or w.discard() when declining; an exception inside ``with`` discards.

JobMaster (checkpoint coordinator main thread)::

    committer = CheckpointCommitter(base_url)          # creates the tables if needed
    committer.commit(job_id, checkpoint_id, handles,
                     CheckpointRecord(trigger_time=..., mode=SnapshotAlignment.UNALIGNED, ...))
    committer.abort(handles)                           # failed/timed-out checkpoint
    retain(base_url, job_id, num_retained,             # after each completed commit; maintains the
           full_vacuum=schedule.due())                 # tables on a MaintenanceSchedule's cadence

``commit`` makes all ``operator_state`` files visible in one Delta transaction,
then all ``channel_state`` files in one, each with app transaction
``(f"{job_id}/{table}", checkpoint_id)``, and then appends the ``checkpoints``
row. It is idempotent: a retry after any failure completes the checkpoint
without duplicating rows. A failure before the last step leaves no
completion row, so the checkpoint is never listed or restored.

Restore (JobMaster picks, tasks read)::

    cp = find_restorable_checkpoint(base_url, job_id)   # newest that verifies
    read_operator_state(base_url, job_id, cp.checkpoint_id, uid, key_groups=range(0, 64))
    read_operator_state(base_url, job_id, cp.checkpoint_id, uid, keyed=False)
    read_channel_state(base_url, job_id, cp.checkpoint_id, uid, subtask, "input")

Incremental checkpoints (:mod:`checkpointing.chains`): a checkpoint's keyed
rows may be changes (``change`` = put / delete) on top of older checkpoints; its
``checkpoints`` row records each subtask's chain, ``read_operator_state``
resolves it, and retention keeps every partition a retained chain names.

Inspection (CLI): :mod:`checkpointing.inspect` (``list_checkpoints``,
``operator_state``, ``channel_state``, ``format_history``).

Errors (:mod:`flinklike_spark.errors`): ``CheckpointStorageError`` (storage
unreachable or unwritable; names the URL and cause), ``CorruptCheckpointError``
(a completed checkpoint's file is missing or damaged; names checkpoint and
file), ``CheckpointNotFoundError`` (no such completed / restorable checkpoint),
``IncompatibleCheckpointError`` (tables written in another format).

Every function taking ``base`` accepts a URL/path or a :class:`CheckpointLayout`
(which carries deltalake ``storage_options`` and fsspec options).
"""

from __future__ import annotations

from .committer import CheckpointCommitter, CheckpointRecord, CommitResult
from .layout import CheckpointLayout
from .reader import (
    ChannelBuffer,
    CompletedCheckpoint,
    StateEntry,
    decode_operator_state,
    find_restorable_checkpoint,
    iter_keyed_state,
    latest_completed,
    list_completed_checkpoints,
    read_channel_state,
    read_operator_state,
    verify_checkpoint,
)
from .retention import RetentionResult, retain
from .schemas import CheckpointKind, Direction, SnapshotAlignment, StateKind
from .state_snapshots import (
    KeyedStateChanges,
    KeyedStateSnapshot,
    OperatorStateSnapshot,
    StateSnapshotPart,
    write_state_snapshots,
)
from .writer import KeyedColumnChunks, KeyedColumns, SnapshotWriter, StateFile, StateHandle, discard_handles

__all__ = [
    "ChannelBuffer",
    "CheckpointCommitter",
    "CheckpointKind",
    "CheckpointLayout",
    "CheckpointRecord",
    "CommitResult",
    "CompletedCheckpoint",
    "Direction",
    "KeyedColumnChunks",
    "KeyedColumns",
    "KeyedStateChanges",
    "KeyedStateSnapshot",
    "OperatorStateSnapshot",
    "RetentionResult",
    "SnapshotAlignment",
    "SnapshotWriter",
    "StateEntry",
    "StateFile",
    "StateHandle",
    "StateKind",
    "StateSnapshotPart",
    "decode_operator_state",
    "discard_handles",
    "find_restorable_checkpoint",
    "iter_keyed_state",
    "latest_completed",
    "list_completed_checkpoints",
    "read_channel_state",
    "read_operator_state",
    "retain",
    "verify_checkpoint",
    "write_state_snapshots",
]
