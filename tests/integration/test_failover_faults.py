"""Faults in the fault path: every case ends running or clearly failed, never hangs, leaves no process."""

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
from flinklike_spark import JobExecutionError, MapFunction, StreamExecutionEnvironment
from flinklike_spark.errors import NonRecoverableError, mark_non_recoverable
from tests.support.failover_jobs import (
    FailOnDemand,
    ProgressSink,
    assert_no_task_executor_left,
    inject_fault,
    progress,
    task_executor_processes,
    wait_for,
)
from tests.support.processes import task_executors_under

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

NUM_KEYS, RECORDS_PER_KEY = 4, 300


def keyed_env(extra: dict | None = None) -> StreamExecutionEnvironment:
    config = {
        "parallelism.default": 2,
        "local.number-taskmanager": 2,
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": 3,
        "restart-strategy.fixed-delay.delay": "100 ms",
    }
    return StreamExecutionEnvironment.get_execution_environment(config | (extra or {}))


def run_keyed(env: StreamExecutionEnvironment, function: MapFunction):
    (
        # 3 s of input: the injected failures (after ~0.3 s) hit tasks long before their input ends
        env.from_source(
            SequenceSource(num_keys=NUM_KEYS, records_per_key=RECORDS_PER_KEY, rows_per_second=400, batch_size=20),
            name="seq",
        )  # fmt: skip
        .rebalance()
        .map(function)
        .key_by("key")
        .map(lambda row: row)
        .sink_to(CollectSink("out"))
    )
    client = env.execute_async("faults")
    try:
        return client, CollectSink.rows(client.wait(180))
    finally:
        if not client.done():
            client.cancel()


class FailsOnceInSubtaskZero(MapFunction):
    """Subtask 0's first attempt fails at its 100th row."""

    def open(self, runtime_context):
        self.attempt = runtime_context.attempt_number
        self.subtask = runtime_context.index_of_this_subtask
        self.seen = 0

    def map(self, value):
        self.seen += 1
        if self.attempt == 0 and self.subtask == 0 and self.seen == 100:
            raise RuntimeError("first failure")
        return value


class FailsInOpenOfAttempt(FailsOnceInSubtaskZero):
    """...and its restart then fails while initializing (in ``open``)."""

    def open(self, runtime_context):
        super().open(runtime_context)
        if self.attempt == 1 and self.subtask == 0:
            raise RuntimeError("failure while the restarted task initializes")


def test_a_failure_while_the_restarted_tasks_initialize_restarts_again_and_the_job_finishes():
    client, rows = run_keyed(keyed_env(), FailsInOpenOfAttempt())
    # without checkpoints the restart starts over: every key's rows arrive, at least once
    assert {(r["key"], r["seq"]) for r in rows} == {(k, s) for k in range(NUM_KEYS) for s in range(RECORDS_PER_KEY)}
    causes = [str(e.root_cause).splitlines()[0] for e in client.get_exception_history()]
    assert len(causes) == 2 and "first failure" in causes[0] and "initializes" in causes[1]
    assert client.num_restarts == 2
    assert_no_task_executor_left()


class FailsOnceAndBreaksOnCancel(FailsOnceInSubtaskZero):
    """...and subtask 1's ``close`` raises while its cancellation runs."""

    def close(self):
        if self.attempt == 0 and self.subtask == 1:
            raise RuntimeError("close failed during cancellation")


def test_a_failure_during_cancellation_is_not_a_new_failure():
    client, rows = run_keyed(keyed_env(), FailsOnceAndBreaksOnCancel())
    assert len({(r["key"], r["seq"]) for r in rows}) == NUM_KEYS * RECORDS_PER_KEY
    [entry] = client.get_exception_history()
    assert "first failure" in str(entry.root_cause)
    assert_no_task_executor_left()


@mark_non_recoverable
class PoisonRecord(ValueError):
    pass


class RaisesNonRecoverable(MapFunction):
    def map(self, value):
        if value["seq"] == 50:
            raise PoisonRecord(f"cannot process {value}")
        return value


def test_a_non_recoverable_user_error_fails_the_job_at_once_despite_restarts_left():
    with pytest.raises(JobExecutionError, match="not recoverable") as failure:
        run_keyed(keyed_env({"restart-strategy.fixed-delay.attempts": 100}), RaisesNonRecoverable())
    assert "PoisonRecord" in str(failure.value.__cause__)
    assert_no_task_executor_left()


class AlwaysFails(MapFunction):
    def map(self, value):
        raise RuntimeError("always")


def test_an_exhausted_restart_strategy_fails_the_job_with_every_cause():
    with pytest.raises(
        JobExecutionError, match="recovery is suppressed by FixedDelayRestartBackoffTimeStrategy"
    ) as failure:
        run_keyed(keyed_env({"restart-strategy.fixed-delay.attempts": 2}), AlwaysFails())
    assert str(failure.value).count("always") >= 3  # the last cause and the history of all three
    assert_no_task_executor_left()


