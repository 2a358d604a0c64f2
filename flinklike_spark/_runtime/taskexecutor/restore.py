"""Loading a task's share of a completed checkpoint (runs on the task thread, before ``open``).

State is redistributed the way Flink does when the parallelism changed:

* keyed state by key-group range: a subtask reads the rows of its key groups,
  whoever wrote them;
* operator (non-keyed) state in full: each operator picks its share (a source
  takes every ``parallelism``-th split);
* in-flight data (unaligned checkpoints) on the *consumer* side: a restored
  task replays, before any new input, (1) the input channel state its vertex
  recorded and then (2) the output channel state its producers recorded for
  the edge (buffers their priority barriers overtook, which had not reached
  it yet). Which old records a subtask takes follows each input's partitioner
  (see :func:`_share_of`): its key groups for a keyed input, one old
  subtask's copy for a broadcast input, old subtask / subpartition ``i`` when
  ``i % parallelism`` is its index otherwise.
  Producers therefore never re-send their output state, and every record is
  replayed exactly once, in per-channel order, at any parallelism.

A task that restores a checkpoint of its own job at the same parallelism
(a failover) holds exactly the keyed state of the old subtask with its index:
with incremental checkpoints its first checkpoint after the restore builds on
that subtask's chain (:func:`_incremental_bases`) instead of writing all of its
state again.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Iterator, Mapping

import numpy as np
import pyarrow as pa

from checkpointing import (
    CheckpointKind,
    iter_keyed_state,
    list_completed_checkpoints,
    read_channel_state,
    read_operator_state,
)
from checkpointing.chains import Chains, decode_chains
from flinklike_spark._runtime import serialization
from flinklike_spark._runtime.deployment import TaskDeploymentDescriptor
from flinklike_spark._runtime.graph.job_graph import PartitionerKind, PartitionerSpec
from flinklike_spark._runtime.operators.rows import records_of
from flinklike_spark._runtime.operators.stream_operator import RestoredEntry, RestoredState
from flinklike_spark._runtime.record_timestamps import strip_timestamps
from flinklike_spark._runtime.state.incremental_snapshot import IncrementalConfig
from flinklike_spark._runtime.state.key_groups import assign_key_groups, key_group_for, key_group_range
from flinklike_spark.common.types import pickled_field_values
from flinklike_spark.errors import SchemaMismatchError

__all__ = ["load_restored_state"]


def _entries(table: pa.Table) -> tuple[RestoredEntry, ...]:
    # Column by column: converting whole columns and unpickling them under one lock
    # acquisition is several times faster than going through to_pylist() rows.
    # The collector is paused while the restored (live) objects are built: serialization.paused_gc.
    column = table.column
    with serialization.paused_gc():
        keys = serialization.loads_many(column("key").to_pylist())
        values = serialization.loads_many(column("value").to_pylist())
        # tuple.__new__ over zipped columns builds the NamedTuples without a Python call per entry.
        return tuple(
            map(
                functools.partial(tuple.__new__, RestoredEntry),
                zip(
                    column("state_name").to_pylist(),
                    column("state_kind").to_pylist(),
                    column("key_group").to_pylist(),
                    keys,
                    values,
                    column("subtask").to_pylist(),
                    strict=True,
                ),
            )
        )


class _StreamedEntries:
    """Restored keyed entries, read and unpickled one checkpoint file at a time as they are iterated,
    so restoring state larger than memory (into the RocksDB backend) never holds all of it.

    Single pass: the operator's ``initialize_state`` iterates it once.
    """

    def __init__(self, first: pa.Table, rest: Iterator[pa.Table]) -> None:
        self._files: Iterator[pa.Table] | None = _chain_first(first, rest)

    def __iter__(self) -> Iterator[RestoredEntry]:
        files, self._files = self._files, None
        if files is None:
            raise RuntimeError("restored keyed state is read once, file by file; it was iterated already")
        for table in files:
            yield from _entries(table)


def _chain_first(first: pa.Table, rest: Iterator[pa.Table]) -> Iterator[pa.Table]:
    yield first
    del first  # its entries are built; let the table go before the next file is read
    yield from rest


def load_restored_state(
    tdd: TaskDeploymentDescriptor, local_keyed: Mapping[str, tuple[RestoredEntry, ...]] | None = None
) -> tuple[dict[str, RestoredState], list[pa.RecordBatch]]:
    """``(uid -> RestoredState, in-flight batches to replay first)`` for ``tdd.restore``.

    ``local_keyed`` (task-local recovery, see :mod:`.local_state`): keyed entries of
    operators from a local copy of this very checkpoint and subtask (same parallelism);
    those operators' keyed state is not read from Delta.
    """
    restore = tdd.restore
    assert restore is not None
    key_groups = key_group_range(tdd.max_parallelism, tdd.parallelism, tdd.subtask_index)
    bases = _incremental_bases(tdd)
    restored: dict[str, RestoredState] = {}
    for spec in tdd.operators:
        keyed: Iterable[RestoredEntry]
        if local_keyed is not None and spec.uid in local_keyed:
            keyed = local_keyed[spec.uid]
        else:
            files = iter_keyed_state(
                restore.storage, restore.job_id, restore.checkpoint_id, spec.uid, key_groups=key_groups
            )
            first = next((table for table in files if table.num_rows), None)
            keyed = () if first is None else _StreamedEntries(first, files)
        operator = read_operator_state(restore.storage, restore.job_id, restore.checkpoint_id, spec.uid, keyed=False)
        if keyed or operator.num_rows:
            restored[spec.uid] = RestoredState(
                checkpoint_id=restore.checkpoint_id,
                keyed=keyed,
                operator=_entries(operator),
                parallelism=restore.parallelism.get(tdd.vertex_id, 0),
                keyed_base=None
                if bases is None
                else bases.get((spec.uid, tdd.subtask_index), (restore.checkpoint_id,)),
            )
    return restored, _in_flight(tdd, key_groups)


def _incremental_bases(tdd: TaskDeploymentDescriptor) -> Chains | None:
    """The restored checkpoint's incremental chains, when this task's next checkpoint may build on them.

    Only for a checkpoint (not a savepoint: never a base) of this very job in its
    own checkpoint storage, taken at this parallelism: then this subtask's keyed
    state is exactly the old subtask ``subtask_index``'s, whose chain is
    ``chains[(uid, subtask_index)]``, or ``(checkpoint_id,)`` when that snapshot was
    full. Anything else (a resume into a new job, a rescale) starts over with a
    full checkpoint.
    """
    restore, checkpointing = tdd.restore, tdd.checkpointing
    if checkpointing is None or IncrementalConfig.from_configuration(tdd.config) is None:
        return None
    if restore.job_id != tdd.job_id:
        return None
    if restore.storage.base_url != checkpointing.storage.base_url:
        return None
    if restore.parallelism.get(tdd.vertex_id) != tdd.parallelism:
        return None
    completed = next(
        (c for c in list_completed_checkpoints(restore.storage, restore.job_id) if c.checkpoint_id == restore.checkpoint_id),
        None,
    )  # fmt: skip
    if completed is None or completed.kind is CheckpointKind.SAVEPOINT:
        return None
    return decode_chains(completed.properties)


def _in_flight(tdd: TaskDeploymentDescriptor, key_groups: range) -> list[pa.RecordBatch]:
    restore = tdd.restore
    old_consumers = restore.parallelism.get(tdd.vertex_id, 0)
    inputs, outputs = [], []
    for gate_index, gate in enumerate(restore.gates):
        share = _share_of(gate.partitioner, tdd, old_consumers, key_groups)
        for old in range(old_consumers):
            if share.takes(old):
                inputs += [
                    (share, b.batch) for b in _read(restore, tdd.vertex_id, old, "input") if b.gate == gate_index
                ]
        for old in range(restore.parallelism.get(gate.producer_vertex_id, 0)):
            for buffer in _read(restore, gate.producer_vertex_id, old, "output"):
                # ``channel`` of an output buffer is the old consumer subtask it was meant for.
                if buffer.gate == gate.output_index and share.takes(buffer.channel):
                    outputs.append((share, buffer.batch))
    replay: list[pa.RecordBatch] = []
    for share, batch in inputs + outputs:
        if share.keep is not None:
            batch = share.keep(batch)
        if batch.num_rows:
            replay.append(batch)
    return replay


@dataclasses.dataclass(frozen=True)
class _Share:
    """Which old consumer subtasks' in-flight records of one input a restored subtask replays."""

    takes: Callable[[int], bool]
    keep: Callable[[pa.RecordBatch], pa.RecordBatch] | None = None


