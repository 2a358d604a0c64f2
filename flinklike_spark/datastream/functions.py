"""User function interfaces in the style of PyFlink's DataStream API.

Per-record functions receive and return rows as ``dict``. Class-based functions
get ``open(runtime_context)`` before the first record and ``close()`` after the
last, on the task thread; plain callables are accepted wherever a
``MapFunction``/``FlatMapFunction``/``FilterFunction`` is.

``KeyedProcessFunction.process_element`` and ``on_timer`` *yield* their output
rows (or return an iterable, or None for no output), as in PyFlink.
"""

from __future__ import annotations

import abc
import types
from collections.abc import Iterable
from enum import Enum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from flinklike_spark.datastream.state import (
        AggregatingState,
        AggregatingStateDescriptor,
        ListState,
        ListStateDescriptor,
        MapState,
        MapStateDescriptor,
        ReducingState,
        ReducingStateDescriptor,
        ValueState,
        ValueStateDescriptor,
    )
    from flinklike_spark.metrics import MetricGroup

from flinklike_spark.datastream.async_retry_strategies import AsyncRetryPredicate, AsyncRetryStrategy

__all__ = [
    "AggregateFunction",
    "AllWindowFunction",
    "AsyncFunction",
    "AsyncRetryPredicate",
    "AsyncRetryStrategy",
    "BroadcastProcessFunction",
    "CoFlatMapFunction",
    "CoMapFunction",
    "CoProcessFunction",
    "FilterFunction",
    "FlatMapFunction",
    "Function",
    "KeySelector",
    "KeyedBroadcastProcessFunction",
    "KeyedCoProcessFunction",
    "KeyedProcessFunction",
    "KeyedStateStore",
    "MapFunction",
    "ProcessAllWindowFunction",
    "ProcessFunction",
    "ProcessWindowFunction",
    "ReduceFunction",
    "RuntimeContext",
    "TimeDomain",
    "TimerService",
    "WindowFunction",
]


class TimeDomain(Enum):
    EVENT_TIME = "event_time"
    PROCESSING_TIME = "processing_time"


class RuntimeContext(abc.ABC):
    """What a function knows about the parallel subtask running it."""

    @property
    @abc.abstractmethod
    def task_name(self) -> str: ...

    @property
    @abc.abstractmethod
    def index_of_this_subtask(self) -> int: ...

    @property
    @abc.abstractmethod
    def number_of_parallel_subtasks(self) -> int: ...

    @property
    @abc.abstractmethod
    def max_number_of_parallel_subtasks(self) -> int: ...

    @property
    @abc.abstractmethod
    def attempt_number(self) -> int: ...

    def get_task_name(self) -> str:
        return self.task_name

    def get_index_of_this_subtask(self) -> int:
        return self.index_of_this_subtask

    def get_number_of_parallel_subtasks(self) -> int:
        return self.number_of_parallel_subtasks

    def get_attempt_number(self) -> int:
        return self.attempt_number

    @abc.abstractmethod
    def get_state(self, descriptor: ValueStateDescriptor) -> ValueState:
        """Keyed value state (only in functions applied to a KeyedStream)."""

    @abc.abstractmethod
    def get_list_state(self, descriptor: ListStateDescriptor) -> ListState: ...

    @abc.abstractmethod
    def get_map_state(self, descriptor: MapStateDescriptor) -> MapState: ...

    @abc.abstractmethod
    def get_reducing_state(self, descriptor: ReducingStateDescriptor) -> ReducingState: ...

    @abc.abstractmethod
    def get_metrics_group(self) -> MetricGroup:
        """The operator's metric group: counters, gauges, meters, distributions (:mod:`flinklike_spark.metrics`)."""

    @abc.abstractmethod
    def get_aggregating_state(self, descriptor: AggregatingStateDescriptor) -> AggregatingState:
        """Keyed state holding an AggregateFunction's accumulator."""


class _Generic:
    """PyFlink's function and context classes are ``Generic``: programs subscript them.

    ``ProcessWindowFunction[tuple, tuple, str, TimeWindow]`` (as a base class or
    an annotation) and ``ProcessWindowFunction.Context[TimeWindow]`` give a
    ``types.GenericAlias`` of the class, as ``list[int]`` does; the type
    parameters document, they are not checked.
    """

    __class_getitem__ = classmethod(types.GenericAlias)


