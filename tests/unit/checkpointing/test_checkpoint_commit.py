"""Commit protocol: visibility, idempotency, failures leave nothing half-visible."""

from __future__ import annotations

import os
import pickle

import pytest
from deltalake import DeltaTable

from checkpointing import (
    CheckpointCommitter,
    iter_keyed_state,
    list_completed_checkpoints,
    read_operator_state,
)
from checkpointing import inspect as cp_inspect
from checkpointing.layout import scan_table
from flinklike_spark.errors import (
    CheckpointNotFoundError,
    CheckpointStorageError,
    CorruptCheckpointError,
)
from tests.support.checkpoint_tables import JOB, UID, complete, record, write_subtask


def _rows(base, table):
    return scan_table(DeltaTable(os.path.join(base, table))).num_rows


def test_two_subtasks_read_back_by_key_group_range(base):
    complete(base, 1)
    # Rescaled to 3 subtasks: the middle one owns groups [3, 6), written by both old subtasks.
    middle = read_operator_state(base, JOB, 1, UID, key_groups=range(3, 6), state_name="count")
    assert middle["key_group"].to_pylist() == [3, 4, 5]
    assert middle["subtask"].to_pylist() == [0, 1, 1]
    assert [pickle.loads(v) for v in middle["value"].to_pylist()] == [30, 40, 50]
    assert middle["key_repr"].to_pylist() == ["'k3'", "'k4'", "'k5'"]
    everything = read_operator_state(base, JOB, 1, UID)
    assert everything.num_rows == 2 * (4 + 4 + 1)
    operator_only = read_operator_state(base, JOB, 1, UID, keyed=False)
    assert sorted(operator_only["key_repr"].to_pylist()) == ["'split-0'", "'split-1'"]
    assert set(operator_only["key_group"].to_pylist()) == {-1}


def test_iter_keyed_state_yields_the_keyed_rows_of_a_range_file_by_file(base):
    complete(base, 1)
    files = list(iter_keyed_state(base, JOB, 1, UID, key_groups=range(3, 6)))
    assert len(files) >= 2  # one per subtask's file at least: never concatenated
    columns = ("key_group", "state_name", "key_repr")
    rows = sorted(row for table in files for row in zip(*(table[c].to_pylist() for c in columns)))
    expected = read_operator_state(base, JOB, 1, UID, key_groups=range(3, 6))
    assert rows == sorted(zip(*(expected[c].to_pylist() for c in columns)))
    assert all(set(table["key_group"].to_pylist()) <= {3, 4, 5} for table in files)  # no operator state
    with pytest.raises(CheckpointNotFoundError):
        iter_keyed_state(base, JOB, 2, UID, key_groups=range(8))


def test_handle_is_small_and_picklable(base):
    handle = write_subtask(base, 1, 0)
    clone = pickle.loads(pickle.dumps(handle))
    assert clone == handle
    assert {f.table for f in handle.files} == {"operator_state", "channel_state"}
    assert handle.state_bytes == sum(f.size for f in handle.files if f.table == "operator_state") > 0
    assert handle.operator_state_rows == 9 and handle.channel_state_rows == 4


def test_uncommitted_files_are_invisible(base):
    committer = CheckpointCommitter(base)
    handles = [write_subtask(base, 1, s) for s in (0, 1)]
    for h in handles:
        for f in h.files:
            assert os.path.exists(os.path.join(base, f.table, f.path))
    assert _rows(base, "operator_state") == 0
    assert _rows(base, "channel_state") == 0
    assert list_completed_checkpoints(base, JOB) == []
    assert cp_inspect.operator_state(base, 1).num_rows == 0
    committer.abort(handles)
    assert not any(os.path.exists(os.path.join(base, f.table, f.path)) for h in handles for f in h.files)


def test_recommit_does_not_duplicate_rows(base):
    handles = [write_subtask(base, 1, s) for s in (0, 1)]
    committer = CheckpointCommitter(base)
    first = committer.commit(JOB, 1, handles, record())
    versions = {
        t: DeltaTable(os.path.join(base, t)).version() for t in ("operator_state", "channel_state", "checkpoints")
    }
    second = CheckpointCommitter(base).commit(JOB, 1, handles, record())
    assert not first.already_committed and second.already_committed
    assert _rows(base, "operator_state") == 18
    assert _rows(base, "channel_state") == 8
    assert _rows(base, "checkpoints") == 1
    assert versions == {t: DeltaTable(os.path.join(base, t)).version() for t in versions}


def test_partial_commit_then_retry_completes_exactly_once(base):
    """The completion row is missing after a failure in channel_state; a retry finishes it."""
    handles = [write_subtask(base, 1, s) for s in (0, 1)]
    committer = CheckpointCommitter(base)
    channel_file = next(f for f in handles[1].files if f.table == "channel_state")
    moved = os.path.join(base, "moved.parquet")
    os.rename(os.path.join(base, "channel_state", channel_file.path), moved)
    with pytest.raises(CorruptCheckpointError, match="is missing"):
        committer.commit(JOB, 1, handles, record())
    assert _rows(base, "operator_state") == 18  # first table committed ...
    assert _rows(base, "channel_state") == 0
    assert list_completed_checkpoints(base, JOB) == []  # ... but nothing trusts it
    with pytest.raises(CheckpointNotFoundError):
        read_operator_state(base, JOB, 1, UID)
    os.rename(moved, os.path.join(base, "channel_state", channel_file.path))
    result = committer.commit(JOB, 1, handles, record())
    assert result.skipped == {"operator_state"}
    assert _rows(base, "operator_state") == 18
    assert _rows(base, "channel_state") == 8
    assert [c.checkpoint_id for c in list_completed_checkpoints(base, JOB)] == [1]


