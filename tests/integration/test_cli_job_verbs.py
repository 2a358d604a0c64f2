"""``flinklike list / savepoint / stop / cancel / rescale`` against a running job's REST API, as Flink's CLI verbs.

The job is the keyed exact-count job (each key's ``seq`` once and in order, or it fails): its savepoint taken
by ``stop`` resumes to the exact final count per key.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from checkpointing import list_completed_checkpoints
from connectors import CollectSink
from flinklike_spark.errors import JobCancelledError
from tests.support.checkpoint_jobs import checkpoint_config
from tests.support.cli import cli
from tests.support.exact_count_job import NUM_KEYS, RECORDS_PER_KEY, build, resume

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _running(tmp_path: Path, name: str, **extra):
    directory = str(tmp_path / f"checkpoints-{name.replace(' ', '-')}")
    config = checkpoint_config(directory, "aligned") | {"rest.port": 0, **extra}
    client = build(config, seconds_per_record=0.002).execute_async(name)
    deadline = time.monotonic() + 120
    while not list_completed_checkpoints(directory, client.job_id):
        assert not client.done() and time.monotonic() < deadline, "no checkpoint completed"
        time.sleep(0.1)
    return client, directory, client.web_interface_url


def _path(out: str) -> str:
    match = re.search(r"Savepoint completed\. Path: (.+)", out)
    assert match, out
    return match.group(1)


def test_list_savepoint_and_stop_with_a_savepoint_that_resumes_exactly(tmp_path, capsys):
    client, directory, address = _running(tmp_path, "cli verbs")
    try:
        code, out, err = cli(capsys, "list", "-m", address)
        assert code == 0, err
        assert re.search(rf"\d\d\.\d\d\.\d{{4}} \d\d:\d\d:\d\d : {client.job_id} : cli verbs \(RUNNING\)", out), out
        assert "No scheduled jobs." in out

        code, out, err = cli(capsys, "savepoint", "-m", address, client.job_id)
        assert code == 0, err
        assert out.startswith(f"Triggering savepoint for job {client.job_id}.")
        assert _path(out).startswith(directory)

        copies = tmp_path / "copies"
        code, out, err = cli(capsys, "savepoint", "-m", address, client.job_id, copies)
        assert code == 0, err
        assert _path(out).startswith(str(copies)) and Path(_path(out)).exists()

        code, out, err = cli(capsys, "stop", "-m", address, "--savepointPath", directory, client.job_id)
        assert code == 0, err
        assert out.startswith(f'Suspending job "{client.job_id}" with a CANONICAL savepoint.')
        stopped_at = _path(out)
        with pytest.raises(JobCancelledError, match="cancelled by stop-with-savepoint"):
            client.wait(60)  # the job ends with its savepoint
    finally:
        if not client.done():
            client.cancel()

    config = checkpoint_config(str(tmp_path / "resumed"), "aligned") | {"execution.state-recovery.path": stopped_at}
    result = build(config, seconds_per_record=0).execute("resumed from the CLI's savepoint")
    assert {row["key"]: row["count"] for row in CollectSink.rows(result)} == dict.fromkeys(
        range(NUM_KEYS), RECORDS_PER_KEY
    )


def test_cancel_and_the_errors_for_an_unknown_job_or_cluster(tmp_path, capsys):
    client, _directory, address = _running(tmp_path, "to cancel")
    try:
        code, out, err = cli(capsys, "cancel", "-m", address, "0" * 32)
        assert code == 1 and "The job was not found" in err and "0" * 32 in err, (out, err)
        code, out, err = cli(capsys, "stop", "-m", address, "--drain", client.job_id)
        assert code == 1 and "drain" in err, (out, err)

        code, out, err = cli(capsys, "cancel", "-m", address, client.job_id)
        assert code == 0, err
        assert out.splitlines() == [f"Cancelling job {client.job_id}.", f"Cancelled job {client.job_id}."]
        with pytest.raises(JobCancelledError):
            client.wait(60)
    finally:
        if not client.done():
            client.cancel()

    # the embedded cluster of a job ends with it, its REST API too
    code, out, err = cli(capsys, "list", "-m", address)
    assert code == 1 and f"Could not reach the cluster's REST API at {address}" in err, err


def test_rescale_changes_a_running_jobs_parallelism_and_its_state_goes_on_exactly(tmp_path, capsys):
    client, directory, address = _running(
        tmp_path, "to rescale", **{"jobmanager.scheduler": "adaptive", "taskmanager.numberOfTaskSlots": 2}
    )
    try:
        code, out, err = cli(capsys, "rescale", "-m", address, client.job_id, "-p", "3")
        assert code == 0, err
        pattern = rf"Rescaled job {client.job_id} to \{{'seq': 3, 'count': 3\}} in \d+ ms \(through checkpoint \d+\)\."
        assert re.search(pattern, out), out
        code, out, err = cli(capsys, "rescale", "-m", address, client.job_id, "-p", "3")
        assert code == 0 and "keeps its parallelism" in out, (out, err)
        code, out, err = cli(capsys, "rescale", "-m", address, client.job_id, "--vertex", "nope=2")
        assert code == 1 and "--vertex 'nope=2': expected VERTEX_ID=N with one of ['count', 'seq']" in err, err
        code, out, err = cli(capsys, "rescale", "-m", address, client.job_id, "-p", "9")
        assert code == 0 and "Rescaled job" in out and "'count': 4" in out, (out, err)  # 4 slots
        client.cancel()
        with pytest.raises(JobCancelledError):
            client.wait(60)
    finally:
        if not client.done():
            client.cancel()
    # the keyed counts went on through both rescales: resumed to the end, each key counts every record once
    assert resume(directory, "aligned") == dict.fromkeys(range(NUM_KEYS), RECORDS_PER_KEY)
