"""Stream operators: what runs inside an operator chain on the task thread.

Every operator receives data either as Arrow batches (``process_batch``) or as
lists of row dicts (``process_rows``); per-record operators work on rows,
vectorized ones on batches, and each converts what it is given. Output goes to
``self.output`` (an :class:`Output`): the next chained operator or the network.

An operator is described by a picklable :class:`OperatorSpec` in the JobGraph
and instantiated in the TaskExecutor by ``spec.create()``.

Lifecycle (driven by the operator chain): ``setup`` -> ``open`` (tail to head)
-> ``process_*`` / ``process_watermark`` / ``on_processing_time`` -> ``finish``
(end of input, head to tail) -> ``close`` (always, head to tail).
"""

from __future__ import annotations

import abc
import dataclasses
import importlib
import time
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

import pyarrow as pa

from flinklike_spark._runtime.network.partitioner import key_group_for
from flinklike_spark._runtime.streaming.idleness import IdlenessTracker
from flinklike_spark._runtime.streaming.keyed_state import KeyedStateBackend, create_keyed_state_backend
from flinklike_spark._runtime.streaming.record_timestamps import (
    Timestamps,
    split_timestamps,
    strip_timestamps,
    with_timestamps,
)
from flinklike_spark._runtime.streaming.rows import RecordKind, RowsConverter, declared_kind, records_of
from flinklike_spark._runtime.streaming.side_outputs import SideOutputCollector
from flinklike_spark._runtime.streaming.timers import KeyedTimers
from flinklike_spark.config import StateBackendType
from flinklike_spark.connector_api import (
    END_OF_INPUT,
    Committer,
    ReadResult,
    Sink,
    SinkWriterContext,
    Source,
    SourceReaderContext,
    TwoPhaseCommittingSink,
)
from flinklike_spark.errors import FunctionResultError
from flinklike_spark.functions import (
    FilterFunction,
    FlatMapFunction,
    Function,
    KeyedProcessFunction,
    MapFunction,
    ProcessFunction,
    RuntimeContext,
    TimeDomain,
    TimerService,
)
from flinklike_spark.metrics import MetricGroup, MetricRegistry
from flinklike_spark.row import Row
from flinklike_spark.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from flinklike_spark.watermarks import MIN_WATERMARK, WatermarkStrategy

__all__ = [
    "FilterOperator",
    "FlatMapOperator",
    "KeyedProcessOperator",
    "MapBatchesOperator",
    "MapOperator",
    "OperatorContext",
    "OperatorSnapshot",
    "OperatorSpec",
    "Output",
    "ProcessOperator",
    "RestoredEntry",
    "RestoredState",
    "SideOutputOperator",
    "SinkOperator",
    "SourceOperator",
    "StreamOperator",
    "transactional_id_prefix",
]

MAX_WATERMARK = 2**63 - 1
_EVENT_TIMERS = "event_time_timers"
_PROCESSING_TIMERS = "processing_time_timers"
_SOURCE_SPLITS = "source_splits"
_COMMITTABLES = "pending_committables"


class Output(abc.ABC):
    """Where an operator emits. Implementations: chaining, network, fan-out.

    ``emit_rows`` takes the rows' event timestamps as a parallel list (None:
    no row has one); ``emit_batch`` takes them in the batch's reserved
    timestamp column (see ``record_timestamps``).
    """

    @abc.abstractmethod
    def emit_rows(self, rows: list[dict], timestamps: Timestamps = None) -> None: ...

    @abc.abstractmethod
    def emit_batch(self, batch: pa.RecordBatch) -> None: ...

    @abc.abstractmethod
    def emit_watermark(self, timestamp: int) -> None: ...

    def emit_watermark_status(self, idle: bool) -> None:  # noqa: B027 - outputs without consumers drop it
        """Flink's WatermarkStatus: the stream is idle (True) or active again (False)."""


