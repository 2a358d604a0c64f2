"""Stream operators: what runs inside an operator chain on the task thread.

Every operator receives data either as Arrow batches (``process_batch``) or as
lists of row dicts (``process_rows``); per-record operators work on rows,
vectorized ones on batches, and each converts what it is given. Output goes to
``self.output`` (an :class:`Output`): the next chained operator or the network.

An operator is described by a picklable
:class:`~flinklike_spark._runtime.operators.operator_spec.OperatorSpec` in the
JobGraph and instantiated in the TaskExecutor by ``create_operator(spec)``. This module
holds the base classes and the stateless per-record operators; the source, sink
and process operators have modules of their own.

Lifecycle (driven by the operator chain): ``setup`` -> ``open`` (tail to head)
-> ``process_*`` / ``process_watermark`` / ``on_processing_time`` -> ``finish``
(end of input, head to tail) -> ``close`` (always, head to tail).
"""

from __future__ import annotations

import abc
import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping
from types import GeneratorType, MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

import pyarrow as pa

from checkpointing.state_snapshots import KeyedStateChanges, KeyedStateSnapshot, OperatorStateSnapshot
from flinklike_spark._runtime.operators.rows import RecordKind, RowsConverter, declared_kind, records_of
from flinklike_spark._runtime.record_timestamps import (
    Timestamps,
    split_timestamps,
    with_timestamps,
)
from flinklike_spark._runtime.state.incremental_snapshot import IncrementalConfig
from flinklike_spark._runtime.state.state_backend_base import KeyedStateBackend
from flinklike_spark.common.types import Row
from flinklike_spark.config import RocksDBOptions, StateBackendType
from flinklike_spark.datastream.functions import (
    FilterFunction,
    FlatMapFunction,
    Function,
    MapFunction,
    RuntimeContext,
)
from flinklike_spark.datastream.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from flinklike_spark.errors import FunctionResultError
from flinklike_spark.metrics import MetricGroup, MetricRegistry

__all__ = [
    "EVENT_TIMERS",
    "PROCESSING_TIMERS",
    "FilterOperator",
    "FlatMapOperator",
    "MapBatchesOperator",
    "MapOperator",
    "OperatorContext",
    "OperatorRuntimeContext",
    "OperatorSnapshot",
    "Output",
    "RestoredEntry",
    "RestoredState",
    "SideOutputOperator",
    "StreamOperator",
    "UserFunctionOperator",
    "call_close",
    "call_open",
    "check_iterable",
    "check_rows",
    "describe_operator",
    "extend_results",
    "extend_stamped",
    "short_repr",
]

if TYPE_CHECKING:  # pragma: no cover
    from flinklike_spark._runtime.operators.operator_spec import OperatorSpec
    from flinklike_spark._runtime.watermark_alignment import WatermarkReport

EVENT_TIMERS = "event_time_timers"
PROCESSING_TIMERS = "processing_time_timers"


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
        keyed: a full snapshot of each keyed state (timers and window contents included).
        operator: each non-keyed state (source splits, sink committables, broadcast state).
        keyed_changes: incremental checkpoints: the changes of each changed keyed state.
    """

    keyed: list[KeyedStateSnapshot] = dataclasses.field(default_factory=list)
    operator: list[OperatorStateSnapshot] = dataclasses.field(default_factory=list)
    keyed_changes: list[KeyedStateChanges] = dataclasses.field(default_factory=list)
    #: incremental checkpoints: the checkpoints whose rows make up the keyed state; None: self-contained
    chain: tuple[int, ...] | None = None


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
        keyed_base: the incremental chain that ``keyed`` is, when the subtask's next
            incremental checkpoint may build on it (a checkpoint of this job, in its own
            storage, at this parallelism, so ``keyed`` is exactly the state of the old
            subtask with this index); None when the next checkpoint must be a full one.
    """

    checkpoint_id: int
    keyed: tuple[RestoredEntry, ...] = ()
    operator: tuple[RestoredEntry, ...] = ()
    parallelism: int = 0
    keyed_base: tuple[int, ...] | None = None


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
    #: Flink's state.backend.type: a built-in backend, or the name a backend module registered
    state_backend_type: StateBackendType | str = StateBackendType.HASHMAP
    #: ``execution.runtime-mode: batch``: no watermark before the end of input, final values only
    batch_execution: bool = False
    #: execution.checkpointing.incremental: when to write a new base (None: full checkpoints)
    incremental: IncrementalConfig | None = None
    rocksdb: RocksDBOptions | None = None  # state.backend.rocksdb.* (None: the defaults)
    #: the task's user metrics (reported with the task's metrics)
    metric_registry: MetricRegistry = dataclasses.field(default_factory=MetricRegistry)
    #: the job's client (a connector_api.ClientResultChannel), for execute_and_collect's sink
    result_channel: Any = None
    #: the JobMaster's watermark alignment (JobMasterGateway.report_watermark; None: sources are not aligned)
    report_watermark: Callable[[WatermarkReport], int] | None = None
    vertex_id: str = ""
    #: FLIP-147: the task ends with a final checkpoint, whose completion commits the sinks' last output
    final_checkpoint: bool = False
    #: True once the task is being cancelled (or failed from outside): long waits in connectors poll it
    cancelled: Callable[[], bool] = dataclasses.field(default=lambda: False)


class OperatorRuntimeContext(RuntimeContext):
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


