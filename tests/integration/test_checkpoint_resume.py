"""Exactly-once across stop and resume: keyed state, source positions and in-flight data.

A keyed job with a slow stage after ``key_by`` (so there is backpressure and
data in flight) is cancelled after a few completed checkpoints and resumed
from the latest one. The counting function checks, per key, that every
``seq`` arrives exactly once and in order (it raises otherwise, failing the
job), and the final count per key must be exactly ``records_per_key``.
"""

from __future__ import annotations

import time

import pytest

from checkpointing import list_completed_checkpoints, read_channel_state
from connectors import CollectSink, SequenceSource
from flinklike_spark import KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor
from flinklike_spark.errors import IncompatibleCheckpointError
from tests.support.checkpoint_jobs import checkpoint_config, run_and_cancel
from tests.support.exact_count_job import END_OF_TIME, NUM_KEYS, RECORDS_PER_KEY, SlowExactCount, build, resume

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.mark.parametrize("mode", ["aligned", "unaligned", "aligned-with-timeout"])
def test_exactly_once_across_stop_and_resume(tmp_path, mode):
    directory = str(tmp_path / "checkpoints")
    job_id = run_and_cancel(build(checkpoint_config(directory, mode)), directory, checkpoints=3)
    latest = list_completed_checkpoints(directory, job_id)[-1]
    counts = resume(directory, mode)
    assert counts == {key: RECORDS_PER_KEY for key in range(NUM_KEYS)}
    if mode == "aligned":
        assert latest.mode == "aligned" and latest.channel_state_bytes == 0


@pytest.mark.parametrize(("first", "then"), [("rocksdb", "rocksdb"), ("rocksdb", "hashmap"), ("hashmap", "rocksdb")])
def test_exactly_once_across_stop_and_resume_on_and_between_state_backends(tmp_path, first, then):
    pytest.importorskip("rocksdict")
    directory = str(tmp_path / "checkpoints")
    config = checkpoint_config(directory, "unaligned") | {"state.backend.type": first}
    run_and_cancel(build(config), directory, checkpoints=3)
    config = checkpoint_config(directory, "unaligned") | {
        "execution.state-recovery.path": directory,
        "state.backend.type": then,
    }
    result = build(config, seconds_per_record=0).execute("resumed")
    counts = {row["key"]: row["count"] for row in CollectSink.rows(result)}
    assert counts == {key: RECORDS_PER_KEY for key in range(NUM_KEYS)}


def test_restore_at_a_different_parallelism(tmp_path):
    directory = str(tmp_path / "checkpoints")
    run_and_cancel(build(checkpoint_config(directory, "unaligned")), directory, checkpoints=3)
    assert resume(directory, "unaligned", parallelism=3) == {key: RECORDS_PER_KEY for key in range(NUM_KEYS)}


def test_unaligned_checkpoint_under_backpressure_persists_in_flight_data(tmp_path):
    directory = str(tmp_path / "checkpoints")
    job_id = run_and_cancel(build(checkpoint_config(directory, "unaligned")), directory, checkpoints=3)
    with_channel_state = [c for c in list_completed_checkpoints(directory, job_id) if c.channel_state_bytes > 0]
    assert with_channel_state, "no completed unaligned checkpoint recorded in-flight data"
    checkpoint = with_channel_state[-1]
    assert checkpoint.mode == "unaligned"
    buffers = [
        buffer
        for uid in ("seq", "count")
        for subtask in range(2)
        for direction in ("input", "output")
        for buffer in read_channel_state(directory, job_id, checkpoint.checkpoint_id, uid, subtask, direction)
    ]
    assert sum(b.batch.num_rows for b in buffers) > 0


def test_restore_into_a_job_without_the_operator_names_the_uid(tmp_path):
    directory = str(tmp_path / "checkpoints")
    run_and_cancel(build(checkpoint_config(directory, "aligned")), directory, checkpoints=1)
    config = checkpoint_config(directory, "aligned") | {"execution.state-recovery.path": directory}
    env = StreamExecutionEnvironment.get_execution_environment(config)
    (
        env.from_source(SequenceSource(num_keys=NUM_KEYS, records_per_key=10), name="seq")
        .uid("seq")
        .key_by("key")
        .process(SlowExactCount(0))
        .uid("renamed-count")
        .sink_to(CollectSink("counts"))
    )
    with pytest.raises(IncompatibleCheckpointError, match="'count'"):
        env.execute("incompatible")


