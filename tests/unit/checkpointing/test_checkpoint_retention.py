"""Retention keeps the newest completed checkpoints (and savepoints) and vacuums the rest."""

from __future__ import annotations

import os

from deltalake import DeltaTable

from checkpointing import (
    find_restorable_checkpoint,
    list_completed_checkpoints,
    read_operator_state,
    retain,
    verify_checkpoint,
)
from checkpointing.layout import scan_table
from tests.support.checkpoint_tables import JOB, UID, complete, write_subtask


def _files_on_disk(base, table):
    root = os.path.join(base, table)
    return sorted(
        os.path.relpath(os.path.join(d, f), root)
        for d, _, fs in os.walk(root)
        if "_delta_log" not in d
        for f in fs
        if f.endswith(".parquet")
    )


def test_retain_keeps_newest_and_savepoints_and_vacuums(base):
    handles = {cid: complete(base, cid, kind="savepoint" if cid == 2 else "checkpoint") for cid in range(1, 6)}
    in_flight = write_subtask(base, 6, 0)  # being written while retention runs
    result = retain(base, JOB, 2)
    assert result.retained == (4, 5)
    assert result.dropped == (1, 3)
    listed = [(c.checkpoint_id, c.kind) for c in list_completed_checkpoints(base, JOB)]
    assert listed == [(2, "savepoint"), (4, "checkpoint"), (5, "checkpoint")]
    for cid in (2, 4, 5):
        verify_checkpoint(base, JOB, cid, full=True)
        assert read_operator_state(base, JOB, cid, UID).num_rows == 18
    on_disk = _files_on_disk(base, "operator_state")
    for cid in (1, 3):
        assert not any(f"checkpoint_id={cid}/" in p for p in on_disk)
        assert all(not os.path.exists(os.path.join(base, f.table, f.path)) for h in handles[cid] for f in h.files)
    assert any(p.endswith(".parquet") for p in result.vacuumed_files)
    # The in-flight checkpoint's uncommitted files survive the vacuum.
    assert all(os.path.exists(os.path.join(base, f.table, f.path)) for f in in_flight.files)
    assert find_restorable_checkpoint(base, JOB).checkpoint_id == 5
    # Live table contents match what is listed: no rows of dropped checkpoints.
    live = scan_table(DeltaTable(os.path.join(base, "operator_state")))
    assert sorted(set(live["checkpoint_id"].to_pylist())) == [2, 4, 5]


def test_without_the_full_vacuum_only_the_files_its_own_deletes_removed_are_deleted(base, monkeypatch):
    import checkpointing.retention as retention

    files = {cid: [f for h in complete(base, cid) for f in h.files] for cid in range(1, 5)}
    in_flight = write_subtask(base, 5, 0).files

    def exists(f):
        return os.path.exists(os.path.join(base, f.table, f.path))

    # An earlier retention died after its deletes: checkpoint 1 left the logs, its files stayed.
    monkeypatch.setattr(retention, "_delete_files", lambda layout, table, paths: [])
    retain(base, JOB, 3, full_vacuum=False, drop_abandoned=False)  # (orphan cleanup would sweep them)
    monkeypatch.undo()
    assert all(map(exists, files[1]))

    result = retain(base, JOB, 2, full_vacuum=False, drop_abandoned=False)
    assert result.dropped == (2,)
    assert not any(map(exists, files[2]))
    state_files = {f"{f.table}/{f.path}" for f in files[2]}
    assert state_files <= set(result.vacuumed_files)
    assert all(p in state_files or p.startswith("checkpoints/") for p in result.vacuumed_files), result
    assert all(map(exists, [*files[1], *files[3], *files[4], *in_flight]))

    swept = retain(base, JOB, 2)  # a full vacuum sweeps what the interrupted retention left
    assert {f"{f.table}/{f.path}" for f in files[1]} <= set(swept.vacuumed_files)
    assert not any(map(exists, files[1]))


def test_retain_removes_abandoned_checkpoint_files(base):
    abandoned = write_subtask(base, 1, 0)  # never committed: the coordinator died
    complete(base, 2)
    complete(base, 3)
    result = retain(base, JOB, 1)
    assert result.retained == (3,) and result.dropped == (2,)
    assert sorted(result.orphan_files) == sorted(f"{f.table}/{f.path}" for f in abandoned.files)
    assert not any(os.path.exists(os.path.join(base, f.table, f.path)) for f in abandoned.files)
    again = retain(base, JOB, 1)
    assert again.dropped == () and again.orphan_files == () and again.vacuumed_files == ()


def test_a_listing_that_races_retention_reads_the_newer_version(base, monkeypatch):
    """Retention in another process deletes checkpoint rows and vacuums their files at once (no retention
    window): a reader that loaded the older table version must not fail on the vanished file (seen: a
    restoring task failed with FileNotFoundError and cost the job a second restart)."""
    from checkpointing import reader

    for cid in range(1, 5):
        complete(base, cid)
    real_scan, raced = reader.scan_table, []

    def scan_after_retention(dt, **kwargs):
        if not raced:  # the version this reader loaded still names checkpoints 1-3's rows
            raced.append(None)  # retention's own listing scans as usual
            raced[0] = retain(base, JOB, 1)
        return real_scan(dt, **kwargs)

    monkeypatch.setattr(reader, "scan_table", scan_after_retention)
    listed = [c.checkpoint_id for c in list_completed_checkpoints(base, JOB)]
    assert raced and raced[0].dropped == (1, 2, 3)
    assert listed == [4]


def test_every_table_checkpoints_its_log_every_ten_commits(base):
    """Retention's deletes and vacuums, and every open, stay cheap: the Delta log is checkpointed every 10
    commits (at delta-rs's default of 100, opening a table replayed up to 100 JSON commits)."""
    for cid in range(1, 9):
        complete(base, cid)
        retain(base, JOB, 2)
    for table in ("checkpoints", "operator_state", "channel_state"):
        dt = DeltaTable(os.path.join(base, table))
        assert dt.metadata().configuration.get("delta.checkpointInterval") == "10", table
        log = os.listdir(os.path.join(base, table, "_delta_log"))
        assert dt.version() >= 10 and any(name.endswith(".checkpoint.parquet") for name in log), (table, sorted(log))


def test_completion_rows_go_as_whole_files_and_a_file_with_several_rows_is_rewritten(base):
    """The committer writes one file per completion row: retention removes those files without a
    rewrite. A file holding several rows (another writer's, e.g. a compaction) is rewritten by a
    Delta delete that keeps the rows of retained checkpoints."""
    from deltalake import write_deltalake

    for cid in range(1, 5):
        complete(base, cid)
    checkpoints = os.path.join(base, "checkpoints")
    version = DeltaTable(checkpoints).version()
    retain(base, JOB, 3)
    operations = [h["operation"] for h in DeltaTable(checkpoints).history() if h["version"] > version]
    assert "DELETE" not in operations and [c.checkpoint_id for c in list_completed_checkpoints(base, JOB)] == [2, 3, 4]

    # Compact the rows of checkpoints 2-4 into one file, as an OPTIMIZE by another writer would.
    rows = scan_table(DeltaTable(checkpoints))
    write_deltalake(checkpoints, rows, mode="overwrite")
    complete(base, 5)
    version = DeltaTable(checkpoints).version()
    result = retain(base, JOB, 2)
    assert result.dropped == (2, 3)
    assert [c.checkpoint_id for c in list_completed_checkpoints(base, JOB)] == [4, 5]
    assert "DELETE" in [h["operation"] for h in DeltaTable(checkpoints).history() if h["version"] > version]
