"""Reactive mode and waiting for resources on a real local cluster (TaskExecutor processes, Delta output).

Under ``scheduler-mode: reactive`` a keyed job uses every slot of the cluster: it
starts on 2 TaskExecutors of 1 slot at parallelism 2, scales up to 3 when a
TaskExecutor is added, and goes on at 2 from its latest completed checkpoint
when one is SIGKILLed (no replacement is started). The job checks in keyed
state that every key's ``seq`` arrives exactly once and in order (it raises
otherwise, and has no restarts), and the Delta table, read in commit order,
must hold every key's ``seq`` exactly once and in order.

Under the adaptive scheduler a job that asks for more slots than the cluster
has starts, once they stayed unchanged for the stabilization timeout, with what
is there; one whose lower bounds no slot meets fails after the wait timeout.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from checkpointing import list_completed_checkpoints
from connectors import DeltaSink, SequenceSource
from flinklike_spark import Configuration, StreamExecutionEnvironment
from flinklike_spark._runtime.minicluster import MiniCluster
from flinklike_spark.errors import NoResourceAvailableError
from tests.integration.test_adaptive_scheduler import NUM_KEYS, RECORDS_PER_KEY
from tests.support.delta_sink_job import InOrderPerKey, assert_exactly_once_in_order
from tests.support.rest_helpers import get, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

STABILIZATION = "1 s"


def _environment(tmp_path, *, unaligned: bool = False, **extra) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment({
        "parallelism.default": 2, "local.number-taskmanager": 2, "taskmanager.numberOfTaskSlots": 1,
        "restart-strategy.type": "none", "rest.port": 0,
        "jobmanager.adaptive-scheduler.resource-stabilization-timeout": STABILIZATION, **extra,
        "execution.checkpointing.interval": "200ms", "execution.checkpointing.dir": str(tmp_path / "chk"),
        "execution.checkpointing.unaligned.enabled": unaligned, "taskmanager.memory.segment-size": "2kb",
    })  # fmt: skip
    source = SequenceSource(num_keys=NUM_KEYS, records_per_key=RECORDS_PER_KEY, rows_per_second=1_000)
    (
        env.from_source(source, name="seq").uid("seq")
        .key_by("key").process(InOrderPerKey()).uid("check")
        .sink_to(DeltaSink(tmp_path / "out")).uid("delta")
    )  # fmt: skip
    return env


def _latest_checkpoint(tmp_path, job_id: str) -> int:
    return max((c.checkpoint_id for c in list_completed_checkpoints(str(tmp_path / "chk"), job_id)), default=0)


def _wait_for_checkpoints(tmp_path, job_id: str, count: int) -> None:
    seen = _latest_checkpoint(tmp_path, job_id)
    wait_for(f"{count} more checkpoints", lambda: _latest_checkpoint(tmp_path, job_id) >= seen + count)


def _parallelism(base: str, job_id: str) -> set[int]:
    return {v["parallelism"] for v in get(f"{base}/jobs/{job_id}")["vertices"]}


@pytest.mark.parametrize("unaligned", [False, True], ids=["aligned", "unaligned"])
def test_a_reactive_job_follows_task_executors_that_come_and_go_exactly_once(tmp_path, unaligned):
    client = _environment(tmp_path, unaligned=unaligned, **{"scheduler-mode": "reactive"}).execute_async("reactive")
    base, job_id = client.web_interface_url, client.job_id
    try:
        assert _parallelism(base, job_id) == {2}  # every slot, whatever parallelism.default says
        assert client.get_resource_requirements()["seq"]["parallelism"] == {"lowerBound": 1, "upperBound": 128}
        _wait_for_checkpoints(tmp_path, job_id, 2)

        [added] = client.start_task_executors(1)
        wait_for("the rescale up", lambda: len(get(f"{base}/jobs/{job_id}/rescales")["rescales"]) == 1)
        [up] = get(f"{base}/jobs/{job_id}/rescales")["rescales"]
        assert set(up["parallelismBefore"].values()) == {2} and set(up["parallelismAfter"].values()) == {3}
        assert up["cause"] == f"reactive: 3 slots ({added} registered)"
        wait_for(
            "RUNNING at 3", lambda: client.get_job_status().name == "RUNNING" and _parallelism(base, job_id) == {3}
        )
        _wait_for_checkpoints(tmp_path, job_id, 2)

        pids = {tm["id"]: tm["pid"] for tm in get(f"{base}/taskmanagers")["taskmanagers"]}
        victim = sorted(set(pids) - {added})[0]
        os.kill(pids[victim], signal.SIGKILL)
        wait_for("the restart at 2", lambda: len(get(f"{base}/jobs/{job_id}/rescales")["rescales"]) == 2)
        down = get(f"{base}/jobs/{job_id}/rescales")["rescales"][1]
        assert set(down["parallelismAfter"].values()) == {2}, down
        assert (
            down["cause"].startswith(f"reactive: TaskExecutor {victim} lost") and down["checkpoint"] > up["checkpoint"]
        )
        wait_for(
            "RUNNING at 2", lambda: client.get_job_status().name == "RUNNING" and _parallelism(base, job_id) == {2}
        )
        time.sleep(1.0)  # the monitor would have started a replacement by now
        assert {tm["id"] for tm in get(f"{base}/taskmanagers")["taskmanagers"]} == set(pids) - {victim}
        client.wait(240)
    finally:
        if not client.get_job_status().is_globally_terminal:
            client.cancel()
    assert_exactly_once_in_order(tmp_path / "out")


def test_a_job_asking_for_more_slots_than_there_are_starts_with_what_is_there(tmp_path):
    env = _environment(tmp_path, **{"jobmanager.scheduler": "adaptive", "parallelism.default": 4})
    started = time.monotonic()
    client = env.execute_async("waits")
    waited = time.monotonic() - started
    base, job_id = client.web_interface_url, client.job_id
    try:
        assert waited >= 1.0  # the slots stayed at 2 for the stabilization timeout
        assert _parallelism(base, job_id) == {2}
        assert client.get_resource_requirements()["seq"]["parallelism"] == {"lowerBound": 1, "upperBound": 4}
        client.wait(240)
    finally:
        if not client.get_job_status().is_globally_terminal:
            client.cancel()
    assert_exactly_once_in_order(tmp_path / "out")


def test_a_job_whose_lower_bounds_no_slot_meets_fails_after_the_resource_wait_timeout(tmp_path):
    config = {"local.number-taskmanager": 1, "taskmanager.numberOfTaskSlots": 1, "restart-strategy.type": "none",
              "jobmanager.scheduler": "adaptive", "rest.port": 0,
              "jobmanager.adaptive-scheduler.resource-wait-timeout": "2 s"}  # fmt: skip
    with MiniCluster(Configuration(config)) as cluster:
        holder = _environment(tmp_path / "a", **{"parallelism.default": 1})
        first = cluster.submit_job(holder.get_job_graph("holds the slot"))
        try:
            started = time.monotonic()
            with pytest.raises(NoResourceAvailableError) as info:
                cluster.submit_job(_environment(tmp_path / "b").get_job_graph("finds none"))
            assert 2.0 <= time.monotonic() - started < 10.0
            assert "has 0 slots after waiting 0:00:02" in str(info.value)
            assert "needs 1 for its lower bounds (it would use 2)" in str(info.value)
            assert first.get_job_status().name == "RUNNING"
        finally:
            first.cancel()
