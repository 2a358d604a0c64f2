"""Manual clocks for code that takes an injectable ``clock()`` (and timers that fire when it is advanced)."""

from __future__ import annotations

from datetime import timedelta

__all__ = ["FakeTimers", "ManualClock"]


class ManualClock:
    """``clock()`` returns :attr:`now`, which only :meth:`advance` (or assignment) changes.

    The unit is the caller's: milliseconds for state TTL and window timers,
    seconds for ``time.monotonic``-style clocks.
    """

    def __init__(self, now: float = 0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, delta: float) -> None:
        self.now += delta


class FakeTimers:
    """``clock`` and ``register`` for the handler; ``advance`` moves time and fires due timers in order.

    ``timers`` holds ``[deadline, callback, cancelled_or_fired]`` per registration.
    """

    def __init__(self, start: float) -> None:
        self.now = start
        self.timers: list[list] = []

    def clock(self) -> float:
        return self.now

    def register(self, delay: timedelta, callback):
        assert delay >= timedelta(0), f"negative timer delay {delay}"
        entry = [self.now + delay.total_seconds(), callback, False]
        self.timers.append(entry)

        class Handle:
            def cancel(self_inner):
                entry[2] = True

        return Handle()

    def live(self) -> int:
        """Timers neither cancelled nor fired."""
        return sum(1 for t in self.timers if not t[2])

    def advance(self, seconds: float) -> None:
        self.now += seconds
        while True:
            due = [t for t in self.timers if not t[2] and t[0] <= self.now]
            if not due:
                return
            entry = min(due, key=lambda t: t[0])
            entry[2] = True
            entry[1]()
