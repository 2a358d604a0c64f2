"""``flinklike checkpoints`` and ``flinklike inspect`` on the checkpoints of a real keyed job.

The job runs once per module on the embedded cluster (TaskExecutor processes):
3 unaligned checkpoints and a final savepoint. The CLI tests on checkpoint
tables written directly are tests/unit/checkpointing/test_cli_inspect.py.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from checkpointing import inspect as cp_inspect
from checkpointing import list_completed_checkpoints
from connectors import CollectSink, SequenceSource
from flinklike_spark import KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor
from flinklike_spark.errors import JobExecutionError
from tests.support.cli import CHANNEL_COLUMNS, STATE_COLUMNS, cli, column, header

pytestmark = [pytest.mark.slow]

NUM_KEYS = 4


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

    code, out, _ = cli(
        capsys, "inspect", directory, "--checkpoint", savepoint, "--operator", "counter", "--format", "json"
    )
    counts = json.loads(out)
    assert code == 0 and {r["operator_uid"] for r in counts} == {"counter"}
    assert "key" not in counts[0] and "value" not in counts[0]
    code, out, _ = cli(capsys, "inspect", directory, "--checkpoint", savepoint, "--operator", "seq", "--format", "json")
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
    code, out, err = cli(
        capsys, "inspect", directory, "--checkpoint", unaligned.checkpoint_id, "--operator", uid, "--channel-state"
    )
    assert (code, err) == (0, "")
    assert header(out) == CHANNEL_COLUMNS
    assert all(int(n) > 0 for n in column(out, "payload_bytes"))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_limit(capsys, real_job):
    directory, _, completed = real_job
    code, out, err = cli(
        capsys, "inspect", directory, "--checkpoint", completed[-1].checkpoint_id, "--operator", "counter", "--limit", 2
    )
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
    code, _, err = cli(
        capsys, "inspect", directory, "--checkpoint", savepoint, "--operator", "counter", "--channel-state"
    )
    assert code == 2
    assert "operators with channel_state rows there: none (aligned checkpoints" in err
