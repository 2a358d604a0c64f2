"""Process operators: :class:`ProcessOperator` (a ``ProcessFunction``) and :class:`KeyedProcessOperator`
(a ``KeyedProcessFunction`` with keyed state and timers), and the context both give their function.
"""

from __future__ import annotations

from types import GeneratorType
from typing import TYPE_CHECKING, Any

from checkpointing.schemas import StateKind
from checkpointing.state_snapshots import KeyedStateSnapshot
from flinklike_spark._runtime.operators.side_outputs import SideOutputCollector
from flinklike_spark._runtime.operators.stream_operator import (
    EVENT_TIMERS,
    PROCESSING_TIMERS,
    OperatorContext,
    OperatorRuntimeContext,
    OperatorSnapshot,
    Output,
    RestoredState,
    UserFunctionOperator,
    call_open,
    check_iterable,
    check_rows,
    describe_operator,
    extend_stamped,
)
from flinklike_spark._runtime.operators.timers import KeyedTimers
from flinklike_spark._runtime.record_timestamps import (
    Timestamps,
)
from flinklike_spark._runtime.state.incremental_snapshot import incremental_snapshots, take_keyed_snapshot
from flinklike_spark._runtime.state.key_groups import key_group_for
from flinklike_spark._runtime.state.keyed_state import KeyedStateBackend
from flinklike_spark._runtime.state.state_backends import create_keyed_state_backend
from flinklike_spark.common.watermark_strategy import MIN_WATERMARK
from flinklike_spark.datastream.functions import (
    KeyedProcessFunction,
    ProcessFunction,
    TimeDomain,
    TimerService,
)

if TYPE_CHECKING:  # pragma: no cover
    from flinklike_spark._runtime.operators.operator_spec import OperatorSpec


class ProcessContext(KeyedProcessFunction.OnTimerContext, ProcessFunction.Context, TimerService):
    """Context, on-timer context and timer service of (keyed) process functions."""

    def __init__(self, operator: ProcessOperator) -> None:
        self._op = operator
        #: the event timestamp of the element or timer being processed (Flink's StreamRecord timestamp)
        self.current_timestamp: int | None = None
        self.domain = TimeDomain.EVENT_TIME

    def timestamp(self) -> int | None:
        return self.current_timestamp

    def timer_service(self) -> TimerService:
        return self

    def get_current_key(self) -> Any:
        return self._op.backend.current_key if self._op.backend is not None else None

    def output(self, output_tag: Any, value: Any) -> None:
        self._op.side.collect(output_tag, value, self.current_timestamp)

    def time_domain(self) -> TimeDomain:
        return self.domain

    def current_processing_time(self) -> int:
        return self._op.context.clock_ms()

    def current_watermark(self) -> int:
        return self._op.watermark

    def _timers(self) -> KeyedTimers:
        if self._op.timers is None:
            raise TypeError(f"operator {self._op.name!r}: timers are only available on a KeyedStream")
        return self._op.timers

    def register_processing_time_timer(self, timestamp: int) -> None:
        self._timers().processing_time.add(int(timestamp), self._op.backend.current_key)

    def register_event_time_timer(self, timestamp: int) -> None:
        self._timers().event_time.add(int(timestamp), self._op.backend.current_key)

    def delete_processing_time_timer(self, timestamp: int) -> None:
        self._timers().processing_time.delete(int(timestamp), self._op.backend.current_key)

    def delete_event_time_timer(self, timestamp: int) -> None:
        self._timers().event_time.delete(int(timestamp), self._op.backend.current_key)


class ProcessOperator(UserFunctionOperator):
    """Runs a ProcessFunction (non-keyed) or, as a subclass, a KeyedProcessFunction."""

    def __init__(self, spec: OperatorSpec) -> None:
        super().__init__(spec)
        self.backend: KeyedStateBackend | None = None
        self.timers: KeyedTimers | None = None
        self.watermark = MIN_WATERMARK
        self._ctx = ProcessContext(self)
        self.side = SideOutputCollector(self)

    def open(self) -> None:
        call_open(self.function, OperatorRuntimeContext(self.context, self.backend, self.name))

    def _emit(self, out: list, out_ts: list, method: str) -> None:
        """Emit ``out`` (with timestamps ``out_ts``) and the side outputs (``ctx.output`` or yielded
        ``(OutputTag, value)`` pairs); a main-output row that is not a dict fails naming ``method``."""
        out, out_ts = self.side.route(out, out_ts)
        if out:
            self.output.emit_rows(check_rows(out, self, method), out_ts)
        self.side.flush()

    def process_rows(self, rows: list[dict], timestamps: Timestamps = None) -> None:
        fn = self.function.process_element
        ctx = self._ctx
        out: list[dict] = []
        out_ts: list = []
        for row, timestamp in zip(rows, timestamps or [None] * len(rows), strict=True):
            ctx.current_timestamp = timestamp
            extend_stamped(out, out_ts, fn(row, ctx), timestamp, self, "process_element")
        ctx.current_timestamp = None
        self._emit(out, out_ts, "process_element")

    def process_watermark(self, timestamp: int) -> None:
        self.watermark = timestamp
        self.output.emit_watermark(timestamp)


