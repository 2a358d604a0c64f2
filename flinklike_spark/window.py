"""Windows, window assigners and triggers, with PyFlink's names and semantics.

Mirrors ``pyflink.datastream.window`` (and ``pyflink.common.Time``)::

    stream.key_by("user") \\
        .window(TumblingEventTimeWindows.of(Time.minutes(1))) \\
        .allowed_lateness(10_000) \\
        .side_output_late_data(late_tag) \\
        .reduce(lambda a, b: {...})

A :class:`WindowAssigner` puts each element into zero or more windows; the
set of elements of one key and one window is a *pane*. A :class:`Trigger`
decides, per pane, when the window function runs (``FIRE``) and when the
pane's contents are dropped (``PURGE``). Timers and state that triggers use
through their :class:`Trigger.TriggerContext` are scoped to the key *and* the
window, and live in the window operator's keyed state: they are checkpointed,
restored and redistributed on rescale with the key.

Timestamps are epoch milliseconds (``int``); ``Time`` builds them. A
:class:`TimeWindow` covers ``[start, end)``; its ``max_timestamp()`` is
``end - 1``, the timestamp at which the event-time trigger fires.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Collection, Iterable
from datetime import timedelta
from enum import Enum
from typing import Any, NamedTuple

from flinklike_spark.errors import ConfigurationError
from flinklike_spark.evictors import CountEvictor, DeltaEvictor, Evictor, TimeEvictor, TimestampedValue
from flinklike_spark.state import ReducingStateDescriptor, StateDescriptor, ValueStateDescriptor

__all__ = [
    "MAX_TIMESTAMP",
    "ContinuousEventTimeTrigger",
    "ContinuousProcessingTimeTrigger",
    "CountEvictor",
    "CountSlidingWindowAssigner",
    "CountTrigger",
    "CountTumblingWindowAssigner",
    "CountWindow",
    "DeltaEvictor",
    "DynamicEventTimeSessionWindows",
    "DynamicProcessingTimeSessionWindows",
    "EventTimeSessionWindows",
    "EventTimeTrigger",
    "Evictor",
    "GlobalWindow",
    "GlobalWindows",
    "MergingWindowAssigner",
    "NeverTrigger",
    "ProcessingTimeSessionWindows",
    "ProcessingTimeTrigger",
    "PurgingTrigger",
    "SessionWindowTimeGapExtractor",
    "SlidingEventTimeWindows",
    "SlidingProcessingTimeWindows",
    "Time",
    "TimeEvictor",
    "TimeWindow",
    "TimestampedValue",
    "Trigger",
    "TriggerResult",
    "TumblingEventTimeWindows",
    "TumblingProcessingTimeWindows",
    "Window",
    "WindowAssigner",
]

#: Java's Long.MAX_VALUE: the max timestamp of global and count windows.
MAX_TIMESTAMP = 2**63 - 1
_MIN_TIMESTAMP = -(2**63)


class Time:
    """A duration for window sizes (PyFlink's ``pyflink.common.Time``), in milliseconds."""

    __slots__ = ("_ms",)

    def __init__(self, milliseconds: int) -> None:
        if not isinstance(milliseconds, int) or isinstance(milliseconds, bool):
            raise ConfigurationError(f"Time needs an int number of milliseconds, got {milliseconds!r}")
        self._ms = milliseconds

    @staticmethod
    def milliseconds(milliseconds: int) -> Time:
        return Time(milliseconds)

    @staticmethod
    def seconds(seconds: int) -> Time:
        return Time(seconds * 1000)

    @staticmethod
    def minutes(minutes: int) -> Time:
        return Time(minutes * 60_000)

    @staticmethod
    def hours(hours: int) -> Time:
        return Time(hours * 3_600_000)

    @staticmethod
    def days(days: int) -> Time:
        return Time(days * 86_400_000)

    def to_milliseconds(self) -> int:
        return self._ms

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Time) and other._ms == self._ms

    def __hash__(self) -> int:
        return hash(self._ms)

    def __repr__(self) -> str:
        return f"Time.milliseconds({self._ms})"


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
    def merge_windows(windows: Iterable[TimeWindow], callback: MergingWindowAssigner.MergeCallback) -> None:
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


# -- triggers -------------------------------------------------------------------------------


class TriggerResult(Enum):
    """What happens to a pane: (fire, purge)."""

    CONTINUE = (False, False)
    FIRE_AND_PURGE = (True, True)
    FIRE = (True, False)
    PURGE = (False, True)

    def is_fire(self) -> bool:
        return self.value[0]

    def is_purge(self) -> bool:
        return self.value[1]


