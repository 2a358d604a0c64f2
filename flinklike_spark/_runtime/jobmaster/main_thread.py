"""The JobMaster's main thread: one thread that runs posted callables in order.

Every state change of the scheduler and the checkpoint coordinator happens on
this thread (Flink's ``ComponentMainThreadExecutor``), so that code needs no
locks. Other threads (RPC handlers, future callbacks) only post work with
:meth:`MainThreadExecutor.execute` or :meth:`MainThreadExecutor.schedule`.

:class:`ManualMainThreadExecutor` has the same interface for tests: nothing
runs until the test calls :meth:`~ManualMainThreadExecutor.trigger_all`, and
delayed work runs only when :meth:`~ManualMainThreadExecutor.advance` moves its
manual clock past the deadline.

Errors raised by posted callables are handed to an injectable error handler;
they are never swallowed silently.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Protocol

__all__ = [
    "ComponentMainThreadExecutor",
    "MainThreadExecutor",
    "ManualMainThreadExecutor",
    "ScheduledHandle",
]

log = logging.getLogger(__name__)

ErrorHandler = Callable[[BaseException], None]


def _log_error(exc: BaseException) -> None:
    log.error("uncaught error in a main-thread callable", exc_info=(type(exc), exc, exc.__traceback__))


class ComponentMainThreadExecutor(Protocol):
    """What the scheduler needs from a main-thread executor."""

    def execute(self, fn: Callable[[], object]) -> None: ...

    def schedule(self, delay: timedelta, fn: Callable[[], object]) -> ScheduledHandle: ...

    def assert_running_in_main_thread(self) -> None: ...


class ScheduledHandle:
    """A delayed callable; :meth:`cancel` prevents it from running if it has not started yet."""

    def __init__(self, fn: Callable[[], object], deadline: float) -> None:
        self._fn = fn
        self.deadline = deadline
        self._lock = threading.Lock()
        self._state = "pending"  # pending | started | cancelled

    def cancel(self) -> bool:
        """Cancel; True if it will not run, False if it already started (or ran)."""
        with self._lock:
            if self._state == "pending":
                self._state = "cancelled"
            return self._state == "cancelled"

    @property
    def cancelled(self) -> bool:
        return self._state == "cancelled"

    @property
    def done(self) -> bool:
        """True once it ran (or started running) or was cancelled."""
        return self._state != "pending"

    def _claim(self) -> bool:
        with self._lock:
            if self._state != "pending":
                return False
            self._state = "started"
            return True

    def _run(self) -> None:
        if self._claim():
            self._fn()


def _check_delay(delay: timedelta) -> float:
    if not isinstance(delay, timedelta):
        raise TypeError(f"delay must be a datetime.timedelta, got {type(delay).__name__}: {delay!r}")
    seconds = delay.total_seconds()
    if seconds < 0:
        raise ValueError(f"delay must not be negative, got {delay}")
    return seconds


class MainThreadExecutor:
    """A single daemon thread running posted callables in FIFO order.

    The thread starts in the constructor. Callables posted with :meth:`execute`
    run in posting order; delayed ones run once their deadline passes, in
    deadline order (ties: posting order), interleaved with immediate ones.

    Args:
        name: the thread's name.
        error_handler: called (on the main thread) with every exception a callable
            raises; default logs it at ERROR with the traceback. If the handler
            itself raises, that is logged too and the thread keeps running.
        clock: monotonic seconds source for the deadlines of :meth:`schedule`.
    """

    def __init__(
        self,
        *,
        name: str = "jobmaster-main",
        error_handler: ErrorHandler | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._name = name
        self._error_handler = error_handler or _log_error
        self._clock = clock
        self._cond = threading.Condition()
        self._ready: collections.deque[Callable[[], object]] = collections.deque()
        self._timers: list[tuple[float, int, ScheduledHandle]] = []
        self._seq = itertools.count()
        self._shutdown = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def __enter__(self) -> MainThreadExecutor:
        return self

    def __exit__(self, *exc_info) -> None:
        self.shutdown()

    def execute(self, fn: Callable[[], object]) -> None:
        """Post ``fn`` to run on the main thread (from any thread).

        Raises:
            RuntimeError: the executor was shut down.
        """
        with self._cond:
            if self._shutdown:
                raise RuntimeError(f"main thread executor {self._name!r} is shut down; cannot run {fn!r}")
            self._ready.append(fn)
            self._cond.notify()

    def schedule(self, delay: timedelta, fn: Callable[[], object]) -> ScheduledHandle:
        """Run ``fn`` on the main thread once ``delay`` has passed (from any thread).

        Raises:
            RuntimeError: the executor was shut down.
            TypeError / ValueError: ``delay`` is not a non-negative timedelta.
        """
        seconds = _check_delay(delay)
        with self._cond:
            if self._shutdown:
                raise RuntimeError(f"main thread executor {self._name!r} is shut down; cannot schedule {fn!r}")
            handle = ScheduledHandle(fn, self._clock() + seconds)
            heapq.heappush(self._timers, (handle.deadline, next(self._seq), handle))
            self._cond.notify()
        return handle

    def is_main_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def assert_running_in_main_thread(self) -> None:
        """Raises RuntimeError naming the calling thread if it is not the main thread."""
        if not self.is_main_thread():
            raise RuntimeError(
                f"must run in main thread {self._name!r}, but runs in {threading.current_thread().name!r}"
            )

    def shutdown(self, *, timeout: timedelta = timedelta(seconds=10)) -> None:
        """Stop the thread; idempotent. Queued and delayed callables that did not start are dropped.

        Waits up to ``timeout`` for a running callable to return, unless called
        from the main thread itself.
        """
        with self._cond:
            self._shutdown = True
            dropped = len(self._ready) + len(self._timers)
            self._ready.clear()
            for _, _, handle in self._timers:
                handle.cancel()
            self._timers.clear()
            self._cond.notify_all()
        if dropped:
            log.debug("main thread executor %r dropped %d pending callables on shutdown", self._name, dropped)
        if not self.is_main_thread():
            self._thread.join(timeout.total_seconds())

    def _next(self) -> Callable[[], object] | None:
        with self._cond:
            while not self._shutdown:
                now = self._clock()
                while self._timers and self._timers[0][0] <= now:
                    handle = heapq.heappop(self._timers)[2]
                    if not handle.done:
                        self._ready.append(handle._run)
                if self._ready:
                    return self._ready.popleft()
                wait = self._timers[0][0] - now if self._timers else None
                self._cond.wait(wait)
            return None

    def _loop(self) -> None:
        while (fn := self._next()) is not None:
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 - handed to the error handler
                try:
                    self._error_handler(exc)
                except BaseException:  # noqa: BLE001 - the loop must survive a broken handler
                    log.exception("error handler of main thread %r raised", self._name)


def _raise(exc: BaseException) -> None:
    raise exc


class ManualMainThreadExecutor:
    """A main-thread executor for tests: work runs only when the test triggers it.

    The thread that creates it is its main thread; :meth:`trigger_all` and
    :meth:`advance` must be called from it. :meth:`execute` and :meth:`schedule`
    may be called from any thread.

    Args:
        error_handler: called with every exception a callable raises; default
            re-raises it out of :meth:`trigger_all` / :meth:`advance` (the rest
            of the queue stays queued).
    """

    def __init__(self, *, error_handler: ErrorHandler | None = None) -> None:
        self._error_handler = error_handler or _raise
        self._lock = threading.Lock()
        self._ready: collections.deque[Callable[[], object]] = collections.deque()
        self._timers: list[tuple[float, int, ScheduledHandle]] = []
        self._seq = itertools.count()
        self._now = 0.0
        self._shutdown = False
        self._main = threading.current_thread()

    @property
    def now(self) -> timedelta:
        """The manual clock: time advanced since construction."""
        return timedelta(seconds=self._now)

    @property
    def num_queued(self) -> int:
        """Callables ready to run (not counting delayed ones)."""
        with self._lock:
            return len(self._ready)

    @property
    def num_scheduled(self) -> int:
        """Delayed callables not yet due and not cancelled."""
        with self._lock:
            return sum(1 for _, _, h in self._timers if not h.done)

    def execute(self, fn: Callable[[], object]) -> None:
        """Queue ``fn``; it runs on the next :meth:`trigger_all`.

        Raises:
            RuntimeError: the executor was shut down.
        """
        with self._lock:
            if self._shutdown:
                raise RuntimeError(f"manual main thread executor is shut down; cannot run {fn!r}")
            self._ready.append(fn)

    def schedule(self, delay: timedelta, fn: Callable[[], object]) -> ScheduledHandle:
        """Queue ``fn`` to run once :meth:`advance` moved the clock by ``delay``."""
        seconds = _check_delay(delay)
        with self._lock:
            if self._shutdown:
                raise RuntimeError(f"manual main thread executor is shut down; cannot schedule {fn!r}")
            handle = ScheduledHandle(fn, self._now + seconds)
            heapq.heappush(self._timers, (handle.deadline, next(self._seq), handle))
        return handle

    def is_main_thread(self) -> bool:
        return threading.current_thread() is self._main

    def assert_running_in_main_thread(self) -> None:
        """Raises RuntimeError naming the calling thread if it is not the creating thread."""
        if not self.is_main_thread():
            raise RuntimeError(
                f"must run in the test's main thread {self._main.name!r}, "
                f"but runs in {threading.current_thread().name!r}"
            )

    def trigger_all(self) -> int:
        """Run queued callables, including ones they post, until the queue is empty.

        Returns:
            how many callables ran.
        """
        self.assert_running_in_main_thread()
        ran = 0
        while True:
            with self._lock:
                if not self._ready:
                    return ran
                fn = self._ready.popleft()
            ran += 1
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 - handed to the error handler
                self._error_handler(exc)

    def advance(self, delta: timedelta) -> int:
        """Move the clock by ``delta``, queue every delayed callable now due (deadline order), run all.

        Returns:
            how many callables ran.
        """
        seconds = _check_delay(delta)
        self.assert_running_in_main_thread()
        with self._lock:
            self._now += seconds
            while self._timers and self._timers[0][0] <= self._now:
                handle = heapq.heappop(self._timers)[2]
                if not handle.done:
                    self._ready.append(handle._run)
        return self.trigger_all()

    def shutdown(self) -> None:
        """Drop everything queued; later :meth:`execute` calls raise. Idempotent."""
        with self._lock:
            self._shutdown = True
            self._ready.clear()
            for _, _, handle in self._timers:
                handle.cancel()
            self._timers.clear()
