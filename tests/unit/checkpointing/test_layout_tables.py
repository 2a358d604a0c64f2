"""CheckpointLayout.open_table keeps a thread's loaded tables and brings them up to date."""

from __future__ import annotations

import pickle
import shutil
import threading

import pyarrow as pa
from deltalake import write_deltalake

from checkpointing.layout import CHECKPOINTS, OPERATOR_STATE, CheckpointLayout
from checkpointing.schemas import CHECKPOINTS_SCHEMA


def _append_row(layout: CheckpointLayout, checkpoint_id: int) -> None:
    """A commit by another writer (not through ``layout``)."""
    columns = {
        f.name: pa.nulls(1, f.type) if f.nullable else pa.repeat(pa.scalar(0).cast(f.type), 1)
        for f in CHECKPOINTS_SCHEMA
        if f.name not in ("job_id", "checkpoint_id", "kind")
    }
    table = (
        pa.table({**columns, "job_id": ["j"], "checkpoint_id": [checkpoint_id], "kind": ["CHECKPOINT"]})
        .select(CHECKPOINTS_SCHEMA.names)
        .cast(CHECKPOINTS_SCHEMA)
    )
    write_deltalake(layout.table_uri(CHECKPOINTS), table, mode="append")


def test_a_reopened_table_is_the_same_object_at_the_latest_version(tmp_path):
    layout = CheckpointLayout(base_url=str(tmp_path))
    first = layout.open_table(CHECKPOINTS, create=True)
    version = first.version()
    _append_row(layout, 1)
    again = layout.open_table(CHECKPOINTS)
    assert again is first and again.version() == version + 1
    assert layout.open_table(OPERATOR_STATE) is None  # absent, not created, not cached as a table


def test_threads_and_copies_do_not_share_tables(tmp_path):
    layout = CheckpointLayout(base_url=str(tmp_path))
    mine = layout.open_table(CHECKPOINTS, create=True)
    theirs = []
    thread = threading.Thread(target=lambda: theirs.append(layout.open_table(CHECKPOINTS)))
    thread.start()
    thread.join(30)
    assert theirs and theirs[0] is not mine
    copy = pickle.loads(pickle.dumps(layout))
    assert copy == layout and copy.open_table(CHECKPOINTS) is not mine


def test_a_table_removed_under_a_loaded_handle_is_loaded_again(tmp_path):
    layout = CheckpointLayout(base_url=str(tmp_path))
    layout.open_table(CHECKPOINTS, create=True)
    _append_row(layout, 1)
    shutil.rmtree(tmp_path / CHECKPOINTS)
    fresh = layout.open_table(CHECKPOINTS, create=True)
    assert fresh.version() == 0 and fresh.to_pyarrow_table().num_rows == 0
