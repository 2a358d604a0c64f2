"""The keyed state backend seam: :class:`StateBackendContext` and the :class:`KeyedStateBackend` base class.

A keyed state backend holds the keyed state of one operator subtask (Flink's
``KeyedStateBackend``). The base class owns what every backend does the same
way:

* descriptor registration (:meth:`KeyedStateBackend.get_state`: one handle per
  state name, the same name keeps its kind, restored entries must agree with
  the TTL setting);
* TTL wrapping (the handles of :mod:`~flinklike_spark._runtime.state.ttl_state`,
  the policies that full snapshots clean with, incremental cleanup where the
  backend supports it);
* handle selection (the plain handles of :mod:`flinklike_spark.datastream.state`, or the
  change-tracking ones of :mod:`~flinklike_spark._runtime.state.tracked_state`);
* declared types (:mod:`~flinklike_spark._runtime.state.state_types`): the handle of a
  state whose descriptor declares ``Types.*`` checks every value written, and a
  restored state's entries are checked against (or evolved to) its declared type.

A backend implements only its table and snapshot primitives:

* :meth:`~KeyedStateBackend._table`: the dict-like table of one state (the
  handles use ``get``, ``[]``, ``[]=``, ``del``, ``pop``, ``setdefault``, ``in``);
* :meth:`~KeyedStateBackend.snapshot_entries` (and, for incremental
  checkpoints, :meth:`~KeyedStateBackend.snapshot_changes` with
  :attr:`~KeyedStateBackend.tracks_changes`): typed
  :class:`~checkpointing.KeyedStateSnapshot` / :class:`~checkpointing.KeyedStateChanges`
  values, which only :mod:`checkpointing` turns into rows;
* :meth:`~KeyedStateBackend.restore_entry`, :meth:`~KeyedStateBackend.keys_of`,
  :meth:`~KeyedStateBackend.num_keys`, :meth:`~KeyedStateBackend.state_names`,
  and optionally :meth:`~KeyedStateBackend.close`.

Backends are created by name (``state.backend.type``) from the registry in
:mod:`~flinklike_spark._runtime.state.state_backends`, with a
:class:`StateBackendContext`.
"""

from __future__ import annotations

import abc
import dataclasses
import time
from collections.abc import Callable, MutableMapping
from typing import Any, ClassVar, Protocol

from checkpointing.schemas import StateKind
from checkpointing.state_snapshots import KeyedStateChanges, KeyedStateSnapshot, OperatorStateSnapshot
from flinklike_spark._runtime.state.state_types import DeclaredStateType, declared_type_parts
from flinklike_spark._runtime.state.tracked_state import TRACKED_HANDLE_OF_KIND
from flinklike_spark._runtime.state.ttl_state import (
    TTL_HANDLE_OF_KIND,
    IncrementalCleanup,
    TtlPolicy,
    is_ttl_entry,
)
from flinklike_spark.config import RocksDBOptions, StateBackendType
from flinklike_spark.datastream.state import (
    HANDLE_OF_KIND,
    AggregatingStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    StateTtlConfig,
)
from flinklike_spark.errors import ConfigurationError

__all__ = ["NOTHING", "KeyedStateBackend", "OperatorStateSettings", "StateBackendContext", "wall_clock_ms"]

#: What :meth:`KeyedStateBackend._stored_sample` returns for a state without entries.
NOTHING: Any = object()

#: Most key groups a backend must handle (Flink's upper bound of ``pipeline.max-parallelism``).
_MAX_KEY_GROUPS = 1 << 15


def wall_clock_ms() -> int:
    """Processing time in ms: the clock of state TTL unless a test injects one."""
    return int(time.time() * 1000)


class OperatorStateSettings(Protocol):
    """What :meth:`StateBackendContext.of_operator` reads of an operator's context (``OperatorContext``)."""

    state_backend_type: Any
    max_parallelism: int
    clock_ms: Callable[[], int]
    incremental: Any
    rocksdb: RocksDBOptions | None


