"""A manual clock for code that takes an injectable ``clock()``."""

from __future__ import annotations

__all__ = ["ManualClock"]


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
