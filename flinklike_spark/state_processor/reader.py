"""Reading a checkpoint's or savepoint's state as tables: Flink's ``SavepointReader``.

    reader = SavepointReader.read("/checkpoints/<job id>/chk-7")           # pyarrow tables
    reader = SavepointReader.read("/checkpoints", spark=spark)             # Spark DataFrames
    counts = reader.read_keyed_state(OperatorIdentifier.for_uid("count"))  # key, count
    timers = reader.read_timers("count")                                   # key, timestamp, time_domain

Keyed state is read resolved (an incremental checkpoint's chain is applied, as a
restore does) and decoded: one row per key, the key in column ``key`` and each
state in a column named after it (see :mod:`~flinklike_spark.state_processor.state_values`
for the shape of each kind and the ``<state>_ttl_timestamp`` columns). A
DataFrame read here can be written back with
:class:`~flinklike_spark.state_processor.SavepointWriter` unchanged.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from checkpointing import CheckpointLayout, CompletedCheckpoint, read_operator_state
from checkpointing.schemas import StateKind
from flinklike_spark._runtime import serialization
from flinklike_spark._runtime.jobmaster.recovery import resolve_recovery_path
from flinklike_spark._runtime.operators.stream_operator import EVENT_TIMERS, PROCESSING_TIMERS
from flinklike_spark.errors import StateNotFoundError, StateProcessorError
from flinklike_spark.storage import StorageConfig

from .frames import to_output
from .identifier import OperatorIdentifier, as_identifier
from .state_values import KEYED_KINDS, decode_values, is_ttl_value, to_arrow_array, ttl_column

__all__ = ["BROADCAST_PREFIX", "TIME_DOMAINS", "SavepointReader", "as_storage", "key_values"]

#: State-name prefix of broadcast state in ``operator_state`` rows (the runtime's).
BROADCAST_PREFIX = "_broadcast/"
#: Timer state names and the ``time_domain`` they are read as.
TIME_DOMAINS: Mapping[str, str] = {EVENT_TIMERS: "event_time", PROCESSING_TIMERS: "processing_time"}


_TIMESTAMP = pa.timestamp("ms", tz="UTC")


def _in_ms(stamps: pa.Array) -> pa.Array:
    """Last access times as ms timestamps (what the runtime stores), inside lists and maps too."""
    kind = stamps.type
    if pa.types.is_map(kind):
        return stamps.cast(pa.map_(kind.key_type, _TIMESTAMP))
    if pa.types.is_list(kind):
        return stamps.cast(pa.list_(_TIMESTAMP))
    return stamps.cast(_TIMESTAMP) if not pa.types.is_null(kind) else stamps


def as_storage(storage: StorageConfig | Mapping[str, Any] | None) -> StorageConfig | None:
    """Object-store settings: a :class:`StorageConfig` or Flink's keys (``s3.endpoint``, ...)."""
    if storage is None or isinstance(storage, StorageConfig):
        return storage
    if isinstance(storage, Mapping):
        return StorageConfig.from_configuration(storage)
    raise StateProcessorError(
        f"storage must be a StorageConfig or a mapping of s3.* / fs.azure.* keys, got {storage!r}"
    )


def key_values(keys: list[Any]) -> pa.Array:
    """The ``key`` column (tuple keys become lists)."""
    return to_arrow_array([list(k) if type(k) is tuple else k for k in keys])


