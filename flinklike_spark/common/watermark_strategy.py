"""Event time: timestamp assigners and watermark strategies (PyFlink style).

``WatermarkStrategy.for_bounded_out_of_orderness(timedelta(seconds=5))
.with_timestamp_assigner("ts")`` makes a source emit, after every batch and at
most every ``pipeline.auto-watermark-interval``, the watermark
``max_timestamp_seen - out_of_orderness - 1`` (Flink's
BoundedOutOfOrdernessWatermarks). Timestamps are epoch milliseconds. The
assigner is a column name (vectorized) or a function ``row dict -> int``.
"""

from __future__ import annotations

import abc
import dataclasses
import datetime
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from flinklike_spark.common.types import pickled_field_values, plain_values_cause, records_of
from flinklike_spark.errors import ConfigurationError

__all__ = [
    "TimestampAssigner",
    "TimestampAssignerLike",
    "WatermarkAlignment",
    "WatermarkGenerator",
    "WatermarkStrategy",
    "epoch_millis",
]

#: The lowest and highest watermarks (Flink's ``Long.MIN_VALUE`` and ``Long.MAX_VALUE``): the highest ends event
#: time (end of input), or, as a bound, means none.
MIN_WATERMARK = -(2**63)
MAX_WATERMARK = 2**63 - 1


def epoch_millis(value: Any) -> int | None:
    """An event timestamp as epoch ms: ints as they are, datetimes (naive = UTC, as Arrow stores them)."""
    if value is None or type(value) is int:
        return value
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return int(value.timestamp() * 1000)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    raise ConfigurationError(f"an event timestamp must be epoch milliseconds or a datetime, got {value!r}")


class TimestampAssigner(abc.ABC):
    """PyFlink's ``TimestampAssigner``: ``extract_timestamp(value, record_timestamp)`` -> epoch ms.

    ``record_timestamp`` is the record's previous timestamp, or ``MIN_WATERMARK``
    (Flink's ``Long.MIN_VALUE``, "no timestamp") when it has none.
    """

    @abc.abstractmethod
    def extract_timestamp(self, value: dict, record_timestamp: int) -> int: ...


#: A column name (vectorized), a function ``row -> epoch ms``, or a TimestampAssigner.
TimestampAssignerLike = str | Callable[[dict], int] | TimestampAssigner


@dataclasses.dataclass(frozen=True, kw_only=True)
class WatermarkAlignment:
    """``with_watermark_alignment``: the sources of one group keep their watermarks within a drift (FLIP-182/217).

    Every ``update_interval`` each source subtask reports its watermark to the
    JobMaster and hears back the group's lowest watermark plus
    ``max_allowed_watermark_drift``; a split (or, for a reader that cannot
    pause splits, the whole subtask) whose watermark is beyond that stops
    reading until the group catches up.
    """

    watermark_group: str
    max_allowed_watermark_drift: timedelta
    update_interval: timedelta = timedelta(seconds=1)

    def __post_init__(self) -> None:
        if not isinstance(self.watermark_group, str) or not self.watermark_group:
            raise ConfigurationError(
                f"with_watermark_alignment: watermark_group must be a non-empty string, got {self.watermark_group!r}"
            )
        drift, interval = self.max_allowed_watermark_drift, self.update_interval
        if not isinstance(drift, timedelta) or drift < timedelta(0):
            raise ConfigurationError(
                f"with_watermark_alignment: max_allowed_watermark_drift must be a datetime.timedelta/Duration of "
                f"zero or more, got {drift!r}"
            )
        if not isinstance(interval, timedelta) or interval <= timedelta(0):
            raise ConfigurationError(
                f"with_watermark_alignment: update_interval must be a positive datetime.timedelta/Duration, "
                f"got {interval!r}"
            )

    @property
    def max_drift_ms(self) -> int:
        return int(self.max_allowed_watermark_drift.total_seconds() * 1000)