class Function(_Generic, abc.ABC):  # noqa: B024 - hooks are optional, the subclasses add the abstract method
    """Base of all class-based user functions."""

    def open(self, runtime_context: RuntimeContext) -> None:  # noqa: B027
        """Called once on the task thread before the first record."""

    def close(self) -> None:  # noqa: B027
        """Called once after the last record, also after a failure."""


class KeySelector(Function):
    """``get_key(value)`` returns the key of a record (PyFlink's KeySelector, for ``key_by``)."""

    @abc.abstractmethod
    def get_key(self, value: Any) -> Any: ...

    def __call__(self, value: Any) -> Any:
        return self.get_key(value)


class MapFunction(Function):
    @abc.abstractmethod
    def map(self, value: dict) -> dict: ...


class FlatMapFunction(Function):
    @abc.abstractmethod
    def flat_map(self, value: dict) -> Iterable[dict]: ...


class FilterFunction(Function):
    @abc.abstractmethod
    def filter(self, value: dict) -> bool: ...


class TimerService(abc.ABC):
    """Time and timers of a keyed operator; timers are scoped to the current key."""

    @abc.abstractmethod
    def current_processing_time(self) -> int:
        """Wall-clock time in epoch milliseconds."""

    @abc.abstractmethod
    def current_watermark(self) -> int:
        """The operator's event-time watermark in epoch milliseconds."""

    @abc.abstractmethod
    def register_processing_time_timer(self, timestamp: int) -> None: ...

    @abc.abstractmethod
    def register_event_time_timer(self, timestamp: int) -> None: ...

    @abc.abstractmethod
    def delete_processing_time_timer(self, timestamp: int) -> None: ...

    @abc.abstractmethod
    def delete_event_time_timer(self, timestamp: int) -> None: ...


class ProcessFunction(Function):
    """A per-record function on a non-keyed stream; ``process_element`` yields output rows."""

    class Context(_Generic, abc.ABC):
        @abc.abstractmethod
        def timestamp(self) -> int | None: ...

        @abc.abstractmethod
        def timer_service(self) -> TimerService: ...

        @abc.abstractmethod
        def output(self, output_tag: Any, value: Any) -> None:
            """Emit ``value`` to the side output ``output_tag`` (as does yielding ``(output_tag, value)``)."""

    @abc.abstractmethod
    def process_element(self, value: dict, ctx: ProcessFunction.Context) -> Iterable[dict] | None: ...


class KeyedProcessFunction(Function):
    """A per-record function on a KeyedStream, with keyed state and timers.

    ``process_element`` is called with the current key set, so keyed state and
    timers it registers belong to that key. ``on_timer`` runs with the key of
    the timer set. Both yield (or return an iterable of) output rows.
    """

    class Context(_Generic, abc.ABC):
        @abc.abstractmethod
        def timestamp(self) -> int | None:
            """The record's event timestamp (epoch ms) if the stream has timestamps."""

        @abc.abstractmethod
        def timer_service(self) -> TimerService: ...

        @abc.abstractmethod
        def get_current_key(self) -> Any: ...

        @abc.abstractmethod
        def output(self, output_tag: Any, value: Any) -> None:
            """Emit ``value`` to the side output ``output_tag`` (as does yielding ``(output_tag, value)``)."""

    class OnTimerContext(Context):
        @abc.abstractmethod
        def time_domain(self) -> TimeDomain: ...

    @abc.abstractmethod
    def process_element(self, value: dict, ctx: KeyedProcessFunction.Context) -> Iterable[dict] | None: ...

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterable[dict] | None:
        """A timer registered for the current key fired."""
        return None


# -- side outputs, reduce/aggregate and window functions (PyFlink names) ---------------------------


class ReduceFunction(Function):
    """Combines two values of the same type into one: ``reduce(value1, value2)``."""

    @abc.abstractmethod
    def reduce(self, value1: Any, value2: Any) -> Any: ...


