"""MainThreadExecutor (real thread) and ManualMainThreadExecutor (tests)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from flinklike_spark._runtime.jobmaster.main_thread import MainThreadExecutor, ManualMainThreadExecutor

WAIT = 5.0  # upper bound for events; tests finish as soon as they are set


@pytest.fixture
def executor():
    errors: list[BaseException] = []
    ex = MainThreadExecutor(name="test-main", error_handler=errors.append)
    ex.errors = errors
    yield ex
    ex.shutdown()


def _barrier(executor) -> None:
    """Wait until everything posted before this call has run."""
    done = threading.Event()
    executor.execute(done.set)
    assert done.wait(WAIT)


def test_runs_callables_in_order_on_one_named_thread(executor):
    seen = []
    for i in range(50):
        executor.execute(lambda i=i: seen.append((i, threading.current_thread().name)))
    _barrier(executor)
    assert [i for i, _ in seen] == list(range(50))
    assert {name for _, name in seen} == {"test-main"}


def test_errors_go_to_the_handler_and_the_loop_survives(executor):
    boom = ValueError("boom")

    def fail():
        raise boom

    ran = []
    executor.execute(fail)
    executor.execute(lambda: ran.append(1))
    _barrier(executor)
    assert executor.errors == [boom]
    assert ran == [1]


def test_default_handler_logs_the_error(caplog):
    with MainThreadExecutor(name="logging-main") as ex:
        ex.execute(lambda: 1 / 0)
        _barrier(ex)
    assert any("ZeroDivisionError" in (r.exc_text or "") or r.exc_info for r in caplog.records)


def test_assert_running_in_main_thread(executor):
    with pytest.raises(RuntimeError, match="test-main"):
        executor.assert_running_in_main_thread()
    result = []
    executor.execute(lambda: result.append(executor.is_main_thread()))
    executor.execute(executor.assert_running_in_main_thread)
    _barrier(executor)
    assert result == [True]
    assert executor.errors == []


def test_schedule_runs_after_immediate_work(executor):
    order = []
    fired = threading.Event()
    executor.schedule(timedelta(milliseconds=20), lambda: (order.append("delayed"), fired.set()))
    executor.execute(lambda: order.append("now"))
    assert fired.wait(WAIT)
    assert order == ["now", "delayed"]


def test_cancelled_schedule_never_runs(executor):
    ran = []
    handle = executor.schedule(timedelta(milliseconds=1), lambda: ran.append("cancelled"))
    # cancel may lose the race against a 1 ms timer; it must report which way it went
    cancelled = handle.cancel()
    later = threading.Event()
    executor.schedule(timedelta(milliseconds=5), later.set)
    assert later.wait(WAIT)
    assert ran == ([] if cancelled else ["cancelled"])
    long = executor.schedule(timedelta(hours=1), lambda: ran.append("long"))
    assert long.cancel() and long.cancelled


def test_schedule_rejects_bad_delays(executor):
    with pytest.raises(TypeError, match="timedelta"):
        executor.schedule(5, lambda: None)
    with pytest.raises(ValueError, match="negative"):
        executor.schedule(timedelta(seconds=-1), lambda: None)


def test_shutdown_is_idempotent_and_rejects_new_work():
    ex = MainThreadExecutor(name="short-lived")
    ex.shutdown()
    ex.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        ex.execute(lambda: None)
    with pytest.raises(RuntimeError, match="shut down"):
        ex.schedule(timedelta(seconds=1), lambda: None)


def test_shutdown_from_the_main_thread_does_not_deadlock():
    ex = MainThreadExecutor(name="self-stop")
    done = threading.Event()
    ex.execute(lambda: (ex.shutdown(), done.set()))
    assert done.wait(WAIT)


# -- manual ----------------------------------------------------------------------------------


def test_manual_runs_nothing_until_triggered():
    ex = ManualMainThreadExecutor()
    seen = []
    ex.execute(lambda: seen.append(1))
    ex.execute(lambda: (seen.append(2), ex.execute(lambda: seen.append(3))))
    assert seen == [] and ex.num_queued == 2
    assert ex.trigger_all() == 3
    assert seen == [1, 2, 3]
    assert ex.trigger_all() == 0


def test_manual_advance_runs_due_timers_in_deadline_order():
    ex = ManualMainThreadExecutor()
    seen = []
    ex.schedule(timedelta(seconds=10), lambda: seen.append("10s"))
    ex.schedule(timedelta(seconds=5), lambda: seen.append("5s"))
    cancelled = ex.schedule(timedelta(seconds=1), lambda: seen.append("cancelled"))
    assert cancelled.cancel()
    ex.advance(timedelta(seconds=4))
    assert seen == []
    ex.advance(timedelta(seconds=1))
    assert seen == ["5s"]
    assert ex.num_scheduled == 1
    ex.advance(timedelta(seconds=5))
    assert seen == ["5s", "10s"]
    assert ex.now == timedelta(seconds=10)


def test_manual_error_handling():
    ex = ManualMainThreadExecutor()
    ex.execute(lambda: 1 / 0)
    ex.execute(lambda: None)
    with pytest.raises(ZeroDivisionError):
        ex.trigger_all()
    assert ex.num_queued == 1

    errors = []
    collecting = ManualMainThreadExecutor(error_handler=errors.append)
    collecting.execute(lambda: 1 / 0)
    collecting.execute(lambda: errors.append("after"))
    collecting.trigger_all()
    assert [type(e) for e in errors[:1]] == [ZeroDivisionError] and errors[1] == "after"


def test_manual_main_thread_is_the_creating_thread():
    ex = ManualMainThreadExecutor()
    ex.assert_running_in_main_thread()
    outcome = []

    def other():
        ex.execute(lambda: outcome.append("posted from other thread"))
        try:
            ex.assert_running_in_main_thread()
        except RuntimeError as exc:
            outcome.append(str(exc))

    t = threading.Thread(target=other, name="intruder")
    t.start()
    t.join(WAIT)
    assert "intruder" in outcome[0]
    ex.trigger_all()
    assert outcome[1] == "posted from other thread"


def test_manual_shutdown():
    ex = ManualMainThreadExecutor()
    ex.execute(lambda: None)
    ex.schedule(timedelta(seconds=1), lambda: None)
    ex.shutdown()
    ex.shutdown()
    assert ex.num_queued == 0 and ex.num_scheduled == 0
    with pytest.raises(RuntimeError, match="shut down"):
        ex.execute(lambda: None)
