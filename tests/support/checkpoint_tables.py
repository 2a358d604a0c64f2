"""Helpers for checkpoint storage tests: real deltalake tables under tmp_path."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa

from checkpointing import CheckpointCommitter, CheckpointRecord, SnapshotWriter, StateHandle

__all__ = [
    "JOB",
    "MAX_KEY_GROUPS",
    "UID",
    "batch",
    "complete",
    "record",
    "write_subtask",
]

JOB = "job-1"
UID = "counter"
MAX_KEY_GROUPS = 8


def batch(start: int, n: int) -> pa.RecordBatch:
    return pa.record_batch(
        {"k": pa.array(range(start, start + n), pa.int64()), "s": [f"v{i}" for i in range(start, start + n)]}
    )


def write_subtask(base, checkpoint_id: int, subtask: int, *, job: str = JOB, value_offset: int = 0) -> StateHandle:
    """Subtask ``s`` of 2 owns key groups [4s, 4s+4); key ``f"k{g}"`` lives in group g."""
    with SnapshotWriter(base, job, checkpoint_id, UID, subtask) as w:
        groups = range(4 * subtask, 4 * subtask + 4)
        w.add_keyed_state("count", [(g, f"k{g}", g * 10 + value_offset) for g in groups], kind="value")
        w.add_keyed_state("seen", [(g, f"k{g}", [g, checkpoint_id]) for g in groups], kind="list")
        w.add_operator_state("offsets", [(f"split-{subtask}", 100 * checkpoint_id + subtask)], kind="source_split")
        for seq in range(3):
            w.add_channel_state("input", 0, subtask, seq, batch(100 * subtask + 10 * seq, 2 + seq))
        w.add_channel_state("output", 1, 0, 0, batch(999, 1))
        return w.finish()


def record(**overrides) -> CheckpointRecord:
    t0 = datetime(2025, 1, 1, tzinfo=UTC)
    fields = dict(
        trigger_time=t0,
        completion_time=t0 + timedelta(milliseconds=1500),
        mode="aligned",
        max_alignment=timedelta(milliseconds=20),
        parallelism={"source": 1, UID: 2},
        job_graph_fingerprint="fp-1",
    )
    fields.update(overrides)
    return CheckpointRecord(**fields)


def complete(base, checkpoint_id: int, *, job: str = JOB, kind: str = "checkpoint", value_offset: int = 0):
    handles = [write_subtask(base, checkpoint_id, s, job=job, value_offset=value_offset) for s in (0, 1)]
    CheckpointCommitter(base).commit(job, checkpoint_id, handles, record(kind=kind))
    return handles