class SavepointReader:
    """The state of one completed checkpoint or savepoint, read as tables.

    Create it with :meth:`read`. Every ``read_*`` method returns a ``pyarrow.Table``,
    or a Spark DataFrame when the reader was created with ``spark=``.
    Nothing is cached: each call reads the state files again (restores read the same way).
    """

    def __init__(self, layout: CheckpointLayout, checkpoint: CompletedCheckpoint, spark: Any = None) -> None:
        self.layout = layout
        self.checkpoint = checkpoint
        self._spark = spark

    @classmethod
    def read(
        cls,
        path: str | os.PathLike[str],
        *,
        spark: Any = None,
        storage: StorageConfig | Mapping[str, Any] | None = None,
    ) -> SavepointReader:
        """Open a checkpoint or savepoint by any form ``execution.state-recovery.path`` accepts.

        ``<dir>`` (the newest restorable one there), ``<dir>/<job id>`` (that job's newest) or
        ``<dir>/<job id>/chk-<n>`` (exactly that one; what :meth:`SavepointWriter.write` returns).

        Args:
            spark: a SparkSession: the ``read_*`` methods then return Spark DataFrames.
            storage: object-store settings for an ``s3://`` / ``abfss://`` path.

        Raises:
            CheckpointNotFoundError: nothing completed at ``path`` (names what is there).
            CorruptCheckpointError: the checkpoint named by ``chk-<n>`` is damaged.
        """
        layout, checkpoint = resolve_recovery_path(os.fspath(path), as_storage(storage))
        return cls(layout, checkpoint, spark)

    @property
    def path(self) -> str:
        """``<dir>/<job id>/chk-<n>``: the exact path of what is read (for ``execution.state-recovery.path``)."""
        return f"{self.layout.base_url.rstrip('/')}/{self.checkpoint.job_id}/chk-{self.checkpoint.checkpoint_id}"

    @property
    def max_parallelism(self) -> Mapping[str, int]:
        """Operator uid (vertex) -> number of key groups its keyed state was written with."""
        return self.checkpoint.max_parallelism

    def operator_uids(self) -> list[str]:
        """The uids of the operators with state here, sorted."""
        return sorted(self.checkpoint.operator_uids)

    def _rows(self, operator: OperatorIdentifier | str, *, keyed: bool, state_name: str | None = None) -> pa.Table:
        uid = as_identifier(operator).uid
        if uid not in self.checkpoint.operator_uids:
            raise StateNotFoundError(
                f"{self.path} holds no state of operator uid {uid!r}; its operators: {self.operator_uids()}"
            )
        return read_operator_state(
            self.layout, self.checkpoint.job_id, self.checkpoint.checkpoint_id, uid, keyed=keyed, state_name=state_name
        )

    def keyed_state_kinds(self, operator: OperatorIdentifier | str) -> dict[str, StateKind]:
        """State name -> kind of the operator's keyed state (timers included), sorted by name."""
        table = self._rows(operator, keyed=True).select(["state_name", "state_kind"])
        pairs = {(n, k) for n, k in zip(table["state_name"].to_pylist(), table["state_kind"].to_pylist())}
        return {name: StateKind(kind) for name, kind in sorted(pairs)}

    def read_keyed_state(
        self, operator: OperatorIdentifier | str, state_names: str | Sequence[str] | None = None
    ) -> Any:
        """One row per key: ``key``, then per state a column of its value (null: no entry for the key).

        Args:
            state_names: the states to read (default: every keyed state but timers).

        Columns of a state ``s``: ``s`` (value / reducing / aggregating: the value or
        accumulator; list: a list; map: a map) and, for state with time-to-live,
        ``s_ttl_timestamp`` (last access time). Rows are sorted by key group.

        Raises:
            StateNotFoundError: no such operator or state (names the ones there are).
        """
        kinds = {n: k for n, k in self.keyed_state_kinds(operator).items() if k in KEYED_KINDS}
        if state_names is None:
            names = list(kinds)
        else:
            names = [state_names] if isinstance(state_names, str) else list(state_names)
        missing = [n for n in names if n not in kinds]
        if missing:
            raise StateNotFoundError(
                f"operator {as_identifier(operator).uid!r} in {self.path} has no keyed state {missing}; "
                f"its keyed states: {sorted(kinds)}"
            )
        rows = self._rows(operator, keyed=True)
        per_state: dict[str, dict[Any, Any]] = {}
        order: dict[Any, int] = {}  # key -> key group, first seen (rows are sorted by key group)
        for name in names:
            table = rows.filter(pc.equal(rows["state_name"], name))
            keys = serialization.loads_many(table["key"].to_pylist())
            values = serialization.loads_many(table["value"].to_pylist())
            per_state[name] = dict(zip(keys, values))
            for key, group in zip(keys, table["key_group"].to_pylist()):
                order.setdefault(key, group)
        keys = sorted(order, key=order.__getitem__)
        columns: dict[str, pa.Array] = {"key": key_values(keys)}
        for name in names:
            kind = kinds[name]
            stored = [per_state[name].get(k) for k in keys]
            ttl = any(is_ttl_value(kind, v) for v in stored if v is not None)
            values, stamps = decode_values(kind, stored, ttl)
            columns[name] = to_arrow_array(values, map_column=kind == StateKind.MAP)
            if stamps is not None:
                columns[ttl_column(name)] = _in_ms(to_arrow_array(stamps, map_column=kind == StateKind.MAP))
        columns["key_group"] = pa.array([order[k] for k in keys], pa.int32())
        return to_output(pa.table(columns), self._spark)

    def read_timers(self, operator: OperatorIdentifier | str) -> Any:
        """The timers of a keyed process operator: ``key``, ``timestamp`` (ms), ``time_domain``, ``key_group``.

        ``time_domain`` is ``"event_time"`` or ``"processing_time"``; rows are sorted by
        domain, timestamp. Operators without timers give an empty table.
        """
        rows = self._rows(operator, keyed=True)
        rows = rows.filter(pc.equal(rows["state_kind"], StateKind.TIMER.value))
        keys = serialization.loads_many(rows["key"].to_pylist())
        stamps = serialization.loads_many(rows["value"].to_pylist())
        domains = [TIME_DOMAINS.get(n, n) for n in rows["state_name"].to_pylist()]
        order = sorted(range(len(keys)), key=lambda i: (domains[i], stamps[i]))
        table = pa.table({
            "key": key_values([keys[i] for i in order]) if keys else pa.array([], pa.null()),
            "timestamp": pa.array([stamps[i] for i in order], pa.int64()),
            "time_domain": pa.array([domains[i] for i in order], pa.string()),
            "key_group": pa.array([rows["key_group"][i].as_py() for i in order], pa.int32()),
        })  # fmt: skip
        return to_output(table, self._spark)

    def read_broadcast_state(self, operator: OperatorIdentifier | str, state_name: str) -> Any:
        """Broadcast state ``state_name`` (a ``MapStateDescriptor``'s name) of the operator: ``key``, ``value``.

        Every subtask holds the same copy; the copy of the lowest subtask is read.

        Raises:
            StateNotFoundError: the operator has no such broadcast state (names those it has).
        """
        rows = self._rows(operator, keyed=False)
        names = sorted(
            {n[len(BROADCAST_PREFIX) :] for n in rows["state_name"].to_pylist() if n.startswith(BROADCAST_PREFIX)}
        )
        if state_name not in names:
            raise StateNotFoundError(
                f"operator {as_identifier(operator).uid!r} in {self.path} has no broadcast state {state_name!r}; "
                f"its broadcast states: {names}"
            )
        rows = rows.filter(pc.equal(rows["state_name"], BROADCAST_PREFIX + state_name))
        first = pc.min(rows["subtask"]).as_py()
        rows = rows.filter(pc.equal(rows["subtask"], first))
        keys = serialization.loads_many(rows["key"].to_pylist())
        values = serialization.loads_many(rows["value"].to_pylist())
        table = pa.table({"key": key_values(keys), "value": to_arrow_array(values)})
        return to_output(table, self._spark)

    def read_operator_state(self, operator: OperatorIdentifier | str, state_name: str | None = None) -> Any:
        """Non-keyed state rows (source splits, sink committables, ...): ``state_name``, ``state_kind``,
        ``subtask``, ``key_repr``, ``value_repr`` (readable text; the values stay as they are on write)."""
        rows = self._rows(operator, keyed=False, state_name=state_name)
        table = rows.select(["state_name", "state_kind", "subtask", "key_repr", "value_repr"])
        return to_output(table, self._spark)
