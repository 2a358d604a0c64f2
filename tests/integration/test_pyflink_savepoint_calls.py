"""PyFlink's savepoint calls on JobClient (issue 39 items 4, 5, 8): ``stop_with_savepoint(False, dir).result()``,
``trigger_savepoint(dir).result()``, a savepoint path that is a directory, and the Flink 1.x restore key.

Each savepoint is resumed by a real job, and the resumed counts are checked per key against the state the
savepoint holds (read back with the State Processor API): the count goes on from there, one by one.
"""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest

from connectors import CollectSink, SequenceSource
from flinklike_spark import KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor
from flinklike_spark.errors import CheckpointStorageError, ConfigurationError, JobCancelledError
from flinklike_spark.state_processor import SavepointReader

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

NUM_KEYS = 4


class Count(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)
        yield {"key": value["key"], "count": self.count.value()}


def _start(checkpoint_dir, *, records_per_key=None, rows_per_second=400.0, **config):
    env = StreamExecutionEnvironment.get_execution_environment(
        {"flinklike.local.taskmanager-mode": "thread", "execution.checkpointing.dir": str(checkpoint_dir)} | config
    )
    source = SequenceSource(num_keys=NUM_KEYS, records_per_key=records_per_key, rows_per_second=rows_per_second)
    env.from_source(source, name="seq").uid("seq").key_by("key").process(Count()).uid("counter").sink_to(
        CollectSink("out")
    )
    return env


def _running_with_records(checkpoint_dir, **config):
    client = _start(checkpoint_dir, **config).execute_async("counting")
    deadline = time.monotonic() + 60
    while not any(m.get("records_in", 0) for m in client.task_metrics().values()):
        assert time.monotonic() < deadline, "the job processed no record"
        time.sleep(0.05)
    time.sleep(0.5)
    return client


def _counts_at(path: str) -> dict[int, int]:
    table = SavepointReader.read(path).read_keyed_state("counter", "count")
    return dict(zip(table["key"].to_pylist(), table["count"].to_pylist(), strict=True))


def _resume_and_check(tmp_path, path: str, key: str = "execution.state-recovery.path") -> None:
    """Resume ``path`` with the source bounded a few records per key beyond it: every key's count goes on exactly."""
    before = _counts_at(path)
    assert len(before) == NUM_KEYS and all(count > 0 for count in before.values())
    end = max(before.values()) + 3
    env = _start(tmp_path / "resumed", records_per_key=end, rows_per_second=None, **{key: path})
    rows = CollectSink.rows(env.execute("resumed"))
    for k in range(NUM_KEYS):
        emitted = [r["count"] for r in rows if r["key"] == k]
        assert emitted == list(range(before[k] + 1, end + 1)), f"key {k}: {emitted}, savepoint {before[k]}"


def test_pyflink_stop_with_savepoint_into_a_directory_and_resume_with_the_flink_1x_key(tmp_path):
    client = _running_with_records(tmp_path / "ck")
    future = client.stop_with_savepoint(False, str(tmp_path / "savepoints"))  # PyFlink's exact call
    path = future.result(timeout=120)
    with pytest.raises(JobCancelledError):
        client.wait(60)
    assert isinstance(path, str) and path.startswith(str(tmp_path / "savepoints"))
    assert os.path.isdir(path), "a savepoint's path is a directory, as in Flink"
    _resume_and_check(tmp_path, path, key="execution.savepoint.path")  # Flink 1.x's key, still accepted


def test_pyflink_trigger_savepoint_returns_a_future_and_the_job_goes_on(tmp_path):
    client = _running_with_records(tmp_path / "ck")
    try:
        path = client.trigger_savepoint(str(tmp_path / "ck")).result(timeout=120)  # the checkpoint directory: no copy
        assert path.startswith(f"{tmp_path / 'ck'}/{client.job_id}/chk-")
        assert client.get_job_status().name == "RUNNING"
        assert client.trigger_savepoint().result() != path  # the waiting form's info also answers result()
    finally:
        client.cancel()
        with pytest.raises(JobCancelledError):
            client.wait(60)


def test_a_savepoint_path_is_a_directory_whose_copy_restores(tmp_path):
    client = _running_with_records(tmp_path / "ck")
    savepoint = client.stop_with_savepoint(timeout=120)  # this engine's waiting form still works
    with pytest.raises(JobCancelledError):
        client.wait(60)
    assert savepoint.path in repr(savepoint)
    marker = json.loads((tmp_path / "ck" / client.job_id / f"chk-{savepoint.checkpoint_id}" / "_metadata").read_text())
    assert marker["restore_path"] == savepoint.path
    copy = shutil.copytree(savepoint.path, tmp_path / "backup" / "my-savepoint")
    _resume_and_check(tmp_path, str(copy))


def test_pyflink_drain_is_refused_with_what_to_do(tmp_path):
    client = _running_with_records(tmp_path / "ck")
    try:
        with pytest.raises(ConfigurationError, match=r"advance_to_end_of_time=True.*not supported.*False"):
            client.stop_with_savepoint(True)
        assert client.get_job_status().name == "RUNNING"
    finally:
        client.cancel()
        with pytest.raises(JobCancelledError):
            client.wait(60)


def test_a_copy_that_cannot_be_written_names_the_completed_savepoint(tmp_path):
    (tmp_path / "a-file").write_text("not a directory")
    client = _running_with_records(tmp_path / "ck")
    try:
        future = client.trigger_savepoint(str(tmp_path / "a-file" / "savepoints"))
        with pytest.raises(
            CheckpointStorageError, match=r"completed at .*/ck/[0-9a-f]{32}/chk-\d+, but its copy"
        ) as info:
            future.result(timeout=120)
        restorable = str(info.value).split("completed at ")[1].split(",")[0]
        assert os.path.isdir(restorable)  # the savepoint itself is there, with its _metadata
    finally:
        client.cancel()
        with pytest.raises(JobCancelledError):
            client.wait(60)
