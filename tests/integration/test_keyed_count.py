"""The runtime core end to end on real multi-process local clusters."""

from __future__ import annotations

import collections
import logging
import time

import pyarrow as pa
import pytest

from connectors import CollectSink, SequenceSource
from flinklike_spark import (
    ConfigurationError,
    JobCancelledError,
    JobExecutionError,
    KeyedProcessFunction,
    RemoteTaskError,
    StreamExecutionEnvironment,
    ValueStateDescriptor,
)
from flinklike_spark.errors import SlotAllocationError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

END_OF_TIME = 2**62


class CountPerKey(KeyedProcessFunction):
    """Counts per key; checks per-key order; emits the count when input ends."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))
        self.last_seq = runtime_context.get_state(ValueStateDescriptor("last_seq"))
        self.subtask = runtime_context.index_of_this_subtask

    def process_element(self, value, ctx):
        current = self.count.value() or 0
        if current == 0:
            ctx.timer_service().register_event_time_timer(END_OF_TIME)
        last = self.last_seq.value()
        if last is not None and value["seq"] != last + 1:
            raise AssertionError(f"key {value['key']}: seq {value['seq']} after {last}")
        self.last_seq.update(value["seq"])
        self.count.update(current + 1)

    def on_timer(self, timestamp, ctx):
        yield {"key": ctx.get_current_key(), "count": self.count.value(), "subtask": self.subtask}


def run_keyed_count(config: dict, *, num_keys: int, records_per_key: int) -> list[dict]:
    env = StreamExecutionEnvironment.get_execution_environment(config)
    sink = CollectSink("counts")
    (
        env.from_source(SequenceSource(num_keys=num_keys, records_per_key=records_per_key), name="seq")
        .key_by("key")
        .process(CountPerKey())
        .uid("count")
        .sink_to(sink)
    )
    return CollectSink.rows(env.execute("keyed count"))


def test_keyed_count_two_processes_exact_per_key():
    rows = run_keyed_count(
        {"parallelism.default": 2, "local.number-taskmanager": 2}, num_keys=50, records_per_key=2_000
    )
    counts = {row["key"]: row["count"] for row in rows}
    assert len(rows) == 50, "every key reported exactly once"
    assert counts == {key: 2_000 for key in range(50)}
    assert {row["subtask"] for row in rows} == {0, 1}, "both subtasks received keys"


def test_same_result_in_one_process_and_spread_over_two():
    spread = run_keyed_count(
        {"parallelism.default": 2, "local.number-taskmanager": 2}, num_keys=37, records_per_key=501
    )
    single = run_keyed_count(
        {"parallelism.default": 2, "local.number-taskmanager": 1, "taskmanager.numberOfTaskSlots": 2},
        num_keys=37,
        records_per_key=501,
    )
    key = lambda row: row["key"]  # noqa: E731
    assert sorted(spread, key=key) == sorted(single, key=key)


def test_same_keys_reach_same_subtask_across_runs():
    first = run_keyed_count({"parallelism.default": 2, "local.number-taskmanager": 2}, num_keys=20, records_per_key=10)
    second = run_keyed_count({"parallelism.default": 2, "local.number-taskmanager": 2}, num_keys=20, records_per_key=10)
    assert {r["key"]: r["subtask"] for r in first} == {r["key"]: r["subtask"] for r in second}


def test_stateless_pipeline_with_union_rebalance_and_map_batches():
    import pyarrow.compute as pc

    env = StreamExecutionEnvironment.get_execution_environment(
        {"parallelism.default": 2, "local.number-taskmanager": 2}
    )
    sink = CollectSink("out")
    evens = env.from_source(SequenceSource(num_keys=4, records_per_key=100), name="a").filter(
        lambda row: row["seq"] % 2 == 0
    )
    odds = env.from_source(SequenceSource(num_keys=4, records_per_key=100), name="b").filter(
        lambda row: row["seq"] % 2 == 1
    )
    (
        evens.union(odds)
        .rebalance()
        .map_batches(lambda b: b.append_column("double", pc.multiply(b.column("seq"), 2)))
        .flat_map(lambda row: [row, row] if row["key"] == 0 else [row])
        .set_parallelism(1)
        .sink_to(sink)
    )
    rows = CollectSink.rows(env.execute("stateless"))
    per_key = collections.Counter(row["key"] for row in rows)
    assert per_key == {0: 200, 1: 100, 2: 100, 3: 100}
    assert all(row["double"] == 2 * row["seq"] for row in rows)


class Explode(KeyedProcessFunction):
    def process_element(self, value, ctx):
        if value["seq"] == 57:
            raise ValueError(f"bad record {value}")
        return None


def test_user_exception_fails_job_with_traceback():
    env = StreamExecutionEnvironment.get_execution_environment(
        {"parallelism.default": 2, "local.number-taskmanager": 2}
    )
    env.from_source(SequenceSource(num_keys=3, records_per_key=100), name="seq").key_by("key").process(
        Explode()
    ).sink_to(CollectSink("x"))
    with pytest.raises(JobExecutionError) as info:
        env.execute("explode")
    cause = info.value.__cause__
    assert isinstance(cause, RemoteTaskError)
    assert "ValueError: bad record" in str(cause)
    assert "raise ValueError" in cause.remote_traceback
    assert "Explode" in cause.remote_traceback or "process_element" in cause.remote_traceback


def test_record_not_matching_schema_fails_clearly():
    env = StreamExecutionEnvironment.get_execution_environment({"parallelism.default": 1})
    schema = pa.schema([("key", pa.int64()), ("label", pa.string())])
    (
        env.from_source(SequenceSource(num_keys=2, records_per_key=10), name="seq")
        .map(lambda row: {"key": row["key"], "label": "x" if row["seq"] < 5 else row["seq"]}, output_type=schema)
        .rebalance()
        .sink_to(CollectSink("x"))
    )
    with pytest.raises(JobExecutionError) as info:
        env.execute("schema")
    message = str(info.value.__cause__)
    assert "SchemaMismatchError" in message
    assert "field 'label'" in message


def test_unknown_configuration_key_fails_before_anything_runs():
    with pytest.raises(ConfigurationError, match="did you mean 'parallelism.default'"):
        StreamExecutionEnvironment.get_execution_environment({"parallelism.defualt": 2})


def test_local_cluster_sizes_its_slots_unless_told_and_then_names_the_shortage():
    # Like Flink's local environment: parallelism 3 on 2 TaskExecutors gets 2 slots each.
    counts = run_keyed_count({"parallelism.default": 3, "local.number-taskmanager": 2}, num_keys=5, records_per_key=7)
    assert sorted((r["key"], r["count"]) for r in counts) == [(k, 7) for k in range(5)]
    with pytest.raises(JobExecutionError, match="no free slot left; the cluster has 2 slots") as failure:
        run_keyed_count(
            {"parallelism.default": 3, "local.number-taskmanager": 2, "taskmanager.numberOfTaskSlots": 1},
            num_keys=5,
            records_per_key=7,
        )
    assert isinstance(failure.value.__cause__, SlotAllocationError)


def test_cancel_over_two_processes_ends_every_task_canceled(caplog):
    env = StreamExecutionEnvironment.get_execution_environment(
        {"parallelism.default": 2, "local.number-taskmanager": 2}
    )
    (
        env.from_source(SequenceSource(num_keys=100, records_per_key=None), name="seq")
        .key_by("key")
        .process(CountPerKey())
        .sink_to(CollectSink("never"))
    )
    with caplog.at_level(logging.INFO, logger="flinklike_spark._runtime.jobmaster"):
        client = env.execute_async("cancel me")
        deadline = time.monotonic() + 60
        while sum(m.get("records_in", 0) for m in client.task_metrics().values()) < 100_000:
            assert time.monotonic() < deadline, "no records flowed"
            time.sleep(0.05)
        client.cancel()
        with pytest.raises(JobCancelledError):
            client.wait(60)
    # Consumers may see their producer's partition released before their own cancel call
    # arrives; as in Flink that completes their cancellation and is no task failure.
    failures = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    assert failures == []