class Trigger(abc.ABC):
    """Decides when a pane is evaluated (PyFlink's ``Trigger``).

    Called by the window operator with the key and window set: ``on_element``
    for every element added to a pane, ``on_event_time`` / ``on_processing_time``
    when a timer the trigger registered fires, ``on_merge`` when session windows
    merged (only if ``can_merge()``), and ``clear`` when the window is purged
    for good (delete timers and partitioned state there).
    """

    class TriggerContext(abc.ABC):
        """Timers and state of the current key and window."""

        @abc.abstractmethod
        def get_current_processing_time(self) -> int: ...

        @abc.abstractmethod
        def get_current_watermark(self) -> int: ...

        @abc.abstractmethod
        def register_processing_time_timer(self, time: int) -> None: ...

        @abc.abstractmethod
        def register_event_time_timer(self, time: int) -> None: ...

        @abc.abstractmethod
        def delete_processing_time_timer(self, time: int) -> None: ...

        @abc.abstractmethod
        def delete_event_time_timer(self, time: int) -> None: ...

        @abc.abstractmethod
        def get_partitioned_state(self, state_descriptor: StateDescriptor) -> Any:
            """State scoped to the current key and window."""

    class OnMergeContext(TriggerContext):
        @abc.abstractmethod
        def merge_partitioned_state(self, state_descriptor: StateDescriptor) -> None:
            """Fold the state of the merged windows into the merge result's (list/reducing state)."""

    @abc.abstractmethod
    def on_element(self, element: Any, timestamp: int, window: Any, ctx: Trigger.TriggerContext) -> TriggerResult: ...

    @abc.abstractmethod
    def on_processing_time(self, time: int, window: Any, ctx: Trigger.TriggerContext) -> TriggerResult: ...

    @abc.abstractmethod
    def on_event_time(self, time: int, window: Any, ctx: Trigger.TriggerContext) -> TriggerResult: ...

    def can_merge(self) -> bool:
        return False

    def on_merge(self, window: Any, ctx: Trigger.OnMergeContext) -> None:
        raise ConfigurationError(f"{type(self).__name__} does not support merging windows (can_merge() is False)")

    @abc.abstractmethod
    def clear(self, window: Any, ctx: Trigger.TriggerContext) -> None: ...


class _StatelessTrigger(Trigger):
    """A trigger without parameters: ``create()``, mergeable, shown by its class name."""

    @classmethod
    def create(cls):
        return cls()

    def can_merge(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class EventTimeTrigger(_StatelessTrigger):
    """Fires once the watermark passes the window's ``max_timestamp()``; default of event-time assigners."""

    def on_element(self, element, timestamp, window, ctx):
        if window.max_timestamp() <= ctx.get_current_watermark():
            return TriggerResult.FIRE  # a late element within allowed lateness: fire at once
        ctx.register_event_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_processing_time(self, time, window, ctx):
        return TriggerResult.CONTINUE

    def on_event_time(self, time, window, ctx):
        return TriggerResult.FIRE if time == window.max_timestamp() else TriggerResult.CONTINUE

    def on_merge(self, window, ctx):
        if window.max_timestamp() > ctx.get_current_watermark():
            ctx.register_event_time_timer(window.max_timestamp())

    def clear(self, window, ctx):
        ctx.delete_event_time_timer(window.max_timestamp())


class ProcessingTimeTrigger(_StatelessTrigger):
    """Fires once the processing-time clock passes the window's ``max_timestamp()``."""

    def on_element(self, element, timestamp, window, ctx):
        ctx.register_processing_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_processing_time(self, time, window, ctx):
        return TriggerResult.FIRE

    def on_event_time(self, time, window, ctx):
        return TriggerResult.CONTINUE

    def on_merge(self, window, ctx):
        if window.max_timestamp() > ctx.get_current_processing_time():
            ctx.register_processing_time_timer(window.max_timestamp())

    def clear(self, window, ctx):
        ctx.delete_processing_time_timer(window.max_timestamp())


def _min(a: int, b: int) -> int:
    return a if a <= b else b


def _add(a: int, b: int) -> int:
    return a + b


class _ContinuousTrigger(Trigger):
    """Fires every ``interval`` ms (aligned to multiples of it) and at the window's end."""

    _event_time = True

    def __init__(self, interval: int) -> None:
        if interval <= 0:
            raise ConfigurationError(f"{type(self).__name__} interval must be positive, got {interval} ms")
        self.interval = interval
        self.state_desc = ReducingStateDescriptor("fire-time", reduce_function=_min)

    def _register(self, ctx, time: int) -> None:
        if self._event_time:
            ctx.register_event_time_timer(time)
        else:
            ctx.register_processing_time_timer(time)

    def _register_next(self, time: int, window, ctx, state) -> None:
        next_fire = min(time + self.interval, window.max_timestamp())
        state.add(next_fire)
        self._register(ctx, next_fire)

    def _on_timer(self, time, window, ctx):
        if self._event_time and time == window.max_timestamp():
            return TriggerResult.FIRE
        state = ctx.get_partitioned_state(self.state_desc)
        if state.get() == time:
            state.clear()
            self._register_next(time, window, ctx, state)
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window, ctx):
        ctx.merge_partitioned_state(self.state_desc)
        next_fire = ctx.get_partitioned_state(self.state_desc).get()
        if next_fire is not None:
            self._register(ctx, next_fire)

    def clear(self, window, ctx):
        state = ctx.get_partitioned_state(self.state_desc)
        timestamp = state.get()
        if timestamp is not None:
            if self._event_time:
                ctx.delete_event_time_timer(timestamp)
            else:
                ctx.delete_processing_time_timer(timestamp)
            state.clear()