@dataclasses.dataclass(kw_only=True)
class OperatorSnapshot:
    """The synchronous copy of one operator's state for one checkpoint.

    Taken on the task thread; written to storage later by the asynchronous part.

    Attributes:
        keyed: ``(state name, kind, [(key group, key, value)])`` per keyed state.
        operator: ``(state name, kind, [(key, value)])`` per non-keyed state
            (source splits, sink committables).
    """

    keyed: list[tuple[str, str, list[tuple[int, Any, Any]]]] = dataclasses.field(default_factory=list)
    operator: list[tuple[str, str, list[tuple[Any, Any]]]] = dataclasses.field(default_factory=list)


class RestoredEntry(NamedTuple):
    """One restored state row; ``subtask`` is the subtask that wrote it (before a rescale).

    A NamedTuple, not a frozen dataclass: a restore builds one per state entry,
    and a frozen dataclass's ``__init__`` costs ~2 us per entry (2 s per
    million); build it with keywords.
    """

    state_name: str
    state_kind: str
    key_group: int
    key: Any
    value: Any
    subtask: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class RestoredState:
    """What one operator gets back on restore.

    Attributes:
        checkpoint_id: the checkpoint restored from.
        keyed: keyed rows of this subtask's key-group range (from any old subtask).
        operator: non-keyed rows of *every* old subtask; the operator picks its share.
        parallelism: the operator's parallelism when the checkpoint was taken (0: unknown).
    """

    checkpoint_id: int
    keyed: tuple[RestoredEntry, ...] = ()
    operator: tuple[RestoredEntry, ...] = ()
    parallelism: int = 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class OperatorContext:
    """What an operator knows about its subtask."""

    task_name: str
    subtask_index: int
    parallelism: int
    max_parallelism: int
    attempt_number: int
    job_id: str = ""
    lineage_id: str = ""  # first job of the restore lineage; see SinkWriterContext.transactional_id_prefix
    clock_ms: Callable[[], int] = dataclasses.field(default=lambda: int(time.time() * 1000))
    state_backend_type: StateBackendType = StateBackendType.HASHMAP  # Flink's state.backend.type
    #: the task's user metrics (reported with the task's metrics)
    metric_registry: MetricRegistry = dataclasses.field(default_factory=MetricRegistry)


class _RuntimeContext(RuntimeContext):
    def __init__(self, ctx: OperatorContext, backend: KeyedStateBackend | None, operator_name: str) -> None:
        self._ctx = ctx
        self._backend = backend
        self._operator_name = operator_name

    task_name = property(lambda self: self._ctx.task_name)
    index_of_this_subtask = property(lambda self: self._ctx.subtask_index)
    number_of_parallel_subtasks = property(lambda self: self._ctx.parallelism)
    max_number_of_parallel_subtasks = property(lambda self: self._ctx.max_parallelism)
    attempt_number = property(lambda self: self._ctx.attempt_number)

    def _keyed(self, descriptor: Any, expected: type) -> Any:
        if self._backend is None:
            raise TypeError(
                f"operator {self._operator_name!r}: keyed state ({descriptor!r}) is only available in "
                f"functions applied to a KeyedStream (use key_by(...) first)"
            )
        return self._backend.get_state(descriptor, expected)

    def get_state(self, descriptor):
        return self._keyed(descriptor, ValueStateDescriptor)

    def get_list_state(self, descriptor):
        return self._keyed(descriptor, ListStateDescriptor)

    def get_map_state(self, descriptor):
        return self._keyed(descriptor, MapStateDescriptor)

    def get_reducing_state(self, descriptor):
        return self._keyed(descriptor, ReducingStateDescriptor)

    def get_aggregating_state(self, descriptor):
        return self._keyed(descriptor, AggregatingStateDescriptor)

    def get_metrics_group(self) -> MetricGroup:
        return MetricGroup(self._ctx.metric_registry, (self._operator_name,))


