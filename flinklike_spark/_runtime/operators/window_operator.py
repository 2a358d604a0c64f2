"""WindowOperator: keyed windows on keyed state and timers, as Flink's ``WindowOperator``.

For every element the operator asks the :class:`~flinklike_spark.datastream.window.WindowAssigner`
for its windows and adds the element to each window's *pane* (the contents of
one key and one window): a running reduce value, an aggregate accumulator, or
the list of elements for ``apply``/``process``. The pane's
:class:`~flinklike_spark.datastream.window.Trigger` then decides whether to fire (run the
window function and emit its output) and whether to purge the pane.

Everything lives in state the checkpoint covers and a rescale redistributes
by key group (the group of the record key, never of the window):

========================================  ===================================================
state name                                contents (per key)
========================================  ===================================================
``_window/contents``                      ``{window: pane contents}``
``_window/merging-window-set``            the key's live session windows (merging assigners)
``_window/scoped/<name>``                 trigger and ``window_state()`` state, keyed ``(key, window)``
``_window/event_time_timers`` and         timers, keyed ``(key, window)``: trigger timers and
``_window/processing_time_timers``        cleanup timers
user names                                ``global_state()`` and the runtime context's keyed state
========================================  ===================================================

Lateness (Flink's rules): a window is *late* when its cleanup time
(``max_timestamp() + allowed_lateness`` for event-time assigners) is at or
below the watermark; an element is added only to windows that are not late.
An element none of whose windows took it, and whose timestamp plus the
allowed lateness is at or below the watermark, goes to the late-data side
output if one was set, else is dropped (counted in ``num_late_records_dropped``).
At its cleanup time a window's pane, trigger state and timers are removed and
``ProcessWindowFunction.clear`` runs.

Session windows (merging assigners) merge pane contents directly into the
merge result: reduce values with the reduce function, accumulators with
``AggregateFunction.merge``, element lists by concatenation (oldest window
first); trigger state merges through ``OnMergeContext.merge_partitioned_state``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from checkpointing.schemas import StateKind
from checkpointing.state_snapshots import KeyedStateSnapshot
from checkpointing.writer import KeyedColumns
from flinklike_spark._runtime.operators.side_outputs import SideOutputCollector
from flinklike_spark._runtime.operators.stream_operator import (
    OperatorRuntimeContext,
    OperatorSnapshot,
    RestoredState,
    StreamOperator,
    call_close,
    call_open,
    describe_operator,
)
from flinklike_spark._runtime.operators.timers import KeyedTimers
from flinklike_spark._runtime.operators.window_descriptor import PaneKind, WindowOperatorDescriptor
from flinklike_spark._runtime.operators.window_panes import (
    CONTENTS_STATE,
    EVENT_TIMERS_STATE,
    MERGING_SET_STATE,
    PROCESSING_TIMERS_STATE,
    SCOPED_STATE_PREFIX,
    MergeCollector,
    Panes,
    ScopedStateBackend,
    WindowStateStore,
)
from flinklike_spark._runtime.record_timestamps import Timestamps
from flinklike_spark._runtime.state.key_groups import key_group_for
from flinklike_spark._runtime.state.keyed_state import (
    detach_values,
    key_groups_of,
)
from flinklike_spark._runtime.state.state_backends import create_keyed_state_backend
from flinklike_spark.common.watermark_strategy import MIN_WATERMARK
from flinklike_spark.datastream.functions import (
    AllWindowFunction,
    KeyedStateStore,
    ProcessAllWindowFunction,
    ProcessWindowFunction,
    ReduceFunction,
    WindowFunction,
)
from flinklike_spark.datastream.output_tag import OutputTag
from flinklike_spark.datastream.window import (
    MAX_TIMESTAMP,
    EventTimeTrigger,
    MergingWindowAssigner,
    TimeWindow,
    Trigger,
    TumblingEventTimeWindows,
    WindowAssigner,
)
from flinklike_spark.datastream.window.evictors import Evictor, TimestampedValue
from flinklike_spark.errors import ConfigurationError

__all__ = ["WindowOperator"]

if TYPE_CHECKING:  # pragma: no cover
    from flinklike_spark._runtime.operators.operator_spec import OperatorSpec


class _TriggerContext(Trigger.OnMergeContext):
    """Trigger context of the operator's current key and window (also its merge context)."""

    def __init__(self, op: WindowOperator) -> None:
        self._op = op
        self.key: Any = None
        self.window: Any = None
        self.merged_windows: list[Any] = []

    def set(self, key: Any, window: Any) -> None:
        self.key = key
        self.window = window
        self._op.scoped.current_key = (key, window)

    def get_current_processing_time(self) -> int:
        return self._op.context.clock_ms()

    def get_current_watermark(self) -> int:
        return self._op.watermark

    def register_processing_time_timer(self, time: int) -> None:
        self._op.timers.processing_time.add(int(time), (self.key, self.window))

    def register_event_time_timer(self, time: int) -> None:
        self._op.timers.event_time.add(int(time), (self.key, self.window))

    def delete_processing_time_timer(self, time: int) -> None:
        self._op.timers.processing_time.delete(int(time), (self.key, self.window))

    def delete_event_time_timer(self, time: int) -> None:
        self._op.timers.event_time.delete(int(time), (self.key, self.window))

    def get_partitioned_state(self, state_descriptor):
        return self._op.scoped.get_state(state_descriptor, type(state_descriptor))

    def merge_partitioned_state(self, state_descriptor) -> None:
        sources = [(self.key, m) for m in self.merged_windows]
        self._op.scoped.merge_namespaces(state_descriptor, sources, (self.key, self.window))

    # PyFlink's TriggerContext also offers the metric group; there are no metrics here.
    def get_metric_group(self) -> None:
        return None