class ImportsAMissingModule(MapFunction):
    def open(self, runtime_context):
        import flinklike_test_module_not_installed  # noqa: F401 - the failure under test

    def map(self, value):
        return value


def test_a_missing_module_in_a_task_fails_the_job_at_once_naming_the_fix():
    env = keyed_env({"restart-strategy.fixed-delay.attempts": 100})
    started = time.monotonic()
    with pytest.raises(JobExecutionError, match="not recoverable") as failure:
        run_keyed(env, ImportsAMissingModule())
    cause = str(failure.value.__cause__)
    assert "ModuleNotFoundError" in cause and "flinklike_test_module_not_installed" in cause
    assert "install its package on every machine that runs TaskExecutors" in cause
    assert time.monotonic() - started < 30  # not 100 restarts
    assert_no_task_executor_left()


def test_non_recoverable_error_type_is_public():
    assert issubclass(NonRecoverableError, Exception)


class FailTwoRegionsOnce(MapFunction):
    """Subtasks 1 and 2 fail on their first attempt, one after the other."""

    def open(self, runtime_context):
        index = runtime_context.index_of_this_subtask
        self.fail_after = {1: 200, 2: 260}.get(index) if runtime_context.attempt_number == 0 else None
        self.seen = 0

    def map(self, value):
        self.seen += 1
        if self.fail_after is not None and self.seen > self.fail_after:
            raise RuntimeError("injected")
        return value


def test_a_second_failure_while_a_restart_is_pending_restarts_both_regions_once(tmp_path):
    env = StreamExecutionEnvironment.get_execution_environment(
        {
            "parallelism.default": 4,
            "local.number-taskmanager": 2,
            "restart-strategy.type": "fixed-delay",
            "restart-strategy.fixed-delay.attempts": 5,
            "restart-strategy.fixed-delay.delay": "2 s",  # region 2 fails while region 1 waits
        }
    )
    env.disable_operator_chaining()
    (
        env.from_source(
            SequenceSource(num_keys=4, records_per_key=None, rows_per_second=800, batch_size=10), name="seq"
        )  # fmt: skip
        .uid("seq")
        .map(FailTwoRegionsOnce())
        .uid("map")
        .sink_to(ProgressSink(str(tmp_path)))
        .uid("sink")
    )
    client = env.execute_async("two failures")
    try:
        wait_for(lambda: all(any(a == 1 for a, _, _ in progress(tmp_path, s)) for s in (1, 2)), "both regions back")
        history = client.get_exception_history()
        assert [sorted(e.restarted) for e in history] == [["map-1", "seq-1", "sink-1"], ["map-2", "seq-2", "sink-2"]]
        assert history[1].timestamp.timestamp() - history[0].timestamp.timestamp() < 2.0, "not while pending"
        attempts = client.get_attempt_numbers()
        assert {k: a for k, a in attempts.items() if a} == {
            f"{v}-{s}": 1 for v in ("seq", "map", "sink") for s in (1, 2)
        }
    finally:
        client.cancel()
        with pytest.raises(JobExecutionError):
            client.wait(60)
    assert_no_task_executor_left()


