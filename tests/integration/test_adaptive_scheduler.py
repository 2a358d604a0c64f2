"""The adaptive scheduler's rescale path on a real local cluster (TaskExecutor processes, Delta output).

A keyed job checks in keyed state that every key's ``seq`` arrives exactly once
and in order (it raises otherwise, and the job has no restarts), and writes to
a DeltaSink. While it runs, its resource requirements are changed through the
JobClient and through ``PUT /jobs/:jobid/resource-requirements``: it rescales
2 -> 3 -> 1 through stop-with-savepoint and restore. The Delta table, read in
commit order, must hold every key's ``seq`` exactly once and in order.
"""

from __future__ import annotations

import pytest

from checkpointing import list_completed_checkpoints
from connectors import DeltaSink, SequenceSource
from flinklike_spark import StreamExecutionEnvironment
from flinklike_spark.errors import RescaleRefusedError
from tests.support.delta_sink_job import InOrderPerKey, assert_exactly_once_in_order
from tests.support.rest_helpers import get, request, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

NUM_KEYS = 12
RECORDS_PER_KEY = 3_000


def _environment(tmp_path, *, unaligned: bool, scheduler: str = "adaptive", **extra) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment({
        "jobmanager.scheduler": scheduler, "parallelism.default": 2, "local.number-taskmanager": 2,
        "taskmanager.numberOfTaskSlots": 2, "restart-strategy.type": "none", "rest.port": 0, **extra,
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


def _bounds(client, upper: int) -> dict:
    return {
        vertex: {"parallelism": {"lowerBound": 1, "upperBound": upper}} for vertex in client.get_resource_requirements()
    }


def _latest_checkpoint(tmp_path, client) -> int:
    return max((c.checkpoint_id for c in list_completed_checkpoints(str(tmp_path / "chk"), client.job_id)), default=0)


def _wait_for_checkpoints(tmp_path, client, count: int) -> None:
    seen = _latest_checkpoint(tmp_path, client)
    wait_for(f"{count} more checkpoints", lambda: _latest_checkpoint(tmp_path, client) >= seen + count)


@pytest.mark.parametrize("unaligned", [False, True], ids=["aligned", "unaligned"])
def test_a_running_job_rescales_up_and_down_exactly_once(tmp_path, unaligned):
    client = _environment(tmp_path, unaligned=unaligned).execute_async("rescaled")
    base, job_id = client.web_interface_url, client.job_id
    try:
        _wait_for_checkpoints(tmp_path, client, 2)
        assert client.get_resource_requirements() == _bounds(client, 2)

        up = client.update_resource_requirements(_bounds(client, 3))
        assert set(up["parallelismBefore"].values()) == {2} and set(up["parallelismAfter"].values()) == {3}
        assert client.get_job_status().name == "RUNNING"
        assert {v["parallelism"] for v in get(f"{base}/jobs/{job_id}")["vertices"]} == {3}
        _wait_for_checkpoints(tmp_path, client, 2)

        status, body = request(f"{base}/jobs/{job_id}/resource-requirements", "PUT", _bounds(client, 1))
        assert status == 200 and body == {}, body
        wait_for("the second rescale", lambda: len(get(f"{base}/jobs/{job_id}/rescales")["rescales"]) == 2)
        rescales = get(f"{base}/jobs/{job_id}/rescales")["rescales"]
        assert set(rescales[1]["parallelismAfter"].values()) == {1}
        assert rescales[1]["cause"] == f"PUT /jobs/{job_id}/resource-requirements"
        assert rescales[1]["checkpoint"] > rescales[0]["checkpoint"]
        assert get(f"{base}/jobs/{job_id}/resource-requirements") == _bounds(client, 1)
        client.wait(240)
    finally:
        if not client.get_job_status().is_globally_terminal:
            client.cancel()
    assert_exactly_once_in_order(tmp_path / "out")


def test_a_rescale_starts_task_executors_up_to_the_slot_maximum_and_a_rescale_down_stops_them(tmp_path):
    extra = {"local.number-taskmanager": 1, "slotmanager.number-of-slots.max": 4}
    client = _environment(tmp_path, unaligned=False, **extra).execute_async("grows")
    base = client.web_interface_url
    try:
        _wait_for_checkpoints(tmp_path, client, 1)
        assert len(get(f"{base}/taskmanagers")["taskmanagers"]) == 1
        up = client.update_resource_requirements(_bounds(client, 6))  # the maximum caps it at 4 slots
        assert set(up["parallelismAfter"].values()) == {4}
        assert len(get(f"{base}/taskmanagers")["taskmanagers"]) == 2
        _wait_for_checkpoints(tmp_path, client, 1)
        down = client.update_resource_requirements(_bounds(client, 2))
        assert set(down["parallelismAfter"].values()) == {2}
        wait_for("the idle TaskExecutor stopped", lambda: len(get(f"{base}/taskmanagers")["taskmanagers"]) == 1)
        client.wait(240)
    finally:
        if not client.get_job_status().is_globally_terminal:
            client.cancel()
    assert_exactly_once_in_order(tmp_path / "out")


def test_requirements_the_job_or_cluster_cannot_meet_are_refused_and_the_job_runs_on(tmp_path):
    client = _environment(tmp_path, unaligned=False).execute_async("refused")
    base, job_id = client.web_interface_url, client.job_id
    try:
        wait_for("RUNNING", lambda: client.get_job_status().name == "RUNNING")
        vertices = list(client.get_resource_requirements())
        with pytest.raises(RescaleRefusedError, match=r"lowerBound=3, upperBound=2 must be integers with 1 <="):
            client.update_resource_requirements(
                {v: {"parallelism": {"lowerBound": 3, "upperBound": 2}} for v in vertices}
            )
        with pytest.raises(RescaleRefusedError, match=r"unknown \['nope'\], missing"):
            client.update_resource_requirements({"nope": {"parallelism": {"lowerBound": 1, "upperBound": 1}}})
        status, body = request(f"{base}/jobs/{job_id}/resource-requirements", "PUT",
                               {v: {"parallelism": {"lowerBound": 5, "upperBound": 5}} for v in vertices})  # fmt: skip
        assert (
            status == 400 and "the cluster has 4 slots for this job, fewer than the lower bounds" in body["errors"][0]
        )
        assert client.get_job_status().name == "RUNNING" and get(f"{base}/jobs/{job_id}/rescales")["rescales"] == []
        client.wait(240)
    finally:
        if not client.get_job_status().is_globally_terminal:
            client.cancel()
    assert_exactly_once_in_order(tmp_path / "out")


def test_the_default_scheduler_refuses_to_rescale(tmp_path):
    client = _environment(tmp_path, unaligned=False, scheduler="default").execute_async("fixed")
    try:
        wait_for("RUNNING", lambda: client.get_job_status().name == "RUNNING")
        with pytest.raises(RescaleRefusedError, match="needs jobmanager.scheduler: adaptive"):
            client.update_resource_requirements(_bounds(client, 3))
    finally:
        client.cancel()