class AggregateFunction(Function):
    """An incremental aggregation with an accumulator (PyFlink's ``AggregateFunction``).

    ``create_accumulator()`` starts a pane, ``add(value, accumulator)`` returns the
    new accumulator, ``get_result(accumulator)`` gives the output, and
    ``merge(acc_a, acc_b)`` combines accumulators of merging (session) windows.
    Accumulators are checkpointed: they must be picklable.
    """

    @abc.abstractmethod
    def create_accumulator(self) -> Any: ...

    @abc.abstractmethod
    def add(self, value: Any, accumulator: Any) -> Any: ...

    @abc.abstractmethod
    def get_result(self, accumulator: Any) -> Any: ...

    def merge(self, acc_a: Any, acc_b: Any) -> Any:
        raise TypeError(f"{type(self).__name__}.merge is needed to aggregate merging (session) windows")


class KeyedStateStore(abc.ABC):
    """Where a window function gets state: per window (``window_state``) or per key (``global_state``)."""

    @abc.abstractmethod
    def get_state(self, state_descriptor: ValueStateDescriptor) -> ValueState: ...

    @abc.abstractmethod
    def get_list_state(self, state_descriptor: ListStateDescriptor) -> ListState: ...

    @abc.abstractmethod
    def get_map_state(self, state_descriptor: MapStateDescriptor) -> MapState: ...

    @abc.abstractmethod
    def get_reducing_state(self, state_descriptor: ReducingStateDescriptor) -> ReducingState: ...

    @abc.abstractmethod
    def get_aggregating_state(self, state_descriptor: AggregatingStateDescriptor) -> AggregatingState: ...


class WindowFunction(Function):
    """``apply(key, window, inputs)`` yields the output of one fired pane of a keyed window."""

    @abc.abstractmethod
    def apply(self, key: Any, window: Any, inputs: Iterable[Any]) -> Iterable[Any]: ...


class AllWindowFunction(Function):
    """``apply(window, inputs)`` yields the output of one fired pane of ``window_all``."""

    @abc.abstractmethod
    def apply(self, window: Any, inputs: Iterable[Any]) -> Iterable[Any]: ...


class ProcessWindowFunction(Function):
    """``process(key, context, elements)`` yields the output of a fired pane; ``clear(context)``
    runs when the window is purged for good (clean up ``context.window_state()`` there)."""

    class Context(_Generic, abc.ABC):
        @abc.abstractmethod
        def window(self) -> Any:
            """The window being evaluated."""

        @abc.abstractmethod
        def current_processing_time(self) -> int: ...

        @abc.abstractmethod
        def current_watermark(self) -> int: ...

        @abc.abstractmethod
        def window_state(self) -> KeyedStateStore:
            """State of the current key *and* window (kept until the window is cleaned up)."""

        @abc.abstractmethod
        def global_state(self) -> KeyedStateStore:
            """State of the current key, shared by all its windows."""

        @abc.abstractmethod
        def output(self, output_tag: Any, value: Any) -> None:
            """Emit ``value`` to the side output ``output_tag``."""

    @abc.abstractmethod
    def process(self, key: Any, context: ProcessWindowFunction.Context, elements: Iterable[Any]) -> Iterable[Any]: ...

    def clear(self, context: ProcessWindowFunction.Context) -> None:  # noqa: B027
        """The window is being purged (after its cleanup time)."""


class ProcessAllWindowFunction(Function):
    """``process(context, elements)`` for ``window_all``; the context is that of ProcessWindowFunction."""

    Context = ProcessWindowFunction.Context

    @abc.abstractmethod
    def process(self, context: ProcessWindowFunction.Context, elements: Iterable[Any]) -> Iterable[Any]: ...

    def clear(self, context: ProcessWindowFunction.Context) -> None:  # noqa: B027
        """The window is being purged (after its cleanup time)."""


# -- two-input functions (connect) and broadcast state -----------------------------------------


class CoMapFunction(Function):
    """``map1`` for the first connected input, ``map2`` for the second; both return one row."""

    @abc.abstractmethod
    def map1(self, value: Any) -> Any: ...

    @abc.abstractmethod
    def map2(self, value: Any) -> Any: ...


class CoFlatMapFunction(Function):
    """``flat_map1`` / ``flat_map2`` yield any number of rows per input row."""

    @abc.abstractmethod
    def flat_map1(self, value: Any) -> Iterable[Any]: ...

    @abc.abstractmethod
    def flat_map2(self, value: Any) -> Iterable[Any]: ...


