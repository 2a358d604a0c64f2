"""Writing a new savepoint: Flink's ``SavepointWriter``.

    path = (
        SavepointWriter.from_existing_savepoint("/checkpoints/<job id>/chk-7")
        .remove_operator(OperatorIdentifier.for_uid("old"))
        .with_operator(OperatorIdentifier.for_uid("count"), transformation)
        .write("/savepoints")
    )   # "/savepoints/<new job id>/chk-7": set it as execution.state-recovery.path

The result is an ordinary savepoint: a ``checkpoints`` row of kind ``savepoint``
under a new job id, its state written by the runtime's own
:class:`~checkpointing.SnapshotWriter` and committed by
:class:`~checkpointing.CheckpointCommitter`, so a job restores it like any
other, at any parallelism. The source is only read, never changed; the new
savepoint is self-contained (an incremental source's chains are resolved).

Operators the writer does not touch are copied: their rows are read resolved,
unpickled and written again per subtask (keeping each subtask's operator
state, e.g. source positions). With :meth:`SavepointWriter.with_max_parallelism`
their keyed rows move to the key groups of the new max parallelism.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from checkpointing import (
    CheckpointCommitter,
    CheckpointLayout,
    CheckpointRecord,
    KeyedColumns,
    KeyedStateSnapshot,
    OperatorStateSnapshot,
    SnapshotWriter,
    StateHandle,
    discard_handles,
    read_operator_state,
    write_state_snapshots,
)
from checkpointing.savepoint_marker import savepoint_path
from checkpointing.schemas import CheckpointKind, SnapshotAlignment, StateKind
from flinklike_spark._runtime import serialization
from flinklike_spark._runtime.state.key_groups import key_group_for, operator_index_for_key_group
from flinklike_spark._runtime.state.keyed_state import key_groups_of
from flinklike_spark.errors import StateLossError, StateNotFoundError, StateProcessorError
from flinklike_spark.storage import StorageConfig

from .identifier import OperatorIdentifier, as_identifier
from .reader import SavepointReader, as_storage
from .state_values import KEYED_KINDS
from .transformation import StateBootstrapTransformation

__all__ = ["DEFAULT_MAX_PARALLELISM", "SavepointWriter"]

#: ``pipeline.max-parallelism``'s default: the number of key groups of a new savepoint.
DEFAULT_MAX_PARALLELISM: Final = 128
_MAX_KEY_GROUPS: Final = 1 << 15
#: ``properties`` key of the written savepoint naming what it was derived from.
DERIVED_FROM_PROPERTY: Final = "derived_from"


def _states(states: Mapping[str, StateKind]) -> str:
    """``'count' (value), 'seen' (map)``, sorted by name; ``none`` when empty."""
    return ", ".join(f"{name!r} ({states[name]})" for name in sorted(states)) or "none"


def _check_max_parallelism(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _MAX_KEY_GROUPS:
        raise StateProcessorError(f"max parallelism must be an int in [1, {_MAX_KEY_GROUPS}], got {value!r}")
    return value


class SavepointWriter:
    """Builds a savepoint: a new one, or one derived from an existing checkpoint or savepoint.

    Configure with :meth:`with_operator`, :meth:`remove_operator`, :meth:`drop_state`
    and :meth:`with_max_parallelism` (each returns the writer, in any order), then
    :meth:`write`. Nothing is written before :meth:`write`, and nothing read but the
    names of the states of an operator given to :meth:`drop_state`.

    No keyed state of the source is lost without being named: an operator replaced with
    :meth:`with_operator` must get every keyed state the source holds for it, each of the
    same kind, unless :meth:`drop_state` (or :meth:`remove_operator`) drops it; otherwise
    :meth:`write` raises :class:`~flinklike_spark.errors.StateLossError` before writing
    anything. Timers are not part of this rule: ``with_operator`` replaces them.
    """

    def __init__(self, source: SavepointReader | None, max_parallelism: int) -> None:
        self._source = source
        self._max_parallelism = _check_max_parallelism(max_parallelism)
        #: set by new_savepoint / with_max_parallelism: every operator gets _max_parallelism key groups;
        #: otherwise each copied or replaced operator keeps the number its source recorded
        self._forced = source is None
        self._operators: dict[str, StateBootstrapTransformation] = {}
        self._removed: set[str] = set()
        #: uids given to remove_operator: all their keyed state was dropped explicitly, even if
        #: with_operator writes the operator again
        self._cleared: set[str] = set()
        #: uid -> keyed states of the source dropped with drop_state
        self._dropped: dict[str, set[str]] = {}
        #: uid -> keyed states (name -> kind, timers excluded) the source holds; the source never changes
        self._held: dict[str, dict[str, StateKind]] = {}

    @classmethod
    def new_savepoint(cls, *, max_parallelism: int = DEFAULT_MAX_PARALLELISM) -> SavepointWriter:
        """An empty savepoint; ``max_parallelism`` must equal the job's ``pipeline.max-parallelism``."""
        return cls(None, max_parallelism)

    @classmethod
    def from_existing_savepoint(
        cls, path: str | os.PathLike[str], *, storage: StorageConfig | Mapping[str, Any] | None = None
    ) -> SavepointWriter:
        """A savepoint starting as a copy of the checkpoint or savepoint at ``path``
        (any form :meth:`SavepointReader.read` takes).

        Raises:
            CheckpointNotFoundError, CorruptCheckpointError: as :meth:`SavepointReader.read`.
            StateProcessorError: the source holds in-flight data (an unaligned checkpoint),
                which a savepoint cannot carry.
        """
        source = SavepointReader.read(path, storage=storage)
        checkpoint = source.checkpoint
        if checkpoint.channel_state_bytes:
            raise StateProcessorError(
                f"{source.path} is an unaligned checkpoint holding {checkpoint.channel_state_bytes} bytes of in-flight "
                f"data, which a savepoint cannot carry (its records would be lost); derive from a savepoint or an "
                f"aligned checkpoint (execution.checkpointing.unaligned.enabled: false)"
            )
        recorded = set(checkpoint.max_parallelism.values())
        return cls(source, max(recorded) if recorded else DEFAULT_MAX_PARALLELISM)

    @property
    def max_parallelism(self) -> int:
        """The number of key groups of operators new to the savepoint (and of all, after
        :meth:`with_max_parallelism`); others keep the source's number."""
        return self._max_parallelism

    def _target(self, uid: str) -> int:
        """The number of key groups ``uid``'s keyed state is written with."""
        if self._forced or self._source is None:
            return self._max_parallelism
        return self._source.checkpoint.max_parallelism.get(uid, self._max_parallelism)

    def with_operator(
        self, operator: OperatorIdentifier | str, transformation: StateBootstrapTransformation
    ) -> SavepointWriter:
        """Write ``transformation``'s keyed state as the operator's.

        For an operator of the source, its keyed state (every state and timer) is
        replaced; its non-keyed state (e.g. source positions) is kept. The
        transformation must write every keyed state the source holds for the operator,
        under the same name and of the same kind, except those dropped with
        :meth:`drop_state` or :meth:`remove_operator`: checked by :meth:`write`, which
        raises :class:`~flinklike_spark.errors.StateLossError` otherwise. For ``states()``
        the check comes before the data is read; ``transform()`` functions register their
        states when they run, so for them it comes after they ran over the data.
        """
        uid = as_identifier(operator).uid
        if not isinstance(transformation, StateBootstrapTransformation):
            raise StateProcessorError(
                f"with_operator({uid!r}, ...) takes a StateBootstrapTransformation (from "
                f"OperatorTransformation.bootstrap_with(data).key_by(...)...), got {transformation!r}"
            )
        if uid in self._operators:
            raise StateProcessorError(f"with_operator: operator {uid!r} was given twice; each uid is written once")
        self._removed.discard(uid)
        self._operators[uid] = transformation
        return self

    def remove_operator(self, operator: OperatorIdentifier | str) -> SavepointWriter:
        """Leave the operator's state (keyed and non-keyed) out of the new savepoint.

        Raises:
            StateNotFoundError: the source has no state of that operator (names those it has).
        """
        uid = as_identifier(operator).uid
        known = set(self._source.operator_uids()) if self._source is not None else set()
        if uid not in known:
            raise StateNotFoundError(
                f"remove_operator: the source savepoint holds no state of operator uid {uid!r}; "
                f"its operators: {sorted(known)}"
            )
        self._removed.add(uid)
        self._cleared.add(uid)
        self._operators.pop(uid, None)
        return self

    def drop_state(self, operator: OperatorIdentifier | str, *state_names: str) -> SavepointWriter:
        """Leave the keyed states ``state_names`` of the operator out of the new savepoint.

        This project's extension of Flink's API, which drops only whole operators
        (:meth:`remove_operator`). A job resumed from the savepoint starts these states
        empty. With :meth:`with_operator` for the same operator, the transformation need
        not write them, and may write a state of a dropped name with another kind (the
        held one is replaced). Without it, the operator is copied without them: its other
        keyed states, its timers and its non-keyed state are kept. Calling it again adds names.

        Reads the names of the operator's states from the source (once per operator).

        Raises:
            StateNotFoundError: the source holds no state of the operator, or no keyed
                state of such a name (names those it holds).
            StateProcessorError: no name given, or a name that is not a string.
        """
        uid = as_identifier(operator).uid
        if not state_names:
            raise StateProcessorError(f"drop_state({uid!r}) needs the names of the states to drop, e.g. 'count'")
        bad = [n for n in state_names if not isinstance(n, str)]
        if bad:
            raise StateProcessorError(f"drop_state({uid!r}, ...) takes state names (strings), got {bad[0]!r}")
        known = set(self._source.operator_uids()) if self._source is not None else set()
        if uid not in known:
            raise StateNotFoundError(
                f"drop_state: the source savepoint holds no state of operator uid {uid!r}; "
                f"its operators: {sorted(known)}"
            )
        held = self._held_states(uid)
        unknown = [n for n in state_names if n not in held]
        if unknown:
            raise StateNotFoundError(
                f"drop_state({uid!r}, ...): the source savepoint holds no keyed state {unknown} of operator {uid!r}; "
                f"its keyed states: {_states(held)}"
            )
        self._dropped.setdefault(uid, set()).update(state_names)
        return self

    def with_max_parallelism(self, max_parallelism: int) -> SavepointWriter:
        """Write keyed state in ``max_parallelism`` key groups (the resumed job's ``pipeline.max-parallelism``).

        Copied operators' keyed rows are moved to the new key groups of their keys.
        """
        self._max_parallelism = _check_max_parallelism(max_parallelism)
        self._forced = True
        return self

    def write(self, path: str | os.PathLike[str], *, storage: StorageConfig | Mapping[str, Any] | None = None) -> str:
        """Write and commit the savepoint into the checkpoint directory ``path``; return its exact path.

        ``path`` may be the source's directory too (the savepoint gets a job id of its own).
        The returned ``<path>/<job id>/chk-<n>`` is what ``execution.state-recovery.path``
        (and :meth:`SavepointReader.read`) take. On failure nothing is committed and the
        files written so far are deleted.

        Raises:
            StateLossError: an operator replaced with :meth:`with_operator` would lose a keyed
                state of the source, or change its kind (see :meth:`with_operator`).
            StateProcessorError: bad data for an operator (named), or nothing to write.
            CheckpointStorageError: ``path`` cannot be written.
        """
        layout = CheckpointLayout(base_url=os.fspath(path), storage=as_storage(storage))
        source = self._source
        # Refuse before writing anything: declared states before the data is read, then the
        # states the functions registered. So every operator's state is computed (and held
        # in memory) before the first file is written.
        for uid, transformation in self._operators.items():
            declared = transformation.declared_states
            if declared is not None:
                self._check_replacement(uid, declared)
        computed = {uid: t.compute(uid, self._target(uid)) for uid, t in self._operators.items()}
        for uid, result in computed.items():
            self._check_replacement(uid, result.states)
        job_id = uuid.uuid4().hex
        checkpoint_id = source.checkpoint.checkpoint_id if source is not None else 1
        started = datetime.now(UTC)
        committer = CheckpointCommitter(layout)
        handles: list[StateHandle] = []
        parallelism: dict[str, int] = {}
        try:
            if source is not None:
                for uid in source.operator_uids():
                    if uid in self._removed:
                        continue
                    handles += self._copy(layout, job_id, checkpoint_id, uid, uid not in self._operators, parallelism)
            for uid, result in computed.items():
                parts = result.parts
                if source is not None and uid in source.checkpoint.operator_uids:
                    subtasks = parallelism.setdefault(uid, source.checkpoint.parallelism.get(uid, 1))
                else:
                    subtasks = parallelism.setdefault(uid, 1)
                handles += self._write_keyed(
                    layout, job_id, checkpoint_id, uid, parts, subtasks, {0: result.types} if result.types else None
                )
            if not handles:
                raise StateProcessorError("the savepoint would hold no state: add an operator with with_operator()")
            properties = {}
            if source is not None:
                properties[DERIVED_FROM_PROPERTY] = source.path
            committer.commit(job_id, checkpoint_id, handles, CheckpointRecord(
                trigger_time=started,
                kind=CheckpointKind.SAVEPOINT,
                mode=SnapshotAlignment.ALIGNED,
                parallelism=parallelism,
                max_parallelism={uid: self._target(uid) for uid in sorted(parallelism)},
                lineage_id=source.checkpoint.lineage_id if source is not None else job_id,
                properties=properties,
            ))  # fmt: skip
        except BaseException:
            committer.abort(handles)
            raise
        return savepoint_path(layout.base_url, job_id, checkpoint_id)

    # -- internals -----------------------------------------------------------------------------

    def _held_states(self, uid: str) -> dict[str, StateKind]:
        """The keyed states (timers excluded) the source holds for ``uid``; empty if none."""
        if self._source is None or uid not in self._source.checkpoint.operator_uids:
            return {}
        if uid not in self._held:
            kinds = self._source.keyed_state_kinds(uid)
            self._held[uid] = {name: kind for name, kind in kinds.items() if kind in KEYED_KINDS}
        return self._held[uid]

    def _check_replacement(self, uid: str, written: Mapping[str, StateKind]) -> None:
        """Refuse to replace ``uid``'s keyed state with ``written`` if a held state would be lost.

        A held state is lost when ``written`` lacks it or has it with another kind, and it
        was not dropped with :meth:`drop_state` (or the operator with :meth:`remove_operator`).
        """
        if uid in self._cleared:
            return
        held = self._held_states(uid)
        dropped = self._dropped.get(uid, set())
        missing = [n for n in sorted(held) if n not in written and n not in dropped]
        changed = [n for n in sorted(held) if n in written and written[n] != held[n] and n not in dropped]
        if not missing and not changed:
            return
        problems = []
        if missing:
            problems.append(f"does not write {', '.join(repr(n) for n in missing)}")
        if changed:
            problems.append(
                "writes " + ", ".join(f"{n!r} as {written[n]} state, held as {held[n]} state" for n in changed)
            )
        names = ", ".join(repr(n) for n in missing + changed)
        raise StateLossError(
            f"with_operator({uid!r}, ...) would lose keyed state the source savepoint holds for operator {uid!r}: "
            f"the transformation {' and '.join(problems)}. The savepoint holds {_states(held)}; the transformation "
            f"writes {_states(written)}. Write every held state with the name and kind the job uses (its state "
            f"descriptors), or drop them explicitly: .drop_state({uid!r}, {names}), or "
            f".remove_operator({uid!r}) to drop all of the operator's state",
            operator_uid=uid,
            held={n: str(k) for n, k in held.items()},
            written={n: str(k) for n, k in written.items()},
        )

    def _copy(
        self, layout: CheckpointLayout, job_id: str, checkpoint_id: int, uid: str, keep_keyed: bool,
        parallelism: dict[str, int],
    ) -> list[StateHandle]:  # fmt: skip
        """Copy one operator of the source: its operator state per subtask, and its keyed state unless replaced."""
        source = self._source
        cp = source.checkpoint
        old_subtasks = cp.parallelism.get(uid, 1)
        rows = read_operator_state(source.layout, cp.job_id, cp.checkpoint_id, uid, keyed=None if keep_keyed else False)
        dropped = self._dropped.get(uid)
        if keep_keyed and dropped:
            is_dropped = pc.and_(
                pc.greater_equal(rows["key_group"], 0), pc.is_in(rows["state_name"], pa.array(sorted(dropped)))
            )
            rows = rows.filter(pc.invert(is_dropped))
        subtasks = sorted(set(rows["subtask"].to_pylist()))
        count = max([old_subtasks, *(s + 1 for s in subtasks)])
        if keep_keyed and pc.any(pc.greater_equal(rows["key_group"], 0)).as_py():
            count = min(count, self._target(uid))
        parallelism[uid] = count
        keyed = rows.filter(pc.greater_equal(rows["key_group"], 0))
        parts: list[KeyedStateSnapshot] = []
        old_max = cp.max_parallelism.get(uid)
        for name in sorted(set(keyed["state_name"].to_pylist())):
            table = keyed.filter(pc.equal(keyed["state_name"], name))
            keys = serialization.loads_many(table["key"].to_pylist())
            values = serialization.loads_many(table["value"].to_pylist())
            groups = table["key_group"].to_numpy()
            if old_max is not None and old_max != self._target(uid):
                groups = self._regroup(uid, name, keys, groups, old_max, self._target(uid))
            kind = StateKind(table["state_kind"][0].as_py())
            parts.append(KeyedStateSnapshot(name=name, kind=kind, entries=KeyedColumns(keys, values, groups)))
        operator = rows.filter(pc.less(rows["key_group"], 0))
        # The declared types of keyed states go with them: a replaced operator's new states
        # record their own, a dropped state's is dropped.
        gone = sorted(dropped or ()) if keep_keyed else sorted(set(operator["state_name"].to_pylist()))
        is_gone_type = pc.and_(
            pc.equal(operator["state_kind"], StateKind.TYPE_INFO.value),
            pc.is_in(operator["state_name"], pa.array(gone, pa.string())),
        )
        operator = operator.filter(pc.invert(is_gone_type))
        by_subtask: dict[int, list[OperatorStateSnapshot]] = {}
        for subtask in sorted(set(operator["subtask"].to_pylist())):
            mine = operator.filter(pc.equal(operator["subtask"], subtask))
            for name in sorted(set(mine["state_name"].to_pylist())):
                table = mine.filter(pc.equal(mine["state_name"], name))
                entries = list(zip(serialization.loads_many(table["key"].to_pylist()),
                                   serialization.loads_many(table["value"].to_pylist())))  # fmt: skip
                kind = StateKind(table["state_kind"][0].as_py())
                by_subtask.setdefault(subtask, []).append(OperatorStateSnapshot(name=name, kind=kind, entries=entries))
        return self._write_keyed(layout, job_id, checkpoint_id, uid, parts, count, by_subtask)

    @staticmethod
    def _regroup(uid: str, name: str, keys: list, groups: np.ndarray, old_max: int, new_max: int) -> np.ndarray:
        """Key groups of ``keys`` under the new max parallelism; refuses rows not stored under their own key."""
        for key, group in zip(keys, groups.tolist()):
            if key_group_for(key, old_max) != group:
                raise StateProcessorError(
                    f"cannot change the max parallelism of operator {uid!r}: state {name!r} stores key {key!r} in key "
                    f"group {group}, not in the group of the key itself (window state scopes its keys), so its new "
                    f"key group cannot be computed; remove the operator or keep max parallelism {old_max}"
                )
        return key_groups_of(keys, new_max)

    def _write_keyed(
        self,
        layout: CheckpointLayout,
        job_id: str,
        checkpoint_id: int,
        uid: str,
        parts: list[KeyedStateSnapshot],
        subtasks: int,
        operator_parts: Mapping[int, list[OperatorStateSnapshot]] | None = None,
    ) -> list[StateHandle]:
        """One SnapshotWriter per subtask: its key groups' entries of ``parts`` and its ``operator_parts``."""
        max_parallelism = self._target(uid)
        subtasks = max(1, min(subtasks, max_parallelism))
        per_subtask: dict[int, list] = {s: [] for s in range(subtasks)}
        for part in parts:
            entries = part.entries
            assert isinstance(entries, KeyedColumns)
            owner = _owners(entries.key_groups, max_parallelism, subtasks)
            for subtask in range(subtasks):
                index = np.flatnonzero(owner == subtask)
                if len(index) == 0:
                    continue
                if len(index) == len(entries):
                    per_subtask[subtask].append(part)
                    continue
                picked = index.tolist()
                per_subtask[subtask].append(KeyedStateSnapshot(name=part.name, kind=part.kind, entries=KeyedColumns(
                    [entries.keys[i] for i in picked], [entries.values[i] for i in picked], entries.key_groups[index]
                )))  # fmt: skip
        for subtask, operator in (operator_parts or {}).items():
            per_subtask.setdefault(subtask, []).extend(operator)
        handles: list[StateHandle] = []
        try:
            for subtask, snapshot in sorted(per_subtask.items()):
                if not snapshot:
                    continue
                with SnapshotWriter(layout, job_id, checkpoint_id, uid, subtask) as writer:
                    write_state_snapshots(writer, snapshot)
                    handles.append(writer.finish())
        except BaseException:
            discard_handles(layout, handles)
            raise
        return handles


def _owners(groups: np.ndarray, max_parallelism: int, parallelism: int) -> np.ndarray:
    """Subtask owning each key group (vectorized :func:`operator_index_for_key_group`)."""
    if parallelism == 1:
        return np.zeros(len(groups), dtype=np.int64)
    operator_index_for_key_group(max_parallelism, parallelism, 0)  # validates the pair
    return np.asarray(groups, dtype=np.int64) * parallelism // max_parallelism