def test_restore_with_another_max_parallelism_is_refused_before_any_task_runs(tmp_path):
    directory = str(tmp_path / "checkpoints")
    job_id = run_and_cancel(build(checkpoint_config(directory, "aligned")), directory, checkpoints=1)
    recorded = list_completed_checkpoints(directory, job_id)[-1].max_parallelism
    assert recorded == {"seq": 128, "count": 128}
    config = checkpoint_config(directory, "aligned") | {
        "execution.state-recovery.path": directory,
        "pipeline.max-parallelism": 64,
    }
    with pytest.raises(IncompatibleCheckpointError) as refused:
        build(config, seconds_per_record=0).execute("fewer key groups")
    message = str(refused.value)
    assert "'count'" in message and "max parallelism 128" in message and "max parallelism 64" in message
    assert "pipeline.max-parallelism: 128" in message
    assert {c.job_id for c in list_completed_checkpoints(directory)} == {job_id}, "the refused job ran"


def test_alignment_timeout_switches_to_unaligned_only_under_backpressure(tmp_path):
    slow = str(tmp_path / "slow")
    job_id = run_and_cancel(build(checkpoint_config(slow, "aligned-with-timeout")), slow, checkpoints=3)
    modes = [c.mode for c in list_completed_checkpoints(slow, job_id)]
    assert "switched" in modes, f"no checkpoint switched to unaligned under backpressure: {modes}"

    idle = str(tmp_path / "idle")
    config = checkpoint_config(idle, "aligned-with-timeout") | {
        "execution.checkpointing.aligned-checkpoint-timeout": "2s",
        "taskmanager.memory.segment-size": "32kb",
    }
    env = StreamExecutionEnvironment.get_execution_environment(config)
    (
        env.from_source(SequenceSource(num_keys=4, records_per_key=400, rows_per_second=800), name="seq")
        .uid("seq")
        .key_by("key")
        .process(SlowExactCount(0))
        .uid("count")
        .sink_to(CollectSink("counts"))
    )
    result = env.execute("no backpressure")
    assert {row["key"]: row["count"] for row in CollectSink.rows(result)} == {k: 400 for k in range(4)}
    modes = [c.mode for c in list_completed_checkpoints(idle, result.job_id)]
    assert modes and set(modes) == {"aligned"}, modes


class DistinctSeqs(KeyedProcessFunction):
    """Remembers every ``seq`` per key (duplicates allowed: at-least-once)."""

    def open(self, runtime_context):
        self.seen = runtime_context.get_state(ValueStateDescriptor("seen"))

    def process_element(self, value, ctx):
        seen = self.seen.value()
        if seen is None:
            seen = set()
            ctx.timer_service().register_event_time_timer(END_OF_TIME)
        seen.add(value["seq"])
        self.seen.update(seen)
        time.sleep(0.0003)

    def on_timer(self, timestamp, ctx):
        yield {"key": ctx.get_current_key(), "distinct": len(self.seen.value())}


def test_at_least_once_mode_loses_nothing_across_resume(tmp_path):
    directory = str(tmp_path / "checkpoints")

    def job(extra: dict) -> StreamExecutionEnvironment:
        config = checkpoint_config(directory, "aligned") | {"execution.checkpointing.mode": "at-least-once"} | extra
        env = StreamExecutionEnvironment.get_execution_environment(config)
        (
            env.from_source(SequenceSource(num_keys=NUM_KEYS, records_per_key=RECORDS_PER_KEY), name="seq")
            .uid("seq")
            .key_by("key")
            .process(DistinctSeqs())
            .uid("distinct")
            .sink_to(CollectSink("distinct"))
        )
        return env

    run_and_cancel(job({}), directory, checkpoints=2)
    result = job({"execution.state-recovery.path": directory}).execute("resumed")
    assert {r["key"]: r["distinct"] for r in CollectSink.rows(result)} == {k: RECORDS_PER_KEY for k in range(NUM_KEYS)}
