"""Flink's REST API on a real local cluster: a running, a finished and a failed job.

Every endpoint the dashboard and Flink's tools use is asked while the job
runs (with checkpoints completing), after it finished and after it failed;
the responses carry Flink's documented field names (rest_helpers) and values
that follow from the job (records counted, checkpoints completed, the user's
exception in the history). Savepoints and cancelling go through the API too.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from checkpointing import CheckpointCommitter
from connectors import CollectSink, SequenceSource
from flinklike_spark import MapFunction, StreamExecutionEnvironment, WatermarkStrategy
from flinklike_spark.errors import JobCancelledError, JobExecutionError
from tests.support.rest_helpers import (
    BACKPRESSURE_FIELDS,
    BACKPRESSURE_SUBTASK_FIELDS,
    CHECKPOINT_CONFIG_FIELDS,
    CHECKPOINT_COUNTS_FIELDS,
    CHECKPOINT_FIELDS,
    CHECKPOINT_LATEST_FIELDS,
    CHECKPOINT_SUMMARY_FIELDS,
    CHECKPOINTS_FIELDS,
    COMPLETED_CHECKPOINT_FIELDS,
    CONFIG_FIELDS,
    EXCEPTION_ENTRY_FIELDS,
    EXCEPTIONS_FIELDS,
    FEATURES_FIELDS,
    HARDWARE_FIELDS,
    IO_METRICS_FIELDS,
    JOB_DETAILS_FIELDS,
    JOB_OVERVIEW_FIELDS,
    JOB_VERTEX_FIELDS,
    OVERVIEW_FIELDS,
    PLAN_FIELDS,
    PLAN_NODE_FIELDS,
    STATS_SUMMARY_FIELDS,
    SUBTASK_FIELDS,
    TASK_STATES,
    TASKMANAGER_FIELDS,
    VERTEX_DETAILS_FIELDS,
    get,
    has_fields,
    request,
    wait_for,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

MIN_WATERMARK = -(2**63)


def _config(**extra) -> dict:
    return {
        "parallelism.default": 2,
        "local.number-taskmanager": 2,
        "rest.port": 0,
        "metrics.fetcher.update-interval": "100ms",
        **extra,
    }


class Counted(MapFunction):
    def open(self, runtime_context):
        self.seen = runtime_context.get_metrics_group().add_group("parse").counter("records")

    def map(self, value):
        self.seen.inc()
        return value


def _fail_late(row):
    if row["seq"] >= 150:  # after a few checkpoints completed
        raise ValueError(f"rest test rejects {row['key']}")
    return row


def _check_every_get(base: str, job_id: str, state: str, *, checkpointing: bool) -> dict:
    """Every GET endpoint answers for the job in ``state`` with Flink's fields; returns /jobs/:jobid."""
    _check_cluster(base)
    assert {"id": job_id, "status": state} in get(f"{base}/jobs")["jobs"]
    overview = [j for j in get(f"{base}/jobs/overview")["jobs"] if j["jid"] == job_id]
    assert len(overview) == 1 and overview[0]["state"] == state
    has_fields(overview[0], JOB_OVERVIEW_FIELDS, "/jobs/overview")
    job = get(f"{base}/jobs/{job_id}")
    _check_job_details(job, job_id, state)
    plan = get(f"{base}/jobs/{job_id}/plan")["plan"]
    assert plan["jid"] == job_id and [n["id"] for n in plan["nodes"]] == [v["id"] for v in job["vertices"]]
    for node in plan["nodes"]:
        has_fields(node, PLAN_NODE_FIELDS, "a plan node")
    has_fields(get(f"{base}/jobs/{job_id}/exceptions"), EXCEPTIONS_FIELDS, "/exceptions")
    assert {m["id"] for m in get(f"{base}/jobs/{job_id}/metrics")} >= {"numRestarts"}
    for vertex in job["vertices"]:
        _check_vertex_endpoints(base, job_id, vertex["id"], running=state == "RUNNING")
        watermarks = get(f"{base}/jobs/{job_id}/vertices/{vertex['id']}/watermarks")
        assert all(m["id"].endswith(".currentInputWatermark") and int(m["value"]) for m in watermarks)
        names = {m["id"] for m in get(f"{base}/jobs/{job_id}/vertices/{vertex['id']}/subtasks/metrics")}
        assert {"numRecordsIn", "numRecordsOutPerSecond", "busyTimeMsPerSecond"} <= names, names
        assert {m["id"] for m in get(f"{base}/jobs/{job_id}/vertices/{vertex['id']}/metrics")} >= {
            "0.numRecordsIn",
            "1.numRecordsIn",
        }
    status, body = request(f"{base}/jobs/{job_id}/checkpoints")
    status_config, config = request(f"{base}/jobs/{job_id}/checkpoints/config")
    if checkpointing:
        assert status == status_config == 200
        has_fields(body, CHECKPOINTS_FIELDS, "/checkpoints")
        has_fields(config, CHECKPOINT_CONFIG_FIELDS, "/checkpoints/config")
    else:
        assert status == status_config == 404 and "Checkpointing is not enabled" in body["errors"][0]
    return job


