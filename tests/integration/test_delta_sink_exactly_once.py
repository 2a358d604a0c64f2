"""Exactly-once output to a Delta table across stop and resume.

A keyed job (SequenceSource -> key_by -> a slow pass-through stage, so there
is backpressure and data in flight -> DeltaSink) is cancelled after a few
completed checkpoints and resumed from the latest one. The Delta table is
then read in commit order (log version, then file order within a commit, then
row order within a file): per key, the ``seq`` values must be exactly
``0 .. records_per_key - 1`` in that order, so a lost, duplicated or
reordered row fails the test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.checkpoint_jobs import checkpoint_config, run_and_cancel
from tests.support.delta_sink_job import (
    NUM_KEYS,
    RECORDS_PER_KEY,
    assert_exactly_once_in_order,
    build,
    rows_in_commit_order,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.mark.parametrize(
    ("mode", "resume_parallelism"),
    [("aligned", 2), ("unaligned", 2), ("aligned-with-timeout", 2), ("unaligned", 3)],
    ids=["aligned", "unaligned", "aligned-with-timeout", "unaligned-rescaled-2-to-3"],
)
def test_delta_output_is_exactly_once_across_stop_and_resume(tmp_path, mode, resume_parallelism):
    directory, table = str(tmp_path / "checkpoints"), tmp_path / "out"
    run_and_cancel(
        build(checkpoint_config(directory, mode), table, seconds_per_record=0.0003), directory, checkpoints=3
    )
    committed = len(rows_in_commit_order(table)) if (table / "_delta_log").exists() else 0
    assert 0 < committed < NUM_KEYS * RECORDS_PER_KEY, "stopped too late or nothing was committed at checkpoints"

    config = checkpoint_config(directory, mode, resume_parallelism) | {"execution.state-recovery.path": directory}
    build(config, table, seconds_per_record=0).execute("resume delta")
    assert_exactly_once_in_order(table)


def test_bounded_job_without_checkpointing_commits_its_output_at_the_end(tmp_path):
    table = tmp_path / "out"
    config = {"parallelism.default": 2, "local.number-taskmanager": 1}
    build(config, table, seconds_per_record=0).execute("bounded delta")
    assert_exactly_once_in_order(table)


def assert_committed_prefix_in_order(table: Path) -> int:
    """Per key, the committed ``seq`` values are ``0 .. n-1`` in order (no loss, no duplicate); return the rows."""
    per_key: dict[int, list[int]] = {}
    rows = rows_in_commit_order(table)
    for row in rows:
        per_key.setdefault(row["key"], []).append(row["seq"])
    for key, seqs in sorted(per_key.items()):
        assert seqs == list(range(len(seqs))), (
            f"key {key}: {len(seqs)} rows, {len(seqs) - len(set(seqs))} duplicated, "
            f"first missing {sorted(set(range(max(seqs) + 1)) - set(seqs))[:5]}"
        )
    return len(rows)


@pytest.mark.parametrize("run", [1, 2, 3, 4])
def test_two_concurrent_resumes_of_one_lineage_never_both_commit(tmp_path, run):
    """Two jobs resume the same checkpoints into the same sink at once: the newer one fences the older.

    Before fencing, both finished "successfully" and the table missed or
    duplicated rows in 3 runs of 4 (each job skipped what the other committed
    under the shared transactional ids, although their inputs were cut elsewhere).
    """
    from flinklike_spark.errors import CommittedSinkOutputError, SinkFencedError

    directory, table = str(tmp_path / "checkpoints"), tmp_path / "out"
    run_and_cancel(build(checkpoint_config(directory, "aligned"), table, seconds_per_record=0.0003), directory,
                   checkpoints=2)  # fmt: skip
    config = checkpoint_config(directory, "aligned") | {
        "execution.state-recovery.path": directory,
        "execution.checkpointing.dir": str(tmp_path / f"checkpoints-{run}"),
        "restart-strategy.type": "none",
    }
    outcomes = []

    def refused(exc: BaseException) -> None:
        text = f"{exc} {exc.__cause__}"
        expected = isinstance(exc, SinkFencedError | CommittedSinkOutputError)
        assert expected or SinkFencedError.__name__ in text or CommittedSinkOutputError.__name__ in text, text
        outcomes.append("refused")

    clients = []
    for i in range(2):
        try:  # the second may already be refused at submission, if the first committed a newer checkpoint
            clients.append(build(config, table, seconds_per_record=0.0002).execute_async(f"resume {i}"))
        except (SinkFencedError, CommittedSinkOutputError) as exc:
            refused(exc)
    for client in clients:
        try:
            client.wait(timeout=240)
            outcomes.append("finished")
        except Exception as exc:  # noqa: BLE001 - the outcome under test
            refused(exc)
    assert outcomes.count("finished") <= 1, "two jobs of one lineage both committed"
    committed = assert_committed_prefix_in_order(table)
    if "finished" in outcomes:
        assert committed == NUM_KEYS * RECORDS_PER_KEY
