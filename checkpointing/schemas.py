"""Arrow schemas of the checkpoint tables (and of the autoscaler's decisions beside them) and the value vocabularies they use.

The schemas are the contract with every reader (delta-rs, delta-spark, DuckDB,
polars): column names and types change only with :data:`FORMAT_VERSION`.
Partition columns (``job_id``, ``checkpoint_id``) are not stored inside the
state Parquet files, as the Delta protocol requires; the Delta log carries them.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Final, Literal, TypeVar, get_args

import pyarrow as pa

__all__ = [
    "CHANGE_DELETE",
    "CHANGE_PUT",
    "CHANNEL_STATE_FILE_SCHEMA",
    "CHANNEL_STATE_SCHEMA",
    "CHECKPOINTS_SCHEMA",
    "FINISHED_VERTICES_PROPERTY",
    "FORMAT_VERSION",
    "LINEAGE_PROPERTY",
    "MAX_PARALLELISM_PROPERTY_PREFIX",
    "NON_KEYED_KEY_GROUP",
    "OPERATOR_STATE_FILE_SCHEMA",
    "OPERATOR_STATE_SCHEMA",
    "OPTIONAL_COLUMNS",
    "REPR_LIMIT",
    "SCALING_DECISIONS_SCHEMA",
    "STATE_CHAINS_PROPERTY",
    "STATE_PARTITION_COLUMNS",
    "CheckpointKind",
    "Direction",
    "SnapshotAlignment",
    "StateKind",
    "as_enum",
    "check_literal",
    "truncated_repr",
]

E = TypeVar("E", bound=StrEnum)

#: Version of the table layout written into every ``checkpoints`` row.
FORMAT_VERSION: Final = 1

#: ``properties`` key of a ``checkpoints`` row: the id of the first job of the
#: restore lineage (a job and every job restored from its checkpoints share it).
LINEAGE_PROPERTY: Final = "lineage_id"

#: ``properties`` key of a ``checkpoints`` row: a JSON list of the ids of the job vertices
#: whose every subtask had finished when the checkpoint was taken (FLIP-147's fully
#: finished operators); absent when none had. A restore deploys them FINISHED_ON_RESTORE.
FINISHED_VERTICES_PROPERTY: Final = "finished_vertices"

#: ``properties`` key prefix of a ``checkpoints`` row: ``<prefix><vertex id>`` ->
#: the vertex's max parallelism (number of key groups) when the checkpoint was taken.
MAX_PARALLELISM_PROPERTY_PREFIX: Final = "max_parallelism."

#: ``properties`` key of a ``checkpoints`` row written with incremental checkpoints: a JSON
#: list of ``{"uid": operator uid, "subtask": n, "chain": [checkpoint ids]}``, one per
#: subtask whose keyed state in this checkpoint is changes on top of older checkpoints.
#: ``chain`` starts with the checkpoint holding the base (a full snapshot) and ends with
#: this checkpoint; the state is the base's keyed rows, then each later checkpoint's
#: ``change`` rows in order (last write wins). A subtask without an entry is self-contained.
STATE_CHAINS_PROPERTY: Final = "state_chains"

#: ``change`` of an ``operator_state`` row: the key's entry at this checkpoint ...
CHANGE_PUT: Final = "put"
#: ... or the key's entry was removed since the previous checkpoint of the chain.
CHANGE_DELETE: Final = "delete"

#: ``key_group`` of operator (non-keyed) state rows.
NON_KEYED_KEY_GROUP: Final = -1

#: Maximum length of ``key_repr`` / ``value_repr``.
REPR_LIMIT: Final = 200

Direction = Literal["input", "output"]


class StateKind(StrEnum):
    """What a state's entries are (the ``state_kind`` column of ``operator_state``).

    Keyed state (rows with a key group >= 0): the five keyed state kinds of
    :mod:`flinklike_spark.datastream.state`, and timers. Operator state (key group -1):
    plain and broadcast operator state, source splits, sink committables.
    Members compare equal to their values, which are what the rows hold.
    """

    VALUE = "value"
    LIST = "list"
    MAP = "map"
    REDUCING = "reducing"
    AGGREGATING = "aggregating"
    TIMER = "timer"
    """A timer: the key is the timer's key (or namespace), the value its timestamp."""
    OPERATOR = "operator"
    """Non-keyed operator state, broadcast state included."""
    TYPE_INFO = "type_info"
    """The declared ``Types.*`` type of a keyed state (Flink's state meta info), stored as operator
    state so that every subtask reads it: the row's ``state_name`` is the state's, its value the
    type's ``repr``."""
    SOURCE_SPLIT = "source_split"
    SINK_COMMITTABLES = "sink_committables"


class CheckpointKind(StrEnum):
    """A periodic checkpoint, or a savepoint (triggered by a user; survives retention, always aligned)."""

    CHECKPOINT = "checkpoint"
    SAVEPOINT = "savepoint"


class SnapshotAlignment(StrEnum):
    """How a checkpoint's snapshot was taken (the ``mode`` column of ``checkpoints``)."""

    ALIGNED = "aligned"
    """At the last barrier, with every channel aligned."""
    UNALIGNED = "unaligned"
    """At the first barrier, unaligned from the start (in-flight data persisted)."""
    SWITCHED = "switched"
    """Started aligned; the alignment timed out and the snapshot was taken unaligned."""

    @classmethod
    def of_checkpoint(cls, alignments: Iterable[SnapshotAlignment]) -> SnapshotAlignment:
        """A checkpoint's alignment from its tasks': switched if any switched, else unaligned if any was."""
        seen = set(alignments)
        return next((mode for mode in (cls.SWITCHED, cls.UNALIGNED) if mode in seen), cls.ALIGNED)