def _check_job_details(details: dict, job_id: str, state: str) -> None:
    has_fields(details, JOB_DETAILS_FIELDS, "/jobs/:jobid")
    assert details["jid"] == job_id and details["state"] == state and details["job-type"] == "STREAMING"
    assert len(details["vertices"]) == 2
    for vertex in details["vertices"]:
        has_fields(vertex, JOB_VERTEX_FIELDS, "a vertex of /jobs/:jobid")
        has_fields(vertex["metrics"], IO_METRICS_FIELDS, "a vertex's metrics")
        assert set(vertex["tasks"]) == TASK_STATES
        assert vertex["parallelism"] == 2 and vertex["status"] in TASK_STATES
    assert set(details["status-counts"]) == TASK_STATES
    has_fields(details["plan"], PLAN_FIELDS, "the plan of /jobs/:jobid")


def _check_cluster(base: str) -> None:
    config = get(f"{base}/config")
    has_fields(config, CONFIG_FIELDS, "/config")
    has_fields(config["features"], FEATURES_FIELDS, "/config features")
    overview = get(f"{base}/overview")
    has_fields(overview, OVERVIEW_FIELDS, "/overview")
    assert overview["taskmanagers"] == 2 and overview["slots-total"] == 2
    managers = get(f"{base}/taskmanagers")["taskmanagers"]
    assert len(managers) == 2
    for manager in managers:
        has_fields(manager, TASKMANAGER_FIELDS, "a TaskManager of /taskmanagers")
        has_fields(manager["hardware"], HARDWARE_FIELDS, "a TaskManager's hardware")
        assert manager["slotsNumber"] == 1 and manager["hardware"]["cpuCores"] >= 1


