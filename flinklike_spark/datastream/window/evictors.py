"""Evictors: remove elements from a fired window pane before and/or after the window function (PyFlink's).

``windowed_stream.evictor(CountEvictor.of(100))`` keeps, for each firing, only
the last 100 elements of the pane. With an evictor the pane keeps every
element with its timestamp (also under ``reduce``/``aggregate``, which then run
over the elements left at firing time), as Flink's ``EvictingWindowOperator``
does. An evictor gets the pane's elements as a ``list`` of
:class:`TimestampedValue` in arrival order and removes the ones to evict from
that list in place; what is left stays in the pane for the next firing (unless
the trigger purges).
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = ["CountEvictor", "DeltaEvictor", "Evictor", "TimeEvictor", "TimestampedValue"]


class TimestampedValue(NamedTuple):
    """An element of a pane and its event timestamp (None without event time)."""

    value: Any
    timestamp: int | None

    def get_value(self) -> Any:
        return self.value

    def get_timestamp(self) -> int | None:
        return self.timestamp

    def has_timestamp(self) -> bool:
        return self.timestamp is not None


class Evictor(abc.ABC):
    """Removes elements of a pane: ``evict_before`` runs before the window function, ``evict_after`` after."""

    class EvictorContext(abc.ABC):
        @abc.abstractmethod
        def get_current_processing_time(self) -> int: ...

        @abc.abstractmethod
        def get_current_watermark(self) -> int: ...

    @abc.abstractmethod
    def evict_before(self, elements: list[TimestampedValue], size: int, window: Any, evictor_context: Any) -> None:
        """Remove from ``elements`` (in place) what the window function must not see."""

    @abc.abstractmethod
    def evict_after(self, elements: list[TimestampedValue], size: int, window: Any, evictor_context: Any) -> None:
        """Remove from ``elements`` (in place) what must not stay in the pane after the firing."""


class _BeforeOrAfter(Evictor):
    """An evictor that evicts either before (default) or after the window function."""

    def __init__(self, do_evict_after: bool) -> None:
        self.do_evict_after = bool(do_evict_after)

    def evict_before(self, elements: list[TimestampedValue], size: int, window: Any, evictor_context: Any) -> None:
        if not self.do_evict_after:
            self._evict(elements, size)

    def evict_after(self, elements: list[TimestampedValue], size: int, window: Any, evictor_context: Any) -> None:
        if self.do_evict_after:
            self._evict(elements, size)

    @abc.abstractmethod
    def _evict(self, elements: list[TimestampedValue], size: int) -> None: ...


class CountEvictor(_BeforeOrAfter):
    """Keeps at most ``max_count`` elements: the most recent ones (Flink's ``CountEvictor``)."""

    def __init__(self, max_count: int, do_evict_after: bool = False) -> None:
        if isinstance(max_count, bool) or not isinstance(max_count, int) or max_count < 0:
            raise ValueError(f"CountEvictor needs max_count >= 0, got {max_count!r}")
        super().__init__(do_evict_after)
        self.max_count = max_count

    @staticmethod
    def of(max_count: int, do_evict_after: bool = False) -> CountEvictor:
        return CountEvictor(max_count, do_evict_after)

    def _evict(self, elements: list[TimestampedValue], size: int) -> None:
        if len(elements) > self.max_count:
            del elements[: len(elements) - self.max_count]

    def __repr__(self) -> str:
        return f"CountEvictor.of({self.max_count}, do_evict_after={self.do_evict_after})"


class TimeEvictor(_BeforeOrAfter):
    """Keeps the elements of the last ``window_size`` ms before the pane's newest timestamp (Flink's ``TimeEvictor``).

    An element whose timestamp is at or before ``newest - window_size`` is
    evicted; a pane without timestamps is left as it is.
    """

    def __init__(self, window_size: Any, do_evict_after: bool = False) -> None:
        size = window_size.to_milliseconds() if hasattr(window_size, "to_milliseconds") else window_size
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(f"TimeEvictor needs a window size in ms (an int or a Time) >= 0, got {window_size!r}")
        super().__init__(do_evict_after)
        self.window_size = size

    @staticmethod
    def of(window_size: Any, do_evict_after: bool = False) -> TimeEvictor:
        return TimeEvictor(window_size, do_evict_after)

    def _evict(self, elements: list[TimestampedValue], size: int) -> None:
        stamps = [e.timestamp for e in elements if e.timestamp is not None]
        if not stamps:
            return
        cutoff = max(stamps) - self.window_size
        elements[:] = [e for e in elements if e.timestamp is None or e.timestamp > cutoff]

    def __repr__(self) -> str:
        return f"TimeEvictor.of({self.window_size} ms, do_evict_after={self.do_evict_after})"


class DeltaEvictor(_BeforeOrAfter):
    """Evicts elements whose delta to the pane's last element is at least ``threshold`` (Flink's ``DeltaEvictor``).

    ``delta_function`` is ``f(element, last) -> float`` or an object with
    PyFlink's ``get_delta(old_data_point, new_data_point)``.
    """

    def __init__(self, threshold: float, delta_function: Any, do_evict_after: bool = False) -> None:
        delta: Callable[[Any, Any], float] | None = getattr(delta_function, "get_delta", None) or (
            delta_function if callable(delta_function) else None
        )
        if delta is None:
            raise ValueError(f"DeltaEvictor needs a delta function (a callable or get_delta), got {delta_function!r}")
        super().__init__(do_evict_after)
        self.threshold = threshold
        self.delta_function = delta_function
        self._delta = delta

    @staticmethod
    def of(threshold: float, delta_function: Any, do_evict_after: bool = False) -> DeltaEvictor:
        return DeltaEvictor(threshold, delta_function, do_evict_after)

    def _evict(self, elements: list[TimestampedValue], size: int) -> None:
        if not elements:
            return
        last = elements[-1].value
        elements[:] = [e for e in elements if self._delta(e.value, last) < self.threshold]

    def __repr__(self) -> str:
        return f"DeltaEvictor.of({self.threshold}, {self.delta_function!r}, do_evict_after={self.do_evict_after})"