@dataclasses.dataclass(frozen=True, kw_only=True)
class WatermarkStrategy:
    """How a source derives event timestamps and watermarks.

    Attributes:
        out_of_orderness: how late a record may be relative to the max seen.
        timestamp_assigner: column name or ``row -> epoch ms``; None = no event time.
        idle_timeout: ``with_idleness``: after this long without records a source subtask is idle.
        emit_watermarks: False for ``no_watermarks()``. A source whose records
            carry their own timestamps (Kafka) derives watermarks from them
            unless this is False, also without a timestamp assigner.
        alignment: ``with_watermark_alignment``: the source's group and drift (None: not aligned).
    """

    out_of_orderness: timedelta = timedelta(0)
    timestamp_assigner: TimestampAssignerLike | None = None
    idle_timeout: timedelta | None = None
    emit_watermarks: bool = True
    alignment: WatermarkAlignment | None = None

    def __post_init__(self) -> None:
        if self.out_of_orderness < timedelta(0):
            raise ValueError(f"out_of_orderness must not be negative, got {self.out_of_orderness}")
        if self.idle_timeout is not None and (
            not isinstance(self.idle_timeout, timedelta) or self.idle_timeout <= timedelta(0)
        ):
            raise ValueError(f"idle timeout must be a positive datetime.timedelta/Duration, got {self.idle_timeout!r}")

    @staticmethod
    def for_bounded_out_of_orderness(max_out_of_orderness: timedelta) -> WatermarkStrategy:
        if not isinstance(max_out_of_orderness, timedelta):
            raise TypeError(f"max_out_of_orderness must be a datetime.timedelta, got {max_out_of_orderness!r}")
        return WatermarkStrategy(out_of_orderness=max_out_of_orderness)

    @staticmethod
    def for_monotonous_timestamps() -> WatermarkStrategy:
        return WatermarkStrategy()

    @staticmethod
    def no_watermarks() -> WatermarkStrategy:
        return WatermarkStrategy(emit_watermarks=False)

    def with_timestamp_assigner(self, assigner: TimestampAssignerLike) -> WatermarkStrategy:
        return dataclasses.replace(self, timestamp_assigner=assigner)

    def with_idleness(self, idle_timeout: timedelta) -> WatermarkStrategy:
        """A source subtask that reads no record for ``idle_timeout`` (processing time) is marked idle:
        downstream leaves it out of the combined watermark until it reads records again (Flink's
        ``WatermarkStatus``). Applies where the strategy is a source's."""
        return dataclasses.replace(self, idle_timeout=idle_timeout)

    def with_watermark_alignment(
        self,
        watermark_group: str,
        max_allowed_watermark_drift: timedelta,
        update_interval: timedelta | None = None,
    ) -> WatermarkStrategy:
        """Keep this source's watermark within ``max_allowed_watermark_drift`` of its group's lowest (FLIP-182).

        Every source with the same ``watermark_group`` (across sources and
        subtasks) reports its watermark every ``update_interval`` (default 1 s);
        a split or subtask that runs ahead of the group's lowest watermark by
        more than the drift pauses until the group catches up, so that a fast
        partition does not fill the state of joins and windows with records the
        slow ones are far from matching. Alignment is best effort, as in Flink:
        between two updates a subtask may read a little beyond the bound.
        Split-level pausing (FLIP-217) needs a reader that implements
        ``SourceReader.pause_or_resume_splits`` (Kafka's does); other readers
        pause as a whole.
        """
        alignment = WatermarkAlignment(
            watermark_group=watermark_group,
            max_allowed_watermark_drift=max_allowed_watermark_drift,
            update_interval=timedelta(seconds=1) if update_interval is None else update_interval,
        )
        return dataclasses.replace(self, alignment=alignment)

    def create_generator(self) -> WatermarkGenerator:
        return WatermarkGenerator(self)


class WatermarkGenerator:
    """Assigns event timestamps to one subtask's records and derives watermarks from them.

    :meth:`assign` gives a batch's timestamps (they travel with the records as a
    reserved column, see ``_runtime/record_timestamps.py``) and tracks the
    maximum; :meth:`current_watermark` is ``max - out_of_orderness - 1``.
    """

    def __init__(self, strategy: WatermarkStrategy) -> None:
        self._assigner = strategy.timestamp_assigner
        self._delay_ms = int(strategy.out_of_orderness.total_seconds() * 1000)
        self._max_ts = MIN_WATERMARK + self._delay_ms + 1

    @property
    def enabled(self) -> bool:
        return self._assigner is not None

    def assign(
        self, batch: pa.RecordBatch, previous: list | None = None, *, producer: str | None = None
    ) -> pa.Array | list | None:
        """The event timestamps (epoch ms) of ``batch``'s records, which has no timestamp column.

        ``previous`` are the records' timestamps so far (a TimestampAssigner's
        ``record_timestamp``; ``MIN_WATERMARK`` where a record had none).
        None if the strategy has no assigner. ``producer`` (the operator that
        emitted the batch) is named when the assigner's column is missing.

        Raises:
            KeyError: the assigner is a column name the batch does not have.
        """
        assigner = self._assigner
        if assigner is None:
            return None
        if batch.num_rows == 0:
            return []
        pickled = pickled_field_values(batch, assigner) if isinstance(assigner, str) else None
        if pickled is not None:  # an undeclared stream of named Rows (pickled): the field of each record
            timestamps = [epoch_millis(value) for value in pickled]
            batch_max = max((t for t in timestamps if t is not None), default=None)
        elif isinstance(assigner, str):
            index = batch.schema.get_field_index(assigner)
            if index < 0:
                cause = plain_values_cause(batch, assigner, producer)
                raise KeyError(
                    f"timestamp assigner {assigner!r}: "
                    + (cause or f"the stream has no field {assigner!r}")
                    + f"; its fields are {batch.schema.names}"
                )
            column = batch.column(index)
            if pa.types.is_timestamp(column.type):
                column = column.cast(pa.timestamp("ms")).cast(pa.int64())
            elif not pa.types.is_int64(column.type):
                column = column.cast(pa.int64())
            batch_max = pc.max(column).as_py()
            timestamps: pa.Array | list = column
        else:
            rows = records_of(batch)
            if isinstance(assigner, TimestampAssigner):
                extract = assigner.extract_timestamp
                before = previous or [None] * len(rows)
                timestamps = [
                    epoch_millis(extract(row, MIN_WATERMARK if ts is None else ts))
                    for row, ts in zip(rows, before, strict=True)
                ]
            else:
                timestamps = [epoch_millis(assigner(row)) for row in rows]
            batch_max = max((t for t in timestamps if t is not None), default=None)
        if batch_max is not None and batch_max > self._max_ts:
            self._max_ts = batch_max
        return timestamps

    def observe(self, timestamps: pa.Array) -> None:
        """Track the maximum of timestamps assigned elsewhere (a source's own record timestamps)."""
        if len(timestamps):
            batch_max = pc.max(timestamps).as_py()
            if batch_max is not None and batch_max > self._max_ts:
                self._max_ts = batch_max

    def current_watermark(self) -> int:
        return self._max_ts - self._delay_ms - 1