class KeyedProcessOperator(ProcessOperator):
    """Runs a KeyedProcessFunction with keyed state and timers for the key of each row."""

    def __init__(self, spec: OperatorSpec) -> None:
        super().__init__(spec)
        self.key_field = spec.key_field
        self.key_selector = spec.key_selector

    def setup(self, context: OperatorContext, output: Output) -> None:
        super().setup(context, output)
        self.backend = create_keyed_state_backend(context, owner=describe_operator(self))
        self.incremental = incremental_snapshots(self.backend, context)
        self.timers = KeyedTimers()

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.backend.close()

    def initialize_state(self, restored: RestoredState | None) -> None:
        if restored is None:
            return
        timers = {EVENT_TIMERS: self.timers.event_time, PROCESSING_TIMERS: self.timers.processing_time}
        for entry in restored.keyed:
            if entry.state_kind == StateKind.TIMER:
                timers[entry.state_name].add(entry.value, entry.key)
            else:
                self.backend.restore_entry(entry.state_name, entry.key, entry.value)
        for entry in restored.operator:
            if entry.state_kind == StateKind.TYPE_INFO:
                self.backend.restore_type(entry.state_name, entry.value)
        if self.incremental is not None and restored.keyed_base is not None:
            self.incremental.restored(restored.checkpoint_id, restored.keyed_base)

    def snapshot_state(self, checkpoint_id: int) -> OperatorSnapshot:
        max_parallelism = self.context.max_parallelism
        keyed = take_keyed_snapshot(self.backend, self.incremental, checkpoint_id)
        entries = list(keyed.entries)
        for name, queue in ((EVENT_TIMERS, self.timers.event_time), (PROCESSING_TIMERS, self.timers.processing_time)):
            timers = [(key_group_for(key, max_parallelism), key, timestamp) for timestamp, key in queue.entries()]
            if timers:
                entries.append(KeyedStateSnapshot(name=name, kind=StateKind.TIMER, entries=timers))
        return OperatorSnapshot(
            keyed=entries,
            keyed_changes=keyed.changes,
            chain=keyed.chain,
            operator=self.backend.snapshot_declared_types(),
        )

    def process_rows(self, rows: list[dict], timestamps: Timestamps = None) -> None:
        key_field = self.key_field
        if timestamps is None and key_field is not None:
            self._process_untimed(rows, key_field)
            return
        fn = self.function.process_element
        ctx = self._ctx
        backend = self.backend
        out: list[dict] = []
        out_ts: list = []
        selector = self.key_selector
        keys = [row[key_field] for row in rows] if key_field is not None else [selector(row) for row in rows]
        backend.prefetch(keys)
        for row, key, timestamp in zip(rows, keys, timestamps or [None] * len(rows), strict=True):
            backend.current_key = key
            ctx.current_timestamp = timestamp
            extend_stamped(out, out_ts, fn(row, ctx), timestamp, self, "process_element")
        ctx.current_timestamp = None
        self._emit(out, out_ts, "process_element")

    def _process_untimed(self, rows: list[dict], key_field: str) -> None:
        """``process_rows`` for records without timestamps keyed by a field (the per-record hot path):
        the same calls and checks without per-record timestamp bookkeeping or helper calls."""
        fn = self.function.process_element
        ctx = self._ctx
        ctx.current_timestamp = None
        backend = self.backend
        backend.prefetch([row[key_field] for row in rows])  # RocksDB: one multi-get per state (heap: no-op)
        out: list[dict] = []
        extend = out.extend
        for row in rows:
            backend.current_key = row[key_field]
            produced = fn(row, ctx)
            if produced is not None:
                if type(produced) is not GeneratorType:
                    check_iterable(produced, self, "process_element")
                extend(produced)
        self._emit(out, [None] * len(out), "process_element")

    def _fire(self, timestamp: int, key: Any, domain: TimeDomain, out: list[dict], out_ts: list) -> None:
        self.backend.current_key = key
        ctx = self._ctx
        ctx.current_timestamp = timestamp
        ctx.domain = domain
        # Flink: an event-time timer's output has the timer's timestamp, a processing-time one's none.
        stamp = timestamp if domain is TimeDomain.EVENT_TIME else None
        try:
            extend_stamped(out, out_ts, self.function.on_timer(timestamp, ctx), stamp, self, "on_timer")
        finally:
            ctx.current_timestamp = None

    def process_watermark(self, timestamp: int) -> None:
        self.watermark = timestamp
        out: list[dict] = []
        out_ts: list = []
        self.timers.advance_watermark(timestamp, lambda ts, key, domain: self._fire(ts, key, domain, out, out_ts))
        self._emit(out, out_ts, "on_timer")
        self.output.emit_watermark(timestamp)

    def next_processing_timer(self) -> int | None:
        return self.timers.next_processing_time()

    def on_processing_time(self, now_ms: int) -> None:
        out: list[dict] = []
        out_ts: list = []
        self.timers.advance_processing_time(now_ms, lambda ts, key, domain: self._fire(ts, key, domain, out, out_ts))
        self._emit(out, out_ts, "on_timer")