@dataclasses.dataclass(frozen=True, kw_only=True)
class StateBackendContext:
    """What a keyed state backend is created with (one operator subtask's view of the settings).

    Attributes:
        backend_type: the registered name of the backend (``state.backend.type``:
            ``hashmap``, ``rocksdb``, or a name a backend module registered).
        max_parallelism: number of key groups (``pipeline.max-parallelism``).
        clock_ms: processing time in ms, for state TTL (injectable for tests).
        incremental: incremental checkpoints are on, so the backend should
            track the keys written between snapshots (``snapshot_changes``).
        rocksdb: the ``state.backend.rocksdb.*`` settings (None: the defaults).
    """

    backend_type: str
    max_parallelism: int
    clock_ms: Callable[[], int] = wall_clock_ms
    incremental: bool = False
    rocksdb: RocksDBOptions | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.backend_type, str) or not self.backend_type:
            raise ConfigurationError(
                f"state.backend.type must be a backend name (e.g. 'hashmap', 'rocksdb'), got {self.backend_type!r}"
            )
        parallelism = self.max_parallelism
        if isinstance(parallelism, bool) or not isinstance(parallelism, int) or not 1 <= parallelism <= _MAX_KEY_GROUPS:
            raise ConfigurationError(f"max_parallelism must be an int in [1, {_MAX_KEY_GROUPS}], got {parallelism!r}")
        if not callable(self.clock_ms):
            raise ConfigurationError(f"clock_ms must be a callable returning ms, got {self.clock_ms!r}")
        if self.rocksdb is not None and not isinstance(self.rocksdb, RocksDBOptions):
            raise ConfigurationError(f"rocksdb must be RocksDBOptions or None, got {self.rocksdb!r}")

    @classmethod
    def of_operator(cls, context: OperatorStateSettings) -> StateBackendContext:
        """The backend context of an operator subtask (the one translation from the operator's context)."""
        backend_type = context.state_backend_type
        return cls(
            backend_type=backend_type.value if isinstance(backend_type, StateBackendType) else backend_type,
            max_parallelism=context.max_parallelism,
            clock_ms=context.clock_ms,
            incremental=context.incremental is not None,
            rocksdb=context.rocksdb,
        )


def _handle_args(descriptor: StateDescriptor) -> tuple[Any, ...]:
    """The arguments a handle takes after ``(backend, table)``: the fold of reducing and aggregating state."""
    if isinstance(descriptor, ReducingStateDescriptor):
        return (descriptor.reduce_function,)
    if isinstance(descriptor, AggregatingStateDescriptor):
        return (descriptor.agg_function,)
    return ()


