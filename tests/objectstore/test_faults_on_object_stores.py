"""Failures with everything on an object store (S3, Azurite): a SIGKILLed TaskExecutor, retention, a corrupt newest checkpoint."""

from __future__ import annotations

import logging
import signal

import pytest

from checkpointing import list_completed_checkpoints
from connectors import CollectSink
from tests.support.failover_jobs import task_executor_processes
from tests.support.objectstore_jobs import (
    NUM_KEYS,
    RECORDS_PER_KEY,
    assert_exactly_once_in_order,
    build,
    build_counting,
    job_config,
    rows_in_commit_order,
    run_and_cancel,
    wait_for_checkpoints,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def test_a_sigkilled_task_executor_recovers_exactly_once_and_retention_keeps_num_retained(store):
    directory, table = store.url("checkpoints"), store.url("table")
    layout = store.layout(directory)
    config = job_config(store, directory, "unaligned") | {
        "execution.checkpointing.num-retained": 2,
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": 3,
        "restart-strategy.fixed-delay.delay": "200 ms",
    }
    # 3,000 rows at 100/s: the job still runs when its second checkpoint completed, also on a loaded machine
    client = build(config, table, seconds_per_record=0.001, rows_per_second=100).execute_async("killed")
    wait_for_checkpoints(client, layout, 2)
    assert not client.done(), "the job ended before the kill: nothing to recover"
    task_executor_processes()[0].send_signal(signal.SIGKILL)
    client.wait(180)
    assert client.get_exception_history(), "the kill caused no failover"
    assert_exactly_once_in_order(rows_in_commit_order(store, table))
    completed = list_completed_checkpoints(layout, client.job_id)
    assert 1 <= len(completed) <= 2, [c.checkpoint_id for c in completed]
    fs, root = store.filesystem(directory)
    partitions = fs.ls(f"{root}/operator_state/job_id={client.job_id}", detail=False)
    kept = sorted(int(p.rsplit("=", 1)[1]) for p in partitions)
    assert kept == sorted(c.checkpoint_id for c in completed), "retention left files of removed checkpoints"


def test_a_corrupt_newest_checkpoint_falls_back_to_the_previous_one(store, caplog):
    directory = store.url("checkpoints")
    layout = store.layout(directory)
    config = job_config(store, directory, "aligned")
    # 20 s of input: time for 2 checkpoints (the first one on a store takes seconds) and for the poll to see them
    job_id = run_and_cancel(build_counting(config, rows_per_second=150), layout, checkpoints=2)
    latest = list_completed_checkpoints(layout, job_id)[-1].checkpoint_id
    fs, root = store.filesystem(directory)
    damaged = fs.ls(f"{root}/operator_state/job_id={job_id}/checkpoint_id={latest}", detail=False)
    assert damaged
    for path in damaged:  # same size, damaged footer: only a full verification notices
        data = fs.cat_file(path)
        fs.pipe_file(path, data[:-16] + b"\0" * 16)
    resumed = config | {"execution.state-recovery.path": directory}
    with caplog.at_level(logging.WARNING):
        result = build_counting(resumed).execute("resumed")
    counts = {row["key"]: row["count"] for row in CollectSink.rows(result)}
    assert counts == {key: RECORDS_PER_KEY for key in range(NUM_KEYS)}
    assert any(f"checkpoint {latest}" in r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
