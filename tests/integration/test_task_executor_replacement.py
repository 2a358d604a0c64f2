"""The ResourceManager replaces a TaskExecutor that is gone, on an embedded cluster (TaskExecutors as threads)."""

from __future__ import annotations

import time

import pytest

from flinklike_spark import Configuration
from flinklike_spark._runtime.minicluster import MiniCluster

pytestmark = [pytest.mark.slow]


@pytest.mark.timeout(60)
def test_a_task_executor_that_is_gone_is_replaced_by_a_new_one():
    config = Configuration({"flinklike.local.taskmanager-mode": "thread", "local.number-taskmanager": 2})
    with MiniCluster(config) as cluster:
        first, second = sorted(cluster.launcher.executors)
        cluster.launcher.executors[first].close()
        deadline = time.monotonic() + 20
        while not (
            cluster.resource_manager.num_registered() == 2 and not cluster.resource_manager.is_registered(first)
        ):
            assert time.monotonic() < deadline, "no replacement registered"
            time.sleep(0.1)
        assert cluster.resource_manager.is_registered(second)
        assert first not in cluster.launcher.executors
