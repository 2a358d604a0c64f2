"""Checkpointing under faults: unwritable storage, corrupt checkpoints, savepoints."""

from __future__ import annotations

import contextlib
import logging
import os
import random
import subprocess
import threading
import time

import pytest

from checkpointing import list_completed_checkpoints, read_operator_state
from connectors import CollectSink
from flinklike_spark.errors import CheckpointNotFoundError, JobExecutionError
from tests.support.checkpoint_jobs import checkpoint_config, run_and_cancel
from tests.support.exact_count_job import NUM_KEYS, RECORDS_PER_KEY, build, resume

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def break_after_submission(env, directory: str, name: str):
    """Submit the job, then make its checkpoint directory unwritable: a file where the directory was.

    A directory that is unwritable from the start fails ``execute()`` at once (the
    start-up probe, test_storage_probe.py); one that breaks while the job runs fails
    checkpoints, and the tolerance and the restart strategy decide.
    """
    client = env.execute_async(name)
    os.rename(directory, directory + ".gone")  # atomic, whatever the tasks are writing
    with open(directory, "w") as blocker:
        blocker.write("a file where the checkpoint directory should be")  # mkdir fails even for root
    return client


def test_unwritable_checkpoint_dir_fails_checkpoints_but_not_the_job_below_the_tolerance(tmp_path):
    """Failed checkpoints below the tolerance do not fail the job; as in Flink 2 (FLIP-147), a bounded job
    ends only with a final checkpoint, so it waits until the storage works again."""
    directory = str(tmp_path / "broken-checkpoints")
    config = checkpoint_config(directory, "aligned") | {
        "execution.checkpointing.tolerable-failed-checkpoints": 1000,
    }
    client = break_after_submission(build(config, seconds_per_record=0.0001), directory, "tolerated")
    time.sleep(3)
    assert not client.done(), "the job ended without a completed final checkpoint"
    os.remove(directory)  # the storage works again
    os.rename(directory + ".gone", directory)
    result = client.wait(120)
    counts = {row["key"]: row["count"] for row in CollectSink.rows(result)}
    assert counts == {key: RECORDS_PER_KEY for key in range(NUM_KEYS)}


def test_unwritable_checkpoint_dir_fails_the_job_once_the_tolerance_is_exceeded(tmp_path):
    directory = str(tmp_path / "broken-checkpoints")
    config = checkpoint_config(directory, "aligned") | {
        "execution.checkpointing.tolerable-failed-checkpoints": 2,
        "restart-strategy.type": "none",
    }
    with pytest.raises(JobExecutionError, match="tolerable-failed-checkpoints: 2") as failure:
        break_after_submission(build(config), directory, "intolerant").wait(120)
    assert directory in str(failure.value)


def test_exceeding_the_tolerance_is_a_job_failure_the_restart_strategy_handles(tmp_path):
    """As in Flink: the job restarts (counted, in the exception history) and fails when no restart is left.

    The storage breaks while the job runs, so it is not the start-up probe's: the exception
    history names the checkpoint directory in every entry.
    """
    directory = str(tmp_path / "broken-checkpoints")
    config = checkpoint_config(directory, "aligned") | {
        "execution.checkpointing.tolerable-failed-checkpoints": 1,
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": 1,
        "restart-strategy.fixed-delay.delay": "0 ms",
    }
    client = break_after_submission(
        build(config, seconds_per_record=0.001), directory, "restarted on checkpoint failures"
    )
    with pytest.raises(JobExecutionError, match="tolerable-failed-checkpoints: 1"):
        client.wait(timeout=120)
    assert client.num_restarts == 1
    history = client.get_exception_history()
    assert len(history) == 2
    assert all("tolerable-failed-checkpoints" in str(entry.root_cause) for entry in history)
    assert all(directory in str(entry.root_cause) for entry in history), [str(e.root_cause) for e in history]


