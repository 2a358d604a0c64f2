"""What state to write for an operator: Flink's ``OperatorTransformation`` and ``KeyedStateBootstrapFunction``.

Two ways to say what an operator's keyed state is, both from a table of data
(a Spark DataFrame, a pyarrow Table, ...)::

    # one column per state (the shape SavepointReader.read_keyed_state returns)
    OperatorTransformation.bootstrap_with(df).key_by("key").states(ValueStateDescriptor("count"))

    # a function per record, with the key set, as the job's own function would write it
    OperatorTransformation.bootstrap_with(events).key_by("user").transform(CountBootstrap())

Both produce a :class:`StateBootstrapTransformation`, which
:meth:`SavepointWriter.with_operator` writes. Values are stored exactly as the
runtime stores them: the function form runs on the runtime's own heap keyed
state backend (its state handles, TTL stamping included) and the column form
goes through :func:`~flinklike_spark.state_processor.state_values.encode_values`.
"""

from __future__ import annotations

import abc
import dataclasses
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from checkpointing import KeyedColumns, KeyedStateSnapshot, OperatorStateSnapshot
from checkpointing.schemas import StateKind
from flinklike_spark._runtime.operators.stream_operator import EVENT_TIMERS, PROCESSING_TIMERS
from flinklike_spark._runtime.state.keyed_state import HeapKeyedStateBackend, key_groups_of
from flinklike_spark._runtime.state.state_backend_base import wall_clock_ms
from flinklike_spark._runtime.state.state_types import DeclaredStateType, declared_type_parts
from flinklike_spark.datastream.functions import Function, RuntimeContext, TimerService
from flinklike_spark.datastream.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
)
from flinklike_spark.errors import StateProcessorError
from flinklike_spark.metrics import MetricGroup, MetricRegistry

from .frames import to_arrow_table
from .state_values import encode_values, ttl_column

__all__ = [
    "BootstrappedState",
    "KeyedOperatorTransformation",
    "KeyedStateBootstrapFunction",
    "OneInputOperatorTransformation",
    "OperatorTransformation",
    "StateBootstrapTransformation",
]

KeySpec = str | Callable[[dict], Any]


class KeyedStateBootstrapFunction(Function):
    """Writes keyed state for one input record at a time (Flink's ``KeyedStateBootstrapFunction``).

    ``open(runtime_context)`` registers state with the descriptors the job uses
    (``runtime_context.get_state(ValueStateDescriptor("count"))``, ...);
    ``process_element(value, ctx)`` is called for every input row with its key
    set (``ctx.get_current_key()``), in key-group order, and may register timers
    (``ctx.timer_service().register_event_time_timer(ts)``). It returns nothing.
    """

    class Context(abc.ABC):
        @abc.abstractmethod
        def get_current_key(self) -> Any: ...

        @abc.abstractmethod
        def timer_service(self) -> TimerService: ...

    @abc.abstractmethod
    def process_element(self, value: dict, ctx: KeyedStateBootstrapFunction.Context) -> None: ...


class _Timers(TimerService):
    """Timers registered while bootstrapping: domain -> {(timestamp, key)}."""

    def __init__(self, backend: HeapKeyedStateBackend, clock_ms: Callable[[], int]) -> None:
        self._backend = backend
        self._clock_ms = clock_ms
        self.registered: dict[str, set[tuple[int, Any]]] = {EVENT_TIMERS: set(), PROCESSING_TIMERS: set()}

    def current_processing_time(self) -> int:
        return self._clock_ms()

    def current_watermark(self) -> int:
        return -(2**63)  # no event time has passed while bootstrapping (Flink: Long.MIN_VALUE)

    def register_processing_time_timer(self, timestamp: int) -> None:
        self.registered[PROCESSING_TIMERS].add((int(timestamp), self._backend.current_key))

    def register_event_time_timer(self, timestamp: int) -> None:
        self.registered[EVENT_TIMERS].add((int(timestamp), self._backend.current_key))

    def delete_processing_time_timer(self, timestamp: int) -> None:
        self.registered[PROCESSING_TIMERS].discard((int(timestamp), self._backend.current_key))

    def delete_event_time_timer(self, timestamp: int) -> None:
        self.registered[EVENT_TIMERS].discard((int(timestamp), self._backend.current_key))


