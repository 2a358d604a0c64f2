"""DeltaSink writer and committer against real Delta tables in a temporary directory."""

from __future__ import annotations

import os
import pickle
import threading
import time

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from checkpointing.layout import scan_table
from connectors.delta import DeltaCommittable, DeltaSink, _GroupCommit
from flinklike_spark.connector_api import END_OF_INPUT, SinkWriterContext
from flinklike_spark.errors import ConfigurationError, SchemaMismatchError, SinkCommitError

pytestmark = pytest.mark.timeout(60)


def rows(start: int, stop: int, key: int = 0) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(
        [{"key": key, "seq": s} for s in range(start, stop)],
        schema=pa.schema([("key", pa.int64()), ("seq", pa.int64())]),
    )


def writer_for(sink: DeltaSink, subtask: int = 0, job_id: str = "job-a"):
    writer = sink.create_writer(
        SinkWriterContext(subtask_index=subtask, parallelism=2, job_id=job_id, operator_uid="sink")
    )
    writer.open()
    return writer


def committed_table(path) -> DeltaSink:
    """A sink whose table holds rows 0 and 1 of key 0, committed by job-a's checkpoint 1."""
    sink = DeltaSink(path)
    writer = writer_for(sink)
    writer.write(rows(0, 2))
    sink.create_committer().commit(writer.prepare_commit(1))
    writer.close()
    return sink


def read(path) -> list[dict]:
    return sorted(scan_table(DeltaTable(str(path))).to_pylist(), key=lambda r: (r["key"], r["seq"]))


def test_rows_are_invisible_until_committed_then_visible_once(tmp_path):
    sink = DeltaSink(tmp_path / "t")
    writer = writer_for(sink)
    writer.write(rows(0, 5))
    committables = writer.prepare_commit(1)
    assert [c.version for c in committables] == [1]
    assert not (tmp_path / "t" / "_delta_log").exists()  # nothing committed yet

    committer = sink.create_committer()
    committer.commit(committables)
    assert [r["seq"] for r in read(tmp_path / "t")] == list(range(5))

    # a restart commits the restored committables again: no duplicate rows, no new version
    version = DeltaTable(str(tmp_path / "t")).version()
    committer.commit(pickle.loads(pickle.dumps(committables)))
    assert [r["seq"] for r in read(tmp_path / "t")] == list(range(5))
    assert DeltaTable(str(tmp_path / "t")).version() == version
    writer.close()


def test_later_checkpoints_and_end_of_input_append_only_new_rows(tmp_path):
    sink = DeltaSink(tmp_path / "t")
    writer, committer = writer_for(sink), sink.create_committer()
    writer.write(rows(0, 3))
    first = writer.prepare_commit(1)
    assert writer.prepare_commit(2) == []  # nothing written since checkpoint 1
    writer.write(rows(3, 6))
    third = writer.prepare_commit(3)
    writer.write(rows(6, 8))
    writer.finish()
    final = writer.prepare_commit(END_OF_INPUT)
    committer.commit(first + third)  # two pending checkpoints committed together
    committer.commit(first + third + final)  # already-committed prefix is skipped
    assert [r["seq"] for r in read(tmp_path / "t")] == list(range(8))
    table = DeltaTable(str(tmp_path / "t"))
    assert table.transaction_version("flinklike/job-a/sink/0") == END_OF_INPUT
    writer.close()


@pytest.mark.parametrize("round_", range(10))
def test_concurrent_subtasks_racing_to_create_the_table_all_commit(tmp_path, round_):
    """Six subtasks in six processes (one group commit each) commit their first checkpoint at once to a table
    none of them created: they race, and the losers retry on the newer version."""
    sink = DeltaSink(tmp_path / "t")
    prepared = []
    for subtask in range(6):
        writer = writer_for(sink, subtask)
        writer.write(rows(0, 10, key=subtask))
        prepared.append(writer.prepare_commit(1))
        writer.close()
    start, errors = threading.Barrier(len(prepared)), []

    def commit(committables):
        start.wait(10)
        try:
            _GroupCommit(sink._table(), fence_epoch=0).commit(committables)  # as in a process of its own
        except Exception as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)

    threads = [threading.Thread(target=commit, args=(c,)) for c in prepared]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    got = read(tmp_path / "t")
    for key in range(6):
        assert [r["seq"] for r in got if r["key"] == key] == list(range(10))


def _first_checkpoint_of_job_b(sink: DeltaSink, *, subtasks: int) -> list:
    """Each subtask's committables of checkpoint 1: rows 0..4 of key ``10 + subtask``."""
    prepared = []
    for subtask in range(subtasks):
        writer = writer_for(sink, subtask, job_id="job-b")
        writer.write(rows(0, 5, key=10 + subtask))
        prepared.append(writer.prepare_commit(1))
        writer.close()
    return prepared


def _commit_while_the_group_is_busy(sink: DeltaSink, prepared: list) -> list:
    """Every subtask's commit in a thread of its own, all handed in while another commit holds the group;
    the errors they raised."""
    committer = sink.create_committer()
    group = committer._group
    errors = []

    def commit(committables):
        try:
            sink.create_committer().commit(committables)
        except Exception as exc:  # noqa: BLE001 - asserted by the callers
            errors.append(exc)

    with group._commit_lock:
        threads = [threading.Thread(target=commit, args=(c,)) for c in prepared]
        for thread in threads:
            thread.start()
        while len(group._queue) < len(prepared):
            time.sleep(0.01)
    for thread in threads:
        thread.join(30)
    return errors


