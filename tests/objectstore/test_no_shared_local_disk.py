"""No shared local disk (issue 19 item 3): every TaskExecutor runs in a private working directory
(``process.taskmanager.working-dir``: its own cwd and ``TMPDIR``), checkpoints and tables live on the S3
server only, and the key cluster scenarios still hold: results of ``execute_and_collect`` reach the client
over the engine's RPC (the client's temporary directory stays empty), a job restarted after a task failure
or after the SIGKILL of a TaskExecutor restores from checkpoints on S3 with every key exactly once and in
order, and a job stopped and resumed from S3 writes a Delta table on S3 exactly once.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import tempfile
import time
from pathlib import Path

import pytest

from checkpointing import list_completed_checkpoints
from connectors import CollectSink, SequenceSource
from flinklike_spark import KeyedProcessFunction, MapFunction, StreamExecutionEnvironment, ValueStateDescriptor
from tests.support.failover_jobs import task_executor_processes
from tests.support.objectstore_jobs import stop_and_resume

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture
def private_dirs(tmp_path, monkeypatch):
    """The config keys of the mode, and the client's own (watched) temporary directory."""
    client_tmp = tmp_path / "client-tmp"
    client_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(client_tmp))
    working = tmp_path / "taskmanagers"
    return {"process.taskmanager.working-dir": str(working)}, working, client_tmp


def env(config: dict) -> StreamExecutionEnvironment:
    return StreamExecutionEnvironment.get_execution_environment(
        {"parallelism.default": 2, "local.number-taskmanager": 2, **config}
    )


class WhereAmI(MapFunction):
    def map(self, value):
        return {**value, "pid": os.getpid(), "cwd": os.getcwd(), "tmp": tempfile.gettempdir()}


def test_each_task_executor_has_its_own_directory_and_results_reach_the_client_over_rpc(private_dirs):
    config, working, client_tmp = private_dirs
    e = env(config)
    records = list(
        e.from_source(SequenceSource(num_keys=4, records_per_key=50), name="seq")
        .map(WhereAmI())
        .execute_and_collect("where")
    )
    assert sorted((r["key"], r["seq"]) for r in records) == [(k, s) for k in range(4) for s in range(50)]
    places = {(r["pid"], r["cwd"], r["tmp"]) for r in records}
    assert len({pid for pid, _, _ in places}) == 2, places  # both TaskExecutors ran a subtask
    for pid, cwd, tmp in places:
        assert pid != os.getpid()
        assert Path(cwd).parent == working and Path(cwd).name.startswith("tm_"), cwd
        assert tmp == os.path.join(cwd, "tmp")
    assert len({cwd for _, cwd, _ in places}) == 2  # not shared between the two
    assert list(client_tmp.iterdir()) == []  # nothing was handed over through the client's disk


class RunningCount(KeyedProcessFunction):
    """Fails the first attempt at ``seq == fail_at`` (if given); emits the per-key running count."""

    def __init__(self, fail_at=None):
        self.fail_at = fail_at

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))
        self.attempt = runtime_context.attempt_number

    def process_element(self, value, ctx):
        if self.attempt == 0 and value["seq"] == self.fail_at:
            raise RuntimeError("injected failure")
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        yield {"key": value["key"], "seq": value["seq"], "n": n}


def assert_per_key_prefix(records):
    by_key = collections.defaultdict(list)
    for r in records:
        by_key[r["key"]].append(r)
    assert by_key
    for key, rows in by_key.items():
        assert [r["seq"] for r in rows] == list(range(len(rows))), key
        assert [r["n"] for r in rows] == [r["seq"] + 1 for r in rows], key


def checkpointed(store, mode: str) -> dict:
    return {
        "execution.checkpointing.interval": "200 ms",
        "execution.checkpointing.dir": store.url("checkpoints"),
        "execution.checkpointing.unaligned.enabled": mode == "unaligned",
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.delay": "100 ms",
        **store.config,
    }


@pytest.mark.parametrize("mode", ["aligned", "unaligned"])
def test_collect_is_exactly_once_across_a_restart_from_s3(s3_server, private_dirs, mode):
    config, _, client_tmp = private_dirs
    e = env(config | checkpointed(s3_server, mode))
    source = SequenceSource(num_keys=4, records_per_key=None, rows_per_second=2_000)
    stream = e.from_source(source, name="forever").key_by("key").process(RunningCount(fail_at=300))
    with stream.execute_and_collect("checkpointed") as results:
        first = [next(results) for _ in range(4 * 450)]  # past the failure at seq 300 of every key
    assert_per_key_prefix(first)
    assert list(client_tmp.iterdir()) == []


RECORDS_PER_KEY = 2_000


class ExactCount(KeyedProcessFunction):
    """Counts per key, raising on a lost, duplicated or reordered ``seq``; emits the count at the end."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        expected = self.count.value() or 0
        if value["seq"] != expected:
            raise AssertionError(f"key {value['key']}: got seq {value['seq']}, expected {expected}")
        self.count.update(expected + 1)
        if expected + 1 == RECORDS_PER_KEY:
            yield {"key": value["key"], "count": expected + 1}


def test_a_killed_task_executor_restores_from_s3(s3_server, private_dirs):
    config, _, _ = private_dirs
    directory = s3_server.url("checkpoints")
    e = env(config | checkpointed(s3_server, "aligned") | {"execution.checkpointing.dir": directory})
    (
        e.from_source(SequenceSource(num_keys=6, records_per_key=RECORDS_PER_KEY, rows_per_second=500), name="seq")
        .uid("seq")
        .key_by("key").process(ExactCount()).uid("count")
        .sink_to(CollectSink("counts"))
    )  # fmt: skip
    client = e.execute_async("killed")
    layout = s3_server.layout(directory)
    try:
        deadline = time.monotonic() + 120
        while not (client.job_id and list_completed_checkpoints(layout, client.job_id)):
            assert time.monotonic() < deadline and not client.done(), "no checkpoint completed on S3"
            time.sleep(0.1)
        task_executor_processes()[0].send_signal(signal.SIGKILL)
        result = client.wait(timeout=180)
    except BaseException:
        with contextlib.suppress(Exception):
            client.cancel()
        raise
    assert {r["key"]: r["count"] for r in CollectSink.rows(result)} == {k: RECORDS_PER_KEY for k in range(6)}
    assert client.num_restarts >= 1


def test_stop_and_resume_into_delta_on_s3(s3_server, private_dirs):
    config, _, _ = private_dirs
    stop_and_resume(s3_server, "unaligned", config)