def test_a_killed_jobmaster_process_takes_its_task_executors_with_it(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys, time
            from connectors import SequenceSource, CollectSink
            from flinklike_spark import StreamExecutionEnvironment
            env = StreamExecutionEnvironment.get_execution_environment(
                {"parallelism.default": 2, "local.number-taskmanager": 2})
            env.from_source(SequenceSource(num_keys=4, records_per_key=None, rows_per_second=500), name="s") \\
                .key_by("key").map(lambda r: r).sink_to(CollectSink("never"))
            client = env.execute_async("orphaned")
            print("RUNNING", flush=True)
            time.sleep(600)
            """
        )
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    jobmaster = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, env=env)
    try:
        assert jobmaster.stdout.readline().strip() == b"RUNNING"
        children = psutil.Process(jobmaster.pid).children(recursive=True)  # the fork server too
        assert len(task_executors_under(jobmaster.pid)) == 2
        jobmaster.send_signal(signal.SIGKILL)
        jobmaster.wait(10)
        gone, alive = psutil.wait_procs(children, timeout=30)
        assert not alive, f"TaskExecutors outlived their JobMaster: {[p.pid for p in alive]}"
    finally:
        if jobmaster.poll() is None:
            jobmaster.kill()
        jobmaster.stdout.close()


def test_a_frozen_task_executor_is_declared_lost_replaced_and_the_job_recovers(tmp_path):
    env = StreamExecutionEnvironment.get_execution_environment(
        {
            "parallelism.default": 2,
            "local.number-taskmanager": 2,
            "heartbeat.interval": "200 ms",
            "heartbeat.timeout": "2 s",
            "restart-strategy.type": "fixed-delay",
            "restart-strategy.fixed-delay.attempts": 3,
            "restart-strategy.fixed-delay.delay": "100 ms",
        }
    )
    env.disable_operator_chaining()
    (
        env.from_source(
            SequenceSource(num_keys=2, records_per_key=None, rows_per_second=200, batch_size=10), name="seq"
        )  # fmt: skip
        .uid("seq")
        .sink_to(ProgressSink(str(tmp_path)))
        .uid("sink")
    )
    client = env.execute_async("frozen")
    try:
        wait_for(lambda: progress(tmp_path, 0) and progress(tmp_path, 1), "both regions emitting")
        victim = task_executor_processes()[0]
        victim.send_signal(signal.SIGSTOP)
        wait_for(lambda: client.get_exception_history(), "the frozen TaskExecutor declared lost", timeout=30)
        assert "heartbeat" in str(client.get_exception_history()[0].root_cause)
        wait_for(
            lambda: not victim.is_running() or victim.status() == psutil.STATUS_ZOMBIE, "the frozen process killed"
        )
        restarted = {int(k.rsplit("-", 1)[1]) for k in client.get_exception_history()[0].restarted}
        assert restarted, "the frozen TaskExecutor's region restarted"
        wait_for(lambda: all(any(a >= 1 for a, _, _ in progress(tmp_path, s)) for s in restarted),
                 "restarted regions emitting again")  # fmt: skip
        assert not client.done()
    finally:
        client.cancel()
        with pytest.raises(JobExecutionError):
            client.wait(60)
    assert_no_task_executor_left()


def test_a_restore_point_that_cannot_be_restored_fails_the_job_at_once(tmp_path):
    from flinklike_spark import KeyedProcessFunction, ValueStateDescriptor

    class Count(KeyedProcessFunction):
        def open(self, runtime_context):
            self.count = runtime_context.get_state(ValueStateDescriptor("count"))

        def process_element(self, value, ctx):
            self.count.update((self.count.value() or 0) + 1)
            yield value

    directory = tmp_path / "checkpoints"
    env = keyed_env({"execution.checkpointing.dir": str(directory), "restart-strategy.fixed-delay.attempts": 100})
    (
        env.from_source(
            SequenceSource(num_keys=4, records_per_key=None, rows_per_second=400, batch_size=20), name="seq"
        )  # fmt: skip
        .key_by("key")
        .process(Count())
        .uid("count")
        .map(FailOnDemand(str(tmp_path)))
        .sink_to(CollectSink("never"))
    )
    client = env.execute_async("unrestorable")
    try:
        deadline = time.monotonic() + 60
        while True:  # a savepoint needs every task running
            try:
                savepoint = client.trigger_savepoint(timeout=30)
                break
            except Exception:  # noqa: BLE001
                assert time.monotonic() < deadline, "no savepoint could be taken"
                time.sleep(0.2)
        state = directory / "operator_state" / f"job_id={client.job_id}" / f"checkpoint_id={savepoint.checkpoint_id}"
        files = list(state.iterdir())
        assert files
        for path in files:
            path.unlink()
        inject_fault(tmp_path, 0)
        with pytest.raises(JobExecutionError, match="not recoverable") as failure:
            client.wait(120)
        assert "cannot restore checkpoint" in str(failure.value)
        assert len(client.get_exception_history()) == 2  # the injected failure, then the restore failure
    finally:
        if not client.done():
            client.cancel()
    assert_no_task_executor_left()


class SlowToRestart(FailsOnceInSubtaskZero):
    """...and its restarted attempt takes 3 s to initialize, so the test can strike while it deploys."""

    def open(self, runtime_context):
        super().open(runtime_context)
        if self.attempt == 1:
            time.sleep(3)


def test_a_task_executor_dying_while_the_restarted_tasks_deploy_is_one_more_restart():
    env = keyed_env()
    (
        env.from_source(
            SequenceSource(num_keys=NUM_KEYS, records_per_key=RECORDS_PER_KEY, rows_per_second=400, batch_size=20),
            name="seq",
        )  # fmt: skip
        .rebalance()
        .map(SlowToRestart())
        .key_by("key")
        .map(lambda row: row)
        .sink_to(CollectSink("out"))
    )
    client = env.execute_async("dies while deploying")
    try:
        wait_for(lambda: client.get_exception_history(), "the first failure")
        wait_for(lambda: set(client.get_attempt_numbers().values()) == {1}, "the restart's new attempts")
        time.sleep(1.0)  # inside the restarted maps' 3 s open()
        task_executor_processes()[0].send_signal(signal.SIGKILL)
        rows = CollectSink.rows(client.wait(180))
    finally:
        if not client.done():
            client.cancel()
    assert {(r["key"], r["seq"]) for r in rows} == {(k, s) for k in range(NUM_KEYS) for s in range(RECORDS_PER_KEY)}
    history = client.get_exception_history()
    assert len(history) >= 2 and "first failure" in str(history[0].root_cause)
    assert set(client.get_attempt_numbers().values()) == {2}
    assert_no_task_executor_left()
