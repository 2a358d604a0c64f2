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
from flinklike_spark._runtime.network.partitioner import key_group_for, operator_index_for_key_group
from flinklike_spark._runtime.streaming.keyed_state import key_groups_of
from flinklike_spark.errors import StateNotFoundError, StateProcessorError
from flinklike_spark.storage import StorageConfig

from .identifier import OperatorIdentifier, as_identifier
from .reader import SavepointReader, as_storage
from .transformation import StateBootstrapTransformation

__all__ = ["DEFAULT_MAX_PARALLELISM", "SavepointWriter"]

#: ``pipeline.max-parallelism``'s default: the number of key groups of a new savepoint.
DEFAULT_MAX_PARALLELISM: Final = 128
_MAX_KEY_GROUPS: Final = 1 << 15
#: ``properties`` key of the written savepoint naming what it was derived from.
DERIVED_FROM_PROPERTY: Final = "derived_from"


def _check_max_parallelism(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _MAX_KEY_GROUPS:
        raise StateProcessorError(f"max parallelism must be an int in [1, {_MAX_KEY_GROUPS}], got {value!r}")
    return value


class SavepointWriter:
    """Builds a savepoint: a new one, or one derived from an existing checkpoint or savepoint.

    Configure with :meth:`with_operator`, :meth:`remove_operator` and
    :meth:`with_max_parallelism` (each returns the writer), then :meth:`write`.
    Nothing is read or written before :meth:`write`.
    """

    def __init__(self, source: SavepointReader | None, max_parallelism: int) -> None:
        self._source = source
        self._max_parallelism = _check_max_parallelism(max_parallelism)
        #: set by new_savepoint / with_max_parallelism: every operator gets _max_parallelism key groups;
        #: otherwise each copied or replaced operator keeps the number its source recorded
        self._forced = source is None
        self._operators: dict[str, StateBootstrapTransformation] = {}
        self._removed: set[str] = set()

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
        replaced; its non-keyed state (e.g. source positions) is kept.
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
        self._operators.pop(uid, None)
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
            StateProcessorError: bad data for an operator (named), or nothing to write.
            CheckpointStorageError: ``path`` cannot be written.
        """
        layout = CheckpointLayout(base_url=os.fspath(path), storage=as_storage(storage))
        source = self._source
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
            for uid, transformation in self._operators.items():
                parts = transformation.snapshots(uid, self._target(uid))
                if source is not None and uid in source.checkpoint.operator_uids:
                    subtasks = parallelism.setdefault(uid, source.checkpoint.parallelism.get(uid, 1))
                else:
                    subtasks = parallelism.setdefault(uid, 1)
                handles += self._write_keyed(layout, job_id, checkpoint_id, uid, parts, subtasks)
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

    def _copy(
        self, layout: CheckpointLayout, job_id: str, checkpoint_id: int, uid: str, keep_keyed: bool,
        parallelism: dict[str, int],
    ) -> list[StateHandle]:  # fmt: skip
        """Copy one operator of the source: its operator state per subtask, and its keyed state unless replaced."""
        source = self._source
        cp = source.checkpoint
        old_subtasks = cp.parallelism.get(uid, 1)
        rows = read_operator_state(source.layout, cp.job_id, cp.checkpoint_id, uid, keyed=None if keep_keyed else False)
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