class _WindowContext(ProcessWindowFunction.Context):
    def __init__(self, op: WindowOperator, merging: bool) -> None:
        self._op = op
        self.current_window: Any = None
        self._window_store = WindowStateStore(
            op.scoped,
            allowed=not merging,
            why="per-window state (window_state()) is not supported with merging (session) windows, as in Flink",
        )
        self._global_store = WindowStateStore(op.global_state)

    def window(self) -> Any:
        return self.current_window

    def current_processing_time(self) -> int:
        return self._op.context.clock_ms()

    def current_watermark(self) -> int:
        return self._op.watermark

    def window_state(self) -> KeyedStateStore:
        return self._window_store

    def global_state(self) -> KeyedStateStore:
        return self._global_store

    def output(self, output_tag: OutputTag, value: Any) -> None:
        self._op.side.collect(output_tag, value, self.current_window.max_timestamp())


class _EvictorContext(Evictor.EvictorContext):
    def __init__(self, op: WindowOperator) -> None:
        self._op = op

    def get_current_processing_time(self) -> int:
        return self._op.context.clock_ms()

    def get_current_watermark(self) -> int:
        return self._op.watermark


class _AssignerContext(WindowAssigner.WindowAssignerContext):
    def __init__(self, op: WindowOperator) -> None:
        self._op = op

    def get_current_processing_time(self) -> int:
        return self._op.context.clock_ms()

    def get_runtime_context(self):
        return self._op.runtime_context


