"""``flinklike checkpoints`` and ``flinklike inspect``: history and stored state from the command line.

The ``real_job`` tests read a checkpoint directory written by a real keyed job
on the embedded cluster (run once per module); the others write checkpoint
tables directly with :mod:`ckpt_helpers`.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from checkpointing import inspect as cp_inspect
from checkpointing import list_completed_checkpoints
from connectors import CollectSink, SequenceSource
from flinklike_spark import KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor
from flinklike_spark.cli import main
from flinklike_spark.errors import JobExecutionError
from tests.support.checkpoint_tables import JOB, UID, complete

NUM_KEYS = 4
STATE_COLUMNS = ["subtask", "key_group", "state_name", "state_kind", "key_repr", "value_repr"]
CHANNEL_COLUMNS = ["subtask", "direction", "gate", "channel", "sequence", "rows", "payload_bytes"]


def cli(capsys, *args: str) -> tuple[int, str, str]:
    """Run ``flinklike ARGS`` in-process; return (exit code, stdout, stderr)."""
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def header(out: str) -> list[str]:
    return out.splitlines()[0].split()


def column(out: str, name: str) -> list[str]:
    """Cells of a column of a fixed-width table whose cells contain no blanks."""
    index = header(out).index(name)
    return [line.split()[index] for line in out.splitlines()[1:]]


# --- a real job ------------------------------------------------------------------------------


class Counter(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield {"key": value["key"], "count": count}


@pytest.fixture(scope="module")
def real_job(tmp_path_factory):
    """A directory with 3 unaligned checkpoints and a final savepoint of a keyed counting job.

    Returns ``(directory, job_id, completed checkpoints oldest first)``.
    """
    directory = str(tmp_path_factory.mktemp("cli") / "checkpoints")
    env = StreamExecutionEnvironment.get_execution_environment(
        {
            "parallelism.default": 2,
            "execution.checkpointing.interval": "100ms",
            "execution.checkpointing.dir": directory,
            "execution.checkpointing.num-retained": 3,
            "execution.checkpointing.unaligned.enabled": True,
        }
    )
    source = SequenceSource(num_keys=NUM_KEYS, records_per_key=None, rows_per_second=2000, key_type="str")
    (
        env.from_source(source, name="seq")
        .uid("seq")
        .key_by("key")
        .process(Counter())
        .uid("counter")
        .sink_to(CollectSink("counts"))
    )
    client = env.execute_async("cli inspect")
    deadline = time.monotonic() + 60
    while len(list_completed_checkpoints(directory, client.job_id)) < 3:
        assert not client.done(), "the job ended before it checkpointed"
        assert time.monotonic() < deadline, "no 3 completed checkpoints within 60 s"
        time.sleep(0.05)
    client.stop_with_savepoint(timeout=60)
    with pytest.raises(JobExecutionError):
        client.wait(60)
    return directory, client.job_id, list_completed_checkpoints(directory, client.job_id)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_history_of_a_real_job(capsys, real_job):
    directory, job_id, completed = real_job
    code, out, err = cli(capsys, "checkpoints", directory)
    assert (code, err) == (0, "")
    assert header(out)[:4] == ["JOB", "ID", "KIND", "MODE"]
    assert [int(i) for i in column(out, "ID")] == [c.checkpoint_id for c in completed]
    assert column(out, "KIND") == ["checkpoint"] * (len(completed) - 1) + ["savepoint"]
    assert column(out, "MODE")[-1] == "aligned" and set(column(out, "MODE")[:-1]) == {"unaligned"}
    assert set(column(out, "JOB")) == {job_id}
    assert cli(capsys, "checkpoints", directory, "--job", job_id) == (0, out, "")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_counter_state_of_the_savepoint_matches_the_source_positions(capsys, real_job):
    directory, _, completed = real_job
    savepoint = completed[-1].checkpoint_id
    code, out, err = cli(capsys, "inspect", directory, "--checkpoint", savepoint, "--operator", "counter")
    assert (code, err) == (0, "")
    assert header(out) == STATE_COLUMNS  # no job_id (one job), no pickled key/value
    assert sorted(column(out, "key_repr")) == [f"'k{k}'" for k in range(NUM_KEYS)]
    assert set(column(out, "state_name")) == {"count"} and set(column(out, "state_kind")) == {"value"}

    code, out, _ = cli(capsys, "inspect", directory, "--checkpoint", savepoint, "--operator", "counter",
                       "--format", "json")
    counts = json.loads(out)
    assert code == 0 and {r["operator_uid"] for r in counts} == {"counter"}
    assert "key" not in counts[0] and "value" not in counts[0]
    code, out, _ = cli(capsys, "inspect", directory, "--checkpoint", savepoint, "--operator", "seq",
                       "--format", "json")
    splits = json.loads(out)
    assert code == 0 and [r["state_kind"] for r in splits] == ["source_split", "source_split"]
    emitted = sum(int(re.search(r"next_row=(\d+)", r["value_repr"]).group(1)) for r in splits)
    # an aligned savepoint is a consistent cut: every emitted row was counted, once
    assert sum(int(r["value_repr"]) for r in counts) == emitted > 0


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_channel_state_of_an_unaligned_checkpoint(capsys, real_job):
    directory, _, completed = real_job
    unaligned = max(completed, key=lambda c: c.channel_state_bytes)
    assert unaligned.mode == "unaligned" and unaligned.channel_state_bytes > 0
    [uid, *_] = cp_inspect.channel_state(directory, unaligned.checkpoint_id)["operator_uid"].to_pylist()
    code, out, err = cli(capsys, "inspect", directory, "--checkpoint", unaligned.checkpoint_id,
                         "--operator", uid, "--channel-state")
    assert (code, err) == (0, "")
    assert header(out) == CHANNEL_COLUMNS
    assert all(int(n) > 0 for n in column(out, "payload_bytes"))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_limit(capsys, real_job):
    directory, _, completed = real_job
    code, out, err = cli(capsys, "inspect", directory, "--checkpoint", completed[-1].checkpoint_id,
                         "--operator", "counter", "--limit", 2)
    assert code == 0 and len(out.splitlines()) == 3
    assert err.strip() == f"(showing 2 of {NUM_KEYS} rows)"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_unknown_checkpoint_id_lists_the_existing_ones(capsys, real_job):
    directory, _, completed = real_job
    code, out, err = cli(capsys, "inspect", directory, "--checkpoint", 999, "--operator", "counter")
    assert (code, out) == (2, "")
    ids = ", ".join(str(c.checkpoint_id) for c in completed)
    assert err.strip() == (
        f"flinklike inspect: error: checkpoint 999 not found in {directory!r}; existing checkpoint ids: {ids}"
    )


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_unknown_operator_lists_the_operators_of_the_checkpoint(capsys, real_job):
    directory, _, completed = real_job
    savepoint = completed[-1].checkpoint_id
    code, out, err = cli(capsys, "inspect", directory, "--checkpoint", savepoint, "--operator", "countr")
    assert (code, out) == (2, "")
    assert f"operator 'countr' has no operator_state rows in checkpoint {savepoint}" in err
    assert "operators with operator_state rows there: counter, seq" in err
    code, _, err = cli(capsys, "inspect", directory, "--checkpoint", savepoint, "--operator", "counter",
                       "--channel-state")
    assert code == 2
    assert "operators with channel_state rows there: none (aligned checkpoints" in err


# --- checkpoint tables written directly ---------------------------------------------------


@pytest.mark.timeout(60)
def test_missing_path_file_and_foreign_directory_are_errors_naming_the_path(capsys, tmp_path):
    missing = tmp_path / "nope"
    assert cli(capsys, "checkpoints", missing) == (
        2, "", f"flinklike checkpoints: error: checkpoint directory {str(missing)!r} does not exist\n"
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
    code, out, _ = cli(capsys, "inspect", base, "--checkpoint", 1, "--operator", UID, "--channel-state",
                       "--format", "json")
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
        ("job-a", "1"), ("job-b", "1"), ("job-b", "2"),
    ]
    # rows of several jobs: a job_id column is added
    code, out, _ = cli(capsys, "inspect", base, "--checkpoint", 1, "--operator", UID)
    assert code == 0 and header(out) == ["job_id", *STATE_COLUMNS]
    assert set(column(out, "job_id")) == {"job-a", "job-b"}
    code, out, _ = cli(capsys, "inspect", base, "--checkpoint", 1, "--operator", UID, "--job", "job-b")
    assert code == 0 and header(out) == STATE_COLUMNS and len(out.splitlines()) == 19

    code, _, err = cli(capsys, "inspect", base, "--checkpoint", 2, "--operator", UID, "--job", "job-a")
    assert code == 2 and err.rstrip().endswith("checkpoint 2 of job 'job-a' not found in " + repr(base)
                                               + "; existing checkpoint ids: 1")
    code, _, err = cli(capsys, "inspect", base, "--checkpoint", 7, "--operator", UID)
    assert code == 2 and err.rstrip().endswith("existing checkpoint ids: 1 (job job-a); 1, 2 (job job-b)")
    code, _, err = cli(capsys, "inspect", base, "--checkpoint", 1, "--operator", UID, "--job", "job-c")
    assert code == 2 and "holds no checkpoints of job 'job-c'; job ids there: job-a, job-b" in err

    assert cli(capsys, "checkpoints", base, "--job", "job-c") == (
        0, "no completed checkpoints\n", f"(of job 'job-c'; jobs in {base!r}: job-a, job-b)\n"
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
