"""flinklike_spark.testing: an ABORT marker fails a job once; a restart or a resume is exactly once."""

from __future__ import annotations

import os
import time

import pytest

from flinklike_spark import KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor
from flinklike_spark.errors import JobExecutionError
from flinklike_spark.testing import ABORT, InjectedFailure, TestingSource, collect
from tests.support.checkpoint_jobs import checkpoint_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

END_OF_TIME = 2**62


class SlowOrderedCount(KeyedProcessFunction):
    def open(self, runtime_context):
        self.next = runtime_context.get_state(ValueStateDescriptor("next"))

    def process_element(self, value, ctx):
        expected = self.next.value() or 0
        if value["seq"] != expected:
            raise AssertionError(f"key {value['k']}: seq {value['seq']}, expected {expected}")
        if expected == 0:
            ctx.timer_service().register_event_time_timer(END_OF_TIME)
        self.next.update(expected + 1)
        time.sleep(0.002)

    def on_timer(self, timestamp, ctx):
        yield {"k": ctx.get_current_key(), "count": self.next.value()}


def job(source: TestingSource, config: dict):
    env = StreamExecutionEnvironment.get_execution_environment(config)
    stream = (
        env.from_source(source, name="testing")
        .uid("testing")
        .set_parallelism(1)
        .key_by("k")
        .process(SlowOrderedCount())
        .uid("count")
    )
    return env, stream


def test_abort_fails_the_job_once_and_the_resumed_job_counts_exactly_once(tmp_path):
    rows = [{"k": i % 4, "seq": i // 4} for i in range(800)]
    abort = ABORT(after_checkpoints=2)
    source = TestingSource([*rows[:500], abort, *rows[500:]])
    directory = str(tmp_path / "checkpoints")
    # without restarts the failure ends the job (the default under checkpointing restarts it)
    env, stream = job(source, checkpoint_config(directory, "aligned") | {"restart-strategy.type": "none"})
    with pytest.raises(JobExecutionError) as failure:
        collect(stream)
    assert "InjectedFailure" in repr(failure.value.__cause__) or isinstance(failure.value.__cause__, InjectedFailure)
    assert os.path.exists(abort.marker_file)
    env, stream = job(source, checkpoint_config(directory, "aligned") | {"execution.state-recovery.path": directory})
    assert sorted((r["k"], r["count"]) for r in collect(stream)) == [(k, 200) for k in range(4)]


def test_abort_is_recovered_by_the_default_restart_strategy_exactly_once(tmp_path):
    rows = [{"k": i % 4, "seq": i // 4} for i in range(800)]
    abort = ABORT(after_checkpoints=2)
    source = TestingSource([*rows[:500], abort, *rows[500:]])
    env, stream = job(source, checkpoint_config(str(tmp_path / "checkpoints"), "aligned"))
    assert sorted((r["k"], r["count"]) for r in collect(stream)) == [(k, 200) for k in range(4)]
    assert os.path.exists(abort.marker_file)  # the marker fired (once) and the job restarted from a checkpoint


def test_testing_source_without_markers_is_a_bounded_collection():
    env = StreamExecutionEnvironment.get_execution_environment({"parallelism.default": 2})
    rows = collect(
        env.from_source(TestingSource([{"x": i} for i in range(10)], batch_size=3)).map(lambda r: {"x": r["x"] * 2})
    )
    assert sorted(r["x"] for r in rows) == list(range(0, 20, 2))


def test_failing_mapper_fails_one_subtask_once_and_the_restart_is_exactly_once(tmp_path):
    from connectors import CollectSink, SequenceSource
    from flinklike_spark.testing import FailingMapper

    config = checkpoint_config(str(tmp_path / "checkpoints"), "unaligned") | {
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": 3,
        "restart-strategy.fixed-delay.delay": "100 ms",
    }
    env = StreamExecutionEnvironment.get_execution_environment(config)
    (
        env.from_source(
            SequenceSource(num_keys=6, records_per_key=400, rows_per_second=2000, batch_size=20), name="seq"
        )  # fmt: skip
        .map(FailingMapper(fail_after=300, subtask=1))
        .key_by("key")
        .process(PerKeySeqCount())
        .sink_to(CollectSink("counts"))
    )
    client = env.execute_async("failing mapper")
    result = client.wait(timeout=240)
    assert {r["key"]: r["count"] for r in CollectSink.rows(result, name="counts")} == {k: 400 for k in range(6)}
    [failure] = client.get_exception_history()
    assert "FailingMapper: injected failure after 300 records" in str(failure.root_cause)
    assert client.num_restarts == 1


class PerKeySeqCount(KeyedProcessFunction):
    """Counts per key; raises on a lost, duplicated or reordered ``seq`` (of SequenceSource rows)."""

    def open(self, runtime_context):
        self.next = runtime_context.get_state(ValueStateDescriptor("next"))

    def process_element(self, value, ctx):
        expected = self.next.value() or 0
        if value["seq"] != expected:
            raise AssertionError(f"key {value['key']}: seq {value['seq']}, expected {expected}")
        if expected == 0:
            ctx.timer_service().register_event_time_timer(END_OF_TIME)
        self.next.update(expected + 1)

    def on_timer(self, timestamp, ctx):
        yield {"key": ctx.get_current_key(), "count": self.next.value()}
