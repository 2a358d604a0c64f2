"""A keyed timeout service with an injectable clock (Flink's ``TimerService``).

Each key has at most one pending timeout. Registering a key again replaces its
timeout and issues a new :class:`TimeoutTicket`; the old ticket stops being
valid. A fired timeout stays registered (and its ticket valid) until it is
unregistered or replaced, so the listener can ask :meth:`TimerService.is_valid`
from inside the callback, exactly like Flink's ``TimerService.isValid``.

Two ways to drive time:

* **Background mode** (production): ``TimerService()`` reads ``time.monotonic``;
  :meth:`TimerService.start` spawns one daemon thread that fires due timeouts,
  :meth:`TimerService.close` stops it.
* **Manual mode** (tests): ``TimerService(clock=ManualClock())``. No thread is
  ever started; :meth:`ManualClock.advance` moves time forward and fires every
  timeout that became due, synchronously, in deadline order, on the calling
  thread. :meth:`TimerService.fire_due_timeouts` does the same for any clock.
"""

from __future__ import annotations

import enum
import heapq
import itertools
import logging
import threading
import time
import weakref
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Generic, TypeVar

from flinklike_spark._runtime.state_machine import StateMachine
from flinklike_spark.errors import IllegalStateTransition

__all__ = [
    "ManualClock",
    "TimeoutCallback",
    "TimeoutTicket",
    "TimerService",
    "TimerServiceState",
]

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)

# Upper bound of one wait of the background thread: a safety net against a
# clock that is not time.monotonic drifting from Condition.wait's real time.
_MAX_WAIT_SECONDS = 1.0


@dataclass(frozen=True, order=True)
class TimeoutTicket:
    """Identifies one registration of a timeout; compare tickets with ``==``.

    Attributes:
        serial: unique per :class:`TimerService`, increasing in registration order.
        deadline: clock reading (seconds) at which the timeout fires.
    """

    serial: int
    deadline: float = field(compare=False)


TimeoutCallback = Callable[[K, TimeoutTicket], None]
"""Called as ``callback(key, ticket)`` when the timeout registered for ``key`` fires."""


class TimerServiceState(enum.Enum):
    """Lifecycle of a :class:`TimerService`."""

    CREATED = "created"
    RUNNING = "running"
    CLOSED = "closed"


_TIMER_SERVICE_TRANSITIONS: dict[TimerServiceState, frozenset[TimerServiceState]] = {
    TimerServiceState.CREATED: frozenset(
        {
            TimerServiceState.RUNNING,  # start(): background thread (or manual mode) is live
            TimerServiceState.CLOSED,  # close() before start()
        }
    ),
    TimerServiceState.RUNNING: frozenset({TimerServiceState.CLOSED}),  # close()
    TimerServiceState.CLOSED: frozenset(),  # terminal
}


