"""``flinklike checkpoints`` and ``flinklike inspect``: history and stored state from the command line.

These tests write checkpoint tables directly with
:mod:`tests.support.checkpoint_tables`; the ones that read the checkpoints of a
real job on the embedded cluster are tests/integration/test_cli_inspect_real_job.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from deltalake import DeltaTable

from checkpointing import inspect as cp_inspect
from flinklike_spark.cli import main
from tests.support.checkpoint_tables import JOB, UID, complete
from tests.support.cli import CHANNEL_COLUMNS, STATE_COLUMNS, cli, column, header

# --- checkpoint tables written directly ---------------------------------------------------


@pytest.mark.timeout(60)
def test_missing_path_file_and_foreign_directory_are_errors_naming_the_path(capsys, tmp_path):
    missing = tmp_path / "nope"
    assert cli(capsys, "checkpoints", missing) == (
        2,
        "",
        f"flinklike checkpoints: error: checkpoint directory {str(missing)!r} does not exist\n",
    )
    code, _, err = cli(capsys, "inspect", missing, "--checkpoint", 1, "--operator", UID)
    assert code == 2 and "does not exist" in err and str(missing) in err
    a_file = tmp_path / "file"
    a_file.write_text("x")
    code, _, err = cli(capsys, "checkpoints", a_file)
    assert code == 2 and f"{str(a_file)!r} is not a directory" in err
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "data.csv").write_text("a,b\n")
    code, out, err = cli(capsys, "checkpoints", tmp_path / "other")
    assert (code, out) == (2, "")
    assert f"{str(tmp_path / 'other')!r} holds no checkpoint tables" in err and "Traceback" not in err


@pytest.mark.timeout(60)
def test_empty_directory_has_no_completed_checkpoints(capsys, tmp_path):
    assert cli(capsys, "checkpoints", tmp_path) == (0, "no completed checkpoints\n", "")
    code, _, err = cli(capsys, "inspect", tmp_path, "--checkpoint", 1, "--operator", UID)
    assert code == 2 and "holds no checkpoints" in err


@pytest.mark.timeout(60)
def test_channel_state_rows_without_payload(capsys, base):
    complete(base, 1)
    code, out, err = cli(capsys, "inspect", base, "--checkpoint", 1, "--operator", UID, "--channel-state")
    assert (code, err) == (0, "")
    assert header(out) == CHANNEL_COLUMNS
    # per subtask: 3 input buffers of 2, 3, 4 rows, then one output buffer of 1 row
    assert column(out, "direction") == ["input"] * 3 + ["output"] + ["input"] * 3 + ["output"]
    assert column(out, "rows") == ["2", "3", "4", "1"] * 2
    code, out, _ = cli(
        capsys, "inspect", base, "--checkpoint", 1, "--operator", UID, "--channel-state", "--format", "json"
    )
    rows = json.loads(out)
    assert code == 0 and len(rows) == 8 and "payload" not in rows[0] and rows[0]["payload_bytes"] > 0


@pytest.mark.timeout(60)
def test_operator_state_shows_keyed_and_operator_state(capsys, base):
    complete(base, 1)
    code, out, _ = cli(capsys, "inspect", base, "--checkpoint", 1, "--operator", UID)
    assert code == 0 and header(out) == STATE_COLUMNS
    lines = out.splitlines()
    assert len(lines) == 1 + 2 * 8 + 2  # header, count + seen for 8 key groups, 2 offsets rows
    assert lines[1].split() == ["0", "-1", "offsets", "source_split", "'split-0'", "100"]
    assert "'k3'" in column(out, "key_repr") and "[3, 1]" in out  # list state value_repr


@pytest.mark.timeout(60)
def test_jobs_sharing_a_directory(capsys, base):
    complete(base, 1, job="job-a")
    complete(base, 1, job="job-b")
    complete(base, 2, job="job-b")
    code, out, _ = cli(capsys, "checkpoints", base)
    assert code == 0 and list(zip(column(out, "JOB"), column(out, "ID"))) == [
        ("job-a", "1"),
        ("job-b", "1"),
        ("job-b", "2"),
    ]
    # rows of several jobs: a job_id column is added
    code, out, _ = cli(capsys, "inspect", base, "--checkpoint", 1, "--operator", UID)
    assert code == 0 and header(out) == ["job_id", *STATE_COLUMNS]
    assert set(column(out, "job_id")) == {"job-a", "job-b"}
    code, out, _ = cli(capsys, "inspect", base, "--checkpoint", 1, "--operator", UID, "--job", "job-b")
    assert code == 0 and header(out) == STATE_COLUMNS and len(out.splitlines()) == 19

    code, _, err = cli(capsys, "inspect", base, "--checkpoint", 2, "--operator", UID, "--job", "job-a")
    assert code == 2 and err.rstrip().endswith(
        "checkpoint 2 of job 'job-a' not found in " + repr(base) + "; existing checkpoint ids: 1"
    )
    code, _, err = cli(capsys, "inspect", base, "--checkpoint", 7, "--operator", UID)
    assert code == 2 and err.rstrip().endswith("existing checkpoint ids: 1 (job job-a); 1, 2 (job job-b)")
    code, _, err = cli(capsys, "inspect", base, "--checkpoint", 1, "--operator", UID, "--job", "job-c")
    assert code == 2 and "holds no checkpoints of job 'job-c'; job ids there: job-a, job-b" in err

    assert cli(capsys, "checkpoints", base, "--job", "job-c") == (
        0,
        "no completed checkpoints\n",
        f"(of job 'job-c'; jobs in {base!r}: job-a, job-b)\n",
    )


@pytest.mark.timeout(60)
def test_checkpoint_without_completion_row_is_inspectable(capsys, base):
    complete(base, 1)
    complete(base, 2)
    DeltaTable(f"{base}/checkpoints").delete("checkpoint_id = 2")  # as if the commit failed at its last step
    code, out, _ = cli(capsys, "checkpoints", base)
    assert code == 0 and column(out, "ID") == ["1"]
    code, out, _ = cli(capsys, "inspect", base, "--checkpoint", 2, "--operator", UID)
    assert code == 0 and len(out.splitlines()) == 19
    code, _, err = cli(capsys, "inspect", base, "--checkpoint", 3, "--operator", UID)
    assert code == 2 and err.rstrip().endswith("existing checkpoint ids: 1, 2 (not completed)")


@pytest.mark.timeout(60)
def test_corrupt_checkpoint_is_an_error_naming_the_file(capsys, base):
    complete(base, 1)
    [victim, *_] = sorted(Path(base, "operator_state").rglob("*.parquet"))
    victim.unlink()
    code, out, err = cli(capsys, "inspect", base, "--checkpoint", 1, "--operator", UID)
    assert (code, out) == (1, "")
    assert err.startswith("flinklike inspect: error: CorruptCheckpointError: checkpoint 1 of job 'job-1'")
    assert victim.name in err and "is missing" in err and "Traceback" not in err


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["checkpoints", "DIR", "--job", "../x"], "invalid job_id '../x'"),
        (["inspect", "DIR", "--checkpoint", "-1", "--operator", UID], "expected an integer >= 0, got '-1'"),
        (["inspect", "DIR", "--checkpoint", "one", "--operator", UID], "expected an integer >= 0, got 'one'"),
        (["inspect", "DIR", "--checkpoint", "1", "--operator", UID, "--limit", "0"], "integer >= 1"),
        (["inspect", "DIR", "--checkpoint", "1"], "--operator"),
        (["inspect", "DIR", "--checkpoint", "1", "--operator", UID, "--format", "csv"], "'csv'"),
    ],
)
def test_bad_arguments_are_usage_errors(capsys, base, args, message):
    with pytest.raises(SystemExit) as exit_:
        main([base if a == "DIR" else a for a in args])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.timeout(60)
def test_format_rows_aligns_numbers_right_and_blanks_nulls():
    import pyarrow as pa

    table = pa.table({"name": ["a", None], "n": [5, 123]})
    assert cp_inspect.format_rows(table) == "name    n\na       5\n      123"
    assert cp_inspect.format_table(["A", "BB"], [("xyz", "1")], right={1}) == "A    BB\nxyz   1"


@pytest.mark.timeout(60)
def test_history_of_helper_checkpoints(capsys, base):
    complete(base, 1)
    complete(base, 2, kind="savepoint")
    code, out, _ = cli(capsys, "checkpoints", base)
    assert code == 0 and column(out, "KIND") == ["checkpoint", "savepoint"]
    assert set(column(out, "JOB")) == {JOB} and "1.5 s" in out
