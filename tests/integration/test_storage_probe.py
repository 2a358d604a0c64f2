"""Storage that cannot work fails ``execute()`` at once (issue 27, item 2), local file systems.

A checkpoint directory or sink path that cannot be written used to fail every
checkpoint (or commit), and the job restarted under the default strategy until
it was killed. Like Flink's JobMaster initializing checkpoint storage, the job's
locations are probed when it is submitted: the error names the setting, the
path and the cause, and no TaskExecutor is started. The bound below is
generous; the point is that ``execute()`` returns instead of looping (before
the probe, these tests ran into their pytest timeout).

Storage that breaks while a job runs keeps the restart strategy's handling:
test_checkpoint_faults.py.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from connectors import CollectSink, DeltaSink, FileSink, SequenceSource
from flinklike_spark import StreamExecutionEnvironment
from flinklike_spark.errors import CheckpointNotFoundError, StorageUnavailableError

pytestmark = pytest.mark.timeout(90)

FAIL_FAST_SECONDS = 30


def job(config: dict, sink=None) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.from_source(SequenceSource(num_keys=2, records_per_key=50, rows_per_second=20)).sink_to(
        sink if sink is not None else CollectSink("probe")
    )
    return env


def fails_fast(env: StreamExecutionEnvironment, error=StorageUnavailableError):
    children = len(psutil.Process().children(recursive=True))
    started = time.monotonic()
    with pytest.raises(error) as info:
        env.execute("storage probe")
    assert time.monotonic() - started < FAIL_FAST_SECONDS
    assert len(psutil.Process().children(recursive=True)) == children, "a TaskExecutor was started"
    return info.value


def checkpointing(directory: str) -> dict:
    return {"execution.checkpointing.interval": "200ms", "execution.checkpointing.dir": directory}


def test_a_checkpoint_directory_under_proc_fails_execute_at_once():
    error = fails_fast(job(checkpointing("/proc/flinklike-probe/checkpoints")))
    message = str(error)
    assert "execution.checkpointing.dir '/proc/flinklike-probe/checkpoints' cannot be written" in message
    assert "FileNotFoundError" in message and "the job was not started" in message
    assert error.url == "/proc/flinklike-probe/checkpoints" and error.what == "execution.checkpointing.dir"


def test_a_file_where_the_checkpoint_directory_belongs_fails_execute_at_once(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    error = fails_fast(job(checkpointing(str(blocker / "checkpoints"))))
    assert str(blocker / "checkpoints") in str(error) and "NotADirectoryError" in str(error)
    assert blocker.read_text() == "not a directory"


def test_a_sink_path_that_cannot_be_written_names_the_operator_and_the_connector(tmp_path):
    delta = fails_fast(job({}, DeltaSink("/proc/flinklike-probe/table")))
    assert "operator 'Sink: DeltaSink' (DeltaSink table) '/proc/flinklike-probe/table' cannot be written" in str(delta)
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    files = fails_fast(job({}, FileSink(str(blocker / "out"), format="json")))
    assert f"(FileSink directory) '{blocker / 'out'}' cannot be written" in str(files)


def test_a_missing_restore_path_fails_execute_at_once(tmp_path):
    missing = str(tmp_path / "no-such-checkpoints")
    error = fails_fast(job({"execution.state-recovery.path": f"{missing}/{'0' * 32}/chk-3"}), CheckpointNotFoundError)
    assert missing in str(error) and "does not exist" in str(error)


@contextlib.contextmanager
def read_only_mount(path: Path):
    """A read-only tmpfs at ``path`` (needs root with CAP_SYS_ADMIN), unmounted afterwards."""
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(path)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"mounting a read-only tmpfs needs root with CAP_SYS_ADMIN: {mounted.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def test_a_read_only_mount_fails_execute_at_once(tmp_path):
    with read_only_mount(tmp_path / "ro") as mount:
        checkpoints = fails_fast(job(checkpointing(str(mount / "checkpoints"))))
        sink = fails_fast(job({}, FileSink(str(mount / "out"), format="json")))
    for error in (checkpoints, sink):
        assert "Read-only file system" in str(error), str(error)


@pytest.mark.slow
def test_a_job_whose_storage_works_runs_and_the_probe_leaves_nothing_behind(tmp_path):
    checkpoints, table = tmp_path / "checkpoints", tmp_path / "table"
    env = job(checkpointing(str(checkpoints)), DeltaSink(str(table)))
    env.execute("probed")
    left = [p for p in tmp_path.rglob("*") if "probe" in p.name]
    assert not left, left
    assert (table / "_delta_log").is_dir() and (checkpoints / "checkpoints").is_dir()
    assert os.listdir(checkpoints)
