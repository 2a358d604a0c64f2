"""Heartbeats carry the TaskExecutor's slot report; the ResourceManager frees slots no job uses.

On an embedded cluster (TaskExecutors as threads), so it is an integration test.
"""

from __future__ import annotations

import time

import pytest

from flinklike_spark import Configuration
from flinklike_spark._runtime.minicluster import MiniCluster


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_slot_held_for_an_unknown_allocation_is_freed_by_the_next_heartbeat():
    config = Configuration(
        {
            "flinklike.local.taskmanager-mode": "thread",
            "heartbeat.interval": "100 ms",
            "heartbeat.timeout": "10 s",
            "taskmanager.slot.timeout": "5 min",
        }  # only the heartbeat may free it
    )
    with MiniCluster(config) as cluster:
        [executor] = cluster.launcher.executors.values()
        # as if the JobMaster's free_slot RPC had been lost
        assert executor.slot_table.allocate_slot(0, "some-job", "some-job/orphan")
        report = executor.slot_table.create_slot_report(executor.resource_id)
        assert [s.allocation_id for s in report.slot_statuses] == ["some-job/orphan"]
        deadline = time.monotonic() + 10
        while not executor.slot_table.create_slot_report(executor.resource_id).slot_statuses[0].is_free:
            assert time.monotonic() < deadline, "the orphaned slot was never freed"
            time.sleep(0.05)
        assert cluster.resource_manager.heartbeat("not-registered", report) is False
