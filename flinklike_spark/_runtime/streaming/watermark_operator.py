"""``assign_timestamps_and_watermarks`` on a stream: Flink's ``TimestampsAndWatermarksOperator``.

The operator replaces each record's event timestamp with the new strategy's
(a ``TimestampAssigner`` gets the previous one as ``record_timestamp``),
derives watermarks from the rows passing through (after every batch, when
the watermark advanced) and, as in Flink, swallows the watermarks of its
input except the final ``MAX_WATERMARK`` that ends a bounded input.
"""

from __future__ import annotations

import pyarrow as pa

from flinklike_spark.watermarks import MIN_WATERMARK
from flinklike_spark._runtime.streaming.operators import MAX_WATERMARK, OperatorSpec, StreamOperator
from flinklike_spark._runtime.streaming.record_timestamps import split_timestamps, with_timestamps

__all__ = ["TimestampsAndWatermarksOperator"]


class TimestampsAndWatermarksOperator(StreamOperator):
    vectorized = True

    def __init__(self, spec: OperatorSpec) -> None:
        super().__init__(spec)
        self._generator = spec.function.create_generator()
        self._last = MIN_WATERMARK

    def process_batch(self, batch: pa.RecordBatch) -> None:
        batch, previous = split_timestamps(batch)
        self.output.emit_batch(with_timestamps(batch, self._generator.assign(batch, previous)))
        watermark = self._generator.current_watermark()
        if watermark > self._last:
            self._last = watermark
            self.output.emit_watermark(watermark)

    def process_watermark(self, timestamp: int) -> None:
        if timestamp == MAX_WATERMARK:
            self.output.emit_watermark(timestamp)
