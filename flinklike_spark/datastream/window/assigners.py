"""Window assigners: which windows each element belongs to (time, session, global and count windows)."""

from __future__ import annotations

import abc
from collections.abc import Callable, Collection, Iterable
from typing import Any

from flinklike_spark.datastream.state import ValueStateDescriptor
from flinklike_spark.datastream.window.triggers import (
    CountTrigger,
    EventTimeTrigger,
    NeverTrigger,
    ProcessingTimeTrigger,
    PurgingTrigger,
    Trigger,
)
from flinklike_spark.datastream.window.windows import _GLOBAL_WINDOW, CountWindow, Time, TimeWindow, _millis
from flinklike_spark.errors import ConfigurationError

__all__ = [
    "CountSlidingWindowAssigner",
    "CountTumblingWindowAssigner",
    "DynamicEventTimeSessionWindows",
    "DynamicProcessingTimeSessionWindows",
    "EventTimeSessionWindows",
    "GlobalWindows",
    "MergingWindowAssigner",
    "ProcessingTimeSessionWindows",
    "SessionWindowTimeGapExtractor",
    "SlidingEventTimeWindows",
    "SlidingProcessingTimeWindows",
    "TumblingEventTimeWindows",
    "TumblingProcessingTimeWindows",
    "WindowAssigner",
]


class WindowAssigner(abc.ABC):
    """Assigns zero or more windows to each element (PyFlink's ``WindowAssigner``)."""

    class WindowAssignerContext(abc.ABC):
        @abc.abstractmethod
        def get_current_processing_time(self) -> int: ...

        @abc.abstractmethod
        def get_runtime_context(self) -> Any:
            """The operator's runtime context (keyed state of the current key)."""

    @abc.abstractmethod
    def assign_windows(self, element: Any, timestamp: int, context: WindowAssigner.WindowAssignerContext) -> Collection:
        """The windows ``element`` (with event timestamp ``timestamp``, or None) belongs to."""

    @abc.abstractmethod
    def get_default_trigger(self, env: Any) -> Trigger: ...

    @abc.abstractmethod
    def is_event_time(self) -> bool: ...

    def get_window_serializer(self) -> None:
        """PyFlink API compatibility: windows are pickled, no serializer is needed."""
        return None


class MergingWindowAssigner(WindowAssigner):
    """An assigner whose windows can merge (sessions)."""

    class MergeCallback(abc.ABC):
        @abc.abstractmethod
        def merge(self, to_be_merged: Iterable, merge_result: Any) -> None: ...

    @abc.abstractmethod
    def merge_windows(self, windows: Iterable, callback: MergingWindowAssigner.MergeCallback) -> None: ...


def _check_size_offset(name: str, size: int, offset: int, slide: int | None = None) -> None:
    if size <= 0:
        raise ConfigurationError(f"{name}: size must be positive, got {size} ms")
    if slide is not None and slide <= 0:
        raise ConfigurationError(f"{name}: slide must be positive, got {slide} ms")
    if abs(offset) >= (slide if slide is not None else size):
        what = "slide" if slide is not None else "size"
        raise ConfigurationError(f"{name}: abs(offset) must be below the {what}, got offset {offset} ms")


def _require_timestamp(timestamp: int | None, assigner: WindowAssigner) -> int:
    if timestamp is None:
        raise ConfigurationError(
            f"{assigner!r} needs event timestamps, but a record has none: give the source a "
            f"WatermarkStrategy with a timestamp assigner (or use a processing-time assigner)"
        )
    return timestamp


class _TimeAssigner(WindowAssigner):
    """Time-window assigners: by event time (the element's timestamp) or by the operator's clock."""

    _event_time = True

    def _time_of(self, timestamp: int | None, context: WindowAssigner.WindowAssignerContext) -> int:
        if self._event_time:
            return _require_timestamp(timestamp, self)
        return context.get_current_processing_time()

    def get_default_trigger(self, env):
        return EventTimeTrigger() if self._event_time else ProcessingTimeTrigger()

    def is_event_time(self) -> bool:
        return self._event_time


