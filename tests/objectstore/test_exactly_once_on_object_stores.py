"""Exactly-once resume with checkpoints, channel state and a DeltaSink all on an object store.

A keyed job (SequenceSource -> key_by -> slow pass-through -> DeltaSink) whose
checkpoint directory and Delta table are on the S3 server (or Azurite) is
cancelled after two completed checkpoints and resumed from the directory. The
table, read in commit order from the store, must hold per key every ``seq``
exactly once and in order: a lost channel-state buffer, a replayed commit or a
commit lost to a concurrent writer fails it.
"""

from __future__ import annotations

import pytest

from checkpointing import list_completed_checkpoints
from tests.support.objectstore_jobs import (
    MODES,
    assert_exactly_once_in_order,
    build,
    job_config,
    rows_in_commit_order,
    run_and_cancel,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def stop_and_resume(store, mode: str, extra: dict | None = None) -> None:
    directory, table = store.url("checkpoints"), store.url("table")
    layout = store.layout(directory)
    config = job_config(store, directory, mode) | (extra or {})
    first = build(config, table, seconds_per_record=0.002, rows_per_second=500)
    job_id = run_and_cancel(first, layout, checkpoints=2)
    latest = list_completed_checkpoints(layout, job_id)[-1]
    resumed = config | {"execution.state-recovery.path": directory}
    build(resumed, table, seconds_per_record=0).execute("resumed")
    assert_exactly_once_in_order(rows_in_commit_order(store, table))
    if mode == "aligned":
        assert latest.mode == "aligned" and latest.channel_state_bytes == 0


@pytest.mark.parametrize("mode", MODES)
def test_exactly_once_across_stop_and_resume(store, mode):
    stop_and_resume(store, mode)
