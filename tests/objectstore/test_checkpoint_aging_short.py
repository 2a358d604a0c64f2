"""benchmarks/checkpoint_aging.py, shortened: its loop, marks and checks hold locally and on moto, seeded included.

The full run (20,000 checkpoints, ``python benchmarks/checkpoint_aging.py``) is
a benchmark; this checks that a run of it means what it prints: every mark's
log within ``log_file_bound``, every retained checkpoint and the savepoint
restorable at the end, and an S3 directory seeded from a local one going on
from the local one's checkpoints.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from checkpointing import CheckpointLayout, list_completed_checkpoints

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from checkpoint_aging import JOB, SAVEPOINT_AT, TABLES, age, seed  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def _check(figures: dict, marks: list[int]) -> None:
    for mark in marks:
        assert all(figures[mark]["log_files"][t] <= figures[mark]["bound"][t] for t in TABLES), figures[mark]
        assert figures[mark]["storage"] > 0
    assert ("savepoint" in {kind for _, kind in figures["verified"]}) and figures["verified"][-1][0] == max(marks)


def test_a_short_aging_run_keeps_its_logs_bounded_and_everything_restorable(tmp_path, s3_server):
    local = CheckpointLayout(base_url=str(tmp_path / "aged"))
    figures = age(local, [15, 30], window=5, num_retained=1, channel_state=True, interval=0.0)
    _check(figures, [15, 30])

    seeded = s3_server.layout(s3_server.url("aging-short"))
    assert seed(local, seeded) > 0
    figures = age(seeded, [40], first=31, window=5, num_retained=1, channel_state=True, interval=0.0)
    assert [c.checkpoint_id for c in list_completed_checkpoints(seeded, JOB)] == [SAVEPOINT_AT, 40]
    _check(figures, [40])