#: Partition columns of ``operator_state`` and ``channel_state``.
STATE_PARTITION_COLUMNS: Final = ("job_id", "checkpoint_id")

_PARTITION_FIELDS = [
    pa.field("job_id", pa.string(), nullable=False),
    pa.field("checkpoint_id", pa.int64(), nullable=False),
]

OPERATOR_STATE_FILE_SCHEMA: Final = pa.schema(
    [
        pa.field("operator_uid", pa.string(), nullable=False),
        pa.field("subtask", pa.int32(), nullable=False),
        pa.field("key_group", pa.int32(), nullable=False),
        pa.field("state_name", pa.string(), nullable=False),
        pa.field("state_kind", pa.string(), nullable=False),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("key_repr", pa.string()),
        pa.field("value_repr", pa.string()),
        # null: an entry of a full snapshot; "put" / "delete": a change of an incremental one
        pa.field("change", pa.string()),
    ]
)
#: Columns a table written by an older version may lack (they read as null).
OPTIONAL_COLUMNS: Final = frozenset({"change"})
OPERATOR_STATE_SCHEMA: Final = pa.schema(_PARTITION_FIELDS + list(OPERATOR_STATE_FILE_SCHEMA))

CHANNEL_STATE_FILE_SCHEMA: Final = pa.schema(
    [
        pa.field("operator_uid", pa.string(), nullable=False),
        pa.field("subtask", pa.int32(), nullable=False),
        pa.field("direction", pa.string(), nullable=False),
        pa.field("gate", pa.int32(), nullable=False),
        pa.field("channel", pa.int32(), nullable=False),
        pa.field("sequence", pa.int64(), nullable=False),
        pa.field("rows", pa.int64(), nullable=False),
        pa.field("payload", pa.binary(), nullable=False),
    ]
)
CHANNEL_STATE_SCHEMA: Final = pa.schema(_PARTITION_FIELDS + list(CHANNEL_STATE_FILE_SCHEMA))

_TS = pa.timestamp("us", tz="UTC")
CHECKPOINTS_SCHEMA: Final = pa.schema(
    [
        pa.field("job_id", pa.string(), nullable=False),
        pa.field("checkpoint_id", pa.int64(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("mode", pa.string(), nullable=False),
        pa.field("trigger_time", _TS, nullable=False),
        pa.field("completion_time", _TS, nullable=False),
        pa.field("duration_ms", pa.int64(), nullable=False),
        pa.field("max_alignment_ms", pa.int64(), nullable=False),
        pa.field("state_bytes", pa.int64(), nullable=False),
        pa.field("channel_state_bytes", pa.int64(), nullable=False),
        pa.field("parallelism", pa.map_(pa.string(), pa.int32())),
        pa.field("job_graph_fingerprint", pa.string()),
        pa.field("operator_uids", pa.list_(pa.string())),
        pa.field("num_subtask_handles", pa.int32(), nullable=False),
        pa.field("operator_state_files", pa.int32(), nullable=False),
        pa.field("channel_state_files", pa.int32(), nullable=False),
        # A table version at which this checkpoint's files are visible (time travel);
        # null when the checkpoint wrote no file to that table.
        pa.field("operator_state_version", pa.int64()),
        pa.field("channel_state_version", pa.int64()),
        pa.field("format_version", pa.int32(), nullable=False),
        pa.field("properties", pa.map_(pa.string(), pa.string())),
    ]
)


def as_enum(value: object, enum_type: type[E], what: str) -> E:
    """``value`` as a member of ``enum_type`` (a member, or its value); ValueError naming it and the valid ones."""
    try:
        return enum_type(value)
    except ValueError:
        valid = ", ".join(repr(member.value) for member in enum_type)
        raise ValueError(f"invalid {what} {value!r}; valid choices: {valid}") from None


def check_literal(value: object, literal: object, what: str) -> None:
    """Raise ValueError naming ``value`` and the valid choices unless it is one of ``literal``'s."""
    choices = get_args(literal)
    if value not in choices:
        raise ValueError(f"invalid {what} {value!r}; valid choices: {', '.join(map(repr, choices))}")


def truncated_repr(obj: object, limit: int = REPR_LIMIT) -> str:
    """``repr(obj)`` cut to ``limit`` characters (ending in ``...`` when cut); never raises."""
    try:
        text = repr(obj)
    except Exception as exc:  # a user __repr__ must not fail a checkpoint
        text = f"<unrepresentable {type(obj).__name__}: {type(exc).__name__}>"
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


#: One row per vertex of each decision of the autoscaler (``<checkpoint dir>/scaling_decisions``, docs/elastic.md).
SCALING_DECISIONS_SCHEMA: Final = pa.schema(
    [
        pa.field("job_id", pa.string(), nullable=False),
        pa.field("decision_id", pa.int64(), nullable=False),
        pa.field("decision_time", _TS, nullable=False),
        pa.field("vertex_id", pa.string(), nullable=False),
        pa.field("current_parallelism", pa.int32(), nullable=False),
        pa.field("new_parallelism", pa.int32(), nullable=False),
        pa.field("true_processing_rate", pa.float64()),  # null: the vertex was never busy
        pa.field("target_rate", pa.float64(), nullable=False),
        pa.field("catch_up_rate", pa.float64(), nullable=False),
        pa.field("busy_ratio", pa.float64(), nullable=False),
        pa.field("backlog", pa.float64(), nullable=False),
        pa.field("applied", pa.bool_(), nullable=False),  # false: job.autoscaler.scaling.enabled is off
        pa.field("reason", pa.string(), nullable=False),
    ]
)
