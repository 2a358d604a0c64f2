"""Resolving and checking a restore before any task runs (execution.state-recovery.*).

Real checkpoint tables and a real Delta sink table under tmp_path; job graphs
come from the public DataStream API.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from deltalake.transaction import CommitProperties, Transaction

from checkpointing import (
    CheckpointCommitter,
    CheckpointRecord,
    SnapshotWriter,
    list_completed_checkpoints,
    retain,
)
from connectors import DeltaSink, SequenceSource
from flinklike_spark import KeyedProcessFunction, StreamExecutionEnvironment
from flinklike_spark._runtime.jobmaster.recovery import (
    ACCEPT_DUPLICATES_KEY,
    check_committed_sink_output,
    check_max_parallelism,
    resolve_recovery_path,
)
from flinklike_spark.connector_api import END_OF_INPUT
from flinklike_spark.errors import (
    CheckpointNotFoundError,
    CommittedSinkOutputError,
    CorruptCheckpointError,
    IncompatibleCheckpointError,
)

JOB = "0123456789abcdef0123456789abcdef"  # job ids in recovery paths are 32 hex digits


class Count(KeyedProcessFunction):
    def process_element(self, value, ctx):
        yield value


def job_graph(table, *, max_parallelism: int = 128, parallelism: int = 2):
    env = StreamExecutionEnvironment.get_execution_environment(
        {"parallelism.default": parallelism, "pipeline.max-parallelism": max_parallelism}
    )
    (
        env.from_source(SequenceSource(num_keys=4, records_per_key=10), name="seq")
        .uid("seq")
        .key_by("key")
        .process(Count())
        .uid("count")
        .sink_to(DeltaSink(table))
        .uid("delta")
    )
    return env.get_job_graph("restore check")


def complete(base, checkpoint_id: int, *, job: str = JOB, **record) -> None:
    """A completed checkpoint with keyed state of operator ``count`` (2 subtasks)."""
    handles = []
    for subtask in (0, 1):
        with SnapshotWriter(base, job, checkpoint_id, "count", subtask) as w:
            w.add_keyed_state("n", [(subtask, f"k{subtask}", checkpoint_id)], kind="value")
            handles.append(w.finish())
    now = datetime.now(UTC)
    fields = {"trigger_time": now, "parallelism": {"seq": 2, "count": 2}} | record
    CheckpointCommitter(base).commit(job, checkpoint_id, handles, CheckpointRecord(**fields))


def checkpoint(base, checkpoint_id: int):
    return next(c for c in list_completed_checkpoints(base, JOB) if c.checkpoint_id == checkpoint_id)


def commit_sink_output(table, app_id: str, version: int) -> None:
    """What a DeltaSink subtask's commit of checkpoint ``version`` leaves in the table."""
    write_deltalake(
        str(table),
        pa.table({"key": [0], "seq": [version]}),
        mode="append",
        commit_properties=CommitProperties(app_transactions=[Transaction(app_id, version)]),
    )


@pytest.fixture
def base(tmp_path):
    return str(tmp_path / "checkpoints")


# -- execution.state-recovery.path -------------------------------------------------------------


def test_a_missing_recovery_path_says_it_does_not_exist(tmp_path):
    missing = str(tmp_path / "no-such-dir")
    with pytest.raises(CheckpointNotFoundError, match="does not exist"):
        resolve_recovery_path(missing)
    with pytest.raises(CheckpointNotFoundError, match="does not exist"):
        resolve_recovery_path(f"{missing}/{JOB}/chk-1")


def test_a_named_checkpoint_that_does_not_exist_is_an_error_naming_the_valid_ids(base):
    for checkpoint_id in (1, 2, 3):
        complete(base, checkpoint_id)
    with pytest.raises(CheckpointNotFoundError) as missing:
        resolve_recovery_path(f"{base}/{JOB}/chk-1000")
    message = str(missing.value)
    assert "checkpoint 1000" in message and "does not exist" in message and "[1, 2, 3]" in message
    assert resolve_recovery_path(f"{base}/{JOB}/chk-2")[1].checkpoint_id == 2
    assert resolve_recovery_path(f"{base}/{JOB}")[1].checkpoint_id == 3


def test_a_checkpoint_dropped_by_retention_names_the_newer_completed_ones(base):
    for checkpoint_id in (1, 2, 3):
        complete(base, checkpoint_id)
    retain(base, JOB, 1)
    with pytest.raises(CheckpointNotFoundError) as dropped:
        resolve_recovery_path(f"{base}/{JOB}/chk-1")
    message = str(dropped.value)
    assert "retention" in message and "[3]" in message and "0 completed" not in message