class StreamOperator:
    """Base operator: forwards watermarks, converts between rows and batches.

    Subclasses override ``process_rows`` (per-record) or ``process_batch``
    (vectorized); the other one converts and delegates. ``process_rows`` gets
    the rows' event timestamps as a parallel list (None: no row has one), a
    batch has them in its reserved timestamp column; an operator gives its
    output the timestamps Flink would (see ``record_timestamps``).
    """

    vectorized = False
    #: tag id -> Output of the side outputs someone consumes (set by the operator chain).
    side_outputs: Mapping[str, Output] = MappingProxyType({})

    def __init__(self, spec: OperatorSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self.uid = spec.uid
        self.output: Output = None  # type: ignore[assignment]
        self.context: OperatorContext = None  # type: ignore[assignment]
        self._converter = RowsConverter(spec.input_schema, stream_name=spec.input_name or spec.name)

    def setup(self, context: OperatorContext, output: Output) -> None:
        self.context = context
        self.output = output

    def open(self) -> None:
        """Prepare for records (user functions' ``open`` runs here)."""

    def process_rows(self, rows: list[dict], timestamps: Timestamps = None) -> None:
        self.process_batch(with_timestamps(self._converter.to_batch(rows), timestamps))

    def process_batch(self, batch: pa.RecordBatch) -> None:
        batch, timestamps = split_timestamps(batch)
        self.process_rows(records_of(batch), timestamps)

    def process_watermark(self, timestamp: int) -> None:
        self.output.emit_watermark(timestamp)

    def process_watermark_status(self, idle: bool) -> None:
        """The input became idle or active again (Flink's WatermarkStatus); forwarded, as in Flink."""
        self.output.emit_watermark_status(idle)

    def next_processing_timer(self) -> int | None:
        """Epoch ms of this operator's next processing-time timer, if any."""
        return None

    def on_processing_time(self, now_ms: int) -> None:
        """Fire processing-time timers due at ``now_ms``."""

    def initialize_state(self, restored: RestoredState | None) -> None:
        """Restore state before ``open`` (None: a fresh start). Stateless operators ignore it."""

    def snapshot_state(self, checkpoint_id: int) -> OperatorSnapshot | None:
        """Copy the operator's state for ``checkpoint_id`` (task thread); None if stateless."""
        return None

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """``checkpoint_id`` (and every earlier one) completed globally."""

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        """``checkpoint_id`` was aborted."""

    def finish(self) -> None:
        """End of input: flush buffered output."""

    def close(self) -> None:
        """Release resources; called exactly once, also after a failure."""

    def final_committables(self) -> list[Any]:
        """Two-phase-commit output left uncommitted when the input ended (sinks only)."""
        return []

    def accumulator(self) -> Any:
        return None


def _describe(operator: StreamOperator) -> str:
    return f"operator {operator.name!r} (uid {operator.uid!r})"


def _extend_stamped(
    out: list, out_ts: list, produced: Any, timestamp: int | None, operator: StreamOperator, method: str
) -> None:
    """``_extend``, and one ``timestamp`` in ``out_ts`` per row appended to ``out``."""
    before = len(out)
    _extend(out, produced, operator, method)
    if len(out) > before:
        out_ts.extend([timestamp] * (len(out) - before))


def _extend(out: list, produced: Any, operator: StreamOperator, method: str) -> None:
    """Append what ``method`` (flat_map, process_element, on_timer) produced: None or an
    iterable of rows. A dict or string is a mistake (``return row`` instead of ``yield
    row``): iterating it would emit its keys or characters as rows."""
    if produced is None:
        return
    if isinstance(produced, dict | str | bytes) or not isinstance(produced, Iterable):
        hint = " (use `yield row` instead of `return row`)" if isinstance(produced, dict) else ""
        raise FunctionResultError(
            f"{method}() of {_describe(operator)} returned {type(produced).__name__} {_short(produced)}; it must "
            f"yield rows (dicts), or return an iterable of rows or None{hint}"
        )
    out.extend(produced)


def _check_rows(rows: list, operator: StreamOperator, method: str) -> list[dict]:
    """``rows`` unchanged if every one is a record (a dict, Row or tuple, or any value on a stream
    declared with a basic type); else FunctionResultError naming the operator."""
    for row in rows:
        if type(row) is not dict and not isinstance(row, (dict, tuple, Row)):
            if declared_kind(operator.spec.output_schema) in (RecordKind.VALUE, RecordKind.PICKLED):
                return rows
            if method == "map":
                hint = "; to drop rows use filter() or flat_map()" if row is None else ""
                what = f"returned {type(row).__name__} {_short(row)}; it must return a row{hint}"
            else:
                what = f"produced {type(row).__name__} {_short(row)} as a row"
            raise FunctionResultError(
                f"{method}() of {_describe(operator)} {what}; rows are dicts of field name -> value, Rows or "
                f"tuples (plain values need a declared output_type, e.g. Types.STRING() or "
                f"Types.PICKLED_BYTE_ARRAY())"
            )
    return rows


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _call_open(function: Any, runtime_context: RuntimeContext) -> None:
    if isinstance(function, Function):
        function.open(runtime_context)


def _call_close(function: Any) -> None:
    if isinstance(function, Function):
        function.close()


class _UserFunctionOperator(StreamOperator):
    def __init__(self, spec: OperatorSpec) -> None:
        super().__init__(spec)
        self.function = spec.function

    def open(self) -> None:
        _call_open(self.function, _RuntimeContext(self.context, None, self.name))

    def close(self) -> None:
        _call_close(self.function)


class MapOperator(_UserFunctionOperator):
    def process_rows(self, rows: list[dict], timestamps: Timestamps = None) -> None:
        fn = self.function.map if isinstance(self.function, MapFunction) else self.function
        self.output.emit_rows(_check_rows([fn(row) for row in rows], self, "map"), timestamps)


class FlatMapOperator(_UserFunctionOperator):
    def process_rows(self, rows: list[dict], timestamps: Timestamps = None) -> None:
        fn = self.function.flat_map if isinstance(self.function, FlatMapFunction) else self.function
        out: list[dict] = []
        if timestamps is None:
            for row in rows:
                _extend(out, fn(row), self, "flat_map")
            out_ts = None
        else:
            out_ts: list = []
            for row, timestamp in zip(rows, timestamps, strict=True):
                _extend_stamped(out, out_ts, fn(row), timestamp, self, "flat_map")
        if out:
            self.output.emit_rows(_check_rows(out, self, "flat_map"), out_ts)


class FilterOperator(_UserFunctionOperator):
    def process_rows(self, rows: list[dict], timestamps: Timestamps = None) -> None:
        fn = self.function.filter if isinstance(self.function, FilterFunction) else self.function
        keep = [fn(row) for row in rows]
        out = [row for row, kept in zip(rows, keep) if kept]
        if out:
            out_ts = None if timestamps is None else [t for t, kept in zip(timestamps, keep) if kept]
            self.output.emit_rows(out, out_ts)


class MapBatchesOperator(_UserFunctionOperator):
    """A vectorized map. The function sees the batch without its timestamp column; a result with
    as many rows keeps the input's timestamps (row i the timestamp of input row i), another has none."""

    vectorized = True

    def process_batch(self, batch: pa.RecordBatch) -> None:
        batch, timestamps = split_timestamps(batch)
        result = self.function(batch)
        if isinstance(result, pa.Table):
            keep = timestamps is not None and result.num_rows == batch.num_rows
            offset = 0
            for piece in result.to_batches():
                stamps = timestamps[offset : offset + piece.num_rows] if keep else None
                offset += piece.num_rows
                self.output.emit_batch(with_timestamps(piece, stamps))
        elif isinstance(result, pa.RecordBatch):
            if result.num_rows:
                keep = timestamps is not None and result.num_rows == batch.num_rows
                self.output.emit_batch(with_timestamps(result, timestamps if keep else None))
        elif result is not None:
            raise TypeError(
                f"map_batches function of {self.name!r} must return a pyarrow.RecordBatch or Table, "
                f"got {type(result).__name__}"
            )


class _ProcessContext(KeyedProcessFunction.OnTimerContext, ProcessFunction.Context, TimerService):
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


class ProcessOperator(_UserFunctionOperator):
    """Runs a ProcessFunction (non-keyed) or, as a subclass, a KeyedProcessFunction."""

    def __init__(self, spec: OperatorSpec) -> None:
        super().__init__(spec)
        self.backend: KeyedStateBackend | None = None
        self.timers: KeyedTimers | None = None
        self.watermark = MIN_WATERMARK
        self._ctx = _ProcessContext(self)
        self.side = SideOutputCollector(self)

    def open(self) -> None:
        _call_open(self.function, _RuntimeContext(self.context, self.backend, self.name))

    def _emit(self, out: list, out_ts: list, method: str) -> None:
        """Emit ``out`` (with timestamps ``out_ts``) and the side outputs (``ctx.output`` or yielded
        ``(OutputTag, value)`` pairs); a main-output row that is not a dict fails naming ``method``."""
        out, out_ts = self.side.route(out, out_ts)
        if out:
            self.output.emit_rows(_check_rows(out, self, method), out_ts)
        self.side.flush()

    def process_rows(self, rows: list[dict], timestamps: Timestamps = None) -> None:
        fn = self.function.process_element
        ctx = self._ctx
        out: list[dict] = []
        out_ts: list = []
        for row, timestamp in zip(rows, timestamps or [None] * len(rows), strict=True):
            ctx.current_timestamp = timestamp
            _extend_stamped(out, out_ts, fn(row, ctx), timestamp, self, "process_element")
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
        self.backend = create_keyed_state_backend(context)
        self.timers = KeyedTimers()

    def initialize_state(self, restored: RestoredState | None) -> None:
        if restored is None:
            return
        timers = {_EVENT_TIMERS: self.timers.event_time, _PROCESSING_TIMERS: self.timers.processing_time}
        for entry in restored.keyed:
            if entry.state_kind == "timer":
                timers[entry.state_name].add(entry.value, entry.key)
            else:
                self.backend.restore_entry(entry.state_name, entry.key, entry.value)

    def snapshot_state(self, checkpoint_id: int) -> OperatorSnapshot:
        max_parallelism = self.context.max_parallelism
        keyed = self.backend.snapshot_entries()
        for name, queue in ((_EVENT_TIMERS, self.timers.event_time), (_PROCESSING_TIMERS, self.timers.processing_time)):
            entries = [(key_group_for(key, max_parallelism), key, timestamp) for timestamp, key in queue.entries()]
            if entries:
                keyed.append((name, "timer", entries))
        return OperatorSnapshot(keyed=keyed)

    def process_rows(self, rows: list[dict], timestamps: Timestamps = None) -> None:
        fn = self.function.process_element
        ctx = self._ctx
        backend = self.backend
        out: list[dict] = []
        out_ts: list = []
        key_field, selector = self.key_field, self.key_selector
        for row, timestamp in zip(rows, timestamps or [None] * len(rows), strict=True):
            backend.current_key = row[key_field] if key_field is not None else selector(row)
            ctx.current_timestamp = timestamp
            _extend_stamped(out, out_ts, fn(row, ctx), timestamp, self, "process_element")
        ctx.current_timestamp = None
        self._emit(out, out_ts, "process_element")

    def _fire(self, timestamp: int, key: Any, domain: TimeDomain, out: list[dict], out_ts: list) -> None:
        self.backend.current_key = key
        ctx = self._ctx
        ctx.current_timestamp = timestamp
        ctx.domain = domain
        # Flink: an event-time timer's output has the timer's timestamp, a processing-time one's none.
        stamp = timestamp if domain is TimeDomain.EVENT_TIME else None
        try:
            _extend_stamped(out, out_ts, self.function.on_timer(timestamp, ctx), stamp, self, "on_timer")
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
        self.timers.advance_processing_time(
            now_ms, lambda ts, key, domain: self._fire(ts, key, domain, out, out_ts)
        )
        self._emit(out, out_ts, "on_timer")


def transactional_id_prefix(lineage_id: str, sink_uid: str) -> str:
    """The transactional id prefix of a sink's writers; see :class:`SinkWriterContext`."""
    return f"flinklike/{lineage_id}/{sink_uid}"


class SinkOperator(StreamOperator):
    """Writes its input to a :class:`~flinklike_spark.connector_api.SinkWriter`.

    With a :class:`~flinklike_spark.connector_api.TwoPhaseCommittingSink` it
    is also the sink's committer (Flink's ``SinkWriterOperator`` and
    ``CommitterOperator`` chained): ``snapshot_state`` pre-commits and keeps
    the committables, per checkpoint id, as operator state
    ``pending_committables`` until ``notify_checkpoint_complete`` commits every
    pending checkpoint up to the completed one. On restore, pending
    committables of old subtask ``s`` go to new subtask ``s % parallelism``,
    which commits them before it processes anything. At the end of a bounded
    input the remaining committables are handed to the JobMaster
    (:meth:`final_committables`), which commits them when the job finished.
    The writer's ``transactional_id_prefix`` comes from the restore lineage,
    not the job id, so it is the same after a resume (see
    :func:`transactional_id_prefix`).
    """

    vectorized = True

    def __init__(self, spec: OperatorSpec) -> None:
        super().__init__(spec)
        self.sink: Sink = spec.function
        self.two_phase = isinstance(self.sink, TwoPhaseCommittingSink)
        self.writer = None
        self._committer: Committer | None = None
        self._pending: dict[int, list[Any]] = {}  # checkpoint id -> committables, oldest first

    def initialize_state(self, restored: RestoredState | None) -> None:
        if restored is None or not self.two_phase:
            return
        ctx = self.context
        for entry in restored.operator:
            if entry.state_name == _COMMITTABLES and entry.subtask % ctx.parallelism == ctx.subtask_index:
                self._pending.setdefault(entry.key, []).extend(entry.value)

    def open(self) -> None:
        ctx = self.context
        self.writer = self.sink.create_writer(
            SinkWriterContext(
                subtask_index=ctx.subtask_index,
                parallelism=ctx.parallelism,
                attempt_number=ctx.attempt_number,
                task_name=ctx.task_name,
                job_id=ctx.job_id,
                operator_uid=self.uid,
                transactional_id_prefix=transactional_id_prefix(ctx.lineage_id or ctx.job_id, self.uid),
            )
        )
        self.writer.open()
        if self.two_phase:
            self._committer = self.sink.create_committer()
            if self._pending:  # recovered: these checkpoints completed before the restart
                self._commit_up_to(max(self._pending))

    def process_batch(self, batch: pa.RecordBatch) -> None:
        self.writer.write(strip_timestamps(batch))

    def process_watermark(self, timestamp: int) -> None:
        pass

    def snapshot_state(self, checkpoint_id: int) -> OperatorSnapshot | None:
        if not self.two_phase:
            return None
        committables = self.writer.prepare_commit(checkpoint_id)
        if committables:
            self._pending[checkpoint_id] = list(committables)
        entries = [(cid, list(c)) for cid, c in sorted(self._pending.items())]
        return OperatorSnapshot(operator=[(_COMMITTABLES, "sink_committables", entries)])

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        if self.two_phase:
            self._commit_up_to(checkpoint_id)

    def _commit_up_to(self, checkpoint_id: int) -> None:
        due = sorted(cid for cid in self._pending if cid <= checkpoint_id)
        if not due:
            return
        self._committer.commit([c for cid in due for c in self._pending[cid]])
        for cid in due:
            del self._pending[cid]

    def finish(self) -> None:
        self.writer.finish()
        if self.two_phase:
            committables = self.writer.prepare_commit(END_OF_INPUT)
            if committables:
                self._pending[END_OF_INPUT] = list(committables)

    def final_committables(self) -> list[Any]:
        """Committables not committed yet when the input ended (oldest first); [] if none."""
        return [c for _, committables in sorted(self._pending.items()) for c in committables]

    def close(self) -> None:
        try:
            if self.writer is not None:
                self.writer.close()
        finally:
            if self._committer is not None:
                self._committer.close()

    def accumulator(self) -> Any:
        return self.writer.accumulator() if self.writer is not None else None


class SourceOperator(StreamOperator):
    """Head of a source chain: polls the reader and emits batches and watermarks."""

    vectorized = True

    def __init__(self, spec: OperatorSpec) -> None:
        super().__init__(spec)
        self.source: Source = spec.function
        self.reader = None
        self.splits = list(spec.splits)
        strategy = spec.timestamp_strategy or WatermarkStrategy()
        self._watermarks = strategy.create_generator()
        self._last_watermark = MIN_WATERMARK
        self.records_out = 0
        self._idle_timeout = strategy.idle_timeout
        self._idleness: IdlenessTracker | None = None  # with_idleness, created in open()

    def open(self) -> None:
        ctx = self.context
        self.reader = self.source.create_reader(
            SourceReaderContext(
                subtask_index=ctx.subtask_index, parallelism=ctx.parallelism, attempt_number=ctx.attempt_number
            )
        )
        self.reader.add_splits(self.splits)
        self.reader.open()
        if self._idle_timeout is not None:
            self._idleness = IdlenessTracker(
                self._idle_timeout, self.output.emit_watermark_status, now_ms=self.context.clock_ms()
            )

    def initialize_state(self, restored: RestoredState | None) -> None:
        """Take this subtask's share of the restored splits (all of them, sorted by id, round-robin)."""
        if restored is None:
            return
        splits = sorted(
            (e.value for e in restored.operator if e.state_name == _SOURCE_SPLITS), key=lambda split: split.split_id
        )
        ctx = self.context
        self.splits = [split for i, split in enumerate(splits) if i % ctx.parallelism == ctx.subtask_index]

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        # issue 13: readers hear of completed checkpoints (Flink's SourceReader.notifyCheckpointComplete)
        if self.reader is not None:
            self.reader.notify_checkpoint_complete(checkpoint_id)

    def snapshot_state(self, checkpoint_id: int) -> OperatorSnapshot:
        splits = self.reader.snapshot_state(checkpoint_id)
        return OperatorSnapshot(operator=[(_SOURCE_SPLITS, "source_split", [(s.split_id, s) for s in splits])])

    def poll(self, max_rows: int) -> ReadResult:
        """Read once; emit what was read (and a watermark if it advanced)."""
        result = self.reader.poll_next(max_rows)
        batch = result.batch
        if self._idleness is not None:
            if batch is not None and batch.num_rows:
                self._idleness.on_records(self.context.clock_ms())
            else:
                self._idleness.check(self.context.clock_ms())
        if batch is not None and batch.num_rows:
            self.records_out += batch.num_rows
            if not self._watermarks.enabled:
                self.output.emit_batch(batch)
            else:
                self.output.emit_batch(with_timestamps(batch, self._watermarks.assign(batch)))
                watermark = self._watermarks.current_watermark()
                if watermark > self._last_watermark:
                    self._last_watermark = watermark
                    self.output.emit_watermark(watermark)
        return result

    def finish(self) -> None:
        # Flink: a bounded source ends with MAX_WATERMARK, firing all event-time timers downstream.
        if self._idleness is not None:
            self._idleness.end()
        self.output.emit_watermark(MAX_WATERMARK)

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()


# -- issue 13: side-output streams and operators in their own modules -------------------------


class SideOutputOperator(StreamOperator):
    """Head of a side-output stream: passes on what its producer emitted under the tag."""

    vectorized = True

    def process_batch(self, batch: pa.RecordBatch) -> None:
        self.output.emit_batch(batch)

    def process_rows(self, rows: list[dict], timestamps: Timestamps = None) -> None:
        self.output.emit_rows(rows, timestamps)


#: Operator kinds implemented in their own modules ("module:Class"), imported on first use.
_OPERATOR_MODULES: dict[str, str] = {
    "window": "flinklike_spark._runtime.streaming.window_operator:WindowOperator",
    "keyed_map": "flinklike_spark._runtime.streaming.keyed_operators:KeyedMapOperator",
    "keyed_flat_map": "flinklike_spark._runtime.streaming.keyed_operators:KeyedFlatMapOperator",
    "keyed_filter": "flinklike_spark._runtime.streaming.keyed_operators:KeyedFilterOperator",
    "keyed_reduce": "flinklike_spark._runtime.streaming.keyed_operators:KeyedReduceOperator",
    "timestamps_watermarks": "flinklike_spark._runtime.streaming.watermark_operator:TimestampsAndWatermarksOperator",
    "co_process": "flinklike_spark._runtime.streaming.co_operators:CoProcessOperator",
    "keyed_co_process": "flinklike_spark._runtime.streaming.co_operators:KeyedCoProcessOperator",
    "async_wait": "flinklike_spark._runtime.streaming.async_operator:AsyncWaitOperator",
}


def _operator_class(kind: str) -> type[StreamOperator]:
    cls = _OPERATOR_CLASSES.get(kind)
    if cls is None:
        module, _, name = _OPERATOR_MODULES[kind].partition(":")
        cls = getattr(importlib.import_module(module), name)
    return cls


_OPERATOR_CLASSES: dict[str, type[StreamOperator]] = {
    "source": SourceOperator,
    "map": MapOperator,
    "flat_map": FlatMapOperator,
    "filter": FilterOperator,
    "map_batches": MapBatchesOperator,
    "process": ProcessOperator,
    "keyed_process": KeyedProcessOperator,
    "sink": SinkOperator,
    "side_output": SideOutputOperator,
}


@dataclasses.dataclass(kw_only=True)
class OperatorSpec:
    """A picklable description of one operator in a chain.

    Attributes:
        uid: stable id (user-given with ``.uid()`` or derived); names state.
        name: display name.
        kind: one of the keys of the operator registry ("map", "sink", ...).
        function: the user function, source or sink.
        input_schema: declared schema of the input stream (None = inferred).
        input_name: name of the input stream for error messages.
        key_field / key_selector: the key of a keyed operator.
        timestamp_strategy: the stream's watermark strategy (event timestamps).
        splits: source splits of this subtask (filled in at deployment).
        chained_outputs: indices (in the vertex's operator list) of chained successors.
        network_outputs: indices of the vertex's output edges this operator feeds.
        chained_output_tags / network_output_tags: of those, the ones fed by a side
            output: index -> OutputTag id.
        side_output_schemas: declared schema per side-output tag id (None: inferred).
    """

    uid: str
    name: str
    kind: str
    function: Any = None
    input_schema: pa.Schema | None = None
    input_name: str | None = None
    output_schema: pa.Schema | None = None
    key_field: str | None = None
    key_selector: Callable[[dict], Any] | None = None
    timestamp_strategy: WatermarkStrategy | None = None
    splits: Iterable[Any] = ()
    chained_outputs: list[int] = dataclasses.field(default_factory=list)
    network_outputs: list[int] = dataclasses.field(default_factory=list)
    # issue 13: outputs that carry a side output instead of the main output
    chained_output_tags: dict[int, str] = dataclasses.field(default_factory=dict)
    network_output_tags: dict[int, str] = dataclasses.field(default_factory=dict)
    side_output_schemas: dict[str, pa.Schema | None] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in _OPERATOR_CLASSES and self.kind not in _OPERATOR_MODULES:
            raise ValueError(
                f"unknown operator kind {self.kind!r}; valid kinds: {sorted([*_OPERATOR_CLASSES, *_OPERATOR_MODULES])}"
            )

    def create(self) -> StreamOperator:
        if self.kind in ("window", "keyed_reduce"):  # issue 22: built-ins run vectorized (same semantics, state)
            from flinklike_spark._runtime.streaming.vectorized_aggregation import vectorized_operator_class

            return (vectorized_operator_class(self) or _operator_class(self.kind))(self)
        return _operator_class(self.kind)(self)

    # -- issue 13: side outputs ---------------------------------------------------------------

    def network_output_schema(self, edge_index: int) -> pa.Schema | None:
        """Declared schema of the rows this operator sends on its output edge ``edge_index``."""
        tag = self.network_output_tags.get(edge_index)
        return self.output_schema if tag is None else self.side_output_schemas.get(tag)
