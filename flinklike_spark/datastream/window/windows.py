"""Windows and durations: ``Time``, ``TimeWindow``, ``CountWindow``, ``GlobalWindow``.

Timestamps are epoch milliseconds (``int``); ``Time`` builds them. A
:class:`TimeWindow` covers ``[start, end)``; its ``max_timestamp()`` is
``end - 1``, the timestamp at which the event-time trigger fires.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable
from datetime import timedelta
from typing import Any, NamedTuple, Protocol

from flinklike_spark.common.time import Time
from flinklike_spark.errors import ConfigurationError

__all__ = ["MAX_TIMESTAMP", "CountWindow", "GlobalWindow", "Time", "TimeWindow", "Window"]

#: Java's Long.MAX_VALUE: the max timestamp of global and count windows.
MAX_TIMESTAMP = 2**63 - 1
_MIN_TIMESTAMP = -(2**63)


def _millis(value: Time | timedelta | int, what: str) -> int:
    """Accept ``Time`` (PyFlink 1.x), ``Duration`` / ``timedelta`` (PyFlink 2.x) or an int of milliseconds."""
    if isinstance(value, Time):
        return value.to_milliseconds()
    if isinstance(value, timedelta):
        return value // timedelta(milliseconds=1)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ConfigurationError(
        f"{what} must be a Duration (or timedelta), a Time or an int of milliseconds, got {value!r}"
    )


# -- windows --------------------------------------------------------------------------------


class _MergeCallback(Protocol):
    """What ``TimeWindow.merge_windows`` reports to (a ``MergingWindowAssigner.MergeCallback``)."""

    def merge(self, to_be_merged: Iterable, merge_result: Any) -> None: ...


class Window(abc.ABC):
    """A finite group of elements; windows are compared by value and must be hashable.

    The built-in windows are NamedTuples registered as virtual subclasses.
    """

    @abc.abstractmethod
    def max_timestamp(self) -> int:
        """The largest timestamp that still belongs to this window."""


class TimeWindow(NamedTuple):
    """The time interval ``[start, end)``.

    A ``NamedTuple`` (hashable, cheap to build, picklable): the window operator
    creates one per element and uses it as part of state keys.
    """

    start: int
    end: int

    def max_timestamp(self) -> int:
        return self.end - 1

    def intersects(self, other: TimeWindow) -> bool:
        """Whether the windows overlap or are adjacent (merging session windows)."""
        return self.start <= other.end and self.end >= other.start

    def cover(self, other: TimeWindow) -> TimeWindow:
        """The smallest window containing both."""
        return TimeWindow(min(self.start, other.start), max(self.end, other.end))

    @staticmethod
    def get_window_start_with_offset(timestamp: int, offset: int, window_size: int) -> int:
        """Start of the window of ``window_size`` containing ``timestamp`` (Flink's formula)."""
        remainder = (timestamp - offset) % window_size
        return timestamp - remainder

    @staticmethod
    def merge_windows(windows: Iterable[TimeWindow], callback: _MergeCallback) -> None:
        """Merge overlapping windows: sort by start, sweep, report each group of two or more."""
        ordered = sorted(windows)
        groups: list[tuple[TimeWindow, list[TimeWindow]]] = []
        for window in ordered:
            if groups and groups[-1][0].intersects(window):
                cover, members = groups[-1]
                groups[-1] = (cover.cover(window), [*members, window])
            else:
                groups.append((window, [window]))
        for cover, members in groups:
            if len(members) > 1:
                callback.merge(members, cover)


Window.register(TimeWindow)


class CountWindow(NamedTuple):
    """A window of a count assigner, numbered by ``id``."""

    id: int

    def max_timestamp(self) -> int:
        return MAX_TIMESTAMP


Window.register(CountWindow)


class GlobalWindow(NamedTuple):
    """The single window of :class:`GlobalWindows` (all elements of a key)."""

    def max_timestamp(self) -> int:
        return MAX_TIMESTAMP

    @staticmethod
    def get() -> GlobalWindow:
        return _GLOBAL_WINDOW


_GLOBAL_WINDOW = GlobalWindow()
Window.register(GlobalWindow)
