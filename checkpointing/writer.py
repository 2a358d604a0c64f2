"""Task side: write one subtask's snapshot as Parquet files, invisible until committed.

A :class:`SnapshotWriter` runs in the asynchronous phase of a subtask's
snapshot (a TaskExecutor pool thread). It buffers rows, writes them as Parquet
files straight into the ``operator_state`` / ``channel_state`` table
directories, and returns a :class:`StateHandle` describing them. The files are
not part of any Delta table version until the coordinator commits the handle
(:class:`checkpointing.CheckpointCommitter`), so readers never see them.
"""

from __future__ import annotations

import dataclasses
import enum
import io
import itertools
import json
import logging
import operator
import pickle
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from flinklike_spark.errors import CheckpointStorageError, IllegalStateTransition

from .layout import (
    CHANNEL_STATE,
    OPERATOR_STATE,
    CheckpointLayout,
    TableName,
    as_layout,
    check_checkpoint_id,
    check_job_id,
)
from .schemas import (
    CHANGE_DELETE,
    CHANGE_PUT,
    CHANNEL_STATE_FILE_SCHEMA,
    NON_KEYED_KEY_GROUP,
    OPERATOR_STATE_FILE_SCHEMA,
    REPR_LIMIT,
    Direction,
    StateKind,
    as_enum,
    check_literal,
    truncated_repr,
)

log = logging.getLogger(__name__)

__all__ = [
    "KeyedColumnChunks",
    "KeyedColumns",
    "SnapshotWriter",
    "StateFile",
    "StateHandle",
    "discard_handles",
    "serialize_batch",
]

_DEFAULT_MAX_ROWS_PER_FILE: Final = 100_000
_INT_STATS_COLUMNS: Final = {
    OPERATOR_STATE: ("subtask", "key_group"),
    CHANNEL_STATE: ("subtask", "gate", "channel", "sequence", "rows"),
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class StateFile:
    """One Parquet file written into a table directory, with its Delta ``add`` metadata.

    Attributes:
        table: ``"operator_state"`` or ``"channel_state"``.
        path: path relative to the table root, exactly as committed in ``add.path``.
        size: file size in bytes.
        partition_values: Delta partition values (strings), ``job_id`` and ``checkpoint_id``.
        modification_time: when the file was written (UTC).
        num_records: rows in the file.
        stats: Delta ``add.stats`` JSON (numRecords, min/max of int columns, nullCount).
    """

    table: TableName
    path: str
    size: int
    partition_values: Mapping[str, str]
    modification_time: datetime
    num_records: int
    stats: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class StateHandle:
    """What one subtask acknowledges for one checkpoint: its uncommitted files.

    Small and picklable: it travels TaskExecutor -> JobMaster with the
    acknowledgement. Byte counts feed the ``checkpoints`` row.
    """

    base_url: str
    job_id: str
    checkpoint_id: int
    operator_uid: str
    subtask: int
    files: tuple[StateFile, ...]
    state_bytes: int
    channel_state_bytes: int
    operator_state_rows: int
    channel_state_rows: int
    #: Incremental keyed state: the checkpoints whose ``operator_state`` rows of this
    #: operator and subtask make up its keyed state (base first, this checkpoint last;
    #: see :data:`checkpointing.schemas.STATE_CHAINS_PROPERTY`). None: self-contained.
    chain: tuple[int, ...] | None = None


#: Columns Parquet dictionary-encodes: not the keys, which are unique within a file, so a
#: dictionary of them only costs hashing before Arrow falls back to plain (it took a third of
#: a 50,000-key file's write, and the file came out larger).
_DICTIONARY = {
    OPERATOR_STATE: [name for name in OPERATOR_STATE_FILE_SCHEMA.names if name not in ("key", "key_repr")],
    CHANNEL_STATE: True,
}


def serialize_batch(batch: pa.RecordBatch) -> bytes:
    """Arrow IPC stream bytes holding exactly ``batch`` (the ``payload`` column format)."""
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue()


def _dumps(obj: Any) -> bytes | None:
    if obj is None:
        return None
    try:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError):
        import cloudpickle  # lambdas and local classes; loads() with plain pickle

        return cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def _dumps_all(objects: Sequence[Any]) -> list[bytes]:
    """``_dumps`` of every object, with the C pickler mapped over the list while it works.

    Unlike the row form, None is pickled too (it reads back as None).
    """
    try:
        return list(map(pickle.dumps, objects, itertools.repeat(pickle.HIGHEST_PROTOCOL, len(objects))))
    except (pickle.PicklingError, TypeError, AttributeError):
        return [_dumps(o) for o in objects]


