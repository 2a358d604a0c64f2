"""Checkpoints after tasks finished (FLIP-147): real multi-process jobs writing to a Delta table.

* A source subtask that finishes at once (fewer keys than subtasks) does not
  stop checkpoints: they keep completing on the running part of the graph and
  the DeltaSink keeps committing while the job runs.
* A bounded job's last rows are committed by its final checkpoint (every
  Delta transaction carries a completed checkpoint's id, none ``END_OF_INPUT``)
  before ``execute()`` returns, and nothing is committed afterwards; in the
  three barrier modes.
* A restore from a checkpoint that recorded a finished source vertex is exact:
  the finished source is deployed finished and does not emit its rows again,
  at the same and at a higher parallelism.

Output is read in Delta commit order and checked per key: every ``seq``
exactly once and in order.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from checkpointing import list_completed_checkpoints
from connectors import DeltaSink, SequenceSource
from flinklike_spark import StreamExecutionEnvironment
from flinklike_spark.connector_api import END_OF_INPUT
from flinklike_spark.errors import JobCancelledError
from tests.support.checkpoint_jobs import checkpoint_config
from tests.support.delta_sink_job import SlowPassThrough, rows_in_commit_order

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

MODES = ["aligned", "unaligned", "aligned-with-timeout"]


def assert_per_key_exactly_once(table: Path, expected: dict[int, int]) -> None:
    """Per key, the ``seq`` values in commit order are exactly ``0 .. expected[key] - 1``."""
    per_key: dict[int, list[int]] = {}
    for row in rows_in_commit_order(table):
        per_key.setdefault(row["key"], []).append(row["seq"])
    assert sorted(per_key) == sorted(expected), f"keys {sorted(per_key)}, expected {sorted(expected)}"
    for key, seqs in sorted(per_key.items()):
        if seqs != list(range(expected[key])):
            missing = sorted(set(range(expected[key])) - set(seqs))[:5]
            raise AssertionError(
                f"key {key}: {len(seqs)} rows of {expected[key]}, {len(seqs) - len(set(seqs))} duplicated, "
                f"first missing {missing}, in order: {seqs == sorted(seqs)}"
            )


def delta_log(table: Path) -> list[Path]:
    return sorted((table / "_delta_log").glob("*.json")) if (table / "_delta_log").exists() else []


def transaction_versions(table: Path) -> list[int]:
    """The app-transaction versions (checkpoint ids) the sink's commits recorded, in commit order."""
    versions = []
    for log in delta_log(table):
        for line in log.read_text().splitlines():
            action = json.loads(line)
            if "txn" in action:
                versions.append(action["txn"]["version"])
    return versions


def keyed_job(env: StreamExecutionEnvironment, source, table: Path) -> None:
    (
        env.from_source(source, name="seq").uid("seq")
        .key_by("key").process(SlowPassThrough(0)).uid("pass")
        .sink_to(DeltaSink(table)).uid("delta")
    )  # fmt: skip


@pytest.mark.parametrize("mode", ["aligned", "unaligned"])
def test_a_finished_source_subtask_does_not_stop_checkpoints_or_commits(tmp_path, mode):
    directory, table = str(tmp_path / "checkpoints"), tmp_path / "out"
    env = StreamExecutionEnvironment.get_execution_environment(checkpoint_config(directory, mode))
    # One key over two source subtasks: subtask 1 has no rows and finishes at once, subtask 0 reads ~8 s
    # (each reader gets half the rate).
    keyed_job(env, SequenceSource(num_keys=1, records_per_key=4_000, rows_per_second=1_000), table)
    client = env.execute_async("half finished")
    deadline = time.monotonic() + 120
    while len(set(transaction_versions(table))) < 3:
        assert not client.done(), (
            f"the job ended with commits of checkpoints {transaction_versions(table)} made while it ran; completed "
            f"checkpoints retained: {list_completed_checkpoints(directory, client.job_id)}"
        )
        assert time.monotonic() < deadline, "no 3 Delta commits within 120 s while a source subtask is finished"
        time.sleep(0.05)
    client.wait(120)
    assert_per_key_exactly_once(table, {0: 4_000})