@contextlib.contextmanager
def small_tmpfs(path):
    """A tmpfs mounted at ``path`` (root with CAP_SYS_ADMIN only), unmounted afterwards."""
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", str(path)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"mounting a tmpfs needs root with CAP_SYS_ADMIN: {mounted.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(path)], capture_output=True)
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def test_a_read_only_checkpoint_file_system_declines_with_the_os_error(tmp_path, caplog):
    """The checkpoint directory's file system turns read-only for a while, several times.

    Every failed checkpoint must report the storage error (EROFS) of its write,
    never an internal state error of the writers it had to clean up nor the
    error of removing its partial files; the job's result
    stays exact. The read-only windows are repeated because the race (one
    writer of a subtask finished, the next fails) is hit only now and then.
    """
    with small_tmpfs(tmp_path / "fs") as mount:
        config = checkpoint_config(str(mount / "checkpoints"), "unaligned") | {
            "execution.checkpointing.tolerable-failed-checkpoints": 1000,
        }
        stop = threading.Event()

        def toggle_read_only() -> None:
            # Short random windows: a checkpoint's files are written within milliseconds,
            # so the flip must often fall between two writers of one subtask.
            rng = random.Random(7)
            time.sleep(1.0)
            while not stop.is_set():
                subprocess.run(["mount", "-o", "remount,ro", str(mount)], capture_output=True)  # EBUSY: try again
                stop.wait(rng.uniform(0.005, 0.05))
                subprocess.run(["mount", "-o", "remount,rw", str(mount)], check=True, capture_output=True)
                stop.wait(rng.uniform(0.005, 0.08))

        toggler = threading.Thread(target=toggle_read_only, daemon=True)
        with caplog.at_level(logging.WARNING):
            toggler.start()
            try:
                result = build(config, seconds_per_record=0.0003).execute("read-only storage")
            finally:
                stop.set()
                toggler.join(timeout=10)
    counts = {row["key"]: row["count"] for row in CollectSink.rows(result)}
    assert counts == {key: RECORDS_PER_KEY for key in range(NUM_KEYS)}
    aborted = [r.getMessage() for r in caplog.records if " aborted: " in r.getMessage()]
    assert any("Read-only file system" in message for message in aborted), aborted
    masked = [m for m in aborted if "cannot go from" in m or "cannot delete uncommitted" in m]
    assert not masked, masked


def _operator_state_files(directory: str, job_id: str, checkpoint_id: int) -> list[str]:
    table = read_operator_state(directory, job_id, checkpoint_id, "count")
    assert table.num_rows
    root = os.path.join(directory, "operator_state", f"job_id={job_id}", f"checkpoint_id={checkpoint_id}")
    return [os.path.join(root, name) for name in os.listdir(root)]


def test_corrupt_latest_checkpoint_falls_back_to_the_previous_one(tmp_path, caplog):
    directory = str(tmp_path / "checkpoints")
    job_id = run_and_cancel(build(checkpoint_config(directory, "unaligned")), directory, checkpoints=2)
    completed = list_completed_checkpoints(directory, job_id)
    latest = completed[-1].checkpoint_id
    for path in _operator_state_files(directory, job_id, latest):
        with open(path, "r+b") as f:  # same size, damaged footer: only a full verification notices
            f.seek(-16, os.SEEK_END)
            f.write(b"\0" * 16)
    with caplog.at_level(logging.WARNING):
        counts = resume(directory, "unaligned")
    assert counts == {key: RECORDS_PER_KEY for key in range(NUM_KEYS)}
    assert any(f"checkpoint {latest}" in r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)


def test_no_restorable_checkpoint_left_is_a_clear_error(tmp_path):
    directory = str(tmp_path / "checkpoints")
    job_id = run_and_cancel(build(checkpoint_config(directory, "aligned")), directory, checkpoints=1)
    for checkpoint in list_completed_checkpoints(directory, job_id):
        for path in _operator_state_files(directory, job_id, checkpoint.checkpoint_id):
            os.remove(path)
    with pytest.raises(CheckpointNotFoundError, match="no restorable checkpoint"):
        resume(directory, "aligned")


def test_stop_with_savepoint_and_resume_from_its_path(tmp_path):
    directory = str(tmp_path / "checkpoints")
    config = checkpoint_config(directory, "unaligned")
    del config["execution.checkpointing.interval"]  # savepoints only
    client = build(config).execute_async("savepointed")
    deadline = time.monotonic() + 60
    while len([m for m in client.task_metrics().values() if m]) < 4:  # a savepoint needs every task running
        assert time.monotonic() < deadline, "tasks did not start"
        time.sleep(0.1)
    time.sleep(0.5)  # let data flow, so the savepoint holds real positions
    savepoint = client.stop_with_savepoint(timeout=120)
    assert savepoint.kind == "savepoint" and savepoint.mode == "aligned"
    with pytest.raises(JobExecutionError):
        client.wait(60)
    [row] = [c for c in list_completed_checkpoints(directory, client.job_id) if c.kind == "savepoint"]
    assert row.checkpoint_id == savepoint.checkpoint_id and row.channel_state_bytes == 0
    resumed = build(config | {"execution.state-recovery.path": savepoint.path}, seconds_per_record=0).execute("back")
    counts = {r["key"]: r["count"] for r in CollectSink.rows(resumed)}
    assert counts == {key: RECORDS_PER_KEY for key in range(NUM_KEYS)}
