"""Keyed state: descriptors (public), state handles functions use, and state TTL (PyFlink's API).

A descriptor names a state and, for reducing and aggregating state, carries
its function. ``runtime_context.get_state(descriptor)`` (and
``get_list_state``, ``get_map_state``, ``get_reducing_state``,
``get_aggregating_state``) returns a handle bound to the operator's keyed
state backend: every access reads or writes the entry of the *current key*
(the key of the record or timer being processed). Values must be picklable
(they are checkpointed).

Descriptors take PyFlink's positional arguments (``MapStateDescriptor(name,
key_type_info, value_type_info)``, ``ReducingStateDescriptor(name,
reduce_function, type_info)``, ``AggregatingStateDescriptor(name,
agg_function, state_type_info)``); type information is optional here, because
values are pickled whatever their type.

State time-to-live: ``descriptor.enable_time_to_live(StateTtlConfig.new_builder(
Time.seconds(60)).build())`` makes the state's entries expire a fixed
processing time after their last write (or also read, with
``UpdateType.OnReadAndWrite``). See :class:`StateTtlConfig` for the exact
semantics; the runtime's handles for TTL state live in
``flinklike_spark._runtime.state.ttl_state``.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Callable, Iterable, Iterator
from datetime import timedelta
from typing import Any, NamedTuple

from flinklike_spark.errors import ConfigurationError

__all__ = [
    "AggregatingState",
    "AggregatingStateDescriptor",
    "AppendingState",
    "BroadcastState",
    "ListState",
    "ListStateDescriptor",
    "MapState",
    "MapStateDescriptor",
    "MergingState",
    "ReadOnlyBroadcastState",
    "ReducingState",
    "ReducingStateDescriptor",
    "State",
    "StateDescriptor",
    "StateTtlConfig",
    "TtlValue",
    "ValueState",
    "ValueStateDescriptor",
]


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not name:
        raise ConfigurationError(f"a state descriptor needs a non-empty string name, got {name!r}")


# -- TTL configuration ------------------------------------------------------------------------


class TtlValue(NamedTuple):
    """A TTL state entry as stored and checkpointed: the user value and its last access time.

    ``timestamp`` is processing time in ms since the epoch. Checkpoints store
    this pair (``value_repr`` in ``operator_state`` shows both), so a restored
    entry keeps its age and expires on schedule.
    """

    value: Any
    timestamp: int


def _ttl_milliseconds(ttl: Any) -> int:
    if isinstance(ttl, timedelta):
        ms = ttl // timedelta(milliseconds=1)
    elif hasattr(ttl, "to_milliseconds"):
        ms = ttl.to_milliseconds()
    else:
        raise ConfigurationError(
            f"state TTL must be a Time (e.g. Time.seconds(60)) or a datetime.timedelta, got {ttl!r}"
        )
    if isinstance(ms, bool) or not isinstance(ms, int) or ms <= 0:
        raise ConfigurationError(f"state TTL must be positive, got {ttl!r} ({ms!r} ms)")
    return ms


class StateTtlConfig:
    """Time-to-live of keyed state entries (PyFlink's ``StateTtlConfig``; build with :meth:`new_builder`).

    Semantics (as Flink's heap backend):

    * An entry's *last access time* is set when it is written
      (``OnCreateAndWrite``), and also when it is read (``OnReadAndWrite``).
      The entry is expired once ``last access + ttl <= now``. ``now`` is
      processing time (``TtlTimeCharacteristic.ProcessingTime``, Flink's only
      characteristic) from the operator's clock, injectable in tests.
    * Map state expires per map entry, list state per element.
    * Reading an expired entry removes it. ``NeverReturnExpired`` then returns
      nothing (as if absent); ``ReturnExpiredIfNotCleanedUp`` returns the
      expired value this one time.
    * Cleanup of entries nobody reads: ``cleanup_full_snapshot()`` leaves
      expired entries out of every checkpoint and savepoint (working state
      keeps them until read); ``cleanup_incrementally(n, per_record)`` checks
      ``n`` entries of the state on each access of it (and, with
      ``per_record``, each time the operator moves to the next record's key).
      Cleanup in background is on by default and means incremental cleanup of
      5 entries per access on the heap backend, as in Flink;
      ``disable_cleanup_in_background()`` turns the default off.
      ``cleanup_in_rocksdb_compact_filter(...)`` is accepted and applies to
      the RocksDB backend only (the heap backend ignores it, as Flink's does).
    * Restored state keeps its timestamps: an entry that expired while the
      job was down is not returned under ``NeverReturnExpired``.
    """

    class UpdateType(enum.Enum):
        Disabled = 0
        OnCreateAndWrite = 1
        OnReadAndWrite = 2

    class StateVisibility(enum.Enum):
        ReturnExpiredIfNotCleanedUp = 0
        NeverReturnExpired = 1

    class TtlTimeCharacteristic(enum.Enum):
        ProcessingTime = 0

    class CleanupStrategies:
        """The configured cleanup strategies (read-only; built by the builder)."""

        class Strategies(enum.Enum):
            FULL_STATE_SCAN_SNAPSHOT = 0
            INCREMENTAL_CLEANUP = 1
            ROCKSDB_COMPACTION_FILTER = 2

        class IncrementalCleanupStrategy(NamedTuple):
            cleanup_size: int
            run_cleanup_for_every_record: bool

        class RocksdbCompactFilterCleanupStrategy(NamedTuple):
            query_time_after_num_entries: int
            periodic_compaction_time: timedelta

        #: Flink's heap default when cleanup in background is on and nothing else is configured.
        DEFAULT_INCREMENTAL_CLEANUP = IncrementalCleanupStrategy(5, False)

        def __init__(self, strategies: dict, is_cleanup_in_background: bool) -> None:
            self._strategies = dict(strategies)
            self._is_cleanup_in_background = is_cleanup_in_background

        def is_cleanup_in_background(self) -> bool:
            return self._is_cleanup_in_background

        def in_full_snapshot(self) -> bool:
            return self.Strategies.FULL_STATE_SCAN_SNAPSHOT in self._strategies

        def get_incremental_cleanup_strategy(
            self,
        ) -> StateTtlConfig.CleanupStrategies.IncrementalCleanupStrategy | None:
            """The incremental strategy in effect (the default one when cleanup in background is on)."""
            configured = self._strategies.get(self.Strategies.INCREMENTAL_CLEANUP)
            if configured is None and self._is_cleanup_in_background:
                return self.DEFAULT_INCREMENTAL_CLEANUP
            return configured

        def get_rocksdb_compact_filter_cleanup_strategy(self):
            return self._strategies.get(self.Strategies.ROCKSDB_COMPACTION_FILTER)

    def __init__(
        self,
        update_type: StateTtlConfig.UpdateType,
        state_visibility: StateTtlConfig.StateVisibility,
        ttl_time_characteristic: StateTtlConfig.TtlTimeCharacteristic,
        ttl: Any,
        cleanup_strategies: StateTtlConfig.CleanupStrategies,
    ) -> None:
        if not isinstance(update_type, StateTtlConfig.UpdateType):
            raise ConfigurationError(
                f"update type must be a StateTtlConfig.UpdateType, got {update_type!r}; "
                f"valid: {[m.name for m in StateTtlConfig.UpdateType]}"
            )
        if not isinstance(state_visibility, StateTtlConfig.StateVisibility):
            raise ConfigurationError(
                f"state visibility must be a StateTtlConfig.StateVisibility, got {state_visibility!r}; "
                f"valid: {[m.name for m in StateTtlConfig.StateVisibility]}"
            )
        if not isinstance(ttl_time_characteristic, StateTtlConfig.TtlTimeCharacteristic):
            raise ConfigurationError(
                f"TTL time characteristic must be StateTtlConfig.TtlTimeCharacteristic.ProcessingTime, "
                f"got {ttl_time_characteristic!r}"
            )
        self._update_type = update_type
        self._state_visibility = state_visibility
        self._ttl_time_characteristic = ttl_time_characteristic
        self._ttl = ttl
        self.ttl_ms = _ttl_milliseconds(ttl)
        self._cleanup_strategies = cleanup_strategies

    @staticmethod
    def new_builder(ttl: Any) -> StateTtlConfig.Builder:
        """A builder for a TTL of ``ttl`` (a ``Time`` or a ``datetime.timedelta``)."""
        return StateTtlConfig.Builder(ttl)

    def get_update_type(self) -> StateTtlConfig.UpdateType:
        return self._update_type

    def get_state_visibility(self) -> StateTtlConfig.StateVisibility:
        return self._state_visibility

    def get_ttl(self) -> Any:
        return self._ttl

    def get_ttl_time_characteristic(self) -> StateTtlConfig.TtlTimeCharacteristic:
        return self._ttl_time_characteristic

    def is_enabled(self) -> bool:
        return self._update_type is not StateTtlConfig.UpdateType.Disabled

    def get_cleanup_strategies(self) -> StateTtlConfig.CleanupStrategies:
        return self._cleanup_strategies

    def __repr__(self) -> str:
        return (
            f"StateTtlConfig<update_type={self._update_type.name}, state_visibility={self._state_visibility.name}, "
            f"ttl={self.ttl_ms} ms>"
        )

    class Builder:
        """Builder of :class:`StateTtlConfig`; defaults: OnCreateAndWrite, NeverReturnExpired,
        processing time, cleanup in background on."""

        def __init__(self, ttl: Any) -> None:
            _ttl_milliseconds(ttl)
            self._ttl = ttl
            self._update_type = StateTtlConfig.UpdateType.OnCreateAndWrite
            self._state_visibility = StateTtlConfig.StateVisibility.NeverReturnExpired
            self._ttl_time_characteristic = StateTtlConfig.TtlTimeCharacteristic.ProcessingTime
            self._is_cleanup_in_background = True
            self._strategies: dict = {}

        def set_update_type(self, update_type: StateTtlConfig.UpdateType) -> StateTtlConfig.Builder:
            self._update_type = update_type
            return self

        def update_ttl_on_create_and_write(self) -> StateTtlConfig.Builder:
            return self.set_update_type(StateTtlConfig.UpdateType.OnCreateAndWrite)

        def update_ttl_on_read_and_write(self) -> StateTtlConfig.Builder:
            return self.set_update_type(StateTtlConfig.UpdateType.OnReadAndWrite)

        def set_state_visibility(self, state_visibility: StateTtlConfig.StateVisibility) -> StateTtlConfig.Builder:
            self._state_visibility = state_visibility
            return self

        def return_expired_if_not_cleaned_up(self) -> StateTtlConfig.Builder:
            return self.set_state_visibility(StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp)

        def never_return_expired(self) -> StateTtlConfig.Builder:
            return self.set_state_visibility(StateTtlConfig.StateVisibility.NeverReturnExpired)

        def set_ttl_time_characteristic(
            self, ttl_time_characteristic: StateTtlConfig.TtlTimeCharacteristic
        ) -> StateTtlConfig.Builder:
            self._ttl_time_characteristic = ttl_time_characteristic
            return self

        def use_processing_time(self) -> StateTtlConfig.Builder:
            return self.set_ttl_time_characteristic(StateTtlConfig.TtlTimeCharacteristic.ProcessingTime)

        def cleanup_full_snapshot(self) -> StateTtlConfig.Builder:
            """Leave expired entries out of full snapshots (checkpoints and savepoints)."""
            self._strategies[StateTtlConfig.CleanupStrategies.Strategies.FULL_STATE_SCAN_SNAPSHOT] = None
            return self

        def cleanup_incrementally(
            self, cleanup_size: int, run_cleanup_for_every_record: bool
        ) -> StateTtlConfig.Builder:
            """Check ``cleanup_size`` entries for expiry on every access of the state (heap backend).

            With ``run_cleanup_for_every_record`` also each time the operator sets
            the key of the next record or timer.
            """
            if isinstance(cleanup_size, bool) or not isinstance(cleanup_size, int) or cleanup_size < 0:
                raise ConfigurationError(
                    f"cleanup_incrementally: cleanup_size must be an int >= 0, got {cleanup_size!r}"
                )
            self._strategies[StateTtlConfig.CleanupStrategies.Strategies.INCREMENTAL_CLEANUP] = (
                StateTtlConfig.CleanupStrategies.IncrementalCleanupStrategy(
                    cleanup_size, bool(run_cleanup_for_every_record)
                )
            )
            return self

        def cleanup_in_rocksdb_compact_filter(
            self, query_time_after_num_entries: int, periodic_compaction_time: Any = timedelta(days=30)
        ) -> StateTtlConfig.Builder:
            """Clean up expired entries in RocksDB compactions; applies to the RocksDB backend only."""
            if (
                isinstance(query_time_after_num_entries, bool)
                or not isinstance(query_time_after_num_entries, int)
                or (query_time_after_num_entries < 0)
            ):
                raise ConfigurationError(
                    f"cleanup_in_rocksdb_compact_filter: query_time_after_num_entries must be an int >= 0, "
                    f"got {query_time_after_num_entries!r}"
                )
            if not isinstance(periodic_compaction_time, timedelta):
                periodic_compaction_time = timedelta(milliseconds=_ttl_milliseconds(periodic_compaction_time))
            self._strategies[StateTtlConfig.CleanupStrategies.Strategies.ROCKSDB_COMPACTION_FILTER] = (
                StateTtlConfig.CleanupStrategies.RocksdbCompactFilterCleanupStrategy(
                    query_time_after_num_entries, periodic_compaction_time
                )
            )
            return self

        def disable_cleanup_in_background(self) -> StateTtlConfig.Builder:
            """Turn off the default background cleanup; explicitly configured strategies stay."""
            self._is_cleanup_in_background = False
            return self

        def set_ttl(self, ttl: Any) -> StateTtlConfig.Builder:
            _ttl_milliseconds(ttl)
            self._ttl = ttl
            return self

        def build(self) -> StateTtlConfig:
            return StateTtlConfig(
                self._update_type,
                self._state_visibility,
                self._ttl_time_characteristic,
                self._ttl,
                StateTtlConfig.CleanupStrategies(self._strategies, self._is_cleanup_in_background),
            )


# -- descriptors ------------------------------------------------------------------------------


class StateDescriptor:
    """Base descriptor: ``name`` identifies the state within its operator.

    Two descriptors are equal when they have the same class and attributes;
    ``enable_time_to_live`` is the only mutation, and must happen before the
    descriptor is first used (as in Flink, the TTL of a state is fixed when
    the state is registered).
    """

    kind = "value"

    def __init__(self, name: str, type_info: Any = None) -> None:
        _check_name(name)
        self.name = name
        self.type_info = type_info
        self._ttl_config: StateTtlConfig | None = None

    def get_name(self) -> str:
        return self.name

    @property
    def ttl_config(self) -> StateTtlConfig | None:
        """The TTL configuration, or None when entries never expire."""
        config = self._ttl_config
        return config if config is not None and config.is_enabled() else None

    def enable_time_to_live(self, ttl_config: StateTtlConfig) -> None:
        """Let entries of this state expire as ``ttl_config`` says (see :class:`StateTtlConfig`)."""
        if not isinstance(ttl_config, StateTtlConfig):
            raise ConfigurationError(
                f"enable_time_to_live needs a StateTtlConfig (StateTtlConfig.new_builder(Time.seconds(n)).build()), "
                f"got {ttl_config!r}"
            )
        self._ttl_config = ttl_config

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and vars(other) == vars(self)

    def __hash__(self) -> int:
        return hash((type(self), self.name))

    def __repr__(self) -> str:
        ttl = f", ttl={self.ttl_config!r}" if self.ttl_config is not None else ""
        return f"{type(self).__name__}({self.name!r}{ttl})"


class ValueStateDescriptor(StateDescriptor):
    kind = "value"

    def __init__(self, name: str, value_type_info: Any = None) -> None:
        super().__init__(name, value_type_info)


class ListStateDescriptor(StateDescriptor):
    kind = "list"

    def __init__(self, name: str, elem_type_info: Any = None) -> None:
        super().__init__(name, elem_type_info)


class MapStateDescriptor(StateDescriptor):
    kind = "map"

    def __init__(self, name: str, key_type_info: Any = None, value_type_info: Any = None) -> None:
        super().__init__(name, None)
        self.key_type_info = key_type_info
        self.value_type_info = value_type_info


class ReducingStateDescriptor(StateDescriptor):
    """``reduce_function`` (a ReduceFunction or a callable ``(a, b) -> c``) folds every added value."""

    kind = "reducing"

    def __init__(self, name: str, reduce_function: Any = None, type_info: Any = None) -> None:
        super().__init__(name, type_info)
        reduce = getattr(reduce_function, "reduce", None)  # a ReduceFunction
        if not callable(reduce):
            reduce = reduce_function
        if not callable(reduce):
            raise ConfigurationError(
                f"ReducingStateDescriptor {name!r} needs a ReduceFunction or a callable (a, b) -> c, "
                f"got {reduce_function!r}"
            )
        self._reduce_function = reduce_function
        #: the fold as a plain callable ``(a, b) -> c``
        self.reduce_function: Callable[[Any, Any], Any] = reduce

    def get_reduce_function(self) -> Any:
        return self._reduce_function


_AGGREGATE_FUNCTION_METHODS = ("create_accumulator", "add", "get_result", "merge")


class AggregatingStateDescriptor(StateDescriptor):
    """State holding an accumulator of ``agg_function`` (an :class:`~flinklike_spark.datastream.functions.AggregateFunction`)."""

    kind = "aggregating"

    def __init__(self, name: str, agg_function: Any = None, state_type_info: Any = None) -> None:
        super().__init__(name, state_type_info)
        # The methods of an AggregateFunction, looked up by name: the function classes'
        # module types its state handles with this one, which imports nothing of it.
        if not all(callable(getattr(agg_function, m, None)) for m in _AGGREGATE_FUNCTION_METHODS):
            raise ConfigurationError(
                f"AggregatingStateDescriptor {name!r} needs an AggregateFunction (create_accumulator, add, "
                f"get_result, merge), got {agg_function!r}"
            )
        self.agg_function = agg_function

    def get_agg_function(self) -> Any:
        return self.agg_function


# -- handles ----------------------------------------------------------------------------------


class State:  # noqa: B024 - a common base with shared behaviour, not an interface (PyFlink names it)
    """A state handle: reads and writes the entry of the backend's current key.

    ``table`` maps key -> stored value; ``backend`` exposes ``current_key``.
    Every access is one dict operation on ``table``.
    """

    __slots__ = ("_backend", "_table")

    def __init__(self, backend: Any, table: dict) -> None:
        self._backend = backend
        self._table = table

    def clear(self) -> None:
        """Remove the current key's entry."""
        self._table.pop(self._backend.current_key, None)


class ValueState(State):
    __slots__ = ()

    def value(self) -> Any:
        """The current key's value, or None if unset."""
        return self._table.get(self._backend.current_key)

    def update(self, value: Any) -> None:
        """Set the current key's value; None clears it."""
        if value is None:
            self._table.pop(self._backend.current_key, None)
        else:
            self._table[self._backend.current_key] = value


class AppendingState(State):
    """State that values are added to: ``get()`` the current result, ``add(value)``."""

    __slots__ = ()

    @abc.abstractmethod
    def get(self) -> Any: ...

    @abc.abstractmethod
    def add(self, value: Any) -> None: ...


class MergingState(AppendingState):
    """Appending state whose entries of several namespaces can be merged (session windows)."""

    __slots__ = ()


class ListState(MergingState):
    __slots__ = ()

    def get(self) -> list:
        """A copy of the current key's list (empty if unset)."""
        return list(self._table.get(self._backend.current_key, ()))

    def add(self, value: Any) -> None:
        self._table.setdefault(self._backend.current_key, []).append(value)

    def add_all(self, values: Iterable[Any]) -> None:
        values = list(values)
        if values:
            self._table.setdefault(self._backend.current_key, []).extend(values)

    def update(self, values: Iterable[Any]) -> None:
        """Replace the current key's list; an empty one clears it."""
        values = list(values)
        if values:
            self._table[self._backend.current_key] = values
        else:
            self.clear()

    def __iter__(self) -> Iterator[Any]:
        return iter(self.get())


class MapState(State):
    """Per-key map: ``get/put/put_all/remove/contains``, ``keys/values/items/is_empty``, and
    ``state[k]``, ``state[k] = v``, ``del state[k]``, ``k in state``, ``for k in state``.

    ``state[k]`` of a missing ``k`` returns None, as PyFlink's ``get``.
    ``keys``/``values``/``items``/iteration work on a copy, so the map may be
    changed while iterating.
    """

    __slots__ = ()

    def _map(self) -> dict:
        return self._table.setdefault(self._backend.current_key, {})

    def get(self, key: Any) -> Any:
        return self._table.get(self._backend.current_key, {}).get(key)

    def put(self, key: Any, value: Any) -> None:
        self._map()[key] = value

    def put_all(self, dict_value: dict) -> None:
        if dict_value:
            self._map().update(dict_value)

    def remove(self, key: Any) -> None:
        entries = self._table.get(self._backend.current_key)
        if entries is not None:
            entries.pop(key, None)
            if not entries:
                self.clear()

    def contains(self, key: Any) -> bool:
        return key in self._table.get(self._backend.current_key, {})

    def keys(self) -> Iterator[Any]:
        return iter(list(self._table.get(self._backend.current_key, {}).keys()))

    def values(self) -> Iterator[Any]:
        return iter(list(self._table.get(self._backend.current_key, {}).values()))

    def items(self) -> Iterator[tuple[Any, Any]]:
        return iter(list(self._table.get(self._backend.current_key, {}).items()))

    def is_empty(self) -> bool:
        return not self._table.get(self._backend.current_key)

    def __getitem__(self, key: Any) -> Any:
        return self.get(key)

    def __setitem__(self, key: Any, value: Any) -> None:
        self.put(key, value)

    def __delitem__(self, key: Any) -> None:
        self.remove(key)

    def __contains__(self, key: Any) -> bool:
        return self.contains(key)

    def __iter__(self) -> Iterator[Any]:
        return self.keys()


class ReducingState(MergingState):
    __slots__ = ("_reduce",)

    def __init__(self, backend: Any, table: dict, reduce_function: Callable[[Any, Any], Any]) -> None:
        super().__init__(backend, table)
        self._reduce = reduce_function

    def get(self) -> Any:
        return self._table.get(self._backend.current_key)

    def add(self, value: Any) -> None:
        key = self._backend.current_key
        current = self._table.get(key)
        self._table[key] = value if current is None else self._reduce(current, value)


class AggregatingState(MergingState):
    """Holds an accumulator: ``add(value)`` folds with ``AggregateFunction.add``, ``get()`` is
    ``get_result(accumulator)`` (None when nothing was added)."""

    __slots__ = ("_agg",)

    def __init__(self, backend: Any, table: dict, agg_function: Any) -> None:
        super().__init__(backend, table)
        self._agg = agg_function

    def get(self) -> Any:
        accumulator = self._table.get(self._backend.current_key)
        return None if accumulator is None else self._agg.get_result(accumulator)

    def add(self, value: Any) -> None:
        key = self._backend.current_key
        accumulator = self._table.get(key)
        if accumulator is None:
            accumulator = self._agg.create_accumulator()
        self._table[key] = self._agg.add(value, accumulator)


#: The handle class of each descriptor kind without TTL.
HANDLE_OF_KIND: dict[str, type[State]] = {
    "value": ValueState,
    "list": ListState,
    "map": MapState,
    "reducing": ReducingState,
    "aggregating": AggregatingState,
}


class ReadOnlyBroadcastState:
    """Broadcast state as the non-broadcast side sees it."""

    def __init__(self, entries: dict, name: str) -> None:
        self._entries = entries
        self._name = name

    def get(self, key: Any) -> Any:
        return self._entries.get(key)

    def contains(self, key: Any) -> bool:
        return key in self._entries

    def items(self) -> Iterator[tuple[Any, Any]]:
        return iter(list(self._entries.items()))

    def keys(self) -> Iterator[Any]:
        return iter(list(self._entries))

    def values(self) -> Iterator[Any]:
        return iter(list(self._entries.values()))

    def is_empty(self) -> bool:
        return not self._entries

    def _read_only(self, *args: Any) -> None:
        raise TypeError(
            f"broadcast state {self._name!r} is read-only in process_element: change it in process_broadcast_element"
        )

    put = put_all = remove = clear = _read_only


class BroadcastState(ReadOnlyBroadcastState):
    """Broadcast state in ``process_broadcast_element``: a writable map."""

    def put(self, key: Any, value: Any) -> None:
        self._entries[key] = value

    def put_all(self, entries: dict) -> None:
        self._entries.update(entries)

    def remove(self, key: Any) -> None:
        self._entries.pop(key, None)

    def clear(self) -> None:
        self._entries.clear()
