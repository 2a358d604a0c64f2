"""Event timestamps that travel with records, as Flink's ``StreamRecord`` timestamp does.

On the data plane a batch carries its records' timestamps in one reserved
trailing column, :data:`TIMESTAMP_COLUMN` (``int64`` epoch ms, null for a
record without a timestamp). A batch of a stream without event time has no
such column. Because the column is part of the batch, timestamps cross the
network, are written into unaligned checkpoints' channel state and are
replayed on restore with no extra machinery.

Inside an operator chain, rows travel as ``(rows, timestamps)``: a list of
dicts (exactly the user's fields; the reserved column is never shown to user
code) and a parallel list of ``int | None``, or ``None`` when no record has a
timestamp. Operators give their outputs the timestamp Flink would: a
one-input function's output the input's timestamp, an event-time timer's
output the timer's timestamp, a window's output ``window.max_timestamp()``.
Sinks write the batch without the column.
"""

from __future__ import annotations

import pyarrow as pa

from flinklike_spark.common.watermark_strategy import epoch_millis
from flinklike_spark.errors import ConfigurationError

__all__ = [
    "TIMESTAMP_COLUMN",
    "Timestamps",
    "epoch_millis",
    "split_timestamps",
    "strip_timestamps",
    "with_timestamps",
]

#: The reserved column of a batch holding its records' event timestamps.
TIMESTAMP_COLUMN = "__flinklike_timestamp"

#: A parallel list of event timestamps (epoch ms, None: no timestamp), or None: none has one.
Timestamps = list | None

_TIMESTAMP_FIELD = pa.field(TIMESTAMP_COLUMN, pa.int64())


def split_timestamps(batch: pa.RecordBatch) -> tuple[pa.RecordBatch, Timestamps]:
    """``batch`` without the timestamp column, and its timestamps (None if it has no such column)."""
    schema = batch.schema
    if not schema.names or schema.names[-1] != TIMESTAMP_COLUMN:
        return batch, None
    index = len(schema.names) - 1
    return batch.remove_column(index), batch.column(index).to_pylist()


def strip_timestamps(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` without the timestamp column (what sinks and user batch functions see)."""
    names = batch.schema.names
    return batch.remove_column(len(names) - 1) if names and names[-1] == TIMESTAMP_COLUMN else batch


def with_timestamps(batch: pa.RecordBatch, timestamps: Timestamps | pa.Array) -> pa.RecordBatch:
    """``batch`` (without a timestamp column) with ``timestamps`` as its trailing timestamp column.

    A list of only Nones, or None, adds no column: such records have no timestamp.
    """
    if timestamps is None:
        return batch
    if isinstance(timestamps, list):
        if all(t is None for t in timestamps):
            return batch
        timestamps = pa.array(timestamps, type=pa.int64())
    if TIMESTAMP_COLUMN in batch.schema.names:
        raise ConfigurationError(
            f"the field name {TIMESTAMP_COLUMN!r} is reserved for event timestamps; rename the field"
        )
    return batch.append_column(_TIMESTAMP_FIELD, timestamps)
