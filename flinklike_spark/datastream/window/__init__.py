"""Windows, window assigners, triggers and evictors, with PyFlink's names and semantics.

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

The package keeps one import path, ``flinklike_spark.datastream.window``, for modules by
role: :mod:`~flinklike_spark.datastream.window.windows` (``Time`` and the window types),
:mod:`~flinklike_spark.datastream.window.triggers`, :mod:`~flinklike_spark.datastream.window.assigners`;
evictors live in :mod:`flinklike_spark.datastream.window.evictors`.
"""

from __future__ import annotations

from flinklike_spark.datastream.window.assigners import (
    CountSlidingWindowAssigner,
    CountTumblingWindowAssigner,
    DynamicEventTimeSessionWindows,
    DynamicProcessingTimeSessionWindows,
    EventTimeSessionWindows,
    GlobalWindows,
    MergingWindowAssigner,
    ProcessingTimeSessionWindows,
    SessionWindowTimeGapExtractor,
    SlidingEventTimeWindows,
    SlidingProcessingTimeWindows,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    WindowAssigner,
)
from flinklike_spark.datastream.window.evictors import (
    CountEvictor,
    DeltaEvictor,
    Evictor,
    TimeEvictor,
    TimestampedValue,
)
from flinklike_spark.datastream.window.triggers import (
    ContinuousEventTimeTrigger,
    ContinuousProcessingTimeTrigger,
    CountTrigger,
    EventTimeTrigger,
    NeverTrigger,
    ProcessingTimeTrigger,
    PurgingTrigger,
    Trigger,
    TriggerResult,
)
from flinklike_spark.datastream.window.windows import MAX_TIMESTAMP, CountWindow, GlobalWindow, Time, TimeWindow, Window

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