@pytest.mark.parametrize("mode", MODES)
def test_the_final_checkpoint_commits_a_bounded_jobs_last_rows_before_execute_returns(tmp_path, mode):
    directory, table = str(tmp_path / "checkpoints"), tmp_path / "out"
    env = StreamExecutionEnvironment.get_execution_environment(checkpoint_config(directory, mode))
    keyed_job(env, SequenceSource(num_keys=6, records_per_key=3_000, rows_per_second=9_000), table)
    result = env.execute("bounded")
    returned = time.time()
    commits = delta_log(table)
    assert commits, "nothing was committed"
    last_commit = max(log.stat().st_mtime for log in commits)
    assert last_commit <= returned, "a Delta commit was written after execute() returned"
    time.sleep(1.5)
    assert delta_log(table) == commits, "a Delta commit was written after the job finished"
    assert_per_key_exactly_once(table, dict.fromkeys(range(6), 3_000))
    # Every commit is a checkpoint's: the last rows were committed by the final checkpoint, not by an
    # end-of-input commit of the JobMaster after the tasks ended.
    versions = transaction_versions(table)
    completed = {c.checkpoint_id for c in list_completed_checkpoints(directory, result.job_id)}
    assert END_OF_INPUT not in versions
    assert max(versions) in completed, f"last commit {max(versions)} is not a completed checkpoint {completed}"


def two_sources_job(config: dict, table: Path, *, fast: bool) -> StreamExecutionEnvironment:
    """A short bounded source (keys 100, 101) and a long one (keys 0-3) into one keyed Delta sink."""
    env = StreamExecutionEnvironment.get_execution_environment(config)
    short = (
        env.from_source(SequenceSource(num_keys=2, records_per_key=200), name="short").uid("short")
        .map_batches(lambda b: pa.RecordBatch.from_arrays([pc.add(b.column("key"), 100), b.column("seq")],
                                                          schema=b.schema)).uid("shift")
    )  # fmt: skip
    long = env.from_source(
        SequenceSource(num_keys=4, records_per_key=3_000, rows_per_second=None if fast else 800), name="long"
    ).uid("long")
    (
        short.union(long)
        .key_by("key").process(SlowPassThrough(0)).uid("pass")
        .sink_to(DeltaSink(table)).uid("delta")
    )  # fmt: skip
    return env


@pytest.mark.parametrize(
    ("mode", "resume_parallelism"),
    [("aligned", 2), ("unaligned", 3), ("aligned-with-timeout", 2)],
    ids=["aligned", "unaligned-rescaled-2-to-3", "aligned-with-timeout"],
)
def test_restore_from_a_checkpoint_with_a_finished_source_is_exact(tmp_path, mode, resume_parallelism):
    directory, table = str(tmp_path / "checkpoints"), tmp_path / "out"
    client = two_sources_job(checkpoint_config(directory, mode), table, fast=False).execute_async("two sources")
    deadline = time.monotonic() + 120
    while not any(c.finished_vertices for c in list_completed_checkpoints(directory, client.job_id)):
        assert not client.done(), "the job ended before a checkpoint recorded the finished source"
        assert time.monotonic() < deadline, "no checkpoint recorded a finished vertex within 120 s"
        time.sleep(0.05)
    client.cancel()
    with pytest.raises(JobCancelledError):
        client.wait(60)
    latest = max(list_completed_checkpoints(directory, client.job_id), key=lambda c: c.checkpoint_id)
    assert latest.finished_vertices, f"checkpoint {latest.checkpoint_id} does not record the finished source"

    config = checkpoint_config(directory, mode, resume_parallelism) | {"execution.state-recovery.path": directory}
    two_sources_job(config, table, fast=True).execute("resume two sources")
    assert_per_key_exactly_once(table, {100: 200, 101: 200, **dict.fromkeys(range(4), 3_000)})