def _check_vertex_endpoints(base: str, job_id: str, vertex_id: str, *, running: bool) -> dict:
    details = get(f"{base}/jobs/{job_id}/vertices/{vertex_id}")
    has_fields(details, VERTEX_DETAILS_FIELDS, "/jobs/:jobid/vertices/:vertexid")
    assert [s["subtask"] for s in details["subtasks"]] == [0, 1]
    for subtask in details["subtasks"]:
        has_fields(subtask, SUBTASK_FIELDS, "a subtask of /jobs/:jobid/vertices/:vertexid")
        has_fields(subtask["metrics"], IO_METRICS_FIELDS, "a subtask's metrics")
        assert subtask["taskmanager-id"].startswith("taskmanager-")
        assert subtask["endpoint"].startswith("127.0.0.1:")
        entered = {"CREATED", "SCHEDULED", "DEPLOYING", "RUNNING"} if running else {"CREATED", "SCHEDULED"}
        assert set(subtask["status-duration"]) >= entered, subtask
        assert all(ms >= 0 for ms in subtask["status-duration"].values())
    url = f"{base}/jobs/{job_id}/vertices/{vertex_id}/backpressure"
    backpressure = get(url)
    has_fields(backpressure, BACKPRESSURE_FIELDS, "/backpressure")
    assert backpressure["backpressureLevel"] in ("ok", "low", "high")
    for subtask in backpressure["subtasks"]:
        has_fields(subtask, BACKPRESSURE_SUBTASK_FIELDS, "a subtask of /backpressure")
    if running:  # once every subtask reported metrics, its time splits into backpressured, idle and busy
        wait_for("time shares of every subtask", lambda: all(
            s["ratio"] + s["idleRatio"] + s["busyRatio"] == pytest.approx(1.0, abs=0.01) for s in get(url)["subtasks"]
        ))  # fmt: skip
    return details


