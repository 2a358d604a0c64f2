"""Table maintenance keeps each checkpoint table's Delta log bounded however many checkpoints a job took,
and everything retained stays restorable (checkpointing.maintenance).

The checkpoints here run the coordinator's own path: commit, then retention with
maintenance on a ``MaintenanceSchedule`` (its clock advanced one second per
checkpoint). The tables' log retention is set to 0 s: a cleanup then removes
everything before the newest Delta checkpoint at once, where the production 10 s
would need a test that waits.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta

import pytest
from deltalake import DeltaTable

from checkpointing import (
    CheckpointCommitter,
    CheckpointLayout,
    decode_operator_state,
    list_completed_checkpoints,
    read_operator_state,
    retain,
    verify_checkpoint,
)
from checkpointing import layout as layout_module
from checkpointing.layout import CHECKPOINTS, OPERATOR_STATE, STATE_TABLES, TABLE_PROPERTIES
from checkpointing.maintenance import MaintenanceSchedule, log_file_bound
from checkpointing.schemas import CHANNEL_STATE_SCHEMA, CHECKPOINTS_SCHEMA, OPERATOR_STATE_SCHEMA
from flinklike_spark.errors import CheckpointStorageError
from tests.support.checkpoint_tables import JOB, UID, complete, record, write_subtask

pytestmark = pytest.mark.timeout(240)

TABLES = (CHECKPOINTS, *STATE_TABLES)
INTERVAL = timedelta(seconds=5)  # maintenance every 5th checkpoint: the test clock advances 1 s per checkpoint


@pytest.fixture
def short_log(monkeypatch):
    monkeypatch.setitem(TABLE_PROPERTIES, "delta.logRetentionDuration", "interval 0 seconds")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def log_files(base, table) -> list[str]:
    path = os.path.join(base, table, "_delta_log")
    return os.listdir(path) if os.path.isdir(path) else []


def age(base, first: int, last: int, *, savepoints=(), num_retained=3, schedule, clock, on_each=None) -> None:
    """Checkpoints ``first..last`` as the coordinator takes them; each writes its id into its state."""
    committer = CheckpointCommitter(base)
    for cid in range(first, last + 1):
        kind = "savepoint" if cid in savepoints else "checkpoint"
        handles = [write_subtask(base, cid, s, value_offset=cid) for s in (0, 1)]
        committer.commit(JOB, cid, handles, record(kind=kind))
        if kind == "checkpoint":
            retain(base, JOB, num_retained, full_vacuum=schedule.due())
        clock.now += 1.0
        if on_each is not None:
            on_each(cid)


def assert_restores(base, checkpoint_id: int) -> None:
    verify_checkpoint(base, JOB, checkpoint_id, full=True)
    counts = {
        e.key: e.value
        for e in decode_operator_state(read_operator_state(base, JOB, checkpoint_id, UID, state_name="count"))
    }
    assert counts == {f"k{g}": g * 10 + checkpoint_id for g in range(8)}, checkpoint_id


def test_the_log_stays_bounded_over_hundreds_of_checkpoints_and_all_retained_restore(base, short_log):
    clock = Clock()
    schedule = MaintenanceSchedule(interval=INTERVAL, clock=clock)
    most = dict.fromkeys(TABLES, 0)

    def count(_):
        for table in TABLES:
            most[table] = max(most[table], len(log_files(base, table)))

    age(base, 1, 200, savepoints=(7, 120), schedule=schedule, clock=clock, on_each=count)

    for table in TABLES:
        versions = DeltaTable(os.path.join(base, table)).version() + 1
        # The bound's rate: commits per second of the test clock (one checkpoint per second).
        bound = log_file_bound(versions / 200, interval=INTERVAL, log_retention=timedelta(0))
        assert most[table] <= bound, (table, most[table], bound, sorted(log_files(base, table)))
        assert versions > 3 * bound, (table, versions, bound)  # without the cleanup the log would hold them all
    completed = [(c.checkpoint_id, c.kind.value) for c in list_completed_checkpoints(base, JOB)]
    assert completed == [(7, "savepoint"), (120, "savepoint"), (198, "checkpoint"), (199, "checkpoint"),
                         (200, "checkpoint")]  # fmt: skip
    for checkpoint_id, _ in completed:
        assert_restores(base, checkpoint_id)


def test_without_maintenance_the_log_grows_with_every_checkpoint(base, short_log):
    """The counterpart: retention alone (no maintenance) leaves every version's log files."""
    clock = Clock()
    never = MaintenanceSchedule(interval=timedelta(days=1), clock=clock)
    never.due()  # spends the first run
    age(base, 1, 60, schedule=never, clock=clock)
    versions = DeltaTable(os.path.join(base, OPERATOR_STATE)).version() + 1
    assert len(log_files(base, OPERATOR_STATE)) > versions > log_file_bound(versions / 60, log_retention=timedelta(0))


def test_tables_made_with_other_properties_get_the_maintained_ones(base):
    """A directory written by an older version (Delta's 30-day log and one-week tombstones, cleanup on every
    commit) is given this version's table properties by the first committer."""
    schemas = {CHECKPOINTS: (CHECKPOINTS_SCHEMA, None), OPERATOR_STATE: (OPERATOR_STATE_SCHEMA, ["job_id",
               "checkpoint_id"]), "channel_state": (CHANNEL_STATE_SCHEMA, ["job_id", "checkpoint_id"])}  # fmt: skip
    for table, (schema, partition_by) in schemas.items():
        DeltaTable.create(os.path.join(base, table), schema, partition_by=partition_by,
                          configuration={"delta.checkpointInterval": "10"})  # fmt: skip
    CheckpointCommitter(base)
    for table in TABLES:
        configuration = DeltaTable(os.path.join(base, table)).metadata().configuration
        assert {k: configuration.get(k) for k in TABLE_PROPERTIES} == TABLE_PROPERTIES, table
    assert TABLE_PROPERTIES["delta.enableExpiredLogCleanup"] == "false"