def _share_of(partitioner: PartitionerSpec, tdd: TaskDeploymentDescriptor, old_consumers: int, key_groups: range):
    """The records this subtask would have received had the new parallelism been in place.

    * HASH: from every old subtask, the records of this subtask's key groups;
    * BROADCAST: every old subtask holds its own copy; this subtask replays
      the copy of old subtask ``i % old parallelism``, the one whose broadcast
      state it restores (their positions in the broadcast input may differ);
    * FORWARD / REBALANCE: old subtask (or channel) ``j`` when ``j % parallelism`` is this subtask.
    """
    if partitioner.kind is PartitionerKind.HASH:
        return _Share(lambda old: True, _keyed_filter(partitioner, tdd.max_parallelism, key_groups))
    if partitioner.kind is PartitionerKind.BROADCAST:
        copy = tdd.subtask_index % old_consumers if old_consumers else 0
        return _Share(lambda old: old == copy)
    return _Share(lambda old: old % tdd.parallelism == tdd.subtask_index)


def _read(restore, uid: str, subtask: int, direction: str):
    return read_channel_state(restore.storage, restore.job_id, restore.checkpoint_id, uid, subtask, direction)


def _keyed_filter(spec: PartitionerSpec, max_parallelism: int, key_groups: range):
    def keep(batch: pa.RecordBatch) -> pa.RecordBatch:
        index = -1 if spec.key_field is None else batch.schema.get_field_index(spec.key_field)
        if index >= 0:
            groups = assign_key_groups(batch.column(index), max_parallelism, batch.schema.field(index))
        else:
            records = strip_timestamps(batch)  # keys as the partitioner sees them (pickled named Rows by field)
            if spec.key_field is None:
                keys = map(spec.key_selector, records_of(records))
            else:
                keys = pickled_field_values(records, spec.key_field)
                if keys is None:  # the partitioner refused such a batch: it cannot be in channel state
                    raise SchemaMismatchError(f"channel state has records without the key field {spec.key_field!r}")
            groups = np.array([key_group_for(key, max_parallelism) for key in keys], dtype=np.int32)
        mask = (groups >= key_groups.start) & (groups < key_groups.stop)
        return batch.filter(pa.array(mask)) if not mask.all() else batch

    return keep