def test_running_job_checkpoints_savepoint_and_cancel(tmp_path):
    checkpoints = f"file://{tmp_path}/chk"
    env = StreamExecutionEnvironment.get_execution_environment(
        _config(**{"execution.checkpointing.interval": "200ms", "execution.checkpointing.dir": checkpoints})
    )
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner("seq")
    (
        env.from_source(SequenceSource(num_keys=4, records_per_key=None, rows_per_second=400), strategy, "seq")
        .key_by("key").map(Counted()).name("counted")
        .sink_to(CollectSink("out"))
    )  # fmt: skip
    client = env.execute_async("rest running")
    base, job_id = client.web_interface_url, client.job_id
    assert base.startswith("http://127.0.0.1:")
    try:
        wait_for("every task RUNNING", lambda: get(f"{base}/jobs/overview")["jobs"][0]["tasks"]["running"] == 4)
        _check_every_get(base, job_id, "RUNNING", checkpointing=True)
        assert get(f"{base}/jobs") == {"jobs": [{"id": job_id, "status": "RUNNING"}]}
        overview = get(f"{base}/jobs/overview")["jobs"]
        assert [j["jid"] for j in overview] == [job_id]
        has_fields(overview[0], JOB_OVERVIEW_FIELDS, "/jobs/overview")
        assert set(overview[0]["tasks"]) == {s.lower() for s in TASK_STATES} | {"total"}
        assert overview[0]["tasks"]["total"] == 4

        # checkpoints complete and records flow
        stats = wait_for(
            "two completed checkpoints",
            lambda: (s := get(f"{base}/jobs/{job_id}/checkpoints"))["counts"]["completed"] >= 2 and s,
        )
        has_fields(stats, CHECKPOINTS_FIELDS, "/checkpoints")
        has_fields(stats["counts"], CHECKPOINT_COUNTS_FIELDS, "/checkpoints counts")
        has_fields(stats["summary"], CHECKPOINT_SUMMARY_FIELDS, "/checkpoints summary")
        for summary in stats["summary"].values():
            has_fields(summary, STATS_SUMMARY_FIELDS, "a /checkpoints summary")
        has_fields(stats["latest"], CHECKPOINT_LATEST_FIELDS, "/checkpoints latest")
        latest = stats["latest"]["completed"]
        has_fields(latest, COMPLETED_CHECKPOINT_FIELDS, "the latest completed checkpoint")
        assert latest["status"] == "COMPLETED" and latest["checkpoint_type"] == "CHECKPOINT"
        assert latest["state_size"] > 0 and latest["end_to_end_duration"] >= 0
        assert latest["num_acknowledged_subtasks"] == latest["num_subtasks"] == 4
        assert latest["external_path"].endswith(f"/{job_id}/chk-{latest['id']}")
        for entry in stats["history"]:
            has_fields(entry, CHECKPOINT_FIELDS, "a /checkpoints history entry")
        details = get(f"{base}/jobs/{job_id}/checkpoints/details/{latest['id']}")
        assert len(details["subtasks"]) == 4 and all(s["alignment"]["duration"] >= 0 for s in details["subtasks"])
        config = get(f"{base}/jobs/{job_id}/checkpoints/config")
        has_fields(config, CHECKPOINT_CONFIG_FIELDS, "/checkpoints/config")
        assert config["interval"] == 200 and config["mode"] == "exactly_once"

        job = wait_for(
            "records counted on both vertices",
            lambda: (
                (d := get(f"{base}/jobs/{job_id}"))
                and all(v["metrics"]["read-records"] > 0 for v in d["vertices"])
                and d
            ),
        )
        _check_job_details(job, job_id, "RUNNING")
        source, keyed = job["vertices"]
        assert source["name"] == "Source: seq" and source["metrics"]["write-records"] > 0
        assert keyed["metrics"]["read-bytes"] > 0 and source["metrics"]["write-bytes"] > 0
        assert get(f"{base}/jobs/{job_id}/plan")["plan"]["jid"] == job_id
        for node in get(f"{base}/jobs/{job_id}/plan")["plan"]["nodes"]:
            has_fields(node, PLAN_NODE_FIELDS, "a plan node")
        _check_vertex_endpoints(base, job_id, source["id"], running=True)
        _check_vertex_endpoints(base, job_id, keyed["id"], running=True)
        watermarks = wait_for(
            "watermarks of the keyed vertex",
            lambda: (
                (w := get(f"{base}/jobs/{job_id}/vertices/{keyed['id']}/watermarks"))
                and all(int(m["value"]) > MIN_WATERMARK for m in w)
                and w
            ),
        )
        assert sorted(m["id"] for m in watermarks) == ["0.currentInputWatermark", "1.currentInputWatermark"]

        metrics = get(f"{base}/jobs/{job_id}/vertices/{keyed['id']}/subtasks/metrics"
                      "?get=numRecordsInPerSecond,busyTimeMsPerSecond,counted.parse.records")  # fmt: skip
        by_id = {m["id"]: m for m in metrics}
        assert set(by_id) == {"numRecordsInPerSecond", "busyTimeMsPerSecond", "counted.parse.records"}
        assert by_id["counted.parse.records"]["sum"] > 0 and by_id["numRecordsInPerSecond"]["sum"] > 0
        job_metrics = {m["id"]: m["value"] for m in get(
            f"{base}/jobs/{job_id}/metrics?get=numRestarts,numberOfCompletedCheckpoints,lastCheckpointSize")}  # fmt: skip
        assert job_metrics["numRestarts"] == "0" and int(job_metrics["numberOfCompletedCheckpoints"]) >= 2
        assert int(job_metrics["lastCheckpointSize"]) > 0

        exceptions = get(f"{base}/jobs/{job_id}/exceptions")
        has_fields(exceptions, EXCEPTIONS_FIELDS, "/exceptions")
        assert exceptions["exceptionHistory"]["entries"] == []

        # a savepoint through the API
        status, body = request(f"{base}/jobs/{job_id}/savepoints", "POST", {"cancel-job": False})
        assert status == 202, body
        trigger = body["request-id"]
        result = wait_for(
            "the savepoint",
            lambda: (r := get(f"{base}/jobs/{job_id}/savepoints/{trigger}"))["status"]["id"] == "COMPLETED" and r,
        )
        assert f"/{job_id}/chk-" in result["operation"]["location"]
        assert request(f"{base}/jobs/{job_id}/savepoints/nope")[0] == 404
        savepoint = wait_for(
            "the savepoint in the checkpoint statistics",
            lambda: get(f"{base}/jobs/{job_id}/checkpoints")["latest"]["savepoint"],
        )
        assert savepoint["is_savepoint"] and savepoint["checkpoint_type"] == "SAVEPOINT"

        # errors in Flink's shape
        status, body = request(f"{base}/jobs/00000000000000000000000000000000")
        assert status == 404 and "not found" in body["errors"][0]
        status, body = request(f"{base}/jobs/{job_id}/vertices/nope")
        assert status == 404 and "nope" in body["errors"][0]
        assert request(f"{base}/jobs/overview", "POST", {})[0] == 405
        assert request(f"{base}/v1/jobs/{job_id}")[0] == 200

        # cancel through the API (web.cancel.enable defaults to true)
        status, _ = request(f"{base}/jobs/{job_id}?mode=cancel", "PATCH")
        assert status == 202
        wait_for("CANCELED", lambda: get(f"{base}/jobs/{job_id}")["state"] == "CANCELED")
    finally:
        if not client.done():
            client.cancel()
    with pytest.raises(JobCancelledError):
        client.wait(60)


