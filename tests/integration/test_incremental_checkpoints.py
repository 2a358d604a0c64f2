"""Exactly-once with incremental checkpoints (``execution.checkpointing.incremental``).

The job of :mod:`test_checkpoint_resume` (a per-key exact-count that raises on a
lost, duplicated or reordered record) runs with incremental checkpoints, chains
of at most 3 checkpoints (so new bases are written during the run) and
retention of 2 (so checkpoints whose state later ones share are dropped), then
resumes: from the latest checkpoint, at another parallelism, from a savepoint,
and past a corrupt checkpoint.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
import urllib.request

import pytest

from checkpointing import list_completed_checkpoints, read_operator_state, verify_checkpoint
from checkpointing.chains import decode_chains
from connectors import CollectSink
from flinklike_spark.errors import CheckpointStorageError, JobCancelledError, JobExecutionError
from tests.support.checkpoint_jobs import checkpoint_config
from tests.support.exact_count_job import NUM_KEYS, RECORDS_PER_KEY, build
from tests.support.failover_jobs import task_executor_processes

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

INCREMENTAL = {
    "execution.checkpointing.incremental": True,
    "execution.checkpointing.incremental.max-chain-length": 3,
    "execution.checkpointing.num-retained": 2,
}
EXPECTED = {key: RECORDS_PER_KEY for key in range(NUM_KEYS)}
BACKEND = {"state.backend.type": "hashmap"}


@pytest.fixture(autouse=True, params=["hashmap", "rocksdb"])
def state_backend(request, monkeypatch):
    """Every scenario runs on both keyed state backends."""
    monkeypatch.setitem(BACKEND, "state.backend.type", request.param)
    return request.param


def config(directory: str, mode: str = "aligned", parallelism: int = 2) -> dict:
    return checkpoint_config(directory, mode, parallelism) | INCREMENTAL | BACKEND


def resume(directory: str, mode: str = "aligned", *, parallelism: int = 2, path: str | None = None) -> dict[int, int]:
    resumed = config(directory, mode, parallelism) | {"execution.state-recovery.path": path or directory}
    result = build(resumed, seconds_per_record=0).execute("resumed")
    return {row["key"]: row["count"] for row in CollectSink.rows(result)}


def chains_of(directory: str, job_id: str) -> dict[int, dict]:
    for attempt in range(20):
        try:
            completed = list_completed_checkpoints(directory, job_id)
        except CheckpointStorageError:  # read while retention vacuumed a file of the version read
            if attempt == 19:
                raise
            time.sleep(0.05)
            continue
        return {c.checkpoint_id: decode_chains(c.properties) for c in completed}
    raise AssertionError("unreachable")


def run_and_cancel_when(env, directory: str, done) -> str:
    """Run the job, cancel it once ``done(chains of its retained checkpoints)``; return its job id."""
    client = env.execute_async("incremental")
    deadline = time.monotonic() + 120
    while True:
        assert not client.done(), "the job ended before it was stopped"
        chains = chains_of(directory, client.job_id)
        if done(chains):
            break
        assert time.monotonic() < deadline, f"condition never met; retained checkpoints' chains: {chains}"
        time.sleep(0.05)
    client.cancel()
    with pytest.raises(JobCancelledError):
        client.wait(60)
    return client.job_id


def has_incremental(chains: dict) -> bool:
    return any(chains.values())


@pytest.mark.parametrize("mode", ["unaligned"])
def test_exactly_once_across_stop_and_resume(tmp_path, mode):
    directory = str(tmp_path / "checkpoints")

    def shares_dropped_state_after_a_new_base(chains: dict) -> bool:
        # A retained checkpoint's chain reaches back to a checkpoint retention dropped (its
        # state is shared), and chains restarted at least once (max length 3: new bases).
        links = [c for per_checkpoint in chains.values() for chain in per_checkpoint.values() for c in chain]
        return bool(links) and min(links) not in chains and max(chains) >= 6

    env = build(config(directory, mode), seconds_per_record=0.001)
    job_id = run_and_cancel_when(env, directory, shares_dropped_state_after_a_new_base)
    for checkpoint_id, chains in chains_of(directory, job_id).items():
        verify_checkpoint(directory, job_id, checkpoint_id, full=True)
        assert all(len(chain) <= 3 and chain[-1] == checkpoint_id for chain in chains.values())
        keys = {e for e in read_operator_state(directory, job_id, checkpoint_id, "count", state_name="count")
                .column("key_repr").to_pylist()}  # fmt: skip
        assert keys == {str(k) for k in range(NUM_KEYS)}
    assert resume(directory, mode) == EXPECTED


def test_a_failover_builds_its_first_checkpoint_on_the_restored_chain(tmp_path):
    """A TaskExecutor SIGKILLed: the restarted subtasks hold exactly the restored checkpoint's state, so their
    first checkpoint stores only what changed since the restore, on that checkpoint's chains (not all their
    state again); it restores right, and the job counts every key exactly once."""
    directory = str(tmp_path / "checkpoints")
    restarting = config(directory) | {
        "execution.checkpointing.interval": "2s",  # the checkpoint after the restore comes at once, the next 2 s later
        "execution.checkpointing.incremental.max-chain-length": 50,
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": 3,
        "restart-strategy.fixed-delay.delay": "0 ms",
    }
    client = build(restarting, seconds_per_record=0.001).execute_async("a failover")
    deadline = time.monotonic() + 120
    while not has_incremental(chains_of(directory, client.job_id)):
        assert time.monotonic() < deadline and not client.done(), "no incremental checkpoint before the kill"
        time.sleep(0.05)
    task_executor_processes()[0].send_signal(signal.SIGKILL)
    url = f"{client.web_interface_url}/jobs/{client.job_id}/checkpoints"
    while True:
        assert time.monotonic() < deadline and not client.done(), "no checkpoint completed after the restore"
        with urllib.request.urlopen(url, timeout=10) as response:
            restored = json.load(response)["latest"]["restored"]
        retained = chains_of(directory, client.job_id)
        if restored is not None and (after := [c for c in retained if c > restored["id"]]):
            break
        time.sleep(0.05)
    restored_id, first = restored["id"], min(after)
    assert restored["is_savepoint"] is False and restored["external_path"].endswith(f"/chk-{restored_id}")
    assert restored_id in retained, f"the restored checkpoint left the retained ones too early: {sorted(retained)}"
    for subtask in (0, 1):
        base = retained[restored_id].get(("count", subtask), (restored_id,))
        assert retained[first][("count", subtask)] == (*base, first), (retained[restored_id], retained[first])
    verify_checkpoint(directory, client.job_id, first, full=True)
    keys = read_operator_state(directory, client.job_id, first, "count", state_name="count").column("key_repr")
    assert set(keys.to_pylist()) == {str(k) for k in range(NUM_KEYS)}
    assert {row["key"]: row["count"] for row in CollectSink.rows(client.wait(120))} == EXPECTED
    assert client.num_restarts == 1


def test_rescale_from_2_to_3(tmp_path):
    directory = str(tmp_path / "checkpoints")
    run_and_cancel_when(build(config(directory, "unaligned"), seconds_per_record=0.001), directory, has_incremental)
    assert resume(directory, "unaligned", parallelism=3) == EXPECTED


def test_stop_with_savepoint_is_self_contained_and_resumes(tmp_path):
    directory = str(tmp_path / "checkpoints")
    client = build(config(directory, "unaligned"), seconds_per_record=0.001).execute_async("savepointed")
    deadline = time.monotonic() + 120
    while not has_incremental(chains_of(directory, client.job_id)):
        assert time.monotonic() < deadline, "no incremental checkpoint was taken"
        time.sleep(0.05)
    savepoint = client.stop_with_savepoint(timeout=120)
    with pytest.raises(JobExecutionError):
        client.wait(60)
    [row] = [c for c in list_completed_checkpoints(directory, client.job_id) if c.kind == "savepoint"]
    assert decode_chains(row.properties) == {}, "a savepoint must not depend on other checkpoints"
    assert resume(directory, "unaligned", path=savepoint.path) == EXPECTED


def test_corrupt_incremental_checkpoint_falls_back_to_the_previous_one(tmp_path, caplog):
    directory = str(tmp_path / "checkpoints")
    env = build(config(directory, "unaligned") | {"execution.checkpointing.num-retained": 3}, seconds_per_record=0.001)
    # the latest checkpoint incremental, with an older retained one to fall back to
    job_id = run_and_cancel_when(env, directory, lambda chains: len(chains) >= 2 and chains[max(chains)])
    latest = list_completed_checkpoints(directory, job_id)[-1].checkpoint_id
    root = os.path.join(directory, "operator_state", f"job_id={job_id}", f"checkpoint_id={latest}")
    for name in os.listdir(root):
        with open(os.path.join(root, name), "r+b") as f:  # same size, damaged footer
            f.seek(-16, os.SEEK_END)
            f.write(b"\0" * 16)
    with caplog.at_level(logging.WARNING):
        assert resume(directory, "unaligned") == EXPECTED
    assert any(f"checkpoint {latest}" in r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)


def test_window_job_with_incremental_checkpoints_resumes_exactly_once(tmp_path):
    """Window operators keep writing full snapshots when incremental checkpoints are on."""
    from tests.support.window_jobs import assert_resumed, build_resumable, expected_resumable

    directory = str(tmp_path / "checkpoints")
    job_id = run_and_cancel_when(
        build_resumable(config(directory, "aligned"), rows_per_second=2_500), directory, lambda c: len(c) >= 2
    )
    assert not any(chains_of(directory, job_id).values()), "a window operator wrote an incremental snapshot"
    resumed = build_resumable(config(directory, "aligned") | {"execution.state-recovery.path": directory},
                              rows_per_second=None).execute("resumed")  # fmt: skip
    assert_resumed(resumed, expected_resumable()[0])
