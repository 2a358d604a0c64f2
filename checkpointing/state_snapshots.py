"""Typed snapshots of one operator subtask's state, and the one place that turns them into rows.

The runtime hands a checkpoint's state over as values of the classes below:
a keyed state backend returns :class:`KeyedStateSnapshot` (a full snapshot of
one state) and :class:`KeyedStateChanges` (an incremental one); operators add
their own keyed entries (timers, window contents) and non-keyed state
(:class:`OperatorStateSnapshot`). :func:`write_state_snapshots` writes them
with a :class:`~checkpointing.writer.SnapshotWriter`; nothing outside this
package decides how state becomes ``operator_state`` rows.

Entries are not copied here: what a snapshot holds must already be detached
from working state (the synchronous part of the checkpoint guarantees it), and
lazily computed parts (key groups, chunked scans) run when they are written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from .schemas import StateKind
from .writer import KeyedColumnChunks, KeyedColumns, SnapshotWriter

__all__ = [
    "KeyedStateChanges",
    "KeyedStateSnapshot",
    "OperatorStateSnapshot",
    "StateSnapshotPart",
    "write_state_snapshots",
]


def _check(name: object, kind: object, what: str) -> None:
    if not isinstance(name, str) or not name:
        raise ValueError(f"{what}: name must be a non-empty string, got {name!r}")
    if not isinstance(kind, StateKind):
        raise TypeError(
            f"{what} {name!r}: kind must be a StateKind, got {kind!r}; valid: {[k.name for k in StateKind]}"
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class KeyedStateSnapshot:
    """Every entry of one keyed state at a checkpoint (a full snapshot of it).

    Attributes:
        name: the state's name in the operator (the ``state_name`` column).
        kind: what the entries are.
        entries: ``(key group, key, value)`` entries: :class:`KeyedColumns`
            (key groups possibly computed on first use), :class:`KeyedColumnChunks`
            (produced chunk by chunk when written) or a sequence of tuples.
    """

    name: str
    kind: StateKind
    entries: KeyedColumns | KeyedColumnChunks | Sequence[tuple[int, Any, Any]]

    def __post_init__(self) -> None:
        _check(self.name, self.kind, "KeyedStateSnapshot")


@dataclasses.dataclass(frozen=True, kw_only=True)
class KeyedStateChanges:
    """The changes of one keyed state since the previous checkpoint of its chain (incremental).

    Attributes:
        name: the state's name in the operator.
        kind: what the entries are.
        upserts: ``(key group, key, value)`` of every key whose entry was written.
        deletes: ``(key group, key, None)`` of every key whose entry was removed.
    """

    name: str
    kind: StateKind
    upserts: KeyedColumns
    deletes: KeyedColumns

    def __post_init__(self) -> None:
        _check(self.name, self.kind, "KeyedStateChanges")


@dataclasses.dataclass(frozen=True, kw_only=True)
class OperatorStateSnapshot:
    """Non-keyed state of one subtask: ``(key, value)`` entries, stored with key group -1.

    Restore hands every old subtask's entries to each new subtask, which picks
    its share (see :func:`checkpointing.read_operator_state` with ``keyed=False``).
    """

    name: str
    kind: StateKind
    entries: Sequence[tuple[Any, Any]]

    def __post_init__(self) -> None:
        _check(self.name, self.kind, "OperatorStateSnapshot")


#: One part of an operator subtask's snapshot.
StateSnapshotPart = KeyedStateSnapshot | KeyedStateChanges | OperatorStateSnapshot


def write_state_snapshots(writer: SnapshotWriter, parts: Iterable[StateSnapshotPart]) -> None:
    """Write every part of one operator subtask's snapshot as ``operator_state`` rows of ``writer``.

    Raises:
        TypeError: a part is not one of the snapshot classes above.
        CheckpointStorageError: the rows cannot be written.
    """
    for part in parts:
        match part:
            case KeyedStateSnapshot(name=name, kind=kind, entries=entries):
                writer.add_keyed_state(name, entries, kind=kind)
            case KeyedStateChanges(name=name, kind=kind, upserts=upserts, deletes=deletes):
                writer.add_keyed_changes(name, upserts, deletes, kind=kind)
            case OperatorStateSnapshot(name=name, kind=kind, entries=entries):
                writer.add_operator_state(name, entries, kind=kind)
            case _:
                raise TypeError(
                    f"cannot write {part!r}: a snapshot part is a KeyedStateSnapshot, KeyedStateChanges "
                    f"or OperatorStateSnapshot"
                )