class _Context(KeyedStateBootstrapFunction.Context):
    def __init__(self, backend: HeapKeyedStateBackend, timers: _Timers) -> None:
        self._backend = backend
        self._timers = timers

    def get_current_key(self) -> Any:
        return self._backend.current_key

    def timer_service(self) -> TimerService:
        return self._timers


class _RuntimeContext(RuntimeContext):
    """Keyed state of the bootstrap backend, as the job's ``RuntimeContext`` hands it out."""

    def __init__(self, backend: HeapKeyedStateBackend, uid: str) -> None:
        self._backend = backend
        self._uid = uid
        #: state name -> kind of every state the function registered (with entries or not)
        self.registered: dict[str, StateKind] = {}

    def _register(self, descriptor: StateDescriptor, expected: type[StateDescriptor]) -> Any:
        handle = self._backend.get_state(descriptor, expected)
        self.registered[descriptor.name] = StateKind(descriptor.kind)
        return handle

    task_name = property(lambda self: f"bootstrap {self._uid}")
    index_of_this_subtask = property(lambda self: 0)
    number_of_parallel_subtasks = property(lambda self: 1)
    max_number_of_parallel_subtasks = property(lambda self: self._backend.max_parallelism)
    attempt_number = property(lambda self: 0)

    def get_state(self, descriptor):
        return self._register(descriptor, ValueStateDescriptor)

    def get_list_state(self, descriptor):
        return self._register(descriptor, ListStateDescriptor)

    def get_map_state(self, descriptor):
        return self._register(descriptor, MapStateDescriptor)

    def get_reducing_state(self, descriptor):
        return self._register(descriptor, ReducingStateDescriptor)

    def get_aggregating_state(self, descriptor):
        return self._register(descriptor, AggregatingStateDescriptor)

    def get_metrics_group(self) -> MetricGroup:
        """A group of a registry of its own: bootstrap metrics are not reported anywhere."""
        return MetricGroup(MetricRegistry(), (f"bootstrap {self._uid}",))


def _owner(uid: str) -> str:
    return f"the bootstrap of operator uid {uid!r}"


def _hashable(key: Any) -> Any:
    """A key as state holds it: lists (an Arrow list column) become tuples."""
    return tuple(_hashable(k) for k in key) if isinstance(key, list) else key


@dataclasses.dataclass(frozen=True, kw_only=True)
class BootstrappedState:
    """The keyed state one transformation computed for one operator.

    Attributes:
        states: name -> kind of every keyed state the transformation writes, timers
            excluded: the descriptors given to ``states()``, or those the function
            registered through its runtime context. A state is in it even when no key
            holds an entry (a column of nulls, a state registered but never updated).
        parts: the snapshot parts to write: one per state holding entries, and the timers.
        types: the ``type_info`` parts recording the declared type of each typed state.
    """

    states: Mapping[str, StateKind]
    parts: list[KeyedStateSnapshot]
    types: list[OperatorStateSnapshot] = dataclasses.field(default_factory=list)


