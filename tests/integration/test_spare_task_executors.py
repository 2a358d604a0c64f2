"""Spare TaskExecutors (``slotmanager.redundant-taskmanager-num``, Flink's FLINK-18625) on the local cluster.

With one spare, the tasks of a SIGKILLed TaskExecutor redeploy at once onto the spare's free slot: the
restarted job runs on the survivor and the spare, its slots were handed out before the replacement
TaskExecutor (started in the background) registered, and the replacement is then the free spare.
The keyed exact count checks every key's sequence (nothing lost, duplicated or out of order).
"""

from __future__ import annotations

import contextlib
import signal

import psutil
import pytest

from checkpointing import list_completed_checkpoints
from connectors import CollectSink
from flinklike_spark import Configuration
from flinklike_spark._runtime.minicluster import MiniCluster
from tests.support.checkpoint_jobs import checkpoint_config
from tests.support.exact_count_job import NUM_KEYS, RECORDS_PER_KEY, build
from tests.support.failover_jobs import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def _registered(cluster) -> dict[str, float]:
    """Resource id -> registration time (epoch seconds) of every registered TaskExecutor."""
    return {e.resource_id: e.registered_at for e, _, _ in cluster.resource_manager.task_executor_infos()}


def _running_again(placement: dict[str, dict]) -> bool:
    return all(p["attempt"] >= 1 and p["state"] == "RUNNING" for p in placement.values())


def test_a_killed_task_executors_tasks_redeploy_onto_the_spare_before_the_replacement_registers(tmp_path):
    directory = str(tmp_path / "checkpoints")
    config = checkpoint_config(directory, "aligned") | {
        "taskmanager.numberOfTaskSlots": 1,
        "slotmanager.redundant-taskmanager-num": 1,
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": 1,
        "restart-strategy.fixed-delay.delay": "0 ms",
        # A replacement that starts as slowly as a fresh interpreter (or a Spark executor) does: a forked
        # one registers within milliseconds, as soon as the redeploy, and the order would prove nothing.
        "flinklike.local.taskmanager-start-method": "spawn",
    }
    env = build(config, seconds_per_record=0.0005)
    with MiniCluster(Configuration(config)) as cluster:
        wait_for(lambda: len(_registered(cluster)) == 3, "2 TaskExecutors and the spare to register", 60)
        before = _registered(cluster)
        client = cluster.submit_job(env.get_job_graph("spare TaskExecutor"))
        try:
            wait_for(lambda: list_completed_checkpoints(directory, client.job_id), "a checkpoint")
            placement = client.get_task_placement()
            hosts = {p["resource_id"] for p in placement.values()}
            assert len(hosts) == 2 and hosts < set(before), placement  # parallelism 2 on 1-slot TaskExecutors
            [spare] = set(before) - hosts
            victim = next(p for task, p in placement.items() if task.endswith("-0"))
            [survivor] = hosts - {victim["resource_id"]}
            psutil.Process(victim["pid"]).send_signal(signal.SIGKILL)

            wait_for(lambda: _running_again(client.get_task_placement()), "the restarted tasks", 60)
            placement = client.get_task_placement()
            restarted_on = {p["resource_id"] for p in placement.values()}
            assert restarted_on == {survivor, spare}, (placement, spare, survivor)
            wait_for(lambda: len(set(_registered(cluster)) - set(before)) == 1, "the replacement TaskExecutor", 60)
            [(replacement, registered_at)] = [(r, t) for r, t in _registered(cluster).items() if r not in before]
            deployed = max(p["deployed_at"] for p in placement.values())
            assert deployed < registered_at, (
                f"the restarted tasks got their slots {deployed - registered_at:+.3f} s after the replacement "
                f"{replacement} registered: they waited for it instead of taking the spare's slot"
            )
            print(f"restarted tasks deployed {registered_at - deployed:.2f} s before the replacement registered")
            # the replacement is the new spare: registered while the job runs on the survivor and the old spare
            infos = cluster.resource_manager.task_executor_infos()
            assert {e.resource_id: used for e, used, _ in infos} == {survivor: 1, spare: 1, replacement: 0}, infos

            result = client.wait(timeout=180)
        except BaseException:
            with contextlib.suppress(Exception):
                client.cancel()
            raise
        counts = {row["key"]: row["count"] for row in CollectSink.rows(result)}
        assert counts == {key: RECORDS_PER_KEY for key in range(NUM_KEYS)}  # exactly once; the function checks order
        assert client.num_restarts == 1