def test_finished_job_reports_final_counts_and_refuses_cancel():
    env = StreamExecutionEnvironment.get_execution_environment(_config(**{"web.cancel.enable": False}))
    env.from_source(SequenceSource(num_keys=5, records_per_key=200), source_name="bounded").key_by("key").map(
        Counted()
    ).name("counted").sink_to(CollectSink("out"))
    client = env.execute_async("rest finished")
    base, job_id = client.web_interface_url, client.job_id
    try:
        wait_for("FINISHED", lambda: client.get_job_status().name == "FINISHED")
        job = _check_every_get(base, job_id, "FINISHED", checkpointing=False)
        assert job["end-time"] >= job["start-time"] > 0
        for vertex in job["vertices"]:
            assert vertex["status"] == "FINISHED" and vertex["tasks"]["FINISHED"] == 2
            assert vertex["metrics"]["read-records-complete"] is True
        source, keyed = job["vertices"]
        # the final counts arrive with the tasks' FINISHED reports: exact, not the last heartbeat's
        assert source["metrics"]["write-records"] == 1000
        assert keyed["metrics"]["read-records"] == 1000
        _check_vertex_endpoints(base, job_id, keyed["id"], running=False)
        overview = get(f"{base}/overview")
        assert overview["jobs-finished"] == 1 and overview["jobs-running"] == 0
        assert get(f"{base}/config")["features"]["web-cancel"] is False
        status, body = request(f"{base}/jobs/{job_id}?mode=cancel", "PATCH")
        assert status == 403 and "web.cancel.enable" in body["errors"][0]
        status, body = request(f"{base}/jobs/{job_id}/savepoints", "POST", {})
        assert status == 409 and "FINISHED" in body["errors"][0]
        assert get(f"{base}/jobs/{job_id}/exceptions")["exceptionHistory"]["entries"] == []
        assert [j["state"] for j in get(f"{base}/jobs/overview")["jobs"]] == ["FINISHED"]
    finally:
        result = client.wait(60)
    assert len(CollectSink.rows(result, name="out")) == 1000