class ContinuousEventTimeTrigger(_ContinuousTrigger):
    """Fires every ``interval`` of event time, and when the watermark passes the window's end."""

    def on_element(self, element, timestamp, window, ctx):
        if window.max_timestamp() <= ctx.get_current_watermark():
            return TriggerResult.FIRE
        ctx.register_event_time_timer(window.max_timestamp())
        state = ctx.get_partitioned_state(self.state_desc)
        if state.get() is None:
            self._register_next(timestamp - (timestamp % self.interval), window, ctx, state)
        return TriggerResult.CONTINUE

    def on_processing_time(self, time, window, ctx):
        return TriggerResult.CONTINUE

    def on_event_time(self, time, window, ctx):
        return self._on_timer(time, window, ctx)

    @staticmethod
    def of(interval: Time | int) -> ContinuousEventTimeTrigger:
        return ContinuousEventTimeTrigger(_millis(interval, "interval"))

    def __repr__(self) -> str:
        return f"ContinuousEventTimeTrigger({self.interval})"


class ContinuousProcessingTimeTrigger(_ContinuousTrigger):
    """Fires every ``interval`` of processing time."""

    _event_time = False

    def on_element(self, element, timestamp, window, ctx):
        state = ctx.get_partitioned_state(self.state_desc)
        if state.get() is None:
            now = ctx.get_current_processing_time()
            self._register_next(now - (now % self.interval), window, ctx, state)
        return TriggerResult.CONTINUE

    def on_processing_time(self, time, window, ctx):
        return self._on_timer(time, window, ctx)

    def on_event_time(self, time, window, ctx):
        return TriggerResult.CONTINUE

    @staticmethod
    def of(interval: Time | int) -> ContinuousProcessingTimeTrigger:
        return ContinuousProcessingTimeTrigger(_millis(interval, "interval"))

    def __repr__(self) -> str:
        return f"ContinuousProcessingTimeTrigger({self.interval})"


class CountTrigger(Trigger):
    """Fires when a pane has received ``count`` elements since it last fired (keeps the contents)."""

    def __init__(self, count: int) -> None:
        if not isinstance(count, int) or count < 1:
            raise ConfigurationError(f"CountTrigger count must be a positive int, got {count!r}")
        self.count = count
        self.state_desc = ReducingStateDescriptor("count", reduce_function=_add)

    @staticmethod
    def of(count: int) -> CountTrigger:
        return CountTrigger(count)

    def on_element(self, element, timestamp, window, ctx):
        state = ctx.get_partitioned_state(self.state_desc)
        state.add(1)
        if state.get() >= self.count:
            state.clear()
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def on_processing_time(self, time, window, ctx):
        return TriggerResult.CONTINUE

    def on_event_time(self, time, window, ctx):
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window, ctx):
        ctx.merge_partitioned_state(self.state_desc)

    def clear(self, window, ctx):
        ctx.get_partitioned_state(self.state_desc).clear()

    def __repr__(self) -> str:
        return f"CountTrigger({self.count})"


class PurgingTrigger(Trigger):
    """Turns any trigger's FIRE into FIRE_AND_PURGE."""

    def __init__(self, nested_trigger: Trigger) -> None:
        if not isinstance(nested_trigger, Trigger):
            raise ConfigurationError(f"PurgingTrigger.of expects a Trigger, got {nested_trigger!r}")
        self.nested_trigger = nested_trigger

    @staticmethod
    def of(nested_trigger: Trigger) -> PurgingTrigger:
        return PurgingTrigger(nested_trigger)

    @staticmethod
    def _purging(result: TriggerResult) -> TriggerResult:
        return TriggerResult.FIRE_AND_PURGE if result.is_fire() else result

    def on_element(self, element, timestamp, window, ctx):
        return self._purging(self.nested_trigger.on_element(element, timestamp, window, ctx))

    def on_processing_time(self, time, window, ctx):
        return self._purging(self.nested_trigger.on_processing_time(time, window, ctx))

    def on_event_time(self, time, window, ctx):
        return self._purging(self.nested_trigger.on_event_time(time, window, ctx))

    def can_merge(self) -> bool:
        return self.nested_trigger.can_merge()

    def on_merge(self, window, ctx):
        self.nested_trigger.on_merge(window, ctx)

    def clear(self, window, ctx):
        self.nested_trigger.clear(window, ctx)

    def __repr__(self) -> str:
        return f"PurgingTrigger({self.nested_trigger!r})"


class NeverTrigger(_StatelessTrigger):
    """Never fires: the default trigger of :class:`GlobalWindows`."""

    def on_element(self, element, timestamp, window, ctx):
        return TriggerResult.CONTINUE

    def on_processing_time(self, time, window, ctx):
        return TriggerResult.CONTINUE

    def on_event_time(self, time, window, ctx):
        return TriggerResult.CONTINUE

    def on_merge(self, window, ctx):
        pass

    def clear(self, window, ctx):
        pass


# -- assigners ------------------------------------------------------------------------------


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
        extract = self.extractor.extract if isinstance(self.extractor, SessionWindowTimeGapExtractor) else self.extractor
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