def test_late_savepoint_commits_after_newer_checkpoint(base):
    late = [write_subtask(base, 5, s) for s in (0, 1)]
    complete(base, 6)
    CheckpointCommitter(base).commit(JOB, 5, late, record(kind="savepoint"))
    CheckpointCommitter(base).commit(JOB, 6, [], record())  # retry of 6 stays a no-op
    assert DeltaTable(os.path.join(base, "operator_state")).transaction_version(f"{JOB}/operator_state") == 6
    listed = list_completed_checkpoints(base, JOB)
    assert [(c.checkpoint_id, c.kind) for c in listed] == [(5, "savepoint"), (6, "checkpoint")]
    assert _rows(base, "operator_state") == 36


def test_missing_completion_row_is_not_listed(base):
    handles = [write_subtask(base, 1, s) for s in (0, 1)]
    complete(base, 2)
    table = DeltaTable(os.path.join(base, "checkpoints"))
    table.delete(f"job_id = '{JOB}' AND checkpoint_id = 2")
    assert list_completed_checkpoints(base, JOB) == []
    assert cp_inspect.operator_state(base, 2).num_rows == 18  # committed state is still there
    with pytest.raises(CheckpointNotFoundError, match="not completed"):
        read_operator_state(base, JOB, 2, UID)
    del handles


def test_checkpoint_row_columns(base):
    complete(base, 3)
    row = cp_inspect.list_checkpoints(base).to_pylist()[0]
    assert (row["job_id"], row["checkpoint_id"], row["kind"], row["mode"]) == (JOB, 3, "checkpoint", "aligned")
    assert row["duration_ms"] == 1500 and row["max_alignment_ms"] == 20
    assert dict(row["parallelism"]) == {"source": 1, UID: 2}
    assert row["operator_uids"] == [UID]
    assert row["state_bytes"] > 0 and row["channel_state_bytes"] > 0
    history = cp_inspect.format_history(cp_inspect.list_checkpoints(base))
    assert history.splitlines()[0].split()[:3] == ["JOB", "ID", "KIND"]
    assert "job-1" in history.splitlines()[1] and "1.5 s" in history


@pytest.mark.parametrize("obstacle", ["base", "table"])
def test_unwritable_base_raises_storage_error(tmp_path, obstacle):
    base = tmp_path / "ckpt"
    if obstacle == "base":
        base.write_text("a file in the way")
    else:
        base.mkdir()
        (base / "operator_state").write_text("a file in the way")
    with pytest.raises(CheckpointStorageError, match="ckpt") as info:
        write_subtask(str(base), 1, 0)
    assert info.value.url.endswith("ckpt")
    with pytest.raises(CheckpointStorageError, match="ckpt"):
        CheckpointCommitter(str(base))


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_directory_raises_storage_error(tmp_path):
    base = tmp_path / "ro"
    base.mkdir()
    base.chmod(0o500)
    try:
        with pytest.raises(CheckpointStorageError, match="ro"):
            write_subtask(str(base), 1, 0)
    finally:
        base.chmod(0o700)


def test_writer_discards_on_exception(base):
    from checkpointing import SnapshotWriter

    with pytest.raises(RuntimeError, match="boom"):
        with SnapshotWriter(base, JOB, 1, UID, 0, max_rows_per_file=2) as w:
            w.add_keyed_state("count", [(g, g, g) for g in range(5)])
            written = [f for _, _, fs in os.walk(os.path.join(base, "operator_state")) for f in fs]
            assert len(written) == 2  # flushed at 2 and 4 rows
            raise RuntimeError("boom")
    leftovers = [f for _, _, fs in os.walk(os.path.join(base, "operator_state")) for f in fs]
    assert leftovers == []


def test_a_lost_commit_race_is_a_commit_conflict_error_with_delta_rs_error_as_its_cause(base, monkeypatch):
    from deltalake.exceptions import CommitFailedError

    import checkpointing.committer as committer_module
    from checkpointing import CheckpointCommitter
    from flinklike_spark.errors import CheckpointCommitConflictError

    def lose_the_race(*args, **kwargs):
        raise CommitFailedError("Transaction failed: a concurrent transaction wrote version 1 first")

    monkeypatch.setattr(committer_module, "commit_files", lose_the_race)
    handle = write_subtask(base, 1, 0)
    with pytest.raises(CheckpointCommitConflictError, match="lost a race") as failure:
        CheckpointCommitter(base).commit(JOB, 1, [handle], record())
    assert isinstance(failure.value.__cause__, CommitFailedError)