class _Tumbling(_TimeAssigner):
    def __init__(self, size: int, offset: int = 0) -> None:
        _check_size_offset(type(self).__name__, size, offset)
        self.size = size
        self.offset = offset

    @classmethod
    def of(cls, size: Time | int, offset: Time | int | None = None):
        return cls(_millis(size, "size"), 0 if offset is None else _millis(offset, "offset"))

    def assign_windows(self, element, timestamp, context):
        timestamp = self._time_of(timestamp, context)
        start = timestamp - (timestamp - self.offset) % self.size
        return (TimeWindow(start, start + self.size),)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.size}, {self.offset})"


class TumblingEventTimeWindows(_Tumbling):
    """Non-overlapping windows of ``size`` by event time: ``[start, start + size)``."""


class TumblingProcessingTimeWindows(_Tumbling):
    """Non-overlapping windows of ``size`` by the operator's clock."""

    _event_time = False


class _Sliding(_TimeAssigner):
    def __init__(self, size: int, slide: int, offset: int = 0) -> None:
        _check_size_offset(type(self).__name__, size, offset, slide)
        self.size = size
        self.slide = slide
        self.offset = offset

    @classmethod
    def of(cls, size: Time | int, slide: Time | int, offset: Time | int | None = None):
        return cls(_millis(size, "size"), _millis(slide, "slide"), 0 if offset is None else _millis(offset, "offset"))

    def assign_windows(self, element, timestamp, context):
        timestamp = self._time_of(timestamp, context)
        last_start = timestamp - (timestamp - self.offset) % self.slide
        size, slide = self.size, self.slide
        return [TimeWindow(start, start + size) for start in range(last_start, timestamp - size, -slide)]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.size}, {self.slide}, {self.offset})"


class SlidingEventTimeWindows(_Sliding):
    """Windows of ``size`` starting every ``slide`` by event time (an element is in ``size/slide`` of them)."""


class SlidingProcessingTimeWindows(_Sliding):
    """Sliding windows by the operator's clock."""

    _event_time = False


class SessionWindowTimeGapExtractor(abc.ABC):
    """Extracts the session gap (ms) from an element, for dynamic session windows."""

    @abc.abstractmethod
    def extract(self, element: Any) -> int: ...


class _Sessions(_TimeAssigner, MergingWindowAssigner):
    def __init__(self, gap: int | None = None, extractor: SessionWindowTimeGapExtractor | Callable | None = None):
        if extractor is None and (gap is None or gap <= 0):
            raise ConfigurationError(f"{type(self).__name__}: the session gap must be positive, got {gap} ms")
        self.gap = gap
        self.extractor = extractor

    @classmethod
    def with_gap(cls, size: Time | int):
        return cls(gap=_millis(size, "gap"))

    @classmethod
    def with_dynamic_gap(cls, extractor: SessionWindowTimeGapExtractor | Callable[[Any], int]):
        if not (isinstance(extractor, SessionWindowTimeGapExtractor) or callable(extractor)):
            raise ConfigurationError(f"with_dynamic_gap expects a SessionWindowTimeGapExtractor, got {extractor!r}")
        return cls(extractor=extractor)

    def _gap_of(self, element) -> int:
        if self.extractor is None:
            return self.gap
        extract = (
            self.extractor.extract if isinstance(self.extractor, SessionWindowTimeGapExtractor) else self.extractor
        )
        gap = extract(element)
        if not isinstance(gap, int) or gap <= 0:
            raise ConfigurationError(f"the session gap extractor returned {gap!r} for {element!r}; it must be > 0 ms")
        return gap

    def assign_windows(self, element, timestamp, context):
        timestamp = self._time_of(timestamp, context)
        return (TimeWindow(timestamp, timestamp + self._gap_of(element)),)

    def merge_windows(self, windows, callback):
        TimeWindow.merge_windows(windows, callback)

    def __repr__(self) -> str:
        gap = "dynamic" if self.extractor is not None else self.gap
        return f"{type(self).__name__}({gap})"