def test_failed_job_reports_the_exception_history_and_its_checkpoints(tmp_path):
    env = StreamExecutionEnvironment.get_execution_environment(_config(**{
        "restart-strategy.type": "none", "execution.checkpointing.interval": "100ms",
        "execution.checkpointing.dir": f"file://{tmp_path}/chk"}))  # fmt: skip
    source = SequenceSource(num_keys=5, records_per_key=None, rows_per_second=500)
    env.from_source(source, source_name="seq").key_by("key").map(_fail_late).name("failing").sink_to(
        CollectSink("never")
    )
    client = env.execute_async("rest failed")
    base, job_id = client.web_interface_url, client.job_id
    try:
        wait_for("FAILED", lambda: client.get_job_status().name == "FAILED")
        job = _check_every_get(base, job_id, "FAILED", checkpointing=True)
        assert job["end-time"] >= job["start-time"]
        checkpoints = get(f"{base}/jobs/{job_id}/checkpoints")
        assert checkpoints["counts"]["completed"] >= 1 and checkpoints["latest"]["completed"]["status"] == "COMPLETED"
        assert checkpoints["counts"]["in_progress"] == 0
        assert "FAILED" in {v["status"] for v in job["vertices"]}
        exceptions = get(f"{base}/jobs/{job_id}/exceptions")
        has_fields(exceptions, EXCEPTIONS_FIELDS, "/exceptions")
        assert "rest test rejects" in exceptions["root-exception"]
        entries = exceptions["exceptionHistory"]["entries"]
        assert len(entries) >= 1
        for entry in entries:
            has_fields(entry, EXCEPTION_ENTRY_FIELDS, "an exception history entry")
        first = entries[-1]
        assert first["exceptionName"].endswith("ValueError")
        assert "rest test rejects" in first["stacktrace"]
        assert (
            first["taskName"].startswith("failing -> Sink: CollectSink (") and first["timestamp"] >= job["start-time"]
        )
        assert first["endpoint"].startswith("127.0.0.1:") and first["taskManagerId"].startswith("taskmanager-")
        assert get(f"{base}/overview")["jobs-failed"] == 1
        assert {m["id"]: m["value"] for m in get(f"{base}/jobs/{job_id}/metrics?get=numRestarts")} == {
            "numRestarts": "0"
        }
        status, body = request(f"{base}/jobs/{job_id}?mode=cancel", "PATCH")
        assert status == 409 and "FAILED" in body["errors"][0]
    finally:
        with pytest.raises(JobExecutionError, match="rest test rejects"):
            client.wait(60)


def _fail_when_exists(path: str):
    def check(row):
        if os.path.exists(path):
            raise ValueError(f"rest test found {path}")
        return row

    return check


def test_a_failed_job_reads_failing_until_the_commit_in_flight_decided_its_checkpoint(tmp_path, monkeypatch):
    """Tasks end while checkpoint 2 commits: the job reads FAILING (REST and client) until the commit
    returned, then FAILED with that checkpoint COMPLETED and none in progress."""
    committing, release = threading.Event(), threading.Event()
    commit = CheckpointCommitter.commit

    def held_commit(self, job_id, checkpoint_id, *args, **kwargs):
        if checkpoint_id == 2:
            committing.set()
            release.wait(60)
        return commit(self, job_id, checkpoint_id, *args, **kwargs)

    monkeypatch.setattr(CheckpointCommitter, "commit", held_commit)
    env = StreamExecutionEnvironment.get_execution_environment(_config(**{
        "restart-strategy.type": "none", "execution.checkpointing.interval": "100ms",
        "execution.checkpointing.dir": f"file://{tmp_path}/chk"}))  # fmt: skip
    flag = tmp_path / "fail-now"
    source = SequenceSource(num_keys=2, records_per_key=None, rows_per_second=200)
    env.from_source(source, source_name="seq").map(_fail_when_exists(str(flag))).sink_to(CollectSink("never"))
    client = env.execute_async("rest failing")
    base, job_id = client.web_interface_url, client.job_id
    try:
        assert committing.wait(60)
        flag.touch()
        wait_for("FAILING", lambda: client.get_job_status().name == "FAILING")
        time.sleep(0.5)  # every task has ended by now: only the commit holds the job back
        assert client.get_job_status().name == "FAILING"
        assert get(f"{base}/jobs/{job_id}")["state"] == "FAILING"
        release.set()
        wait_for("FAILED", lambda: client.get_job_status().name == "FAILED")
        checkpoints = get(f"{base}/jobs/{job_id}/checkpoints")
        assert checkpoints["counts"]["in_progress"] == 0
        assert get(f"{base}/jobs/{job_id}/checkpoints/details/2")["status"] == "COMPLETED"
    finally:
        release.set()
        with pytest.raises(JobExecutionError, match="rest test found"):
            client.wait(60)