class CoProcessFunction(Function):
    """``process_element1`` / ``process_element2`` with a context (timestamp, side outputs)."""

    Context = ProcessFunction.Context

    @abc.abstractmethod
    def process_element1(self, value: Any, ctx: ProcessFunction.Context) -> Iterable[Any] | None: ...

    @abc.abstractmethod
    def process_element2(self, value: Any, ctx: ProcessFunction.Context) -> Iterable[Any] | None: ...


class KeyedCoProcessFunction(Function):
    """Two keyed inputs (``connect`` then ``key_by`` on both) sharing keyed state and timers per key."""

    Context = KeyedProcessFunction.Context
    OnTimerContext = KeyedProcessFunction.OnTimerContext

    @abc.abstractmethod
    def process_element1(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterable[Any] | None: ...

    @abc.abstractmethod
    def process_element2(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterable[Any] | None: ...

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterable[Any] | None:
        return None


class BroadcastProcessFunction(Function):
    """A non-keyed stream connected with a broadcast stream.

    ``process_broadcast_element(value, ctx)`` runs on every subtask for every
    broadcast element and may change the broadcast state
    (``ctx.get_broadcast_state(descriptor)``); ``process_element(value, ctx)``
    sees it read-only. Every subtask must change it the same way (its contents
    are kept per subtask and restored from one copy), as in Flink.
    """

    class ReadOnlyContext(_Generic, abc.ABC):
        """The context of ``process_element``: the broadcast state is read-only."""

        @abc.abstractmethod
        def get_broadcast_state(self, state_descriptor: MapStateDescriptor) -> Any: ...

        @abc.abstractmethod
        def timestamp(self) -> int | None: ...

        @abc.abstractmethod
        def current_processing_time(self) -> int: ...

        @abc.abstractmethod
        def current_watermark(self) -> int: ...

        @abc.abstractmethod
        def output(self, output_tag: Any, value: Any) -> None: ...

    class Context(ReadOnlyContext):
        """The context of ``process_broadcast_element``: the broadcast state is writable."""

    @abc.abstractmethod
    def process_element(self, value: Any, ctx: BroadcastProcessFunction.ReadOnlyContext) -> Iterable[Any] | None: ...

    @abc.abstractmethod
    def process_broadcast_element(self, value: Any, ctx: BroadcastProcessFunction.Context) -> Iterable[Any] | None: ...


class KeyedBroadcastProcessFunction(Function):
    """A keyed stream connected with a broadcast stream: keyed state and timers in ``process_element``
    and ``on_timer``, writable broadcast state in ``process_broadcast_element``."""

    class ReadOnlyContext(BroadcastProcessFunction.ReadOnlyContext):
        """The context of ``process_element``: keyed state and timers of the current key too."""

        @abc.abstractmethod
        def timer_service(self) -> TimerService: ...

        @abc.abstractmethod
        def get_current_key(self) -> Any: ...

    class Context(BroadcastProcessFunction.Context):
        """The context of ``process_broadcast_element``: writable broadcast state, and every key's keyed state."""

        @abc.abstractmethod
        def apply_to_keyed_state(self, state_descriptor: Any, function: Any) -> None:
            """Call ``function(key, state)`` for every key holding ``state_descriptor``'s state."""

    class OnTimerContext(ReadOnlyContext):
        @abc.abstractmethod
        def time_domain(self) -> TimeDomain: ...

    @abc.abstractmethod
    def process_element(self, value: Any, ctx: Any) -> Iterable[Any] | None: ...

    @abc.abstractmethod
    def process_broadcast_element(self, value: Any, ctx: Any) -> Iterable[Any] | None: ...

    def on_timer(self, timestamp: int, ctx: Any) -> Iterable[Any] | None:
        return None


class AsyncFunction(Function):
    """``async def async_invoke(self, value) -> list`` of output rows; ``timeout(value)`` on a timeout."""

    @abc.abstractmethod
    async def async_invoke(self, value: Any) -> list[Any]: ...

    def timeout(self, value: Any) -> list[Any]:
        raise TimeoutError(f"async_invoke timed out for {value!r}")