class EventTimeSessionWindows(_Sessions):
    """Sessions by event time: an element opens ``[ts, ts + gap)``; overlapping windows merge."""


class ProcessingTimeSessionWindows(_Sessions):
    """Sessions by the operator's clock."""

    _event_time = False


class DynamicEventTimeSessionWindows(EventTimeSessionWindows):
    """Event-time sessions whose gap comes from a :class:`SessionWindowTimeGapExtractor`."""

    @staticmethod
    def with_dynamic_gap(extractor):
        return DynamicEventTimeSessionWindows(extractor=extractor)


class DynamicProcessingTimeSessionWindows(ProcessingTimeSessionWindows):
    """Processing-time sessions with a per-element gap."""

    @staticmethod
    def with_dynamic_gap(extractor):
        return DynamicProcessingTimeSessionWindows(extractor=extractor)


class GlobalWindows(WindowAssigner):
    """One window per key holding everything; never fires unless given a trigger."""

    @staticmethod
    def create() -> GlobalWindows:
        return GlobalWindows()

    def assign_windows(self, element, timestamp, context):
        return (_GLOBAL_WINDOW,)

    def get_default_trigger(self, env):
        return NeverTrigger()

    def is_event_time(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "GlobalWindows()"


class CountTumblingWindowAssigner(WindowAssigner):
    """Windows of ``window_size`` consecutive elements per key; element ``n`` goes to ``CountWindow(n // size)``.

    The per-key element count is keyed state (``tumble-count-assigner``), so it
    is checkpointed with the key.
    """

    def __init__(self, window_size: int) -> None:
        if not isinstance(window_size, int) or window_size < 1:
            raise ConfigurationError(f"count window size must be a positive int, got {window_size!r}")
        self.window_size = window_size
        self._count = ValueStateDescriptor("tumble-count-assigner")

    @staticmethod
    def of(window_size: int) -> CountTumblingWindowAssigner:
        return CountTumblingWindowAssigner(window_size)

    def assign_windows(self, element, timestamp, context):
        state = context.get_runtime_context().get_state(self._count)
        count = state.value() or 0
        state.update(count + 1)
        return (CountWindow(count // self.window_size),)

    def get_default_trigger(self, env):
        return PurgingTrigger(CountTrigger(self.window_size))

    def is_event_time(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"CountTumblingWindowAssigner({self.window_size})"


class CountSlidingWindowAssigner(WindowAssigner):
    """Windows of ``window_size`` elements starting every ``window_slide`` elements, per key."""

    def __init__(self, window_size: int, window_slide: int) -> None:
        for name, value in (("size", window_size), ("slide", window_slide)):
            if not isinstance(value, int) or value < 1:
                raise ConfigurationError(f"count window {name} must be a positive int, got {value!r}")
        self.window_size = window_size
        self.window_slide = window_slide
        self._count = ValueStateDescriptor("slide-count-assigner")

    @staticmethod
    def of(window_size: int, window_slide: int) -> CountSlidingWindowAssigner:
        return CountSlidingWindowAssigner(window_size, window_slide)

    def assign_windows(self, element, timestamp, context):
        state = context.get_runtime_context().get_state(self._count)
        count = state.value() or 0
        state.update(count + 1)
        windows = []
        window_id = count // self.window_slide
        while window_id >= 0 and window_id * self.window_slide + self.window_size > count:
            windows.append(CountWindow(window_id))
            window_id -= 1
        return windows

    def get_default_trigger(self, env):
        return PurgingTrigger(CountTrigger(self.window_size))

    def is_event_time(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"CountSlidingWindowAssigner({self.window_size}, {self.window_slide})"