def test_a_reader_holding_an_older_version_reads_the_latest(base, short_log):
    """A reader in another process loaded the tables, then the job took many checkpoints and maintenance
    deleted the log files after the versions it holds: it still lists and restores the latest checkpoint."""
    clock = Clock()
    schedule = MaintenanceSchedule(interval=INTERVAL, clock=clock)
    age(base, 1, 5, schedule=schedule, clock=clock)
    reader = CheckpointLayout(base_url=base)  # keeps its tables open per thread, as a TaskExecutor's does
    assert [c.checkpoint_id for c in list_completed_checkpoints(reader, JOB)] == [3, 4, 5]
    held = {table: reader.open_table(table).version() for table in TABLES}
    raw = DeltaTable(os.path.join(base, OPERATOR_STATE))  # and a DeltaTable of its own

    age(base, 6, 80, schedule=schedule, clock=clock)
    for table, version in held.items():  # the commits after the held versions are gone
        assert f"{version + 1:020d}.json" not in log_files(base, table), (table, sorted(log_files(base, table)))

    assert [c.checkpoint_id for c in list_completed_checkpoints(reader, JOB)] == [78, 79, 80]
    assert_restores(reader, 80)
    raw.update_incremental()  # from the newest Delta checkpoint on
    assert raw.version() == DeltaTable(os.path.join(base, OPERATOR_STATE)).version()


def test_an_open_that_races_a_log_cleanup_opens_again(base, monkeypatch):
    """An open that read a ``_last_checkpoint`` naming a Delta checkpoint the cleanup deleted meanwhile fails
    inside deltalake; the layout opens again, and the cleanup has finished by then."""
    clock = Clock()
    age(base, 1, 8, schedule=MaintenanceSchedule(interval=INTERVAL, clock=clock), clock=clock)
    log = os.path.join(base, OPERATOR_STATE, "_delta_log")
    assert any(name.endswith(".checkpoint.parquet") for name in os.listdir(log))
    hint = os.path.join(log, "_last_checkpoint")
    current = open(hint).read()
    stale = json.dumps({**json.loads(current), "version": 10**6})  # a checkpoint no listing finds
    real, failures = layout_module.DeltaTable, []

    def racing_open(uri, *args, **kwargs):
        if uri.endswith(OPERATOR_STATE) and len(failures) < races:
            with open(hint, "w") as f:
                f.write(stale)
            try:
                return real(uri, *args, **kwargs)
            except Exception as exc:
                failures.append(exc)
                raise
            finally:
                with open(hint, "w") as f:
                    f.write(current)
        return real(uri, *args, **kwargs)

    monkeypatch.setattr(layout_module, "DeltaTable", racing_open)
    races = 1
    dt = CheckpointLayout(base_url=base).open_table(OPERATOR_STATE)
    assert len(failures) == 1 and dt.version() == real(os.path.join(base, OPERATOR_STATE)).version()

    races = 3  # a log that stays unreadable is an error naming the table
    failures.clear()
    with pytest.raises(CheckpointStorageError, match="operator_state"):
        CheckpointLayout(base_url=base).open_table(OPERATOR_STATE)
    assert len(failures) == 3


def test_a_row_an_interrupted_retention_left_is_swept_once_an_hour_old(base, monkeypatch):
    """Tombstones expire fast, so a completion row whose file an interrupted retention did not delete may
    leave the log before a vacuum sees it; the maintenance then deletes it as an untracked file an hour old
    (and never a younger one: it could be a commit in progress)."""
    from checkpointing import retention

    monkeypatch.setitem(TABLE_PROPERTIES, "delta.deletedFileRetentionDuration", "interval 0 seconds")
    for cid in (1, 2, 3):
        complete(base, cid)
    rows = os.path.join(base, CHECKPOINTS)
    with monkeypatch.context() as interrupted:  # the retention dies after its commits, before its deletes
        interrupted.setattr(retention, "_delete_files", lambda layout, table, paths: [])
        retain(base, JOB, 2, full_vacuum=False)
    named = {os.path.basename(uri) for uri in DeltaTable(rows).file_uris()}
    (leaked,) = [f for f in os.listdir(rows) if f.endswith(".parquet") and f not in named]
    removed_at = DeltaTable(rows).version()
    checkpoint = 4
    while not any(f.endswith(".checkpoint.parquet") and int(f[:20]) > removed_at for f in log_files(base, CHECKPOINTS)):
        complete(base, checkpoint)  # commits until a Delta checkpoint drops the expired tombstone
        checkpoint += 1
    retain(base, JOB, 2)
    assert os.path.exists(os.path.join(rows, leaked))  # too young to tell from a commit in progress
    hour_ago = os.path.getmtime(os.path.join(rows, leaked)) - 3700
    os.utime(os.path.join(rows, leaked), (hour_ago, hour_ago))
    swept = retain(base, JOB, 2)
    assert not os.path.exists(os.path.join(rows, leaked))
    assert f"{CHECKPOINTS}/{leaked}" in swept.vacuumed_files
    assert [c.checkpoint_id for c in list_completed_checkpoints(base, JOB)] == [checkpoint - 2, checkpoint - 1]
