"""JobClient requests on a job that is over, timeouts, and Ctrl-C of the client (issue 9 item 9); the result future."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from checkpointing import list_completed_checkpoints
from connectors import CollectSink, SequenceSource
from flinklike_spark import StreamExecutionEnvironment
from flinklike_spark.errors import FlinklikeError, JobCancelledError, JobClientTimeoutError, JobNotRunningError
from tests.support.processes import task_executors_under

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def environment(tmp_path, *, records_per_key: int, rows_per_second: float | None = None, **config):
    env = StreamExecutionEnvironment.get_execution_environment(
        {"flinklike.local.taskmanager-mode": "thread", "execution.checkpointing.dir": str(tmp_path / "ck")} | config
    )
    source = SequenceSource(num_keys=2, records_per_key=records_per_key, rows_per_second=rows_per_second)
    env.from_source(source, name="seq").key_by("key").map(lambda r: r).sink_to(CollectSink("out"))
    return env


def wait_for_status(client, name: str) -> None:
    deadline = time.monotonic() + 60
    while client.get_job_status().name != name:
        assert time.monotonic() < deadline, f"job is {client.get_job_status().name}, not {name}"
        time.sleep(0.05)


def test_savepoint_and_cancel_of_a_finished_job_say_it_finished(tmp_path):
    client = environment(tmp_path, records_per_key=5).execute_async("short")
    wait_for_status(client, "FINISHED")
    # Finished, its cluster still up (nobody waited yet) ...
    with pytest.raises(
        JobNotRunningError, match=f"cannot take a savepoint of job {client.job_id}: it is already FINISHED"
    ):
        client.trigger_savepoint(timeout=30)
    with pytest.raises(JobNotRunningError, match=f"job {client.job_id} was not cancelled: it already FINISHED"):
        client.cancel()
    client.wait(60)
    # ... and after wait() closed the cluster (before: "main thread executor ... is shut down").
    with pytest.raises(JobNotRunningError, match="it is already FINISHED") as info:
        client.trigger_savepoint(timeout=30)
    assert isinstance(info.value, FlinklikeError) and info.value.status == "FINISHED"
    with pytest.raises(JobNotRunningError, match="it is already FINISHED"):
        client.stop_with_savepoint(timeout=30)
    with pytest.raises(JobNotRunningError, match="was not cancelled: it already FINISHED"):
        client.cancel()


def test_cancelling_a_cancelled_job_again_is_a_no_op(tmp_path):
    client = environment(tmp_path, records_per_key=10**9, rows_per_second=100).execute_async("endless")
    wait_for_status(client, "RUNNING")
    client.cancel()
    with pytest.raises(JobCancelledError):
        client.wait(60)
    client.cancel()  # as in Flink: acknowledged, nothing happens
    with pytest.raises(JobNotRunningError, match="it is already CANCELED"):
        client.trigger_savepoint(timeout=30)


class BlockUntilFlag:
    """A map that holds its task thread at the first record until ``flag`` exists (``<flag>.blocked`` says it does)."""

    def __init__(self, flag):
        self.flag = str(flag)

    def __call__(self, row):
        if not os.path.exists(self.flag):
            open(f"{self.flag}.blocked", "w").close()
        while not os.path.exists(self.flag):
            time.sleep(0.01)
        return row


def test_stop_with_savepoint_timeout_says_what_timed_out_and_what_it_waits_for(tmp_path):
    flag = tmp_path / "release"
    env = StreamExecutionEnvironment.get_execution_environment(
        {"flinklike.local.taskmanager-mode": "thread", "execution.checkpointing.dir": str(tmp_path / "ck")}
    )
    source = SequenceSource(num_keys=2, records_per_key=10**9, rows_per_second=100)
    env.from_source(source, name="seq").key_by("key").map(BlockUntilFlag(flag)).uid("blocked").sink_to(
        CollectSink("out")
    )
    client = env.execute_async("blocked")
    try:
        wait_for_status(client, "RUNNING")
        deadline = time.monotonic() + 60
        while not (tmp_path / "release.blocked").exists():  # the barrier must come after a record
            assert time.monotonic() < deadline, "the map never received a record"
            time.sleep(0.01)
        with pytest.raises(JobClientTimeoutError) as info:
            client.stop_with_savepoint(timeout=1)
        message = str(info.value)
        assert message.startswith(f"stop-with-savepoint of job {client.job_id} did not complete within 1 s (savepoint ")
        # The blocked map (chained with the sink) has not acknowledged; the sources have.
        assert "waits for acknowledgements from ['blocked-0#0/" in message, message
        assert message.endswith("; the job stops when its savepoint completes, or keeps running if the savepoint fails")
        assert isinstance(info.value, TimeoutError)
    finally:
        # As in Flink, the client's timeout does not abort the operation: once the task
        # goes on, the savepoint completes and the job stops.
        flag.touch()
        with pytest.raises(JobCancelledError):
            client.wait(60)


def test_stop_with_savepoint_takes_no_checkpoint_after_the_savepoint(tmp_path):
    """A periodic checkpoint completing between the savepoint and the stop would commit sink output
    beyond the savepoint, and restoring the savepoint would then be refused (or duplicate rows)."""
    config = {"execution.checkpointing.interval": "10ms"}
    for _ in range(5):
        client = environment(tmp_path, records_per_key=10**9, rows_per_second=2_000, **config).execute_async("endless")
        while not list_completed_checkpoints(str(tmp_path / "ck"), client.job_id):
            time.sleep(0.01)
        wait_for_status(client, "RUNNING")
        savepoint = client.stop_with_savepoint(timeout=60)
        with pytest.raises(JobCancelledError):
            client.wait(60)
        completed = list_completed_checkpoints(str(tmp_path / "ck"), client.job_id)
        assert max(c.checkpoint_id for c in completed) == savepoint.checkpoint_id


CTRL_C_JOB = textwrap.dedent(
    """
    import os, sys, time
    from connectors import CollectSink, SequenceSource
    from flinklike_spark import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment({
        "parallelism.default": 2, "local.number-taskmanager": 2,
        "execution.checkpointing.interval": "100ms", "execution.checkpointing.dir": sys.argv[1],
    })
    source = SequenceSource(num_keys=4, records_per_key=10**9, rows_per_second=2000)
    env.from_source(source, name="endless").key_by("key").map(lambda r: r).sink_to(CollectSink("out"))
    client = env.execute_async("ctrl-c")
    while not os.path.isdir(sys.argv[1]) or client.get_job_status().name != "RUNNING":
        time.sleep(0.05)
    time.sleep(0.5)  # checkpoints are being taken
    print("running", flush=True)
    if sys.argv[2] == "in-wait":
        client.wait()  # what execute() does
    else:
        time.sleep(600)  # the program does something else while the job runs
    """
)


@contextlib.contextmanager
def _sigint_as_in_a_terminal():
    """SIGINT at its default while a child starts, as a shell leaves it. xdist's workers ignore SIGINT
    (execnet), an ignored signal stays ignored across exec, and a Python started so ignores Ctrl-C: the
    test then hung, on a worker that had not yet started a SparkSession (whose SparkContext installs a
    SIGINT handler of its own, which exec resets to the default)."""
    previous = signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("where", ["in-wait", "outside-wait"])
def test_ctrl_c_cancels_the_job_and_raises_keyboard_interrupt(tmp_path, where):
    script = tmp_path / "ctrl_c.py"
    script.write_text(CTRL_C_JOB)
    with _sigint_as_in_a_terminal():
        client = subprocess.Popen(
            [sys.executable, str(script), str(tmp_path / "ck"), where],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group, as a job in a terminal
        )
    try:
        assert client.stdout.readline().strip() == "running"
        task_executors = [p.pid for p in psutil.Process(client.pid).children(recursive=True)]  # and the fork server
        assert len(task_executors_under(client.pid)) == 2
        time.sleep(0.5)  # the script is inside client.wait() (or time.sleep()) by now
        os.killpg(client.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole group
        _, stderr = client.communicate(timeout=60)
    finally:
        if client.poll() is None:
            os.killpg(client.pid, signal.SIGKILL)
            client.wait()
    assert client.returncode == -signal.SIGINT, stderr
    # The KeyboardInterrupt's traceback is the only one (TaskExecutors may log after it).
    assert "\nKeyboardInterrupt\n" in stderr and stderr.count("Traceback") == 1, stderr
    if where == "in-wait":
        assert "interrupted: cancelled job" in stderr and "(CANCELED after the interrupt)" in stderr, stderr
    for internal in ("RuntimeError", "cannot schedule new futures", "is shut down", "Fatal Python error",
                     "Exception in thread", "ERROR"):  # fmt: skip
        assert internal not in stderr, stderr
    deadline = time.monotonic() + 10
    while any(os.path.exists(f"/proc/{pid}") for pid in task_executors):
        assert time.monotonic() < deadline, "TaskExecutor processes outlived the client"
        time.sleep(0.1)


#: ``python -m flinklike_spark.cli`` that writes every thread's stack to stderr on SIGUSR1 (a hang's diagnosis)
CLI_WITH_STACKS_ON_SIGUSR1 = (
    "import faulthandler, runpy, signal; faulthandler.register(signal.SIGUSR1, all_threads=True); "
    "runpy.run_module('flinklike_spark.cli', run_name='__main__', alter_sys=True)"
)


def test_ctrl_c_under_flinklike_run_prints_one_line(tmp_path):
    """``flinklike run``: Ctrl-C cancels the job, stops the cluster and says so in one line, no traceback."""
    script = tmp_path / "ctrl_c.py"
    script.write_text(CTRL_C_JOB)
    with _sigint_as_in_a_terminal():
        client = subprocess.Popen(
            [sys.executable, "-c", CLI_WITH_STACKS_ON_SIGUSR1, "run", "--no-progress", str(script), str(tmp_path / "ck"),
             "in-wait"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip
    try:
        assert client.stdout.readline().strip() == "running"
        time.sleep(0.5)
        os.killpg(client.pid, signal.SIGINT)
        try:
            _, stderr = client.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            client.send_signal(signal.SIGUSR1)
            time.sleep(2)
            os.killpg(client.pid, signal.SIGKILL)
            pytest.fail(f"flinklike run did not end 60 s after Ctrl-C; its threads:\n{client.communicate()[1]}")
    finally:
        if client.poll() is None:
            os.killpg(client.pid, signal.SIGKILL)
            client.wait()
    assert client.returncode == 130, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    submitted = [line for line in lines if line.endswith("submitted; dashboard and REST API: " + line.split()[-1])]
    job_id = submitted[0].split()[1]
    assert [line for line in lines if line not in submitted] == [
        f"flinklike run: interrupted (Ctrl-C); job {job_id} CANCELED"
    ], stderr


def test_job_execution_result_is_a_future():
    e = StreamExecutionEnvironment.get_execution_environment(
        {"flinklike.local.taskmanager-mode": "thread", "parallelism.default": 2}
    )
    e.from_collection([{"k": 1}, {"k": 2}]).sink_to(CollectSink("out"))
    future = e.execute_async("future").get_job_execution_result()
    result = future.result(timeout=60)
    assert future.done() and future.exception() is None
    assert sorted(r["k"] for r in CollectSink.rows(result, name="out")) == [1, 2]
