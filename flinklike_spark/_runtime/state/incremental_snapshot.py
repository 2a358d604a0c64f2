"""Incremental keyed-state snapshots of one operator subtask (``execution.checkpointing.incremental``).

:class:`IncrementalKeyedSnapshots` decides, at each checkpoint, between a
*full* snapshot (the backend's :meth:`~KeyedStateBackend.snapshot_entries`, a
new base) and an *incremental* one: the keys changed since the last
**confirmed** checkpoint (``notify_checkpoint_complete``), as ``put`` /
``delete`` rows on top of that checkpoint's chain. Basing on the last
confirmed checkpoint, not merely the previous snapshot, keeps a chain valid
when a checkpoint in between is aborted: its changes are carried into the next
one. The coordinator still refuses a chain whose checkpoints retention deleted
(see :meth:`checkpointing.CheckpointCommitter.commit`), and this class answers
an abort of its own incremental checkpoint with a full one next.

A full snapshot is taken when:

* it is a savepoint (self-contained, as in Flink; it never becomes a base);
* no checkpoint of this subtask was confirmed since it started, or since it
  restored state that is not exactly one old subtask's of this job's own
  checkpoint (:meth:`IncrementalKeyedSnapshots.restored`: after a failover at the
  same parallelism the restored checkpoint's chain is the base);
* the backend cannot describe its changes (``tracks_changes`` False, e.g. a
  state with time-to-live);
* the chain would get longer than ``max_chain_length``, or
  ``materialize_interval`` passed since the last base (Flink's
  ``state.backend.changelog.periodic-materialize.interval``);
* a full snapshot is still unconfirmed, or an incremental one was aborted;
* more than :data:`MAX_UNCONFIRMED` snapshots are unconfirmed (notifications
  are late or lost: their changes are not kept forever).

Runs on the task thread only.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Final

from checkpointing.schemas import StateKind
from checkpointing.state_snapshots import KeyedStateChanges, KeyedStateSnapshot
from checkpointing.writer import KeyedColumns
from flinklike_spark._runtime.state.keyed_state import key_groups_of
from flinklike_spark._runtime.state.state_backend_base import KeyedStateBackend

__all__ = [
    "MAX_UNCONFIRMED",
    "IncrementalConfig",
    "IncrementalKeyedSnapshots",
    "KeyedSnapshot",
    "incremental_snapshots",
    "notify_incremental",
    "prepare_savepoint",
    "take_keyed_snapshot",
]

#: Unconfirmed snapshots whose changes are kept for the next incremental one.
MAX_UNCONFIRMED: Final = 8


@dataclasses.dataclass(frozen=True, kw_only=True)
class KeyedSnapshot:
    """The keyed part of an operator subtask's snapshot: full entries or changes (never both).

    Attributes:
        entries: a full snapshot of every non-empty state (empty for an incremental one).
        changes: the changes since the confirmed checkpoint (empty for a full one).
        chain: None for a self-contained (full) snapshot, else the checkpoint ids whose
            rows make up the state (the confirmed checkpoint's chain plus this one).
    """

    entries: list[KeyedStateSnapshot] = dataclasses.field(default_factory=list)
    changes: list[KeyedStateChanges] = dataclasses.field(default_factory=list)
    chain: tuple[int, ...] | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class IncrementalConfig:
    """When an incremental checkpoint writes a new full base instead of changes.

    Attributes:
        materialize_interval: ``state.backend.changelog.periodic-materialize.interval``.
        max_chain_length: ``execution.checkpointing.incremental.max-chain-length``:
            most checkpoints a subtask's state is spread over (base included).
    """

    materialize_interval: timedelta = timedelta(minutes=10)
    max_chain_length: int = 20

    def __post_init__(self) -> None:
        if not isinstance(self.materialize_interval, timedelta) or self.materialize_interval <= timedelta(0):
            raise ValueError(f"materialize_interval must be a positive timedelta, got {self.materialize_interval!r}")
        if (
            isinstance(self.max_chain_length, bool)
            or not isinstance(self.max_chain_length, int)
            or self.max_chain_length < 1
        ):
            raise ValueError(f"max_chain_length must be an int >= 1, got {self.max_chain_length!r}")

    @classmethod
    def from_configuration(cls, config: Any) -> IncrementalConfig | None:
        """The config when ``execution.checkpointing.incremental`` is on and checkpoints are periodic, else None.

        Without ``execution.checkpointing.interval`` only savepoints are taken, which are
        always full: tracking changes would cost per record and never be used.
        """
        if (
            not config.get("execution.checkpointing.incremental")
            or config.get("execution.checkpointing.interval") is None
        ):
            return None
        return cls(
            materialize_interval=config.get("state.backend.changelog.periodic-materialize.interval"),
            max_chain_length=config.get("execution.checkpointing.incremental.max-chain-length"),
        )


@dataclasses.dataclass
class _Snapshot:
    chain: tuple[int, ...] | None  # None: a savepoint (never a base)
    full: bool
    changes: list[KeyedStateChanges] | None  # of an incremental snapshot, until no longer needed


_DELETED = object()


class IncrementalKeyedSnapshots:
    """Full or incremental snapshots of one keyed state backend; see the module docstring.

    Args:
        backend: the operator's keyed state backend (created with ``track_changes``).
        config: when to write a new base.
        clock: monotonic seconds (injectable for tests).
    """

    def __init__(
        self, backend: KeyedStateBackend, config: IncrementalConfig, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._backend = backend
        self._config = config
        self._clock = clock
        self._confirmed: tuple[int, ...] | None = None  # chain of the last confirmed checkpoint
        self._confirmed_id = -1
        self._pending: dict[int, _Snapshot] = {}
        self._materialized_at: float | None = None
        self._force_full = False
        self._savepoint_next = False

    def restored(self, checkpoint_id: int, chain: tuple[int, ...]) -> None:
        """The backend holds exactly the state of ``chain``, checkpoint ``checkpoint_id``'s for this subtask
        (restored before any record): later snapshots may build on it, as on a confirmed checkpoint."""
        self._confirmed = tuple(chain)
        self._confirmed_id = checkpoint_id
        self._materialized_at = self._clock()
        self._pending.clear()

    def prepare_savepoint(self) -> None:
        """The next :meth:`snapshot` belongs to a savepoint (called just before it)."""
        self._savepoint_next = True

    def snapshot(self, checkpoint_id: int, *, savepoint: bool = False) -> KeyedSnapshot:
        """A full snapshot (``chain`` None) or the changes since the confirmed checkpoint."""
        now = self._clock()
        savepoint = savepoint or self._savepoint_next
        self._savepoint_next = False
        if self._needs_full(savepoint, now):
            entries = self._backend.snapshot_entries()
            for earlier in self._pending.values():
                earlier.changes = None  # a later incremental snapshot bases on a newer full one
            self._pending[checkpoint_id] = _Snapshot(None if savepoint else (checkpoint_id,), True, None)
            if not savepoint:
                self._materialized_at = now
            self._force_full = False
            return KeyedSnapshot(entries=entries)
        changes = self._backend.snapshot_changes()
        assert self._confirmed is not None
        chain = (*self._confirmed, checkpoint_id)
        self._pending[checkpoint_id] = _Snapshot(chain, False, changes)
        unconfirmed = [s.changes for c, s in sorted(self._pending.items()) if c > self._confirmed_id]
        merged = changes if len(unconfirmed) == 1 else _merge(unconfirmed, self._backend.max_parallelism)
        return KeyedSnapshot(changes=merged, chain=chain)

    def _needs_full(self, savepoint: bool, now: float) -> bool:
        if savepoint or self._force_full or self._confirmed is None or not self._backend.tracks_changes:
            return True
        if len(self._confirmed) >= self._config.max_chain_length:
            return True
        if (
            self._materialized_at is None
            or now - self._materialized_at >= self._config.materialize_interval.total_seconds()
        ):
            return True
        unconfirmed = [s for c, s in self._pending.items() if c > self._confirmed_id]
        return len(unconfirmed) >= MAX_UNCONFIRMED or any(s.full or s.changes is None for s in unconfirmed)

    def notify_complete(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` completed: later incremental snapshots may build on it."""
        snapshot = self._pending.get(checkpoint_id)
        if snapshot is None or checkpoint_id <= self._confirmed_id:
            return
        self._confirmed = snapshot.chain
        self._confirmed_id = checkpoint_id
        for older in [c for c in self._pending if c <= checkpoint_id]:
            del self._pending[older]

    def notify_aborted(self, checkpoint_id: int) -> None:
        """An incremental snapshot that was aborted may have been refused for a dead chain: start over."""
        snapshot = self._pending.get(checkpoint_id)
        if snapshot is not None and not snapshot.full:
            self._force_full = True


def incremental_snapshots(backend: KeyedStateBackend, context: Any) -> IncrementalKeyedSnapshots | None:
    """The incremental snapshots of ``backend`` when the operator's context enables them, else None."""
    config = context.incremental
    return None if config is None else IncrementalKeyedSnapshots(backend, config)


def prepare_savepoint(operators: Any) -> None:
    """The next snapshot of every operator with incremental snapshots is a savepoint's (self-contained)."""
    for operator in operators:
        incremental = getattr(operator, "incremental", None)
        if incremental is not None:
            incremental.prepare_savepoint()


def notify_incremental(operators: Any, checkpoint_id: int, *, completed: bool) -> None:
    """Tell every operator's incremental snapshots that ``checkpoint_id`` completed (or was aborted)."""
    for operator in operators:
        incremental = getattr(operator, "incremental", None)
        if incremental is not None:
            if completed:
                incremental.notify_complete(checkpoint_id)
            else:
                incremental.notify_aborted(checkpoint_id)


def take_keyed_snapshot(
    backend: KeyedStateBackend, incremental: IncrementalKeyedSnapshots | None, checkpoint_id: int
) -> KeyedSnapshot:
    """A keyed operator's snapshot for ``checkpoint_id`` (full without ``incremental``)."""
    if incremental is None:
        return KeyedSnapshot(entries=backend.snapshot_entries())
    return incremental.snapshot(checkpoint_id)


def _merge(unconfirmed: list[list[KeyedStateChanges]], max_parallelism: int) -> list[KeyedStateChanges]:
    """The changes of several consecutive snapshots as one: for each key, its latest entry or deletion."""
    states: dict[str, tuple[StateKind, dict]] = {}
    for changes in unconfirmed:
        for change in changes:
            latest = states.setdefault(change.name, (change.kind, {}))[1]
            latest.update(zip(change.upserts.keys, change.upserts.values))
            latest.update(dict.fromkeys(change.deletes.keys, _DELETED))
    merged = []
    for name, (kind, latest) in states.items():
        keys = [k for k, v in latest.items() if v is not _DELETED]
        values = [latest[k] for k in keys]
        deleted = [k for k, v in latest.items() if v is _DELETED]
        merged.append(KeyedStateChanges(
            name=name,
            kind=kind,
            upserts=KeyedColumns(keys, values, lambda k=keys: key_groups_of(k, max_parallelism)),
            deletes=KeyedColumns(deleted, [None] * len(deleted), lambda d=deleted: key_groups_of(d, max_parallelism)),
        ))  # fmt: skip
    return merged