def describe_operator(operator: StreamOperator) -> str:
    return f"operator {operator.name!r} (uid {operator.uid!r})"


def extend_stamped(
    out: list, out_ts: list, produced: Any, timestamp: int | None, operator: StreamOperator, method: str
) -> None:
    """``extend_results``, and one ``timestamp`` in ``out_ts`` per row appended to ``out``.

    On the per-record path: a generator (``yield row``, the common case) skips the check.
    """
    if produced is None:
        return
    if type(produced) is not GeneratorType:
        check_iterable(produced, operator, method)
    before = len(out)
    out.extend(produced)
    if len(out) > before:
        out_ts.extend([timestamp] * (len(out) - before))


def extend_results(out: list, produced: Any, operator: StreamOperator, method: str) -> None:
    """Append what ``method`` (flat_map, process_element, on_timer) produced: None or an
    iterable of rows. A dict or string is a mistake (``return row`` instead of ``yield
    row``): iterating it would emit its keys or characters as rows."""
    if produced is None:
        return
    if type(produced) is not GeneratorType:
        check_iterable(produced, operator, method)
    out.extend(produced)


def check_iterable(produced: Any, operator: StreamOperator, method: str) -> None:
    """FunctionResultError unless ``produced`` (not None) is an iterable of rows rather than one row or a string."""
    if isinstance(produced, dict | str | bytes) or not isinstance(produced, Iterable):
        hint = " (use `yield row` instead of `return row`)" if isinstance(produced, dict) else ""
        raise FunctionResultError(
            f"{method}() of {describe_operator(operator)} returned {type(produced).__name__} {short_repr(produced)}; it must "
            f"yield rows (dicts), or return an iterable of rows or None{hint}"
        )


def check_rows(rows: list, operator: StreamOperator, method: str) -> list[dict]:
    """``rows`` unchanged if every one is a record (a dict, Row or tuple), or any value on a stream
    declared with a basic type or without a declared type (pickled, as in PyFlink); else
    FunctionResultError naming the operator (a plain value on a stream declared with fields)."""
    output_schema = operator.spec.output_schema
    for row in rows:
        if type(row) is not dict and not isinstance(row, (dict, tuple, Row)):
            if output_schema is None or declared_kind(output_schema) in (RecordKind.VALUE, RecordKind.PICKLED):
                return rows
            if method == "map":
                hint = "; to drop rows use filter() or flat_map()" if row is None else ""
                what = f"returned {type(row).__name__} {short_repr(row)}; it must return a row{hint}"
            else:
                what = f"produced {type(row).__name__} {short_repr(row)} as a row"
            raise FunctionResultError(
                f"{method}() of {describe_operator(operator)} {what}; its declared output_type has fields "
                f"{output_schema.names}: return dicts, Rows or tuples of them (or declare a basic type such as "
                f"Types.STRING(), or Types.PICKLED_BYTE_ARRAY())"
            )
    return rows


def short_repr(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def call_open(function: Any, runtime_context: RuntimeContext) -> None:
    if isinstance(function, Function):
        function.open(runtime_context)


def call_close(function: Any) -> None:
    if isinstance(function, Function):
        function.close()


class UserFunctionOperator(StreamOperator):
    def __init__(self, spec: OperatorSpec) -> None:
        super().__init__(spec)
        self.function = spec.function

    def open(self) -> None:
        call_open(self.function, OperatorRuntimeContext(self.context, None, self.name))

    def close(self) -> None:
        call_close(self.function)


class MapOperator(UserFunctionOperator):
    def process_rows(self, rows: list[dict], timestamps: Timestamps = None) -> None:
        fn = self.function.map if isinstance(self.function, MapFunction) else self.function
        self.output.emit_rows(check_rows([fn(row) for row in rows], self, "map"), timestamps)


class FlatMapOperator(UserFunctionOperator):
    def process_rows(self, rows: list[dict], timestamps: Timestamps = None) -> None:
        fn = self.function.flat_map if isinstance(self.function, FlatMapFunction) else self.function
        out: list[dict] = []
        if timestamps is None:
            for row in rows:
                extend_results(out, fn(row), self, "flat_map")
            out_ts = None
        else:
            out_ts: list = []
            for row, timestamp in zip(rows, timestamps, strict=True):
                extend_stamped(out, out_ts, fn(row), timestamp, self, "flat_map")
        if out:
            self.output.emit_rows(check_rows(out, self, "flat_map"), out_ts)


class FilterOperator(UserFunctionOperator):
    def process_rows(self, rows: list[dict], timestamps: Timestamps = None) -> None:
        fn = self.function.filter if isinstance(self.function, FilterFunction) else self.function
        keep = [fn(row) for row in rows]
        out = [row for row, kept in zip(rows, keep) if kept]
        if out:
            out_ts = None if timestamps is None else [t for t, kept in zip(timestamps, keep) if kept]
            self.output.emit_rows(out, out_ts)


class MapBatchesOperator(UserFunctionOperator):
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


class SideOutputOperator(StreamOperator):
    """Head of a side-output stream: passes on what its producer emitted under the tag."""

    vectorized = True

    def process_batch(self, batch: pa.RecordBatch) -> None:
        self.output.emit_batch(batch)

    def process_rows(self, rows: list[dict], timestamps: Timestamps = None) -> None:
        self.output.emit_rows(rows, timestamps)