class KeyedStateBackend(abc.ABC):
    """Keyed state of one operator subtask; see the module docstring for what a subclass implements.

    Call order: ``restore_entry`` for every restored entry (before the user
    function's ``open``), then ``get_state`` from ``open`` or later, with
    ``current_key`` set before every state access. ``snapshot_entries`` runs
    on the task thread at a checkpoint; what it returns must not change when
    working state changes afterwards (it is written asynchronously).

    Args:
        max_parallelism: number of key groups.
        clock_ms: processing time in ms, for state TTL (injectable for tests).
        track_changes_in_handles: hand out the change-tracking handles, which
            record the keys each state is written under in ``_changes[name]``
            (for a backend whose tables cannot track writes themselves).

    Attributes:
        current_key: the key whose entries state handles read and write (a
            plain attribute: operators assign it once per record).
        max_parallelism: number of key groups.
        clock_ms: the TTL clock.
        owner: the operator the state belongs to, as error messages name it
            (set by :func:`~flinklike_spark._runtime.state.state_backends.create_keyed_state_backend`).
    """

    #: Whether TTL's incremental cleanup runs on this backend (Flink: heap backends only).
    supports_incremental_cleanup: ClassVar[bool] = False

    def __init__(
        self,
        *,
        max_parallelism: int,
        clock_ms: Callable[[], int] | None = None,
        track_changes_in_handles: bool = False,
    ) -> None:
        self.max_parallelism = max_parallelism
        self.current_key: Any = None
        self.clock_ms = clock_ms if clock_ms is not None else wall_clock_ms
        self._descriptors: dict[str, StateDescriptor] = {}
        self._handles: dict[str, Any] = {}
        #: state name -> TTL policy, for states whose expired entries full snapshots leave out
        self._ttl: dict[str, TtlPolicy] = {}
        self._per_record_cleanups: list[IncrementalCleanup] = []
        self._track_in_handles = track_changes_in_handles
        #: state name -> keys written since the last snapshot (with track_changes_in_handles)
        self._changes: dict[str, set] = {}
        self.owner = "keyed state"
        #: state name -> the declared type its restored entries were written with (see restore_type)
        self._restored_types: dict[str, str] = {}

    @classmethod
    def from_context(cls, context: StateBackendContext) -> KeyedStateBackend:
        """The backend for ``context`` (what the registry calls); subclasses with options override it."""
        return cls(max_parallelism=context.max_parallelism, clock_ms=context.clock_ms)

    # -- primitives a backend implements ------------------------------------------------------

    @abc.abstractmethod
    def _table(self, name: str) -> MutableMapping[Any, Any]:
        """The table of state ``name`` (created empty if needed): stored value per key."""

    def _stored_sample(self, name: str) -> Any:
        """One stored value of state ``name``, or :data:`NOTHING` (checks restored entries' TTL form)."""
        return next(iter(self._table(name).values()), NOTHING)

    def _before_access(self) -> None:  # noqa: B027 - optional hook
        """Called before a state is registered (e.g. to finish a restore, or to refuse a closed backend)."""

    @abc.abstractmethod
    def snapshot_entries(self) -> list[KeyedStateSnapshot]:
        """Synchronous part of a snapshot: one :class:`~checkpointing.KeyedStateSnapshot` per
        non-empty state, whose entries must not change when working state does; key groups
        may be computed lazily (in the asynchronous part). Resets change tracking.

        Entries of states with ``cleanup_full_snapshot`` TTL (``self._ttl``) leave
        out what has expired.
        """

    def snapshot_changes(self) -> list[KeyedStateChanges]:
        """Synchronous part of an incremental snapshot: one :class:`~checkpointing.KeyedStateChanges`
        per state changed since the previous snapshot (full or incremental).

        Like :meth:`snapshot_entries`, the result must not change when working state
        changes afterwards, and both reset the change tracking: the next call returns
        the changes since this snapshot. Only valid while :attr:`tracks_changes` is True.

        Raises:
            NotImplementedError: the backend does not track changes (see :attr:`tracks_changes`).
        """
        raise NotImplementedError(f"{type(self).__name__} does not take incremental snapshots")

    @property
    def tracks_changes(self) -> bool:
        """True when :meth:`snapshot_changes` can describe every change since the last snapshot.

        False by default: callers then take full snapshots.
        """
        return False

    @abc.abstractmethod
    def restore_entry(self, state_name: str, key: Any, value: Any) -> None:
        """Put one restored entry back (before the user function's ``open``)."""

    def restore_type(self, state_name: str, type_text: str) -> None:
        """Record the declared type restored entries of ``state_name`` were written with (a ``type_info``
        row of the checkpoint, before ``open``); the state's registration checks it against its descriptor."""
        self._restored_types[state_name] = type_text

    def snapshot_declared_types(self) -> list[OperatorStateSnapshot]:
        """The ``type_info`` parts recording each typed state's declared type (see :meth:`restore_type`)."""
        return declared_type_parts(self._descriptors.values(), self._restored_types, self._snapshot_prefix)

    #: Prefix of state names in snapshots (the scoped window backend overrides it).
    _snapshot_prefix = ""

    @abc.abstractmethod
    def keys_of(self, state_name: str) -> list[Any]:
        """The keys holding an entry of state ``state_name`` (a snapshot: safe to change state while iterating)."""

    @abc.abstractmethod
    def num_keys(self) -> int:
        """Number of distinct keys holding any state."""

    @abc.abstractmethod
    def state_names(self) -> list[str]:
        """Names of the states that hold or held entries, sorted."""

    def prefetch(self, keys: list) -> None:  # noqa: B027 - optional hook: a heap backend has everything at hand
        """A hint before one input batch: its records' ``keys`` (in order, repeats allowed) are about
        to be accessed. A backend whose single reads are expensive loads them together here (the
        RocksDB backend: one multi-get per state); results never depend on it being called."""

    def close(self) -> None:  # noqa: B027 - optional hook: a heap backend holds nothing to release
        """Release what the backend holds outside the Python heap (idempotent; the operator's
        ``close`` calls it). Snapshots already returned stay readable."""

    # -- what the base class owns -------------------------------------------------------------

    def get_state(self, descriptor: StateDescriptor, expected: type[StateDescriptor]) -> Any:
        """The handle for ``descriptor``; the same name must keep the same kind.

        A descriptor with ``Types.*`` type information gets a handle that checks every
        value written (:mod:`~flinklike_spark._runtime.state.state_types`).

        Raises:
            TypeError: ``descriptor`` is not an ``expected``.
            ValueError: the name was registered with another descriptor type.
            ConfigurationError: the restored entries were written with another
                TTL setting than ``descriptor`` has, or its type information is not a ``Types.*`` type.
            IncompatibleStateTypeError: the restored entries were written with a declared
                type that ``descriptor``'s cannot read.
        """
        if not isinstance(descriptor, expected):
            raise TypeError(f"expected a {expected.__name__}, got {type(descriptor).__name__} ({descriptor!r})")
        self._before_access()
        name = descriptor.name
        known = self._descriptors.get(name)
        if known is not None:
            if type(known) is not type(descriptor):
                raise ValueError(
                    f"state {name!r} was registered as {type(known).__name__}, "
                    f"cannot get it as {type(descriptor).__name__}"
                )
            return self._handles[name]
        kind = StateKind(descriptor.kind)
        table = self._table(name)
        ttl = descriptor.ttl_config
        self._check_restored_ttl(descriptor, kind, ttl is not None)
        args = _handle_args(descriptor)
        declared = DeclaredStateType.of(descriptor, self)
        if declared is not None:
            args = declared.wrap_args(args)
            written = self._restored_types.get(name)
            if written is not None:
                keys = self.keys_of(name)
                declared.restored_from(written, table, keys)
                if self._track_in_handles:  # evolved entries are changed entries for the next incremental snapshot
                    self._changes.setdefault(name, set()).update(keys)
        if ttl is None:
            handle = self._plain_handle(name, kind, table, args)
        else:
            handle = self._ttl_handle(name, kind, table, args, ttl)
        if declared is not None:
            # Same layout, writing methods that check first: untyped state keeps the plain handle's speed.
            handle.__class__ = declared.typed_handle_class(type(handle))
        self._descriptors[name] = descriptor
        self._handles[name] = handle
        return handle

    def _kind_of(self, name: str) -> StateKind:
        """The kind of state ``name`` (restored but not yet registered: value)."""
        descriptor = self._descriptors.get(name)
        return StateKind.VALUE if descriptor is None else StateKind(descriptor.kind)

    def _plain_handle(self, name: str, kind: StateKind, table: Any, args: tuple[Any, ...]) -> Any:
        if not self._track_in_handles:
            return HANDLE_OF_KIND[kind](self, table, *args)
        handle = TRACKED_HANDLE_OF_KIND[kind](self, table, *args)
        handle._changed = self._changes.setdefault(name, set())
        return handle

    def _ttl_handle(self, name: str, kind: StateKind, table: Any, args: tuple[Any, ...], ttl: StateTtlConfig) -> Any:
        policy = TtlPolicy(ttl, self.clock_ms)
        strategies = ttl.get_cleanup_strategies()
        cleanup = None
        strategy = strategies.get_incremental_cleanup_strategy()
        # Incremental cleanup is a heap-backend strategy (as in Flink); elsewhere reads and full snapshots clean.
        if self.supports_incremental_cleanup and strategy is not None and strategy.cleanup_size > 0:
            cleanup = IncrementalCleanup(table, kind, policy, strategy.cleanup_size)
            if strategy.run_cleanup_for_every_record:
                self._per_record_cleanups.append(cleanup)
                self._listen_to_key_changes()
        handle = TTL_HANDLE_OF_KIND[kind](self, table, *args)
        handle._init_ttl(policy, cleanup)
        if strategies.in_full_snapshot():
            self._ttl[name] = policy
        return handle

    def _check_restored_ttl(self, descriptor: StateDescriptor, kind: StateKind, ttl: bool) -> None:
        # Flink fails such a restore (the TTL serializer differs); silently reading
        # (value, timestamp) pairs as user values, or the reverse, would corrupt results.
        sample = self._stored_sample(descriptor.name)
        if sample is NOTHING:
            return
        if is_ttl_entry(kind, sample) != ttl:
            had = "with" if not ttl else "without"
            raise ConfigurationError(
                f"state {descriptor.name!r} was checkpointed {had} time-to-live but is now registered "
                f"{'with' if ttl else 'without'} it; enabling or disabling TTL on existing state is not "
                f"supported (use a new state name)"
            )

    def _listen_to_key_changes(self) -> None:
        """Run per-record incremental cleanups whenever ``current_key`` is assigned.

        Only backends with such a cleanup pay for it: the instance switches to a
        subclass whose ``current_key`` is a property; everyone else keeps the
        plain attribute (a property costs ~100 ns per record).
        """
        cls = type(self)
        if getattr(cls, "_listens_to_keys", False):
            return
        listening = _LISTENING_CLASSES.get(cls)
        if listening is None:
            listening = type(f"KeyListening{cls.__name__}", (cls,), {
                "_listens_to_keys": True, "current_key": property(_get_key, _set_key_and_clean),
                "__module__": cls.__module__,
            })  # fmt: skip
            _LISTENING_CLASSES[cls] = listening
        self.__class__ = listening


_LISTENING_CLASSES: dict[type, type] = {}


def _get_key(self: KeyedStateBackend) -> Any:
    return self.__dict__["current_key"]


def _set_key_and_clean(self: KeyedStateBackend, key: Any) -> None:
    self.__dict__["current_key"] = key
    for cleanup in self._per_record_cleanups:
        cleanup.run()