def test_a_damaged_named_checkpoint_is_an_error_not_a_fallback(base):
    for checkpoint_id in (1, 2):
        complete(base, checkpoint_id)
    root = os.path.join(base, "operator_state", f"job_id={JOB}", "checkpoint_id=2")
    for name in os.listdir(root):
        with open(os.path.join(root, name), "r+b") as f:
            f.truncate(10)
    with pytest.raises(CorruptCheckpointError) as damaged:
        resolve_recovery_path(f"{base}/{JOB}/chk-2")
    assert damaged.value.checkpoint_id == 2 and "checkpoint 2" in str(damaged.value) and "[1]" in str(damaged.value)
    # the directory form still falls back (and its sink check guards the output)
    assert resolve_recovery_path(base)[1].checkpoint_id == 1


def test_a_job_without_checkpoints_names_the_jobs_that_have_some(base):
    complete(base, 1)
    other = "f" * 32
    with pytest.raises(CheckpointNotFoundError, match=f"job {other} has no completed checkpoint.*{JOB}"):
        resolve_recovery_path(f"{base}/{other}")


# -- pipeline.max-parallelism ------------------------------------------------------------------


def test_checkpoints_record_max_parallelism_and_lineage(base):
    complete(base, 1, max_parallelism={"count": 128, "seq": 128}, lineage_id="first-job")
    restored = checkpoint(base, 1)
    assert restored.max_parallelism == {"count": 128, "seq": 128}
    assert restored.lineage_id == "first-job"
    complete(base, 2)
    assert checkpoint(base, 2).lineage_id == JOB, "without a recorded lineage a checkpoint starts its own"


def test_a_changed_max_parallelism_of_keyed_state_is_refused(base, tmp_path):
    complete(base, 1, max_parallelism={"count": 128, "seq": 128})
    restored = checkpoint(base, 1)
    check_max_parallelism(job_graph(tmp_path / "out", max_parallelism=128, parallelism=3), restored)
    with pytest.raises(IncompatibleCheckpointError) as refused:
        check_max_parallelism(job_graph(tmp_path / "out", max_parallelism=64), restored)
    message = str(refused.value)
    assert "'count'" in message and "max parallelism 128" in message and "max parallelism 64" in message
    assert "pipeline.max-parallelism: 128" in message


# -- sink output committed beyond the restore point --------------------------------------------


def test_sink_output_committed_after_the_restored_checkpoint_is_refused(base, tmp_path):
    table = tmp_path / "out"
    for checkpoint_id in (3, 4, 5):
        complete(base, checkpoint_id)
    for subtask, version in ((0, 5), (1, 4)):
        commit_sink_output(table, f"flinklike/{JOB}/delta/{subtask}", version)
    graph = job_graph(table)

    assert check_committed_sink_output(graph, base, checkpoint(base, 5), accept_duplicates=False) == JOB
    with pytest.raises(CommittedSinkOutputError) as refused:
        check_committed_sink_output(graph, base, checkpoint(base, 4), accept_duplicates=False)
    message = str(refused.value)
    assert "checkpoint 4" in message and "checkpoint 5" in message and str(table) in message
    assert ACCEPT_DUPLICATES_KEY in message and "'delta'" in message
    accepted = check_committed_sink_output(graph, base, checkpoint(base, 3), accept_duplicates=True)
    assert accepted == graph.job_id != JOB, "accepting duplicates starts a new transactional identity"


def test_the_check_follows_the_recorded_lineage_and_every_subtask_up_to_max_parallelism(base, tmp_path):
    table = tmp_path / "out"
    complete(base, 7, lineage_id="a" * 32)
    commit_sink_output(table, f"flinklike/{JOB}/delta/0", 100)  # another lineage: not this sink's output
    graph = job_graph(table, parallelism=2)
    assert check_committed_sink_output(graph, base, checkpoint(base, 7), accept_duplicates=False) == "a" * 32
    commit_sink_output(table, f"flinklike/{'a' * 32}/delta/9", 8)  # a rescaled run's subtask 9
    with pytest.raises(CommittedSinkOutputError, match="checkpoint 8"):
        check_committed_sink_output(graph, base, checkpoint(base, 7), accept_duplicates=False)


def test_a_finished_job_output_is_named_as_such(base, tmp_path):
    table = tmp_path / "out"
    complete(base, 2)
    commit_sink_output(table, f"flinklike/{JOB}/delta/1", END_OF_INPUT)
    with pytest.raises(CommittedSinkOutputError, match="end of input"):
        check_committed_sink_output(job_graph(table), base, checkpoint(base, 2), accept_duplicates=False)
