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
  it yet). Keyed consumers keep the records of their key groups; others take
  old subtask / old subpartition ``i`` when ``i % parallelism`` is their index.
  Producers therefore never re-send their output state, and every record is
  replayed exactly once, in per-channel order, at any parallelism.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from checkpointing import read_channel_state, read_operator_state
from flinklike_spark._runtime import serialization
from flinklike_spark._runtime.deployment import TaskDeploymentDescriptor
from flinklike_spark._runtime.network.partitioner import assign_key_groups, key_group_for, key_group_range
from flinklike_spark._runtime.streaming.operators import RestoredEntry, RestoredState

__all__ = ["load_restored_state"]


def _entries(table: pa.Table) -> tuple[RestoredEntry, ...]:
    rows = table.select(["state_name", "state_kind", "key_group", "key", "value", "subtask"]).to_pylist()
    return tuple(
        RestoredEntry(
            state_name=row["state_name"],
            state_kind=row["state_kind"],
            key_group=row["key_group"],
            key=None if row["key"] is None else serialization.loads(row["key"]),
            value=None if row["value"] is None else serialization.loads(row["value"]),
            subtask=row["subtask"],
        )
        for row in rows
    )


def load_restored_state(tdd: TaskDeploymentDescriptor) -> tuple[dict[str, RestoredState], list[pa.RecordBatch]]:
    """``(uid -> RestoredState, in-flight batches to replay first)`` for ``tdd.restore``."""
    restore = tdd.restore
    assert restore is not None
    key_groups = key_group_range(tdd.max_parallelism, tdd.parallelism, tdd.subtask_index)
    restored: dict[str, RestoredState] = {}
    for spec in tdd.operators:
        keyed = read_operator_state(
            restore.storage, restore.job_id, restore.checkpoint_id, spec.uid, key_groups=key_groups
        )
        operator = read_operator_state(restore.storage, restore.job_id, restore.checkpoint_id, spec.uid, keyed=False)
        if keyed.num_rows or operator.num_rows:
            restored[spec.uid] = RestoredState(
                checkpoint_id=restore.checkpoint_id, keyed=_entries(keyed), operator=_entries(operator)
            )
    return restored, _in_flight(tdd, key_groups)


def _in_flight(tdd: TaskDeploymentDescriptor, key_groups: range) -> list[pa.RecordBatch]:
    restore = tdd.restore
    head = tdd.operators[0]
    keep = _keyed_filter(head, tdd.max_parallelism, key_groups) if _is_keyed(head) else None
    replay: list[pa.RecordBatch] = []
    inputs, outputs = [], []
    for gate_index, gate in enumerate(restore.gates):
        for old in range(restore.parallelism.get(tdd.vertex_id, 0)):
            for buffer in _read(restore, tdd.vertex_id, old, "input"):
                if buffer.gate == gate_index and (keep is not None or old % tdd.parallelism == tdd.subtask_index):
                    inputs.append(buffer.batch)
        for old in range(restore.parallelism.get(gate.producer_vertex_id, 0)):
            for buffer in _read(restore, gate.producer_vertex_id, old, "output"):
                # ``channel`` of an output buffer is the old consumer subtask it was meant for.
                if buffer.gate == gate.output_index and (
                    keep is not None or buffer.channel % tdd.parallelism == tdd.subtask_index
                ):
                    outputs.append(buffer.batch)
    for batch in inputs + outputs:
        if keep is not None:
            batch = keep(batch)
        if batch.num_rows:
            replay.append(batch)
    return replay


def _read(restore, uid: str, subtask: int, direction: str):
    return read_channel_state(restore.storage, restore.job_id, restore.checkpoint_id, uid, subtask, direction)


def _is_keyed(spec) -> bool:
    return spec.key_field is not None or spec.key_selector is not None


def _keyed_filter(spec, max_parallelism: int, key_groups: range):
    def keep(batch: pa.RecordBatch) -> pa.RecordBatch:
        if spec.key_field is not None:
            groups = assign_key_groups(batch.column(spec.key_field), max_parallelism)
        else:
            groups = np.array(
                [key_group_for(spec.key_selector(row), max_parallelism) for row in batch.to_pylist()], dtype=np.int32
            )
        mask = (groups >= key_groups.start) & (groups < key_groups.stop)
        return batch.filter(pa.array(mask)) if not mask.all() else batch

    return keep

