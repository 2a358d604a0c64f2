"""The writer's hand-off through the job record: a run requests the job, an owner takes it, the run reads its status."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("pyspark", reason="writer_jobs is a Spark listener (the [spark] or [test] extra)")

from flinklike_spark.spark.job_record_table import JobRecord, JobRecordTable, ProcessId, RunnerState  # noqa: E402
from flinklike_spark.spark.job_runner import BridgeJobError, JobSpec  # noqa: E402
from flinklike_spark.spark.writer_jobs import RunState, RunStatus, request_job, run_status  # noqa: E402

pytestmark = pytest.mark.timeout(60)


def spec_for(directory, run_id: str) -> JobSpec:
    return JobSpec(pipeline="tests.spark.pipelines:fed_count", config={"execution.checkpointing.dir": str(directory)},
                   schema=None, directory=str(directory), run_id=run_id)  # fmt: skip


def take(table: JobRecordTable, owner: ProcessId) -> None:
    table.update(lambda r: dataclasses.replace(r, request=dataclasses.replace(r.request, owner=owner)))


def test_a_run_waits_for_another_runs_open_request_and_then_names_it(tmp_path):
    table = JobRecordTable(str(tmp_path))
    request_job(table, spec_for(tmp_path, "run-a"), claim_timeout=1)
    take(table, ProcessId.current())  # run a's owner (this process) runs its job
    with pytest.raises(BridgeJobError, match=r"is run for query run run-a \(driver pid \d+ on .*\); one running"):
        request_job(table, spec_for(tmp_path, "run-b"), claim_timeout=0.5)
    assert table.read().request.run_id == "run-a"
    table.update(lambda r: dataclasses.replace(r, request=dataclasses.replace(r.request, ended=True)))  # a stopped
    request_job(table, spec_for(tmp_path, "run-b"), claim_timeout=0.5)
    request = table.read().request
    assert (request.run_id, request.owner, request.ended) == ("run-b", None, False)
    assert spec_for(tmp_path, "run-b") == JobSpec.from_json(request.spec)


def test_a_request_whose_owner_died_is_replaced_at_once(tmp_path):
    table = JobRecordTable(str(tmp_path))
    request_job(table, spec_for(tmp_path, "run-a"), claim_timeout=1)
    me = ProcessId.current()
    take(table, dataclasses.replace(me, started=me.started - 100))  # a driver that is gone (its pid reused)
    request_job(table, spec_for(tmp_path, "run-b"), claim_timeout=0)
    assert table.read().request.run_id == "run-b"


def test_the_run_status_follows_the_request_and_the_runner(tmp_path):
    table = JobRecordTable(str(tmp_path))
    assert run_status(table.read(), "run-a") is None
    request_job(table, spec_for(tmp_path, "run-a"), claim_timeout=1)
    assert run_status(table.read(), "run-a") is None  # no owner took it yet
    take(table, ProcessId.current())
    assert run_status(table.read(), "run-a").state is RunState.STARTING
    runner = ProcessId.current()
    table.update(lambda r: dataclasses.replace(r, pid=runner.pid, host=runner.host, started=runner.started,
                                               state=RunnerState.RUNNING, run_id="run-a"))  # fmt: skip
    assert run_status(table.read(), "run-a").state is RunState.RUNNING
    assert run_status(table.read(), "run-b") is None
    table.update(lambda r: dataclasses.replace(r, request=dataclasses.replace(r.request, error="boom")))
    assert run_status(table.read(), "run-a") == RunStatus(state=RunState.FAILED, error="boom")
    assert JobRecord.from_json(table.read().to_json()) == table.read()