def test_subtasks_of_one_process_commit_a_checkpoint_in_one_delta_transaction(tmp_path):
    sink = committed_table(tmp_path / "t")
    prepared = _first_checkpoint_of_job_b(sink, subtasks=4)
    before = DeltaTable(str(tmp_path / "t")).version()
    assert _commit_while_the_group_is_busy(sink, prepared) == []
    table = DeltaTable(str(tmp_path / "t"))
    assert table.version() == before + 1  # one transaction, no lost races
    for subtask in range(4):
        assert table.transaction_version(prepared[subtask][0].app_id) == 1
        assert [r["seq"] for r in read(tmp_path / "t") if r["key"] == 10 + subtask] == list(range(5))


def test_every_subtask_whose_committables_a_failed_group_commit_held_sees_its_error(tmp_path):
    sink = committed_table(tmp_path / "t")
    prepared = _first_checkpoint_of_job_b(sink, subtasks=3)
    lost = prepared[1][0].files[0].path
    os.remove(tmp_path / "t" / lost)
    errors = _commit_while_the_group_is_busy(sink, prepared)
    assert len(errors) == 3 and all(isinstance(e, SinkCommitError) and lost in str(e) for e in errors), errors
    assert len(read(tmp_path / "t")) == 2  # nothing of the failed batch landed


def test_rolls_files_at_target_size(tmp_path):
    sink = DeltaSink(tmp_path / "t", target_file_size=1)
    writer = writer_for(sink)
    for start in range(0, 30, 10):
        writer.write(rows(start, start + 10))
    [committable] = writer.prepare_commit(1)
    assert len(committable.files) == 3
    sink.create_committer().commit([committable])
    assert len(read(tmp_path / "t")) == 30


def test_appends_to_an_existing_table_with_castable_schema(tmp_path):
    sink = committed_table(tmp_path / "t")
    narrow = pa.RecordBatch.from_pylist(
        [{"key": 0, "seq": 2}], schema=pa.schema([("key", pa.int32()), ("seq", pa.int32())])
    )
    writer = writer_for(sink, job_id="job-b")
    writer.write(narrow)
    sink.create_committer().commit(writer.prepare_commit(1))
    assert [r["seq"] for r in read(tmp_path / "t")] == [0, 1, 2]


def test_rows_with_other_columns_are_refused_naming_both(tmp_path):
    sink = committed_table(tmp_path / "t")
    writer = writer_for(sink, job_id="job-b")
    with pytest.raises(SchemaMismatchError, match=r"\['name'\].*\['key', 'seq'\]"):
        writer.write(pa.RecordBatch.from_pylist([{"name": "x"}]))
    writer.close()
    assert len(read(tmp_path / "t")) == 2


def test_a_missing_staged_file_fails_the_commit_and_changes_nothing(tmp_path):
    sink = DeltaSink(tmp_path / "t")
    writer = writer_for(sink)
    writer.write(rows(0, 2))
    ok = writer.prepare_commit(1)
    sink.create_committer().commit(ok)
    writer.write(rows(2, 4))
    [lost] = writer.prepare_commit(2)
    os.remove(tmp_path / "t" / lost.files[0].path)
    with pytest.raises(SinkCommitError, match=lost.files[0].path):
        sink.create_committer().commit([lost])
    assert len(read(tmp_path / "t")) == 2
    writer.close()


def test_uncommitted_files_of_a_failed_attempt_stay_invisible(tmp_path):
    sink = DeltaSink(tmp_path / "t")
    writer = writer_for(sink)
    writer.write(rows(0, 2))
    sink.create_committer().commit(writer.prepare_commit(1))
    writer.write(rows(2, 4))  # the attempt fails before the next checkpoint
    writer.close()
    assert [r["seq"] for r in read(tmp_path / "t")] == [0, 1]


@pytest.mark.parametrize("bad", [dict(path=""), dict(path="/x", target_file_size=0)])
def test_bad_arguments_name_the_value(bad):
    with pytest.raises(ConfigurationError, match="must be"):
        DeltaSink(**bad)


def test_committable_pickles():
    committable = DeltaCommittable(app_id="a", version=1, files=(), schema=pa.schema([("x", pa.int64())]))
    assert pickle.loads(pickle.dumps(committable)) == committable


def test_a_created_table_is_checkpointed_every_10_commits_as_delta_lake_does(tmp_path):
    """A reader of the table loads at most 9 commit files after the newest Delta checkpoint, not 99."""
    sink = DeltaSink(tmp_path / "t")
    writer, committer = writer_for(sink), sink.create_committer()
    for checkpoint in range(1, 25):
        writer.write(rows(checkpoint, checkpoint + 1))
        committer.commit(writer.prepare_commit(checkpoint))
    writer.close()
    table = DeltaTable(str(tmp_path / "t"))
    assert table.metadata().configuration["delta.checkpointInterval"] == "10"
    checkpoints = sorted(
        int(p.name.split(".")[0]) for p in (tmp_path / "t" / "_delta_log").glob("*.checkpoint.parquet")
    )
    assert len(checkpoints) == 2 and checkpoints[1] - checkpoints[0] == 10, checkpoints  # 24 commits
    assert table.version() - checkpoints[-1] < 10
    assert [r["seq"] for r in read(tmp_path / "t")] == list(range(1, 25))
