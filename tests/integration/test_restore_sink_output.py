"""Restoring a checkpoint older than what a DeltaSink already committed.

The sink's transactional ids (Delta app transactions) stay the same across
resumes, so a resumed job knows which checkpoints its sink committed. A
restore point older than the newest committed one cannot be replayed exactly
(the new run places its barriers elsewhere), so the job refuses to start,
before it writes anything, unless
``execution.state-recovery.accept-duplicate-sink-output`` accepts duplicates.
"""

from __future__ import annotations

import os

import pytest
from deltalake import DeltaTable

from checkpointing import list_completed_checkpoints
from flinklike_spark.errors import CommittedSinkOutputError
from tests.support.checkpoint_jobs import checkpoint_config, run_and_cancel
from tests.support.delta_sink_job import (
    NUM_KEYS,
    RECORDS_PER_KEY,
    assert_exactly_once_in_order,
    build,
    rows_in_commit_order,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ACCEPT = "execution.state-recovery.accept-duplicate-sink-output"


def _stopped_job(tmp_path):
    """A cancelled job whose sink committed its newest checkpoint: ``(dir, table, job id, completed ids)``."""
    directory, table = str(tmp_path / "checkpoints"), tmp_path / "out"
    config = checkpoint_config(directory, "aligned")
    job_id = run_and_cancel(build(config, table, seconds_per_record=0.0003), directory, checkpoints=3)
    completed = [c.checkpoint_id for c in list_completed_checkpoints(directory, job_id)]
    assert len(completed) >= 2
    return directory, table, job_id, completed


def _committed_checkpoint(table, job_id: str) -> int:
    dt = DeltaTable(str(table))
    versions = [dt.transaction_version(f"flinklike/{job_id}/delta/{s}") for s in range(2)]
    return max(v for v in versions if v is not None)


def _truncate_operator_state(directory: str, job_id: str, checkpoint_id: int) -> None:
    root = os.path.join(directory, "operator_state", f"job_id={job_id}", f"checkpoint_id={checkpoint_id}")
    names = os.listdir(root)
    assert names
    for name in names:
        path = os.path.join(root, name)
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)


def _resume(directory: str, table, path: str, **extra):
    config = checkpoint_config(directory, "aligned") | {"execution.state-recovery.path": path} | extra
    return build(config, table, seconds_per_record=0).execute("resumed")


def _assert_every_row_at_least_once(table) -> None:
    per_key: dict[int, set[int]] = {}
    for row in rows_in_commit_order(table):
        per_key.setdefault(row["key"], set()).add(row["seq"])
    assert per_key == {key: set(range(RECORDS_PER_KEY)) for key in range(NUM_KEYS)}


def test_corrupt_newest_checkpoint_fallback_refuses_when_the_sink_committed_it(tmp_path):
    directory, table, job_id, completed = _stopped_job(tmp_path)
    newest, previous = completed[-1], completed[-2]
    committed = _committed_checkpoint(table, job_id)
    assert committed == newest, "the sink commits each completed checkpoint"
    _truncate_operator_state(directory, job_id, newest)
    version_before = DeltaTable(str(table)).version()

    with pytest.raises(CommittedSinkOutputError) as refused:
        _resume(directory, table, directory)
    message = str(refused.value)
    assert f"checkpoint {previous}" in message and f"checkpoint {committed}" in message
    assert str(table) in message and ACCEPT in message
    assert DeltaTable(str(table)).version() == version_before, "the refused job wrote to the table"

    _resume(directory, table, directory, **{ACCEPT: True})
    _assert_every_row_at_least_once(table)


def test_explicit_restore_of_an_older_checkpoint_than_the_sink_committed_is_refused(tmp_path):
    directory, table, job_id, completed = _stopped_job(tmp_path)
    older = completed[0]
    with pytest.raises(CommittedSinkOutputError, match=f"checkpoint {older}"):
        _resume(directory, table, f"{directory}/{job_id}/chk-{older}")

    # The newest checkpoint is exact. The resumed job commits under the same
    # transactional ids and its checkpoints carry the lineage on, so resuming
    # it in turn is exact again.
    newest = checkpoint_config(directory, "aligned") | {
        "execution.state-recovery.path": f"{directory}/{job_id}/chk-{completed[-1]}"
    }
    second = run_and_cancel(build(newest, table, seconds_per_record=0.0003), directory, checkpoints=1)
    later = list_completed_checkpoints(directory, second)
    assert later and all(c.lineage_id == job_id for c in later), "the resumed job's checkpoints keep the lineage"
    assert later[0].checkpoint_id > completed[-1], "checkpoint ids continue across the lineage"
    _resume(directory, table, directory)
    assert_exactly_once_in_order(table)
