"""Delta tables on object stores are read through Arrow's native filesystems (issue 27, item 12).

delta-rs's ``to_pyarrow_dataset()`` reads through a Python filesystem handler,
and a process that reads a table with it and exits can abort ("terminate
called without an active exception": 2 of 6 runs after the README's S3
example). ``checkpointing.layout.scan_table`` (every checkpoint-table read,
``read_delta_table``) now gives Arrow its own S3 or Azure filesystem, built
from the table's delta-rs options; the stress test runs each reading path in
many short processes and requires every one to exit cleanly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import urllib.parse

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from deltalake import DeltaTable, write_deltalake

from checkpointing.layout import delta_dataset
from checkpointing.native_fs import arrow_filesystem
from connectors import read_delta_table
from flinklike_spark.config import Configuration
from tests.support.object_stores import S3_BUCKET

pytestmark = pytest.mark.timeout(120)


def write_table(store, url: str, rows: int = 100, files: int = 1) -> None:
    options = dict(store.storage.options(url).delta)
    for part in range(files):
        write_deltalake(url, pa.table({"k": list(range(part * rows, (part + 1) * rows))}), mode="append",
                        storage_options=options)  # fmt: skip


def test_a_table_on_the_object_store_is_read_through_arrows_native_filesystem(store):
    url = store.url("native")
    write_table(store, url, files=3)
    table = DeltaTable(url, storage_options=dict(store.storage.options(url).delta))
    assert isinstance(table.to_pyarrow_dataset().filesystem, pafs.PyFileSystem)  # what is avoided
    filesystem = delta_dataset(table).filesystem
    assert isinstance(filesystem, pafs.SubTreeFileSystem)
    native = pafs.S3FileSystem if store.name == "s3" else pafs.AzureFileSystem
    assert isinstance(filesystem.base_fs, native), filesystem.base_fs
    assert sorted(read_delta_table(url, storage=store.storage).column("k").to_pylist()) == list(range(300))


def test_virtual_hosted_options_read_through_arrow_with_the_bucket_in_the_host(s3_server, caplog):
    """The options of issue 27 item 1 (bucket in delta-rs's endpoint), reached through moto as a proxy."""
    import logging

    port = urllib.parse.urlsplit(s3_server.config["s3.endpoint"]).port
    config = s3_server.config | {"s3.endpoint": f"http://localhost:{port}", "s3.path.style.access": "false",
                                 "s3.proxy.host": "127.0.0.1", "s3.proxy.port": str(port)}  # fmt: skip
    storage = Configuration(config).storage
    url = s3_server.url("virtual")
    write_table(s3_server, url)
    werkzeug = logging.getLogger("werkzeug")
    level = werkzeug.level
    werkzeug.setLevel(logging.INFO)
    try:
        with caplog.at_level(logging.INFO, logger="werkzeug"):
            rows = read_delta_table(url, storage=storage)
    finally:
        werkzeug.setLevel(level)
    assert sorted(rows.column("k").to_pylist()) == list(range(100))
    parquet = [r.getMessage() for r in caplog.records if ".parquet" in r.getMessage()]
    assert parquet and all(f"http://{S3_BUCKET}.localhost:{port}/" in m for m in parquet), parquet


def test_checkpoint_state_files_are_opened_through_arrows_native_filesystem(store, tmp_path):
    """State files (read_operator_state, restores) reach Arrow as native files, not Python file objects."""
    from checkpointing import CheckpointLayout

    for layout in (CheckpointLayout(base_url=store.url("files"), storage=store.storage),
                   CheckpointLayout(base_url=str(tmp_path / "local"))):  # fmt: skip
        fs, root = layout.filesystem()
        fs.makedirs(f"{root}/operator_state", exist_ok=True)
        fs.pipe_file(f"{root}/operator_state/part-0.bin", b"state bytes")
        with layout.open_input_file(f"{root}/operator_state/part-0.bin") as f:
            assert not isinstance(f, pa.PythonFile) and not isinstance(f, pa.BufferReader), type(f)
            assert f.read() == b"state bytes"
        with pytest.raises(FileNotFoundError):
            layout.open_input_file(f"{root}/operator_state/missing.bin")
    # a location Arrow cannot open natively: read through fsspec on the calling thread
    memory = CheckpointLayout(base_url="memory://native-reads")
    fs, root = memory.filesystem()
    fs.pipe_file(f"{root}/x.bin", b"in memory")
    assert isinstance(memory.open_input_file(f"{root}/x.bin"), pa.BufferReader)


def test_options_arrow_cannot_stand_in_for_keep_delta_rs_handler():
    assert arrow_filesystem("s3://b/t", {"AWS_PROFILE": "dev"}) is None  # a profile: how to sign is unknown here
    assert arrow_filesystem("gs://b/t", {}) is None
    s3 = arrow_filesystem("s3://b/t", {"aws_access_key_id": "AK", "aws_secret_access_key": "SK",
                                       "endpoint": "https://b.s3.eu-west-1.amazonaws.com",
                                       "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "true", "region": "eu-west-1",
                                       "aws_conditional_put": "etag"})  # fmt: skip
    assert isinstance(s3, pafs.SubTreeFileSystem) and s3.base_path == "b/t/"
    settings = s3.base_fs.__reduce__()[1][0]  # Arrow exposes its settings only to pickle
    assert settings["endpoint_override"] == "s3.eu-west-1.amazonaws.com"  # the bucket is Arrow's to add
    assert settings["force_virtual_addressing"] and settings["region"] == "eu-west-1"
    assert (settings["access_key"], settings["scheme"]) == ("AK", "https")
    local = arrow_filesystem("file:///tmp/with%20space", {})
    assert isinstance(local.base_fs, pafs.LocalFileSystem) and local.base_path == "/tmp/with space/"


# -- stress: many short processes that read and exit ------------------------------------------------

#: Processes per reading path (3 paths: 60 processes, 30-60 s on a quiet machine, longer on a loaded
#: one); FLINKLIKE_STRESS_RUNS overrides it (the abort it guards against hit 5 of 150 forks).
RUNS_PER_PATH = int(os.environ.get("FLINKLIKE_STRESS_RUNS", "20"))

# One Python process imports everything once, then forks one child per run: the child reads through
# one path and exits through the interpreter's normal finalization (where the abort happened), its
# stderr going to a file. A fresh interpreter per run costs 1-20 s of imports on the shared
# machines here; a fork costs milliseconds and exits the same way. The parent does no I/O before
# forking (no fsspec loop, no Arrow thread pool to inherit).
FORKER = textwrap.dedent("""
    import json, os, sys, tempfile, time
    from checkpointing import CheckpointLayout, list_completed_checkpoints, read_operator_state
    from connectors import read_delta_table
    from flinklike_spark.config import Configuration

    config, table, checkpoints, job_id, checkpoint_id, runs = json.loads(sys.argv[1])
    storage = Configuration(config).storage
    layout = CheckpointLayout(base_url=checkpoints, storage=storage)
    paths = {
        "read_delta_table": lambda: read_delta_table(table, storage=storage).num_rows,
        "list_completed_checkpoints": lambda: len(list_completed_checkpoints(layout, job_id)),
        "read_operator_state": lambda: read_operator_state(layout, job_id, checkpoint_id, "count").num_rows,
    }
    results = {}
    for name, read in paths.items():
        outcomes = results[name] = []
        started = time.monotonic()
        for run in range(runs):
            err = tempfile.TemporaryFile()
            pid = os.fork()
            if pid == 0:
                os.dup2(err.fileno(), 2)
                code = 0 if read() > 0 else 5  # exits through sys.exit: the interpreter finalizes
                sys.exit(code)
            _, status = os.waitpid(pid, 0)
            err.seek(0)
            outcomes.append([os.waitstatus_to_exitcode(status), err.read().decode(errors="replace")[-2000:]])
        print(f"{name}: {runs} processes in {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)
    print("RESULTS", json.dumps(results))
""")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_each_reading_path_exits_cleanly_in_many_short_processes(s3_server):
    from checkpointing import CheckpointLayout, latest_completed, list_completed_checkpoints
    from connectors import DeltaSink, SequenceSource
    from flinklike_spark import KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor

    class Count(KeyedProcessFunction):
        def open(self, runtime_context):
            self.count = runtime_context.get_state(ValueStateDescriptor("count"))

        def process_element(self, value, ctx):
            self.count.update((self.count.value() or 0) + 1)
            yield value

    table, checkpoints = s3_server.url("stress-table"), s3_server.url("stress-checkpoints")
    write_table(s3_server, table, rows=50, files=20)  # many files: many reads on Arrow's I/O threads
    config = s3_server.config | {
        "execution.checkpointing.interval": "300ms",
        "execution.checkpointing.dir": checkpoints,
    }
    env = StreamExecutionEnvironment.get_execution_environment(config)
    source = SequenceSource(num_keys=20, records_per_key=None, rows_per_second=200)
    env.from_source(source).key_by("key").process(Count()).uid("count").sink_to(DeltaSink(s3_server.url("out")))
    client = env.execute_async("stress checkpoints")
    layout = CheckpointLayout(base_url=checkpoints, storage=s3_server.storage)
    try:
        deadline = time.monotonic() + 120
        # by id: one checkpoint is retained, so two are never listed but for a moment
        while (latest := latest_completed(layout, client.job_id)) is None or latest.checkpoint_id < 2:
            assert time.monotonic() < deadline and not client.done(), "no checkpoints completed"
            time.sleep(0.3)
    finally:
        client.cancel()
    # cancel() only asks (as Flink's does): a checkpoint being committed then, and its retention, still land
    deadline = time.monotonic() + 60
    while not client.done():
        assert time.monotonic() < deadline, "the cancelled job did not end"
        time.sleep(0.2)
    checkpoint_id = list_completed_checkpoints(layout, client.job_id)[-1].checkpoint_id
    arguments = json.dumps([s3_server.config, table, checkpoints, client.job_id, checkpoint_id, RUNS_PER_PATH])
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", FORKER, arguments], capture_output=True, text=True, timeout=840)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULTS ")), None)
    assert done.returncode == 0 and line, done.stderr[-3000:]
    results = json.loads(line.removeprefix("RESULTS "))
    print(f"{sum(map(len, results.values()))} processes in {time.monotonic() - started:.0f} s:\n{done.stderr}")
    for path, outcomes in results.items():
        assert len(outcomes) == RUNS_PER_PATH
        bad = [(code, err) for code, err in outcomes if code != 0 or "terminate called" in err]
        assert not bad, f"{path}: {len(bad)} of {len(outcomes)} runs did not exit cleanly, e.g. {bad[0]}"
