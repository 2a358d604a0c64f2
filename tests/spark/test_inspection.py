"""Spark SQL inspection helpers agree with what the engine's own readers say about a job's checkpoints.

A keyed job with unaligned checkpoints under backpressure (a slow keyed
stage) leaves keyed state and in-flight channel state in its checkpoints;
``flinklike_spark.spark``'s helpers read them with ``spark.read.format("delta")``.
"""

from __future__ import annotations

import time

import pytest

from checkpointing import decode_operator_state, list_completed_checkpoints, read_channel_state, read_operator_state
from connectors import DeltaSink, SequenceSource
from flinklike_spark import KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor
from flinklike_spark.errors import CheckpointFailedError, CheckpointNotFoundError, JobCancelledError
from flinklike_spark.spark import channel_state, checkpoint_history, keyed_state, operator_state_as_of

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(600)]

KEYS = 6


class SlowCount(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        time.sleep(0.002)  # backpressure: buffers queue up in front of this stage
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield {"key": value["key"], "count": count}


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    base = tmp_path_factory.mktemp("inspect")
    env = StreamExecutionEnvironment.get_execution_environment(
        {
            "parallelism.default": 2,
            "execution.checkpointing.interval": "100 ms",
            "execution.checkpointing.unaligned.enabled": True,
            "execution.checkpointing.dir": str(base / "job"),
            "execution.checkpointing.num-retained": 50,
        }
    )
    (
        env.from_source(SequenceSource(num_keys=KEYS, records_per_key=1_000, rows_per_second=3_000), name="seq").uid("seq")
        .key_by("key").process(SlowCount()).uid("counter")
        .sink_to(DeltaSink(base / "out")).uid("out")
    )  # fmt: skip
    result = env.execute("inspected")
    return result.job_id, base / "job"


def test_checkpoint_history(spark, job):
    job_id, directory = job
    history = checkpoint_history(spark, directory).collect()
    assert [r.checkpoint_id for r in history] == [c.checkpoint_id for c in list_completed_checkpoints(directory)]
    assert {r.job_id for r in history} == {job_id}
    assert {r.mode for r in history} <= {"unaligned", "aligned"}


def test_keyed_state_per_key_matches_the_engines_reader(spark, job):
    job_id, directory = job
    completed = list_completed_checkpoints(directory)
    for checkpoint in (completed[0], completed[-1]):
        rows = keyed_state(spark, directory, "counter", "count", checkpoint_id=checkpoint.checkpoint_id).collect()
        engine = {
            str(e.key): str(e.value)
            for e in decode_operator_state(
                read_operator_state(directory, job_id, checkpoint.checkpoint_id, "counter", keyed=True)
            )
        }
        assert {r.key: r.value for r in rows} == engine
    # The first checkpoint may come before any record reached the counter; the last cannot.
    assert engine, f"checkpoint {completed[-1].checkpoint_id} should hold counts"


def test_channel_state_per_channel_matches_the_engines_reader(spark, job):
    job_id, directory = job
    with_channel_state = [c for c in list_completed_checkpoints(directory) if c.channel_state_bytes > 0]
    assert with_channel_state, "the slow stage should leave in-flight data in some unaligned checkpoint"
    checkpoint = with_channel_state[-1]
    rows = channel_state(spark, directory, checkpoint_id=checkpoint.checkpoint_id).collect()
    found = {(r.operator_uid, r.subtask, r.direction, r.gate, r.channel): (r.buffers, r.rows) for r in rows}
    expected: dict = {}
    for uid in checkpoint.operator_uids:
        for subtask in range(2):
            for direction in ("input", "output"):
                for buffer in read_channel_state(directory, job_id, checkpoint.checkpoint_id, uid, subtask, direction):
                    key = (uid, subtask, direction, buffer.gate, buffer.channel)
                    buffers, count = expected.get(key, (0, 0))
                    expected[key] = (buffers + 1, count + buffer.batch.num_rows)
    assert found == expected and found


def test_time_travel_to_an_older_checkpoint(spark, job):
    job_id, directory = job
    completed = list_completed_checkpoints(directory)
    older = completed[len(completed) // 2]
    then = operator_state_as_of(spark, directory, older.checkpoint_id)
    ids = {r.checkpoint_id for r in then.select("checkpoint_id").distinct().collect()}
    assert older.checkpoint_id in ids
    assert max(ids) == older.checkpoint_id, "the table as of an older checkpoint holds no newer checkpoint"
    now = {
        r.checkpoint_id
        for r in spark.read.format("delta")
        .load(f"{directory}/operator_state")
        .select("checkpoint_id")
        .distinct()
        .collect()
    }
    assert max(now) > older.checkpoint_id


def test_an_unknown_checkpoint_names_the_ones_that_exist(spark, job, tmp_path):
    job_id, directory = job
    ids = ", ".join(str(c.checkpoint_id) for c in list_completed_checkpoints(directory))
    with pytest.raises(CheckpointNotFoundError) as missing:
        keyed_state(spark, directory, "counter", checkpoint_id=10**6)
    assert str(missing.value) == (
        f"no completed checkpoint 1000000 in {str(directory)!r}; completed checkpoints and savepoints there: "
        f"{ids} of job {job_id}"
    )
    other = "0" * 32
    with pytest.raises(CheckpointNotFoundError, match=rf"^no completed checkpoint of job {other} in .*; completed "):
        channel_state(spark, directory, job_id=other)

    # A savepoint is listed as one.
    env = StreamExecutionEnvironment.get_execution_environment(
        {"execution.checkpointing.dir": str(tmp_path / "sp"), "execution.checkpointing.interval": "1 h"}
    )
    env.from_source(SequenceSource(num_keys=2, records_per_key=10**6, rows_per_second=100), name="seq").sink_to(
        DeltaSink(tmp_path / "out")
    )
    client = env.execute_async("savepointed")
    deadline = time.monotonic() + 120
    while True:  # a savepoint needs every task running
        try:
            savepoint = client.stop_with_savepoint(timeout=120)
            break
        except CheckpointFailedError:
            assert time.monotonic() < deadline, "no savepoint could be taken"
            time.sleep(0.2)
    with pytest.raises(JobCancelledError, match="cancelled by stop-with-savepoint"):
        client.wait(60)
    with pytest.raises(CheckpointNotFoundError) as only_savepoint:
        keyed_state(spark, tmp_path / "sp", "counter", checkpoint_id=7)
    assert str(only_savepoint.value).endswith(
        f"completed checkpoints and savepoints there: {savepoint.checkpoint_id} (savepoint) of job {client.job_id}"
    ), str(only_savepoint.value)
