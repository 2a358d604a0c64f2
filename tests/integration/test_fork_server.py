"""The TaskExecutor fork server: forked TaskExecutors behave as spawned ones would.

Each test forks real children from a real helper process (no cluster unless the
test runs a job): return codes as :class:`subprocess.Popen` reports them, the
request's working directory and environment (not the helper's), the client's
stdout/stderr at the time of the request, the helper's exit with its client,
and a restart after the helper was killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from connectors import CollectSink, SequenceSource
from flinklike_spark import MapFunction, StreamExecutionEnvironment
from flinklike_spark._runtime.cluster.fork_server import ForkServer
from tests.support.processes import is_task_executor

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture
def server():
    server = ForkServer()
    yield server
    server.close()


def _wait_gone(pid: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, f"process {pid} still runs"
        time.sleep(0.05)


def test_a_forked_child_runs_in_the_requests_directory_and_reports_its_exit_code(server, tmp_path):
    child = server.spawn(dict(os.environ), str(tmp_path))
    process = psutil.Process(child.pid)
    deadline = time.monotonic() + 30
    while not is_task_executor(process):  # process_main names itself first thing
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert process.cwd() == str(tmp_path)
    assert process.ppid() == server.pid != os.getpid()
    assert child.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(0.1)
    child.stdin.close()  # EOF before a bootstrap: process_main fails to read one and exits with 1
    assert child.wait(30) == 1 and child.returncode == 1 and child.poll() == 1


def test_a_killed_child_reports_the_signal_as_popen_does(server, tmp_path):
    child = server.spawn(dict(os.environ), str(tmp_path))
    child.kill()
    assert child.wait(30) == -signal.SIGKILL
    child.kill()  # a no-op once it exited
    child.stdin.close()


def test_a_killed_helper_is_replaced_by_the_next_spawn(server, tmp_path):
    first = server.spawn(dict(os.environ), str(tmp_path))
    helper = server.pid
    os.kill(helper, signal.SIGKILL)
    _wait_gone(helper)
    second = server.spawn(dict(os.environ), str(tmp_path))
    assert server.pid not in (None, helper)
    assert psutil.Process(second.pid).ppid() == server.pid
    for child in (first, second):
        child.stdin.close()
    assert second.wait(30) == 1
    # The first child's reaper died with its helper; it still ends (EOF on its stdin) and is reported gone.
    assert first.wait(30) == -signal.SIGKILL
    _wait_gone(first.pid)


CLIENT = textwrap.dedent(
    """
    import os, sys, time
    from flinklike_spark._runtime.cluster.fork_server import fork_server
    child = fork_server().spawn(dict(os.environ), os.getcwd())
    print(fork_server().pid, child.pid, flush=True)
    time.sleep(600)
    """
)


def test_the_helper_and_its_children_end_with_their_client(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    client = subprocess.Popen([sys.executable, "-c", CLIENT], stdout=subprocess.PIPE, env=env, cwd=tmp_path)
    try:
        helper, child = map(int, client.stdout.readline().split())
        client.kill()
        client.wait(10)
        _wait_gone(helper)
        _wait_gone(child)
    finally:
        if client.poll() is None:
            client.kill()
        client.stdout.close()


class ReadEnv(MapFunction):
    def map(self, value):
        return {"key": value["key"], "env": os.environ.get("FORK_SERVER_TEST", "unset"), "pid": os.getpid()}


def _run_job(name: str, **options) -> list:
    env = StreamExecutionEnvironment.get_execution_environment(options)
    env.from_source(SequenceSource(num_keys=2, records_per_key=1), name="s").map(ReadEnv()).sink_to(CollectSink(name))
    return CollectSink.rows(env.execute(name))


def test_a_task_executor_sees_the_clients_environment_at_launch_not_the_helpers(monkeypatch):
    monkeypatch.delenv("FORK_SERVER_TEST", raising=False)
    first = _run_job("fork-env-1")
    monkeypatch.setenv("FORK_SERVER_TEST", "set after the helper started")
    second = _run_job("fork-env-2")
    assert {row["env"] for row in first} == {"unset"}
    assert {row["env"] for row in second} == {"set after the helper started"}
    assert os.getpid() not in {row["pid"] for row in first + second}


def test_spawn_still_starts_fresh_interpreters():
    rows = _run_job("spawned", **{"flinklike.local.taskmanager-start-method": "spawn"})
    assert sorted(row["key"] for row in rows) == [0, 1]
    with pytest.raises(ValueError, match="taskmanager-start-method.*forkserver.*spawn|forkserver.*spawn"):
        StreamExecutionEnvironment.get_execution_environment({"flinklike.local.taskmanager-start-method": "vfork"})


def test_the_helper_forks_only_while_single_threaded(server, tmp_path):
    """A fork from a multi-threaded process can deadlock the child (and Python 3.12+ warns): numpy's OpenBLAS
    pool and the jemalloc background threads of pyarrow and deltalake must not run in the helper."""
    child = server.spawn(dict(os.environ), str(tmp_path))
    try:
        helper = psutil.Process(server.pid)
        threads = [open(f"/proc/{helper.pid}/task/{t.id}/comm").read().strip() for t in helper.threads()]
        assert len(threads) == 1, threads
    finally:
        os.kill(child.pid, signal.SIGKILL)
        _wait_gone(child.pid)


def test_a_helper_with_threads_refuses_to_fork_and_says_why(server, tmp_path):
    env = dict(os.environ) | {"OPENBLAS_NUM_THREADS": "2"}  # the caller's setting wins: numpy starts a thread
    with pytest.raises(OSError, match=r"does not fork while it has threads \(2 threads: "):
        server.spawn(env, str(tmp_path))