class ManualClock:
    """A clock that only moves when told to; a callable returning seconds.

    Passing a ``ManualClock`` to :class:`TimerService` puts that service in
    manual mode and attaches it to the clock, so :meth:`advance` fires its due
    timeouts. One clock may drive several services.

    Args:
        start: the initial reading, in seconds.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)
        self._lock = threading.Lock()
        self._services: weakref.WeakSet[TimerService] = weakref.WeakSet()

    def __call__(self) -> float:
        return self._now

    @property
    def now(self) -> float:
        """The current reading in seconds."""
        return self._now

    def advance(self, delta: timedelta) -> None:
        """Move time forward by ``delta`` and fire every timeout that became due.

        Callbacks run synchronously on the calling thread before this returns.

        Raises:
            TypeError: ``delta`` is not a ``timedelta``.
            ValueError: ``delta`` is negative (time never goes back).
            Exception: the first exception raised by a callback, after all due
                callbacks have run.
        """
        if not isinstance(delta, timedelta):
            raise TypeError(f"advance() takes a timedelta, got {type(delta).__name__} {delta!r}")
        if delta < timedelta(0):
            raise ValueError(f"advance() takes a non-negative timedelta, got {delta}")
        with self._lock:
            self._now += delta.total_seconds()
        first_error: BaseException | None = None
        for service in list(self._services):
            try:
                service.fire_due_timeouts()
            except Exception as e:  # noqa: BLE001 - re-raised below after all services ran
                if first_error is None:
                    first_error = e
        if first_error is not None:
            raise first_error

    def _attach(self, service: TimerService) -> None:
        self._services.add(service)

    def __repr__(self) -> str:
        return f"ManualClock(now={self._now})"


@dataclass
class _Timeout(Generic[K]):
    key: K
    ticket: TimeoutTicket
    callback: TimeoutCallback
    fired: bool = False


class TimerService(Generic[K]):
    """Keyed timeouts: at most one pending timeout per key.

    Thread-safe: every method may be called from any thread. Callbacks run
    without the service's lock held (on the background thread, or on the thread
    calling :meth:`fire_due_timeouts` / :meth:`ManualClock.advance`), so they may
    call back into the service.

    Args:
        clock: seconds source. A :class:`ManualClock` selects manual mode; any
            other callable is read by the background thread.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._manual = isinstance(clock, ManualClock)
        self._lock = threading.Lock()
        self._wakeup = threading.Condition(self._lock)
        self._state = StateMachine("TimerService", TimerServiceState.CREATED, _TIMER_SERVICE_TRANSITIONS)
        self._timeouts: dict[K, _Timeout[K]] = {}
        # (deadline, serial, key); stale entries (replaced or unregistered
        # timeouts) are skipped when popped rather than removed eagerly.
        self._heap: list[tuple[float, int, K]] = []
        self._serials = itertools.count()
        self._thread: threading.Thread | None = None
        if isinstance(clock, ManualClock):
            clock._attach(self)

    @property
    def state(self) -> TimerServiceState:
        return self._state.state

    @property
    def is_manual(self) -> bool:
        """True when driven by a :class:`ManualClock` (no background thread)."""
        return self._manual

    def start(self) -> None:
        """Start firing timeouts; in background mode spawn the timer thread.

        Timeouts registered before ``start`` are kept and fire once started.

        Raises:
            IllegalStateTransition: the service was already started or closed.
        """
        self._state.transition(TimerServiceState.RUNNING, expected=TimerServiceState.CREATED)
        if not self._manual:
            self._thread = threading.Thread(target=self._run, name="timer-service", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Drop every timeout and stop the background thread. Idempotent.

        After ``close``, :meth:`unregister_timeout` is a no-op and
        :meth:`is_valid` returns False; :meth:`register_timeout` raises.
        """
        with self._wakeup:
            if self._state.state is TimerServiceState.CLOSED:
                return
            self._state.transition(TimerServiceState.CLOSED)
            self._timeouts.clear()
            self._heap.clear()
            self._wakeup.notify_all()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def register_timeout(self, key: K, delay: timedelta, callback: TimeoutCallback) -> TimeoutTicket:
        """Register (or replace) the timeout of ``key``, firing ``delay`` from now.

        Args:
            key: any hashable; a pending timeout of the same key is replaced.
            delay: non-negative time until the timeout fires.
            callback: called as ``callback(key, ticket)`` when it fires, at most once.

        Returns:
            The ticket of this registration; valid until replaced or unregistered.

        Raises:
            TypeError: ``delay`` is not a ``timedelta``.
            ValueError: ``delay`` is negative.
            IllegalStateTransition: the service is closed.
        """
        if not isinstance(delay, timedelta):
            raise TypeError(f"delay must be a timedelta, got {type(delay).__name__} {delay!r}")
        if delay < timedelta(0):
            raise ValueError(f"delay must be non-negative, got {delay}")
        with self._wakeup:
            if self._state.state is TimerServiceState.CLOSED:
                raise IllegalStateTransition(
                    f"TimerService is CLOSED; register_timeout({key!r}) is valid only in CREATED or RUNNING",
                    source=TimerServiceState.CLOSED,
                )
            ticket = TimeoutTicket(next(self._serials), self._clock() + delay.total_seconds())
            self._timeouts[key] = _Timeout(key, ticket, callback)
            heapq.heappush(self._heap, (ticket.deadline, ticket.serial, key))
            self._wakeup.notify_all()
            return ticket

    def unregister_timeout(self, key: K) -> None:
        """Cancel the timeout of ``key`` and invalidate its ticket; no-op for an unknown key."""
        with self._lock:
            self._timeouts.pop(key, None)

    def is_valid(self, key: K, ticket: TimeoutTicket) -> bool:
        """True iff ``ticket`` is the current registration of ``key`` (fired or not)."""
        with self._lock:
            timeout = self._timeouts.get(key)
            return timeout is not None and timeout.ticket == ticket

    def pending_keys(self) -> frozenset[K]:
        """Keys whose timeout has not fired yet."""
        with self._lock:
            return frozenset(k for k, t in self._timeouts.items() if not t.fired)

    def fire_due_timeouts(self) -> int:
        """Fire, on the calling thread, every timeout whose deadline has passed.

        Works in any state but CLOSED and whether or not :meth:`start` was
        called, so manual-mode tests need not start the service.

        Returns:
            How many callbacks ran.

        Raises:
            Exception: the first exception a callback raised, after all due
                callbacks ran (later ones are logged).
        """
        due = self._collect_due()
        first_error: BaseException | None = None
        for timeout in due:
            try:
                timeout.callback(timeout.key, timeout.ticket)
            except Exception as e:  # noqa: BLE001 - re-raised below once every due callback ran
                if first_error is None:
                    first_error = e
                else:
                    log.exception("timeout callback for %r failed", timeout.key)
        if first_error is not None:
            raise first_error
        return len(due)

    def _collect_due(self) -> list[_Timeout[K]]:
        with self._lock:
            if self._state.state is TimerServiceState.CLOSED:
                return []
            now = self._clock()
            due: list[_Timeout[K]] = []
            while self._heap and self._heap[0][0] <= now:
                _, serial, key = heapq.heappop(self._heap)
                timeout = self._timeouts.get(key)
                if timeout is None or timeout.ticket.serial != serial or timeout.fired:
                    continue  # replaced or unregistered since it was pushed
                timeout.fired = True
                due.append(timeout)
            return due

    def _seconds_to_next_deadline(self) -> float:
        # Caller holds the lock.
        while self._heap:
            deadline, serial, key = self._heap[0]
            timeout = self._timeouts.get(key)
            if timeout is None or timeout.ticket.serial != serial or timeout.fired:
                heapq.heappop(self._heap)
                continue
            return max(0.0, deadline - self._clock())
        return _MAX_WAIT_SECONDS

    def _run(self) -> None:
        while True:
            with self._wakeup:
                if self._state.state is TimerServiceState.CLOSED:
                    return
                wait = self._seconds_to_next_deadline()
                if wait > 0:
                    self._wakeup.wait(min(wait, _MAX_WAIT_SECONDS))
                    continue
            try:
                self.fire_due_timeouts()
            except Exception:  # noqa: BLE001 - the timer thread must survive a faulty callback
                log.exception("timeout callback failed")

    def __repr__(self) -> str:
        mode = "manual" if self._manual else "background"
        return f"TimerService({mode}, state={self.state.name}, timeouts={len(self._timeouts)})"
