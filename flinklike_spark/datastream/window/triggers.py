"""Triggers: when a pane is evaluated (``FIRE``) and when its contents are dropped (``PURGE``).

Timers and state that triggers use through their :class:`Trigger.TriggerContext`
are scoped to the key *and* the window, and live in the window operator's keyed
state: they are checkpointed, restored and redistributed on rescale with the key.
"""

from __future__ import annotations

import abc
from enum import Enum
from typing import Any

from flinklike_spark.datastream.state import ReducingStateDescriptor, StateDescriptor
from flinklike_spark.datastream.window.windows import Time, _millis
from flinklike_spark.errors import ConfigurationError

__all__ = [
    "ContinuousEventTimeTrigger",
    "ContinuousProcessingTimeTrigger",
    "CountTrigger",
    "EventTimeTrigger",
    "NeverTrigger",
    "ProcessingTimeTrigger",
    "PurgingTrigger",
    "Trigger",
    "TriggerResult",
]


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
