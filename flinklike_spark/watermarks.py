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
from collections.abc import Callable
from datetime import timedelta

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["TimestampAssigner", "TimestampAssignerLike", "WatermarkGenerator", "WatermarkStrategy"]

MIN_WATERMARK = -(2**63)



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
class WatermarkStrategy:
    """How a source derives event timestamps and watermarks.

    Attributes:
        out_of_orderness: how late a record may be relative to the max seen.
        timestamp_assigner: column name or ``row -> epoch ms``; None = no event time.
        monotonous: ``for_monotonous_timestamps`` (out_of_orderness 0).
    """

    out_of_orderness: timedelta = timedelta(0)
    timestamp_assigner: TimestampAssignerLike | None = None

    def __post_init__(self) -> None:
        if self.out_of_orderness < timedelta(0):
            raise ValueError(f"out_of_orderness must not be negative, got {self.out_of_orderness}")

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
        return WatermarkStrategy()

    def with_timestamp_assigner(self, assigner: TimestampAssignerLike) -> WatermarkStrategy:
        return dataclasses.replace(self, timestamp_assigner=assigner)

    def create_generator(self) -> WatermarkGenerator:
        return WatermarkGenerator(self)


class WatermarkGenerator:
    """Tracks the max timestamp seen by one source subtask and derives watermarks."""

    def __init__(self, strategy: WatermarkStrategy) -> None:
        assigner = strategy.timestamp_assigner
        if isinstance(assigner, TimestampAssigner):
            extract = assigner.extract_timestamp
            assigner = lambda row: extract(row, MIN_WATERMARK)  # noqa: E731 - picklable enough: built in the TE
        self._assigner = assigner
        self._delay_ms = int(strategy.out_of_orderness.total_seconds() * 1000)
        self._max_ts = MIN_WATERMARK + self._delay_ms + 1

    @property
    def enabled(self) -> bool:
        return self._assigner is not None

    def on_batch(self, batch: pa.RecordBatch) -> None:
        if self._assigner is None or batch.num_rows == 0:
            return
        if isinstance(self._assigner, str):
            column = batch.column(batch.schema.get_field_index(self._assigner))
            if pa.types.is_timestamp(column.type):
                column = column.cast(pa.timestamp("ms")).cast(pa.int64())
            batch_max = pc.max(column).as_py()
        else:
            batch_max = max(self._assigner(row) for row in batch.to_pylist())
        if batch_max is not None and batch_max > self._max_ts:
            self._max_ts = batch_max

    def current_watermark(self) -> int:
        return self._max_ts - self._delay_ms - 1

    def timestamp_of(self, row: dict) -> int | None:
        if self._assigner is None:
            return None
        if isinstance(self._assigner, str):
            return row.get(self._assigner)
        return self._assigner(row)