def _reprs(objects: Sequence[Any]) -> pa.Array:
    """``truncated_repr`` of every object as a string array: one ``map(repr)`` pass, and a
    per-item pass only when a ``repr`` raises or is longer than the limit."""
    if objects and set(map(type, objects)) == {int}:
        try:  # Arrow's int -> string cast writes exactly repr(int), without a Python call per item
            return pa.array(objects, type=pa.int64()).cast(pa.string())
        except (OverflowError, pa.ArrowInvalid):
            pass
    try:
        texts = pa.array(list(map(repr, objects)), type=pa.string())
    except Exception:  # noqa: BLE001 - a user __repr__ must not fail a checkpoint
        return pa.array([truncated_repr(o) for o in objects], type=pa.string())
    if len(texts) and pc.max(pc.utf8_length(texts)).as_py() > REPR_LIMIT:
        return pa.array([truncated_repr(o) for o in objects], type=pa.string())
    return texts


class KeyedColumns(Sequence[tuple[int, Any, Any]]):
    """Keyed entries ``(key_group, key, value)`` of one state, held as parallel columns.

    What a keyed state backend hands over from the synchronous part of a
    snapshot: ``keys`` and ``values`` are lists the snapshot owns (nothing
    else changes them), and the key groups are computed by ``key_groups``
    (a callable, run once, on first use, so in the asynchronous part) or
    given as a sequence. :meth:`SnapshotWriter.add_keyed_state` writes them
    column-wise; as a sequence they read like the row form.
    """

    __slots__ = ("_compute", "_key_groups", "keys", "values")

    def __init__(
        self,
        keys: list,
        values: list,
        key_groups: Callable[[], Sequence[int]] | Sequence[int],
    ) -> None:
        if len(keys) != len(values):
            raise ValueError(f"KeyedColumns needs as many keys as values, got {len(keys)} and {len(values)}")
        self.keys = keys
        self.values = values
        if callable(key_groups):
            self._compute: Callable[[], Sequence[int]] | None = key_groups
            self._key_groups: np.ndarray | None = None
        else:
            self._compute = None
            self._key_groups = np.asarray(key_groups, dtype=np.int32)

    @property
    def key_groups(self) -> np.ndarray:
        if self._key_groups is None:
            groups = np.asarray(self._compute(), dtype=np.int32)
            if len(groups) != len(self.keys):
                raise ValueError(f"key_groups gave {len(groups)} groups for {len(self.keys)} keys")
            self._key_groups = groups
            self._compute = None
        return self._key_groups

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return list(zip(self.key_groups[index].tolist(), self.keys[index], self.values[index]))
        return (int(self.key_groups[index]), self.keys[index], self.values[index])

    def __iter__(self) -> Iterator[tuple[int, Any, Any]]:
        return zip(self.key_groups.tolist(), self.keys, self.values)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return list(self) == list(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"KeyedColumns({len(self)} entries)"


class KeyedColumnChunks(Iterable[tuple[int, Any, Any]]):
    """Keyed entries of one state produced as a stream of :class:`KeyedColumns` chunks.

    What a state backend whose state may exceed memory (RocksDB) hands over
    from the synchronous part of a snapshot: ``produce`` is called in the
    asynchronous part, once per iteration, and yields chunks that
    :meth:`SnapshotWriter.add_keyed_state` writes one at a time, so only one
    chunk is in memory. Iterated directly it reads like the row form.
    """

    __slots__ = ("_produce",)

    def __init__(self, produce: Callable[[], Iterable[KeyedColumns]]) -> None:
        self._produce = produce

    def chunks(self) -> Iterator[KeyedColumns]:
        return iter(self._produce())

    def __iter__(self) -> Iterator[tuple[int, Any, Any]]:
        for chunk in self.chunks():
            yield from chunk

    def __len__(self) -> int:
        return sum(len(chunk) for chunk in self.chunks())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Iterable) and not isinstance(other, (str, bytes)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "KeyedColumnChunks(...)"


class _WriterState(enum.Enum):
    OPEN = "open"
    FINISHED = "finished"
    DISCARDED = "discarded"


_TRANSITIONS: Final[Mapping[_WriterState, frozenset[_WriterState]]] = {
    # finish() hands the files to the coordinator; discard() deletes them.
    _WriterState.OPEN: frozenset({_WriterState.FINISHED, _WriterState.DISCARDED}),
    # after finish the files belong to the handle: the coordinator commits or aborts them
    _WriterState.FINISHED: frozenset(),
    _WriterState.DISCARDED: frozenset(),
}


class SnapshotWriter:
    """Writes the snapshot of one subtask of one operator for one checkpoint.

    Call order: any number of ``add_*`` calls, then exactly one of
    :meth:`finish` (returns the handle to acknowledge) or :meth:`discard`
    (deletes what was written, e.g. when the checkpoint is declined). Used as a
    context manager, an exception inside the block discards. Not thread-safe:
    one writer per snapshot runnable.

    Rows are buffered and flushed to a new Parquet file whenever
    ``max_rows_per_file`` rows of a table are pending, so memory stays bounded;
    every file is written into the table directory but stays invisible until
    committed. Keys and values are pickled (cloudpickle as fallback).

    Raises (from any method that writes):
        CheckpointStorageError: the base URL cannot be written, naming URL and cause.
    """

    def __init__(
        self,
        base: str | CheckpointLayout,
        job_id: str,
        checkpoint_id: int,
        operator_uid: str,
        subtask: int,
        *,
        max_rows_per_file: int = _DEFAULT_MAX_ROWS_PER_FILE,
    ) -> None:
        check_job_id(job_id)
        check_checkpoint_id(checkpoint_id)
        if not isinstance(operator_uid, str) or not operator_uid:
            raise ValueError(f"operator_uid must be a non-empty string, got {operator_uid!r}")
        if isinstance(subtask, bool) or not isinstance(subtask, int) or subtask < 0:
            raise ValueError(f"subtask must be an int >= 0, got {subtask!r}")
        if max_rows_per_file < 1:
            raise ValueError(f"max_rows_per_file must be >= 1, got {max_rows_per_file!r}")
        self._layout = as_layout(base)
        self.job_id = job_id
        self.checkpoint_id = checkpoint_id
        self.operator_uid = operator_uid
        self.subtask = subtask
        self._max_rows = max_rows_per_file
        self._state = _WriterState.OPEN
        self._pending: dict[TableName, list[dict[str, Any]]] = {OPERATOR_STATE: [], CHANNEL_STATE: []}
        self._files: list[StateFile] = []
        self._rows = {OPERATOR_STATE: 0, CHANNEL_STATE: 0}

    # -- adding rows ---------------------------------------------------------

    def add_keyed_state(
        self,
        state_name: str,
        entries: Iterable[tuple[int, Any, Any]],
        *,
        kind: StateKind | str = StateKind.VALUE,
    ) -> None:
        """Add keyed state entries ``(key_group, key, value)`` of one named state.

        ``key_group`` must be >= 0 (the key's group under the job's max
        parallelism); restore selects rows by key-group range. For ``timer``
        state the key is the timer's key and the value the timer payload.
        """
        kind = as_enum(kind, StateKind, "state kind")
        self._check_open("add_keyed_state")
        self._check_name(state_name)
        if isinstance(entries, KeyedColumns):
            self._add_keyed_columns(state_name, kind, entries)
            return
        if isinstance(entries, KeyedColumnChunks):
            for chunk in entries.chunks():
                self._add_keyed_columns(state_name, kind, chunk)
            return
        for key_group, key, value in entries:
            if isinstance(key_group, bool) or not isinstance(key_group, int) or key_group < 0:
                raise ValueError(f"key_group must be an int >= 0, got {key_group!r}")
            self._add_state_row(state_name, kind, key_group, key, value)

    def add_keyed_changes(
        self,
        state_name: str,
        upserts: KeyedColumns,
        deletes: KeyedColumns,
        *,
        kind: StateKind | str = StateKind.VALUE,
    ) -> None:
        """Add the changes of one keyed state since the previous checkpoint of its chain.

        ``upserts`` are ``(key_group, key, value)`` entries written with ``change`` =
        ``"put"``; ``deletes`` are ``(key_group, key, _)`` of removed keys, written with
        ``change`` = ``"delete"`` and a null value. Pass the chain to :meth:`finish`.
        """
        kind = as_enum(kind, StateKind, "state kind")
        self._check_open("add_keyed_changes")
        self._check_name(state_name)
        self._add_keyed_columns(state_name, kind, upserts, change=CHANGE_PUT)
        self._add_keyed_columns(state_name, kind, deletes, change=CHANGE_DELETE)

    def add_operator_state(
        self,
        state_name: str,
        entries: Iterable[tuple[Any, Any]],
        *,
        kind: StateKind | str = StateKind.OPERATOR,
    ) -> None:
        """Add non-keyed (operator) state entries ``(key, value)``; stored with key_group -1.

        For list-style operator state pass ``(index, element)`` or ``(None,
        element)``; for source readers use ``kind="source_split"`` with the
        split id as key. Restore reads these rows with ``keyed=False`` and
        redistributes them itself.
        """
        kind = as_enum(kind, StateKind, "state kind")
        self._check_open("add_operator_state")
        self._check_name(state_name)
        for key, value in entries:
            self._add_state_row(state_name, kind, NON_KEYED_KEY_GROUP, key, value)

    def add_channel_state(
        self, direction: Direction, gate: int, channel: int, sequence: int, batch: pa.RecordBatch
    ) -> None:
        """Add one in-flight buffer of a channel.

        Restore returns the buffers of a subtask and direction ordered by
        ``(gate, channel, sequence)``; callers number buffers of a channel
        with increasing ``sequence`` in the order they must be replayed.
        """
        check_literal(direction, Direction, "direction")
        self._check_open("add_channel_state")
        for name, number in (("gate", gate), ("channel", channel), ("sequence", sequence)):
            if isinstance(number, bool) or not isinstance(number, int) or number < 0:
                raise ValueError(f"{name} must be an int >= 0, got {number!r}")
        if not isinstance(batch, pa.RecordBatch):
            raise TypeError(f"channel state must be a pyarrow.RecordBatch, got {type(batch).__name__}")
        self._append(
            CHANNEL_STATE,
            {
                "operator_uid": self.operator_uid,
                "subtask": self.subtask,
                "direction": direction,
                "gate": gate,
                "channel": channel,
                "sequence": sequence,
                "rows": batch.num_rows,
                "payload": serialize_batch(batch),
            },
        )

    # -- completion ----------------------------------------------------------

    def finish(self, *, chain: Sequence[int] | None = None) -> StateHandle:
        """Flush pending rows and return the handle of every file written.

        Args:
            chain: for an incremental snapshot, the checkpoint ids whose rows make up
                this subtask's keyed state, oldest (the base) first, ending with this
                checkpoint. None for a self-contained snapshot.

        After this the writer is closed; the files belong to the handle until
        the coordinator commits or aborts it.
        """
        self._check_open("finish")
        if chain is not None:
            chain = tuple(int(c) for c in chain)
            if not chain or chain[-1] != self.checkpoint_id or list(chain) != sorted(set(chain)):
                raise ValueError(
                    f"chain must be increasing checkpoint ids ending with {self.checkpoint_id}, got {chain!r}"
                )
        try:
            for table in (OPERATOR_STATE, CHANNEL_STATE):
                self._flush(table)
        except BaseException as failure:
            _cleanup_after(failure, self.discard)
            raise
        self._transition(_WriterState.FINISHED)
        files = tuple(self._files)
        return StateHandle(
            base_url=self._layout.base_url,
            job_id=self.job_id,
            checkpoint_id=self.checkpoint_id,
            operator_uid=self.operator_uid,
            subtask=self.subtask,
            files=files,
            state_bytes=sum(f.size for f in files if f.table == OPERATOR_STATE),
            channel_state_bytes=sum(f.size for f in files if f.table == CHANNEL_STATE),
            operator_state_rows=self._rows[OPERATOR_STATE],
            channel_state_rows=self._rows[CHANNEL_STATE],
            chain=chain,
        )

    @property
    def is_open(self) -> bool:
        """True until :meth:`finish` or :meth:`discard` closed the writer."""
        return self._state is _WriterState.OPEN

    def discard(self) -> None:
        """Delete every file written so far and close the writer. Idempotent.

        Raises:
            IllegalStateTransition: the writer finished; its files belong to the
                handle :meth:`finish` returned (remove them with :func:`discard_handles`).
        """
        if self._state is _WriterState.DISCARDED:
            return
        self._transition(_WriterState.DISCARDED)
        self._pending = {OPERATOR_STATE: [], CHANNEL_STATE: []}
        _delete_files(self._layout, self._files)
        self._files = []

    def __enter__(self) -> SnapshotWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None and self._state is _WriterState.OPEN:
            _cleanup_after(exc, self.discard)

    # -- internals -----------------------------------------------------------

    def _transition(self, target: _WriterState) -> None:
        if target not in _TRANSITIONS[self._state]:
            raise IllegalStateTransition(
                f"SnapshotWriter cannot go from {self._state.value} to {target.value}",
                source=self._state,
                target=target,
            )
        self._state = target

    def _check_open(self, what: str) -> None:
        if self._state is not _WriterState.OPEN:
            raise IllegalStateTransition(
                f"SnapshotWriter.{what}() called after the writer was {self._state.value}",
                source=self._state,
                target=self._state,
            )

    @staticmethod
    def _check_name(state_name: str) -> None:
        if not isinstance(state_name, str) or not state_name:
            raise ValueError(f"state_name must be a non-empty string, got {state_name!r}")

    def _add_state_row(self, state_name: str, kind: StateKind, key_group: int, key: Any, value: Any) -> None:
        self._append(
            OPERATOR_STATE,
            {
                "operator_uid": self.operator_uid,
                "subtask": self.subtask,
                "key_group": key_group,
                "state_name": state_name,
                "state_kind": kind.value,
                "key": _dumps(key),
                "value": _dumps(value),
                "key_repr": truncated_repr(key),
                "value_repr": truncated_repr(value),
                "change": None,
            },
        )

    def _add_keyed_columns(
        self, state_name: str, kind: StateKind, entries: KeyedColumns, *, change: str | None = None
    ) -> None:
        """Column-wise ``add_keyed_state``: all entries become one Arrow table sorted by key
        group, written in files of ``max_rows_per_file`` rows, so each file covers a narrow
        key-group range (a restore of some key groups skips other files by their statistics)."""
        rows = len(entries)
        if rows == 0:
            return
        groups = entries.key_groups
        if int(groups.min()) < 0:
            raise ValueError(f"key_group must be an int >= 0, got {int(groups.min())}")
        # Sort by key group before building the columns: permuting the Python lists with
        # one itemgetter call is far cheaper than an Arrow take over binary columns.
        order = np.argsort(groups, kind="stable")
        groups = groups[order]
        keys, values = entries.keys, entries.values
        if rows > 1:
            pick = operator.itemgetter(*order.tolist())
            keys, values = pick(keys), pick(values)
        zeros = np.zeros(rows, dtype=np.int32)
        data = pa.Table.from_arrays(
            [
                pa.array([self.operator_uid]).take(zeros),
                pa.array(np.full(rows, self.subtask, dtype=np.int32)),
                pa.array(groups),
                pa.array([state_name]).take(zeros),
                pa.array([kind.value]).take(zeros),
                pa.array(_dumps_all(keys), type=pa.binary()),
                pa.nulls(rows, pa.binary())
                if change == CHANGE_DELETE
                else pa.array(_dumps_all(values), type=pa.binary()),
                _reprs(keys),
                pa.nulls(rows, pa.string()) if change == CHANGE_DELETE else _reprs(values),
                pa.nulls(rows, pa.string()) if change is None else pa.array([change]).take(zeros),
            ],
            schema=OPERATOR_STATE_FILE_SCHEMA,
        )
        self._flush(OPERATOR_STATE)  # rows added before stay in their own file
        self._rows[OPERATOR_STATE] += rows
        for start in range(0, rows, self._max_rows):
            self._files.append(self._write_file(OPERATOR_STATE, data.slice(start, self._max_rows)))

    def _append(self, table: TableName, row: dict[str, Any]) -> None:
        pending = self._pending[table]
        pending.append(row)
        self._rows[table] += 1
        if len(pending) >= self._max_rows:
            self._flush(table)

    def _flush(self, table: TableName) -> None:
        rows = self._pending[table]
        if not rows:
            return
        self._pending[table] = []
        schema = OPERATOR_STATE_FILE_SCHEMA if table == OPERATOR_STATE else CHANNEL_STATE_FILE_SCHEMA
        data = pa.Table.from_pylist(rows, schema=schema)
        # Sorted by key group (or channel order) so that Parquet row-group and Delta
        # file statistics let range reads skip data.
        order = (
            [("key_group", "ascending"), ("state_name", "ascending")]
            if table == OPERATOR_STATE
            else [
                ("direction", "ascending"),
                ("gate", "ascending"),
                ("channel", "ascending"),
                ("sequence", "ascending"),
            ]
        )
        data = data.sort_by(order)
        self._files.append(self._write_file(table, data))

    def _write_file(self, table: TableName, data: pa.Table) -> StateFile:
        prefix = "op" if table == OPERATOR_STATE else "ch"
        relative = (
            f"job_id={self.job_id}/checkpoint_id={self.checkpoint_id}/"
            f"{prefix}-{self.subtask:05d}-{uuid.uuid4().hex}.parquet"
        )
        fs, _ = self._layout.filesystem()
        path = self._layout.file_path(table, relative)
        try:
            fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
            with fs.open(path, "wb") as out:
                pq.write_table(data, out, row_group_size=16_384, compression="zstd", use_dictionary=_DICTIONARY[table])
            size = int(fs.size(path))
        except (OSError, ValueError) as exc:
            raise CheckpointStorageError(
                f"cannot write checkpoint {self.checkpoint_id} state file under "
                f"{self._layout.base_url!r} ({path}): {type(exc).__name__}: {exc}",
                url=self._layout.base_url,
            ) from exc
        return StateFile(
            table=table,
            path=relative,
            size=size,
            partition_values={"job_id": self.job_id, "checkpoint_id": str(self.checkpoint_id)},
            modification_time=datetime.now(UTC),
            num_records=data.num_rows,
            stats=_stats_json(table, data),
        )


def _stats_json(table: TableName, data: pa.Table) -> str:
    import pyarrow.compute as pc

    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    for name in _INT_STATS_COLUMNS[table]:
        bounds = pc.min_max(data[name])
        mins[name] = bounds["min"].as_py()
        maxs[name] = bounds["max"].as_py()
    nulls = {name: data[name].null_count for name in data.column_names}
    return json.dumps({"numRecords": data.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls})


def _cleanup_after(failure: BaseException, cleanup: Callable[[], None]) -> None:
    """Run ``cleanup`` while ``failure`` propagates: a cleanup error is logged, never raised.

    The storage error that made a checkpoint fail is what the user must see; a
    second error from removing its partial files (often the same read-only or
    full file system) would replace it.
    """
    try:
        cleanup()
    except Exception:  # noqa: BLE001 - see the docstring
        log.warning("cleanup after a failed checkpoint write (%r) failed too", failure, exc_info=True)


def _delete_files(layout: CheckpointLayout, files: Iterable[StateFile]) -> None:
    fs, _ = layout.filesystem()
    errors: list[str] = []
    for f in files:
        path = layout.file_path(f.table, f.path)
        try:
            fs.rm_file(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            errors.append(f"{path}: {exc}")
    if errors:
        raise CheckpointStorageError(
            f"cannot delete uncommitted checkpoint files under {layout.base_url!r}: {'; '.join(errors)}",
            url=layout.base_url,
        )


def discard_handles(base: str | CheckpointLayout, handles: Iterable[StateHandle]) -> None:
    """Delete the (uncommitted) files of ``handles``; missing files are ignored.

    Never call this for handles of a committed checkpoint: the files would
    vanish under a completed checkpoint and it would read as corrupt.
    """
    layout = as_layout(base)
    _delete_files(layout, [f for h in handles for f in h.files])