class StateBootstrapTransformation:
    """The keyed state (and timers) of one operator, computed from data when the savepoint is written.

    Build it with :class:`OperatorTransformation`; hand it to
    :meth:`SavepointWriter.with_operator`.
    """

    def __init__(
        self,
        data: Any,
        key: KeySpec,
        *,
        descriptors: tuple[StateDescriptor, ...] = (),
        function: KeyedStateBootstrapFunction | None = None,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self._data = data
        self._key = key
        self._descriptors = descriptors
        self._function = function
        self._clock_ms = clock_ms

    @property
    def declared_states(self) -> Mapping[str, StateKind] | None:
        """Name -> kind of the states written, when known without reading the data: those
        given to ``states()``; None for ``transform()``, whose function registers its states
        when it runs (see :meth:`compute`)."""
        if self._function is not None:
            return None
        return {d.name: StateKind(d.kind) for d in self._descriptors}

    def compute(self, uid: str, max_parallelism: int) -> BootstrappedState:
        """Read the data and compute the operator's keyed state (key groups of ``max_parallelism``):
        the runtime's snapshot parts, and which states they are (see :class:`BootstrappedState`).

        Runs the function of ``transform()`` over every row; nothing is written.

        Raises:
            StateProcessorError: a missing key or state column, a duplicate key (column
                form), or a value of the wrong shape for its state; the message names it.
            StateTypeError: a value does not match its descriptor's declared type.
        """
        table = to_arrow_table(self._data, f"operator {uid!r}")
        if self._function is not None:
            return self._run_function(table, uid, max_parallelism)
        return BootstrappedState(
            states=self.declared_states,
            parts=self._from_columns(table, uid, max_parallelism),
            types=declared_type_parts(self._descriptors, {}),
        )

    def snapshots(self, uid: str, max_parallelism: int) -> list[KeyedStateSnapshot]:
        """The parts of :meth:`compute`: the operator's keyed state as the runtime's snapshot parts."""
        return self.compute(uid, max_parallelism).parts

    def _keys(self, table: pa.Table, uid: str) -> list[Any]:
        if callable(self._key):
            return [_hashable(self._key(row)) for row in table.to_pylist()]
        if self._key not in table.column_names:
            raise StateProcessorError(
                f"operator {uid!r}: key column {self._key!r} is not in the data; its columns: {table.column_names}"
            )
        keys = table[self._key].to_pylist()
        if any(isinstance(k, list) for k in keys):
            keys = [_hashable(k) for k in keys]
        return keys

    def _from_columns(self, table: pa.Table, uid: str, max_parallelism: int) -> list[KeyedStateSnapshot]:
        keys = self._keys(table, uid)
        if len(set(keys)) != len(keys):
            seen: set = set()
            duplicate = next(k for k in keys if k in seen or seen.add(k))
            raise StateProcessorError(
                f"operator {uid!r}: key {duplicate!r} appears in more than one row; the column form takes one row "
                f"per key (aggregate first, e.g. groupBy, or use .transform(KeyedStateBootstrapFunction))"
            )
        groups = key_groups_of(keys, max_parallelism)
        now = self._clock_ms()
        parts = []
        site = types.SimpleNamespace(owner=_owner(uid), current_key=None)  # what type errors name
        for descriptor in self._descriptors:
            name = descriptor.name
            if name not in table.column_names:
                raise StateProcessorError(
                    f"operator {uid!r}: no column {name!r} for state {name!r}; the data's columns: {table.column_names}"
                )
            kind = StateKind(descriptor.kind)
            values = table[name].to_pylist()
            declared = DeclaredStateType.of(descriptor, site)
            if declared is not None:
                for key, value in zip(keys, values):
                    if value is not None:
                        site.current_key = key
                        declared.check_entry(value)
            ttl = descriptor.ttl_config is not None
            stamps = table[ttl_column(name)].to_pylist() if ttl and ttl_column(name) in table.column_names else None
            stored = encode_values(kind, values, stamps, ttl=ttl, now_ms=now, what=f"operator {uid!r} state {name!r}")
            present = [i for i, v in enumerate(stored) if v is not None]
            if not present:
                continue
            if len(present) != len(stored):
                index = np.asarray(present, dtype=np.int64)
                parts.append(KeyedStateSnapshot(name=name, kind=kind, entries=KeyedColumns(
                    [keys[i] for i in present], [stored[i] for i in present], groups[index]
                )))  # fmt: skip
            else:
                parts.append(KeyedStateSnapshot(name=name, kind=kind, entries=KeyedColumns(list(keys), stored, groups)))
        return parts

    def _run_function(self, table: pa.Table, uid: str, max_parallelism: int) -> BootstrappedState:
        keys = self._keys(table, uid)
        rows = table.to_pylist()
        groups = key_groups_of(keys, max_parallelism)
        backend = HeapKeyedStateBackend(max_parallelism=max_parallelism, clock_ms=self._clock_ms)
        backend.owner = _owner(uid)
        timers = _Timers(backend, self._clock_ms)
        function = self._function
        ctx = _Context(backend, timers)
        runtime_context = _RuntimeContext(backend, uid)
        if hasattr(function, "open"):
            function.open(runtime_context)
        try:
            for i in np.argsort(groups, kind="stable").tolist():  # per key group, as Flink's bootstrap tasks go
                backend.current_key = keys[i]
                produced = function.process_element(rows[i], ctx)
                if produced is not None and not isinstance(produced, Iterable):
                    raise StateProcessorError(
                        f"operator {uid!r}: KeyedStateBootstrapFunction.process_element returns nothing, got {produced!r}"
                    )
        finally:
            if hasattr(function, "close"):
                function.close()
        parts = backend.snapshot_entries()
        for name, registered in timers.registered.items():
            if registered:
                entries = sorted(registered, key=lambda e: e[0])
                timer_keys = [k for _, k in entries]
                parts.append(KeyedStateSnapshot(name=name, kind=StateKind.TIMER, entries=KeyedColumns(
                    timer_keys, [t for t, _ in entries], key_groups_of(timer_keys, max_parallelism)
                )))  # fmt: skip
        return BootstrappedState(
            states=dict(runtime_context.registered), parts=parts, types=backend.snapshot_declared_types()
        )


class KeyedOperatorTransformation:
    """Data keyed by a column or selector; finish with :meth:`states` or :meth:`transform`."""

    def __init__(self, data: Any, key: KeySpec) -> None:
        self._data = data
        self._key = key

    def states(self, *descriptors: StateDescriptor | str) -> StateBootstrapTransformation:
        """One column per state, named as the state (a plain name means a ``ValueStateDescriptor``).

        Each row is one key's entries; a null (or empty list / map) means no entry.
        For a descriptor with time-to-live, a ``<name>_ttl_timestamp`` column sets the
        last access times; without it entries are stamped with the time of writing.
        """
        if not descriptors:
            raise StateProcessorError("states() needs at least one state descriptor (or state name)")
        resolved = tuple(ValueStateDescriptor(d) if isinstance(d, str) else d for d in descriptors)
        bad = [d for d in resolved if not isinstance(d, StateDescriptor)]
        if bad:
            raise StateProcessorError(
                f"states() takes state descriptors (ValueStateDescriptor, ListStateDescriptor, MapStateDescriptor, "
                f"ReducingStateDescriptor, AggregatingStateDescriptor) or names, got {bad[0]!r}"
            )
        names = [d.name for d in resolved]
        if len(set(names)) != len(names):
            raise StateProcessorError(f"states() got a state name twice: {names}")
        return StateBootstrapTransformation(self._data, self._key, descriptors=resolved)

    def transform(self, function: KeyedStateBootstrapFunction) -> StateBootstrapTransformation:
        """Run ``function`` for every row with its key set; what it writes to state is the operator's state."""
        if not isinstance(function, KeyedStateBootstrapFunction):
            raise StateProcessorError(f"transform() takes a KeyedStateBootstrapFunction, got {function!r}")
        return StateBootstrapTransformation(self._data, self._key, function=function)


class OneInputOperatorTransformation:
    """Data to bootstrap state from; key it with :meth:`key_by`."""

    def __init__(self, data: Any) -> None:
        self._data = data

    def key_by(self, key: KeySpec) -> KeyedOperatorTransformation:
        """Key the rows by a column name or a function of the row (as the job's ``key_by``)."""
        if not (isinstance(key, str) and key) and not callable(key):
            raise StateProcessorError(f"key_by() takes a column name or a function of the row, got {key!r}")
        return KeyedOperatorTransformation(self._data, key)


class OperatorTransformation:
    """Entry point (Flink's ``OperatorTransformation.bootstrapWith``)."""

    @staticmethod
    def bootstrap_with(data: Any) -> OneInputOperatorTransformation:
        """Bootstrap from ``data``: a Spark DataFrame, a pyarrow Table or RecordBatch, a pandas
        DataFrame, or a list of dicts (read when the savepoint is written)."""
        return OneInputOperatorTransformation(data)