class WindowOperator(StreamOperator):
    """Runs one keyed (or ``window_all``) window; see the module docstring for the state layout."""

    def __init__(self, spec: OperatorSpec) -> None:
        super().__init__(spec)
        d: WindowOperatorDescriptor = spec.function
        self.descriptor = d
        self.assigner = d.assigner
        self.trigger = d.trigger
        self.lateness = d.allowed_lateness
        self.event_time = d.assigner.is_event_time()
        self.merging = isinstance(d.assigner, MergingWindowAssigner)
        self.key_field = spec.key_field
        self.key_selector = spec.key_selector
        self.watermark = MIN_WATERMARK
        self.panes = Panes()
        self.merging_sets: dict[Any, set] = {}
        self.num_late_records_dropped = 0
        self._trigger_ctx = _TriggerContext(self)
        self._assigner_ctx = _AssignerContext(self)
        # With tumbling event-time windows and the default trigger, an element that joins an
        # existing pane whose end the watermark has not reached only updates the contents (the
        # trigger would re-register the timer it already has): process_rows does that inline.
        self._fast_tumbling = (
            type(d.trigger) is EventTimeTrigger and type(d.assigner) is TumblingEventTimeWindows and d.evictor is None
        )
        self._out_ts: list[int] = []  # timestamps of the rows in the ``out`` list being built
        self._windows: dict[int, TimeWindow] = {}  # start -> window, so a pane's window is built once
        self._add = self._make_adder()
        self._merge_contents = self._make_merger()

    # -- lifecycle ----------------------------------------------------------------------------

    def setup(self, context, output) -> None:
        super().setup(context, output)
        self.global_state = create_keyed_state_backend(context, owner=describe_operator(self))
        # Per-window state lives on the heap whatever the backend type: its keys are (key, window).
        self.scoped = ScopedStateBackend(max_parallelism=context.max_parallelism, clock_ms=context.clock_ms)
        self.scoped.owner = f"{describe_operator(self)} (per-window state)"
        self.timers = KeyedTimers()
        self.runtime_context = OperatorRuntimeContext(context, self.global_state, self.name)
        self.side = SideOutputCollector(self)
        self._window_ctx = _WindowContext(self, self.merging)
        self._evictor_ctx = _EvictorContext(self)

    def open(self) -> None:
        for function in self.descriptor.functions():
            call_open(function, self.runtime_context)

    def close(self) -> None:
        try:
            for function in self.descriptor.functions():
                call_close(function)
        finally:
            self.global_state.close()

    # -- pane contents ------------------------------------------------------------------------

    def _make_adder(self) -> Callable[..., Any]:
        """``add(contents, element, timestamp) -> contents`` for this operator's panes."""
        d = self.descriptor
        if d.evictor is not None:

            def add_timestamped(current, value, timestamp=None):
                element = TimestampedValue(value, timestamp)
                if current is None:
                    return [element]
                current.append(element)
                return current

            return add_timestamped
        if d.pane_kind is PaneKind.REDUCE:
            fn = d.reduce_function.reduce if isinstance(d.reduce_function, ReduceFunction) else d.reduce_function

            def add_reduce(current, value, timestamp=None):
                return value if current is None else fn(current, value)

            return add_reduce
        if d.pane_kind is PaneKind.AGGREGATE:
            agg = d.aggregate_function

            def add_aggregate(current, value, timestamp=None):
                return agg.add(value, agg.create_accumulator() if current is None else current)

            return add_aggregate

        def add_list(current, value, timestamp=None):
            if current is None:
                return [value]
            current.append(value)
            return current

        return add_list

    def _make_merger(self) -> Callable[[Any, Any], Any]:
        d = self.descriptor
        if d.evictor is not None:
            return lambda a, b: a + b
        if d.pane_kind is PaneKind.REDUCE:
            return self._make_adder()
        if d.pane_kind is PaneKind.AGGREGATE:
            return d.aggregate_function.merge
        return lambda a, b: a + b

    def _elements(self, contents: Any) -> list[Any]:
        kind = self.descriptor.pane_kind
        if self.descriptor.evictor is not None:  # a list of TimestampedValue, folded now
            values = [element.value for element in contents]
            if kind is PaneKind.REDUCE:
                fn = self.descriptor.reduce_function
                reduce = fn.reduce if isinstance(fn, ReduceFunction) else fn
                return [functools.reduce(reduce, values)] if values else []
            if kind is PaneKind.AGGREGATE:
                agg = self.descriptor.aggregate_function
                accumulator = agg.create_accumulator()
                for value in values:
                    accumulator = agg.add(value, accumulator)
                return [agg.get_result(accumulator)]
            return values
        if kind is PaneKind.REDUCE:
            return [contents]
        if kind is PaneKind.AGGREGATE:
            return [self.descriptor.aggregate_function.get_result(contents)]
        return contents

    # -- elements -----------------------------------------------------------------------------

    def _cleanup_time(self, window: Any) -> int:
        max_timestamp = window.max_timestamp()
        if not self.event_time:
            return max_timestamp
        cleanup = max_timestamp + self.lateness
        return cleanup if cleanup >= max_timestamp and cleanup <= MAX_TIMESTAMP else MAX_TIMESTAMP

    def _is_window_late(self, window: Any) -> bool:
        return self.event_time and self._cleanup_time(window) <= self.watermark

    def _register_cleanup_timer(self, key: Any, window: Any) -> None:
        cleanup = self._cleanup_time(window)
        if cleanup == MAX_TIMESTAMP:
            return  # global and count windows are never cleaned up by time
        queue = self.timers.event_time if self.event_time else self.timers.processing_time
        queue.add(cleanup, (key, window))

    def _delete_cleanup_timer(self, key: Any, window: Any) -> None:
        cleanup = self._cleanup_time(window)
        if cleanup != MAX_TIMESTAMP:
            queue = self.timers.event_time if self.event_time else self.timers.processing_time
            queue.delete(cleanup, (key, window))

    def process_rows(self, rows: list[dict], timestamps: Timestamps = None) -> None:
        if timestamps is None:
            timestamps = [None] * len(rows)
        if self._fast_tumbling:
            self._process_tumbling(rows, timestamps)
            return
        out: list[Any] = []
        key_field, selector = self.key_field, self.key_selector
        panes, add = self.panes, self._add
        assign, actx = self.assigner.assign_windows, self._assigner_ctx
        global_state = self.global_state
        for row, timestamp in zip(rows, timestamps, strict=True):
            key = row[key_field] if key_field is not None else selector(row)
            global_state.current_key = key
            windows = assign(row, timestamp, actx)
            if self.merging:
                taken = self._process_merging(key, row, timestamp, windows, out)
            else:
                taken = False
                watermark = self.watermark
                for window in windows:
                    if self.event_time and self._cleanup_time(window) <= watermark:
                        continue
                    taken = True
                    panes.set(key, window, add(panes.get(key, window), row, timestamp))
                    self._on_element(key, window, row, timestamp, out)
            if not taken and self.event_time and timestamp + self.lateness <= self.watermark:
                self._late(row, timestamp)
        self._flush(out)

    def _process_tumbling(self, rows: list[dict], timestamps: list) -> None:
        """``process_rows`` for TumblingEventTimeWindows with EventTimeTrigger (the common case)."""
        out: list[Any] = []
        key_field, selector = self.key_field, self.key_selector
        by_key, windows, add = self.panes.by_key, self._windows, self._add
        size, offset = self.assigner.size, self.assigner.offset
        d = self.descriptor
        reduce_fn = agg_add = None
        if d.pane_kind is PaneKind.REDUCE:
            reduce_fn = d.reduce_function.reduce if isinstance(d.reduce_function, ReduceFunction) else d.reduce_function
        elif d.pane_kind is PaneKind.AGGREGATE:
            agg_add = d.aggregate_function.add
        global_state = self.global_state
        for row, timestamp in zip(rows, timestamps, strict=True):
            key = row[key_field] if key_field is not None else selector(row)
            if timestamp is None:
                self.assigner.assign_windows(row, None, None)  # raises, naming the missing timestamp
            start = timestamp - (timestamp - offset) % size
            window = windows.get(start)
            if window is None:
                window = windows[start] = TimeWindow(start, start + size)
            watermark = self.watermark
            global_state.current_key = key  # user functions may use keyed state
            key_panes = by_key.get(key)
            if key_panes is not None and start + size - 1 > watermark:
                contents = key_panes.get(window)
                if contents is not None:
                    if reduce_fn is not None:
                        key_panes[window] = reduce_fn(contents, row)
                    elif agg_add is not None:
                        key_panes[window] = agg_add(row, contents)
                    else:
                        contents.append(row)
                    continue
            if self._cleanup_time(window) <= watermark:  # the window is late: so is the element
                if timestamp + self.lateness <= watermark:
                    self._late(row, timestamp)
                continue
            self.panes.set(key, window, add(None if key_panes is None else key_panes.get(window), row, timestamp))
            self._on_element(key, window, row, timestamp, out)
        if len(windows) > 1024:  # a cache: windows of the past are not looked up again
            windows.clear()
        self._flush(out)

    def _on_element(self, key: Any, window: Any, row: dict, timestamp: int | None, out: list) -> None:
        ctx = self._trigger_ctx
        ctx.set(key, window)
        result = self.trigger.on_element(row, timestamp, window, ctx)
        if result.value[0]:  # fire
            contents = self.panes.get(key, window)
            if contents is not None:
                self._emit(key, window, contents, out)
        if result.value[1]:  # purge
            self.panes.pop(key, window)
        self._register_cleanup_timer(key, window)

    def _late(self, row: dict, timestamp: int) -> None:
        tag = self.descriptor.late_data_tag
        if tag is not None:
            self.side.collect(tag, row, timestamp)
        else:
            self.num_late_records_dropped += 1

    def _process_merging(self, key: Any, row: dict, timestamp: int | None, windows: Iterable, out: list) -> bool:
        taken = False
        for window in windows:
            actual = self._add_window(key, window)
            if self._is_window_late(actual):
                self.merging_sets[key].discard(actual)
                if not self.merging_sets[key]:
                    del self.merging_sets[key]
                continue
            taken = True
            self.panes.set(key, actual, self._add(self.panes.get(key, actual), row, timestamp))
            self._on_element(key, actual, row, timestamp, out)
        return taken

    def _add_window(self, key: Any, new_window: Any) -> Any:
        """Add ``new_window`` to the key's session windows, merging; return the window it ended up in
        (Flink's ``MergingWindowSet.addWindow``)."""
        live = self.merging_sets.setdefault(key, set())
        collector = MergeCollector()
        self.assigner.merge_windows([*live, new_window], collector)
        result_window = new_window
        merged_new = False
        for members, merge_result in collector.merges:
            if new_window in members:
                members = [m for m in members if m != new_window]
                merged_new = True
                result_window = merge_result
            live.difference_update(members)
            live.add(merge_result)
            if not (len(members) == 1 and members[0] == merge_result) and members:
                self._merge(key, merge_result, members)
        if not merged_new:
            live.add(new_window)
        return result_window

    def _merge(self, key: Any, result: Any, merged: list[Any]) -> None:
        """Move the panes, trigger state and timers of ``merged`` windows into ``result``."""
        if self.event_time and self._cleanup_time(result) <= self.watermark:
            raise ConfigurationError(
                f"the end timestamp of an event-time window cannot become earlier than the current watermark "
                f"by merging: window {result} (allowed lateness {self.lateness} ms, watermark {self.watermark})"
            )
        merged = sorted(merged, key=lambda w: (w.max_timestamp(), repr(w)))
        ctx = self._trigger_ctx
        ctx.set(key, result)
        ctx.merged_windows = [m for m in merged if m != result]
        try:
            self.trigger.on_merge(result, ctx)
        finally:
            ctx.merged_windows = []
        for window in merged:
            if window == result:
                continue
            ctx.set(key, window)
            self.trigger.clear(window, ctx)
            self._delete_cleanup_timer(key, window)
        contents = self.panes.get(key, result)
        for window in merged:
            if window == result:
                continue
            moved = self.panes.pop(key, window)
            if moved is not None:
                contents = moved if contents is None else self._merge_contents(contents, moved)
        if contents is not None:
            self.panes.set(key, result, contents)

    # -- firing ------------------------------------------------------------------------------

    def _emit(self, key: Any, window: Any, contents: Any, out: list) -> None:
        """Run the window function on the pane; its results go to ``out`` with the timestamp
        ``window.max_timestamp()`` (Flink's ``setAbsoluteTimestamp(window.maxTimestamp())``).

        With an evictor, ``contents`` (the pane's list of TimestampedValue) loses what
        ``evict_before`` removes before the function sees it, and what ``evict_after``
        removes after; the rest stays in the pane (Flink's ``EvictingWindowOperator``).
        """
        evictor = self.descriptor.evictor
        if evictor is not None:
            size = len(contents)
            evictor.evict_before(contents, size, window, self._evictor_ctx)
            try:
                self._run_window_function(key, window, self._elements(contents), out)
            finally:
                evictor.evict_after(contents, size, window, self._evictor_ctx)
            return
        self._run_window_function(key, window, self._elements(contents), out)

    def _run_window_function(self, key: Any, window: Any, elements: list[Any], out: list) -> None:
        wf = self.descriptor.window_function
        stamp = window.max_timestamp()
        if wf is None:
            out.extend(elements)
            self._out_ts.extend([stamp] * len(elements))
            return
        if isinstance(wf, (ProcessWindowFunction, ProcessAllWindowFunction)):
            ctx = self._window_ctx
            ctx.current_window = window
            self.scoped.current_key = (key, window)
            produced = (
                wf.process(key, ctx, elements) if isinstance(wf, ProcessWindowFunction) else (wf.process(ctx, elements))
            )
        elif isinstance(wf, WindowFunction):
            produced = wf.apply(key, window, elements)
        elif isinstance(wf, AllWindowFunction):
            produced = wf.apply(window, elements)
        else:  # a plain callable (key, window, elements) -> iterable
            produced = wf(key, window, elements)
        if produced is not None:
            self.side.split_into(produced, out, self._out_ts, stamp)

    def _on_timer(self, timestamp: int, namespace: tuple[Any, Any], event_time: bool, out: list) -> None:
        key, window = namespace
        self.global_state.current_key = key
        if self.merging and window not in self.merging_sets.get(key, ()):
            return  # the window was merged away; its timers were moved to the merge result
        ctx = self._trigger_ctx
        ctx.set(key, window)
        if event_time:
            result = self.trigger.on_event_time(timestamp, window, ctx)
        else:
            result = self.trigger.on_processing_time(timestamp, window, ctx)
        if result.value[0]:
            contents = self.panes.get(key, window)
            if contents is not None:
                self._emit(key, window, contents, out)
        if result.value[1]:
            self.panes.pop(key, window)
        if event_time == self.event_time and timestamp == self._cleanup_time(window):
            self._clear_all_state(key, window)

    def _clear_all_state(self, key: Any, window: Any) -> None:
        self.panes.pop(key, window)
        ctx = self._trigger_ctx
        ctx.set(key, window)
        self.trigger.clear(window, ctx)
        wf = self.descriptor.window_function
        if isinstance(wf, (ProcessWindowFunction, ProcessAllWindowFunction)):
            self._window_ctx.current_window = window
            self.scoped.current_key = (key, window)
            wf.clear(self._window_ctx)
        if self.merging:
            live = self.merging_sets.get(key)
            if live is not None:
                live.discard(window)
                if not live:
                    del self.merging_sets[key]

    def process_watermark(self, timestamp: int) -> None:
        self.watermark = timestamp
        out: list[Any] = []
        self.timers.advance_watermark(timestamp, lambda ts, ns, _domain: self._on_timer(ts, ns, True, out))
        self._flush(out)
        self.output.emit_watermark(timestamp)

    def next_processing_timer(self) -> int | None:
        return self.timers.next_processing_time()

    def on_processing_time(self, now_ms: int) -> None:
        out: list[Any] = []
        self.timers.advance_processing_time(now_ms, lambda ts, ns, _domain: self._on_timer(ts, ns, False, out))
        self._flush(out)

    def _flush(self, out: list) -> None:
        out_ts, self._out_ts = self._out_ts, []
        if out:
            self.output.emit_rows(out, out_ts)
        self.side.flush()

    # -- checkpoints --------------------------------------------------------------------------

    def snapshot_state(self, checkpoint_id: int) -> OperatorSnapshot:
        max_parallelism = self.context.max_parallelism
        by_key = self.panes.by_key
        keyed = self.global_state.snapshot_entries() + self.scoped.snapshot_entries()
        if by_key:
            keys = list(by_key)
            keyed.append(KeyedStateSnapshot(
                name=CONTENTS_STATE,
                kind=StateKind.MAP,  # key -> {window: pane contents}
                entries=KeyedColumns(keys, detach_values(list(by_key.values())),
                                     lambda: key_groups_of(keys, max_parallelism)),
            ))  # fmt: skip
        if self.merging_sets:
            keyed.append(
                KeyedStateSnapshot(
                    name=MERGING_SET_STATE,
                    kind=StateKind.VALUE,  # key -> the live session windows
                    entries=[(key_group_for(k, max_parallelism), k, sorted(v)) for k, v in self.merging_sets.items()],
                )
            )
        for name, queue in (
            (EVENT_TIMERS_STATE, self.timers.event_time),
            (PROCESSING_TIMERS_STATE, self.timers.processing_time),
        ):
            entries = [(key_group_for(ns[0], max_parallelism), ns, ts) for ts, ns in queue.entries()]
            if entries:
                keyed.append(KeyedStateSnapshot(name=name, kind=StateKind.TIMER, entries=entries))
        types = self.global_state.snapshot_declared_types() + self.scoped.snapshot_declared_types()
        return OperatorSnapshot(keyed=keyed, operator=types)

    def initialize_state(self, restored: RestoredState | None) -> None:
        if restored is None:
            return
        for entry in restored.keyed:
            name = entry.state_name
            if name == CONTENTS_STATE:
                for window, contents in entry.value.items():
                    self.panes.set(entry.key, window, contents)
            elif name == MERGING_SET_STATE:
                self.merging_sets[entry.key] = set(entry.value)
            elif name == EVENT_TIMERS_STATE:
                self.timers.event_time.add(entry.value, entry.key)
            elif name == PROCESSING_TIMERS_STATE:
                self.timers.processing_time.add(entry.value, entry.key)
            elif name.startswith(SCOPED_STATE_PREFIX):
                self.scoped.restore_entry(name[len(SCOPED_STATE_PREFIX) :], entry.key, entry.value)
            else:
                self.global_state.restore_entry(name, entry.key, entry.value)
        for entry in restored.operator:
            if entry.state_kind != StateKind.TYPE_INFO:
                continue
            if entry.state_name.startswith(SCOPED_STATE_PREFIX):
                self.scoped.restore_type(entry.state_name[len(SCOPED_STATE_PREFIX) :], entry.value)
            else:
                self.global_state.restore_type(entry.state_name, entry.value)
