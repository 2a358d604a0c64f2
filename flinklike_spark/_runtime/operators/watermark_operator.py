"""``assign_timestamps_and_watermarks`` on a stream: Flink's ``TimestampsAndWatermarksOperator``.

The operator replaces each record's event timestamp with the new strategy's
(a ``TimestampAssigner`` gets the previous one as ``record_timestamp``),
derives watermarks from the rows passing through (after every batch, when
the watermark advanced) and, as in Flink, swallows the watermarks of its
input except the final ``MAX_WATERMARK`` that ends a bounded input. With
``with_idleness`` its output is marked idle after the timeout without records
(checked on a processing-time wake-up) and active again with the next record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from flinklike_spark._runtime.operators.idleness import IdlenessTracker
from flinklike_spark._runtime.operators.stream_operator import StreamOperator
from flinklike_spark._runtime.record_timestamps import split_timestamps, with_timestamps
from flinklike_spark.common.watermark_strategy import MAX_WATERMARK, MIN_WATERMARK

__all__ = ["TimestampsAndWatermarksOperator"]

if TYPE_CHECKING:  # pragma: no cover
    from flinklike_spark._runtime.operators.operator_spec import OperatorSpec


class TimestampsAndWatermarksOperator(StreamOperator):
    vectorized = True

    def __init__(self, spec: OperatorSpec) -> None:
        super().__init__(spec)
        self._generator = spec.function.create_generator()
        # The operator whose records arrive here, named when the assigner's column is missing.
        self._producer = f"operator {spec.input_name!r}" if spec.input_name else None
        self._last = MIN_WATERMARK
        self._idleness: IdlenessTracker | None = None

    def open(self) -> None:
        timeout = self.spec.function.idle_timeout
        if timeout is not None:
            self._idleness = IdlenessTracker(timeout, self.output.emit_watermark_status, now_ms=self.context.clock_ms())

    def next_processing_timer(self) -> int | None:
        return self._idleness.next_check_ms() if self._idleness is not None else None

    def on_processing_time(self, now_ms: int) -> None:
        if self._idleness is not None:
            self._idleness.check(now_ms)

    def finish(self) -> None:
        if self._idleness is not None:
            self._idleness.end()

    def process_batch(self, batch: pa.RecordBatch) -> None:
        if self._idleness is not None:
            self._idleness.on_records(self.context.clock_ms())
        batch, previous = split_timestamps(batch)
        stamps = self._generator.assign(batch, previous, producer=self._producer)
        self.output.emit_batch(with_timestamps(batch, stamps))
        watermark = self._generator.current_watermark()
        if watermark > self._last and not self.context.batch_execution:  # batch: only the final one
            self._last = watermark
            self.output.emit_watermark(watermark)

    def process_watermark(self, timestamp: int) -> None:
        if timestamp == MAX_WATERMARK:
            if self._idleness is not None:
                self._idleness.end()  # an idle channel's watermark would be ignored downstream
            self.output.emit_watermark(timestamp)
