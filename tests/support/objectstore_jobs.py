"""Jobs and checks of the object-store tests: a keyed job into a Delta table, read back in commit order."""

from __future__ import annotations

import json
import time

import pyarrow.parquet as pq
import pytest

from checkpointing import list_completed_checkpoints
from connectors import DeltaSink, SequenceSource
from flinklike_spark import KeyedProcessFunction, StreamExecutionEnvironment
from flinklike_spark.errors import JobCancelledError

__all__ = [
    "MODES",
    "NUM_KEYS",
    "RECORDS_PER_KEY",
    "ExactCount",
    "SlowPassThrough",
    "assert_exactly_once_in_order",
    "build",
    "build_counting",
    "job_config",
    "rows_in_commit_order",
    "run_and_cancel",
    "stop_and_resume",
    "wait_for_checkpoints",
]

MODES = ("aligned", "unaligned", "aligned-with-timeout")
NUM_KEYS = 6
RECORDS_PER_KEY = 500


class SlowPassThrough(KeyedProcessFunction):
    """Slow enough for backpressure, so unaligned checkpoints carry channel state."""

    def __init__(self, seconds_per_record: float) -> None:
        self.seconds_per_record = seconds_per_record

    def process_element(self, value, ctx):
        time.sleep(self.seconds_per_record)
        yield value


def job_config(store, directory: str, mode: str) -> dict:
    """Two TaskExecutors, checkpoints every 600 ms into ``directory`` on ``store`` in ``mode``."""
    config = {
        "parallelism.default": 2,
        "local.number-taskmanager": 2,
        "execution.checkpointing.interval": "600ms",
        "execution.checkpointing.dir": directory,
        "execution.checkpointing.num-retained": 3,
        "taskmanager.memory.segment-size": "2kb",
        **store.config,
    }
    if mode in ("unaligned", "aligned-with-timeout"):
        config["execution.checkpointing.unaligned.enabled"] = True
    if mode == "aligned-with-timeout":
        config["execution.checkpointing.aligned-checkpoint-timeout"] = "5ms"
    return config


def build(config: dict, table: str, *, seconds_per_record: float, rows_per_second: int | None = None):
    """The source stays RUNNING at ``rows_per_second`` (checkpoints are only taken while every task runs)."""
    env = StreamExecutionEnvironment.get_execution_environment(config)
    source = SequenceSource(
        num_keys=NUM_KEYS, records_per_key=RECORDS_PER_KEY, rows_per_second=rows_per_second, batch_size=20
    )
    (
        env.from_source(source, name="seq")
        .uid("seq")
        .key_by("key")
        .process(SlowPassThrough(seconds_per_record))
        .uid("slow")
        .sink_to(DeltaSink(table))
        .uid("delta")
    )
    return env


def wait_for_checkpoints(client, layout, count: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if client.done():
            client.wait(1)  # raises the failure
            raise AssertionError(f"the job finished before {count} checkpoints completed")
        completed = list_completed_checkpoints(layout, client.job_id)
        if len(completed) >= count:
            return
        assert time.monotonic() < deadline, f"only {len(completed)} checkpoints completed in {timeout} s"
        time.sleep(0.2)


def run_and_cancel(env, layout, *, checkpoints: int) -> str:
    """Start the job, cancel it once ``checkpoints`` checkpoints completed; return its job id."""
    client = env.execute_async("resume me")
    wait_for_checkpoints(client, layout, checkpoints)
    client.cancel()
    with pytest.raises(JobCancelledError):
        client.wait(60)
    return client.job_id


def rows_in_commit_order(store, table: str) -> list[dict]:
    """Every row of the Delta table at ``table`` in the order its log added the files (then row order)."""
    fs, root = store.filesystem(table)
    rows = []
    for log in sorted(p for p in fs.ls(f"{root}/_delta_log", detail=False) if p.endswith(".json")):
        for line in fs.cat_file(log).decode().splitlines():
            action = json.loads(line)
            assert "remove" not in action, f"the sink never removes files, but {log} does"
            if "add" in action:
                with fs.open(f"{root}/{action['add']['path']}", "rb") as f:
                    rows.extend(pq.read_table(f).to_pylist())
    return rows


def assert_exactly_once_in_order(rows: list[dict], records_per_key: int = RECORDS_PER_KEY) -> None:
    seqs: dict[int, list[int]] = {}
    for row in rows:
        seqs.setdefault(row["key"], []).append(row["seq"])
    for key in range(NUM_KEYS):
        got = seqs.get(key, [])
        assert got == list(range(records_per_key)), (
            f"key {key}: {len(got)} rows, {len(got) - len(set(got))} duplicates, "
            f"missing {sorted(set(range(records_per_key)) - set(got))[:10]}, "
            f"in order: {got == sorted(got)}"
        )


class ExactCount(KeyedProcessFunction):
    """Counts per key; raises on a lost, duplicated or reordered ``seq``; emits the count at the end."""

    def open(self, runtime_context):
        from flinklike_spark import ValueStateDescriptor

        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        expected = self.count.value() or 0
        if value["seq"] != expected:
            raise AssertionError(f"key {value['key']}: got seq {value['seq']}, expected {expected}")
        if expected == 0:
            ctx.timer_service().register_event_time_timer(2**62)
        self.count.update(expected + 1)

    def on_timer(self, timestamp, ctx):
        yield {"key": ctx.get_current_key(), "count": self.count.value()}


def build_counting(config: dict, *, rows_per_second: int | None = None):
    from connectors import CollectSink

    env = StreamExecutionEnvironment.get_execution_environment(config)
    source = SequenceSource(
        num_keys=NUM_KEYS, records_per_key=RECORDS_PER_KEY, rows_per_second=rows_per_second, batch_size=20
    )
    env.from_source(source, name="seq").uid("seq").key_by("key").process(ExactCount()).uid("count").sink_to(
        CollectSink("counts")
    )
    return env


def stop_and_resume(store, mode: str, extra: dict | None = None) -> None:
    directory, table = store.url("checkpoints"), store.url("table")
    layout = store.layout(directory)
    config = job_config(store, directory, mode) | (extra or {})
    first = build(config, table, seconds_per_record=0.002, rows_per_second=500)
    job_id = run_and_cancel(first, layout, checkpoints=2)
    latest = list_completed_checkpoints(layout, job_id)[-1]
    resumed = config | {"execution.state-recovery.path": directory}
    build(resumed, table, seconds_per_record=0).execute("resumed")
    assert_exactly_once_in_order(rows_in_commit_order(store, table))
    if mode == "aligned":
        assert latest.mode == "aligned" and latest.channel_state_bytes == 0
