"""Network output of an operator: partitions batches into a ResultPartition.

Rows are converted to Arrow with the stream's schema, split by the channel
selector, and collected per channel; every full ``segment_size`` bytes go out
as one buffer, and the rest waits for more rows, a flush after
``buffer_timeout`` (``flush_deadline``), or an event; forced flushes cut
larger batches into segment-sized buffers. Events (watermarks,
end of partition) flush pending data first, so order is preserved.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pyarrow as pa

from flinklike_spark._runtime.network.events import EndOfData, Watermark, WatermarkStatus
from flinklike_spark._runtime.operators.rows import RowsConverter
from flinklike_spark._runtime.operators.stream_operator import Output
from flinklike_spark._runtime.record_timestamps import Timestamps, with_timestamps
from flinklike_spark.common.types import copy_record

__all__ = ["BroadcastingOutput", "ChainingOutput", "RecordWriterOutput"]


class RecordWriterOutput(Output):
    """Writes one operator's output to one result partition (one output edge)."""

    def __init__(
        self,
        partition,
        selector,
        converter: RowsConverter,
        *,
        segment_size: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.partition = partition
        self._selector = selector
        self._converter = converter
        self._segment_size = segment_size
        self._clock = clock
        n = partition.num_subpartitions
        self._pending: list[list[pa.RecordBatch]] = [[] for _ in range(n)]
        self._pending_bytes = [0.0] * n  # estimated
        self._oldest_pending: float | None = None
        self.records_out = 0
        self.bytes_out = 0  # Flink's numBytesOut (Arrow bytes of the emitted rows)

    def emit_rows(self, rows: list[dict], timestamps: Timestamps = None) -> None:
        if rows:
            self.emit_batch(with_timestamps(self._converter.to_batch(rows), timestamps))

    def emit_batch(self, batch: pa.RecordBatch) -> None:
        rows = batch.num_rows
        if not rows:
            return
        self.records_out += rows
        # Sizes are estimated from the batch's bytes per row: ``nbytes`` of every piece
        # and remainder would cost more than the rest of the bookkeeping together.
        nbytes = batch.nbytes
        self.bytes_out += nbytes
        row_bytes = nbytes / rows
        pending, sizes = self._pending, self._pending_bytes
        for channel, piece in self._selector.split(batch):
            pending[channel].append(piece)
            sizes[channel] += piece.num_rows * row_bytes
            if sizes[channel] >= self._segment_size:
                self._emit_full_buffers(channel)
            if pending[channel] and self._oldest_pending is None:
                self._oldest_pending = self._clock()

    def _take_pending(self, channel: int) -> tuple[pa.RecordBatch, float]:
        """The channel's pending rows as one batch, and their estimated bytes; clears them."""
        pieces, nbytes = self._pending[channel], self._pending_bytes[channel]
        self._pending[channel] = []
        self._pending_bytes[channel] = 0
        return (pieces[0] if len(pieces) == 1 else pa.concat_batches(pieces)), nbytes

    def _emit_full_buffers(self, channel: int) -> None:
        """Emit the channel's pending rows as full segment-sized buffers; keep the rest pending.

        Like Flink's record writer, a partly filled buffer waits for more rows
        (or a flush): cutting a 2,050-row piece into 2,048 + 2 rows would spend
        a whole buffer, credit and network message on 2 rows.
        """
        batch, nbytes = self._take_pending(channel)
        rows = batch.num_rows
        step = self._rows_per_buffer(rows, nbytes)
        full = rows - rows % step
        for offset in range(0, full, step):
            self.partition.emit(channel, batch.slice(offset, step))
        if full < rows:
            self._pending[channel].append(batch.slice(full))
            self._pending_bytes[channel] = nbytes * (rows - full) / rows

    def _rows_per_buffer(self, rows: int, nbytes: float) -> int:
        """Rows of one segment-sized buffer, for ``rows`` rows of ``nbytes`` bytes (> 0)."""
        return max(1, int(rows * self._segment_size // nbytes))

    def _flush_channel(self, channel: int) -> None:
        if not self._pending[channel]:
            return
        batch, nbytes = self._take_pending(channel)
        rows = batch.num_rows
        if nbytes <= self._segment_size or rows <= 1:
            self.partition.emit(channel, batch)
            return
        # Oversized (wide rows or a big vectorized batch): cut into segment-sized buffers,
        # so a buffer's size, and with it the memory behind each credit, stays bounded.
        step = self._rows_per_buffer(rows, nbytes)
        for offset in range(0, rows, step):
            self.partition.emit(channel, batch.slice(offset, step))

    def flush(self) -> None:
        for channel in range(len(self._pending)):
            self._flush_channel(channel)
        self._oldest_pending = None

    def flush_deadline(self, buffer_timeout: float) -> float | None:
        """Monotonic time when pending data must be flushed, or None if nothing is pending."""
        return None if self._oldest_pending is None else self._oldest_pending + buffer_timeout

    def emit_watermark(self, timestamp: int) -> None:
        self.flush()
        self.partition.broadcast_event(Watermark(timestamp))

    def emit_watermark_status(self, idle: bool) -> None:
        self.flush()
        self.partition.broadcast_event(WatermarkStatus(idle))

    def end_data(self) -> None:
        """Flush and tell every consumer that no record or watermark follows (EndOfData)."""
        self.flush()
        self.partition.broadcast_event(EndOfData())

    def finish(self) -> None:
        """Flush and end every subpartition (EndOfPartition)."""
        self.flush()
        self.partition.finish()


class ChainingOutput(Output):
    """Hands output to the next operator of the chain on the same thread."""

    def __init__(self, operator) -> None:
        self._operator = operator

    def emit_rows(self, rows: list[dict], timestamps: Timestamps = None) -> None:
        if rows:
            self._operator.process_rows(rows, timestamps)

    def emit_batch(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows:
            self._operator.process_batch(batch)

    def emit_watermark(self, timestamp: int) -> None:
        self._operator.process_watermark(timestamp)

    def emit_watermark_status(self, idle: bool) -> None:
        self._operator.process_watermark_status(idle)


class BroadcastingOutput(Output):
    """Fans one operator's output out to several outputs (chained and network)."""

    def __init__(self, outputs: list[Output]) -> None:
        self._outputs = outputs

    def emit_rows(self, rows: list[dict], timestamps: Timestamps = None) -> None:
        for output in self._outputs:
            # Downstream operators may keep the records; each output gets its own copies only when
            # there is more than one consumer that could mutate them (records may be any object).
            output.emit_rows(rows if len(self._outputs) == 1 else [copy_record(r) for r in rows], timestamps)

    def emit_batch(self, batch: pa.RecordBatch) -> None:
        for output in self._outputs:
            output.emit_batch(batch)

    def emit_watermark(self, timestamp: int) -> None:
        for output in self._outputs:
            output.emit_watermark(timestamp)

    def emit_watermark_status(self, idle: bool) -> None:
        for output in self._outputs:
            output.emit_watermark_status(idle)


class _DiscardingOutput(Output):
    def emit_rows(self, rows: list[dict], timestamps: Timestamps = None) -> None:
        pass

    def emit_batch(self, batch: pa.RecordBatch) -> None:
        pass

    def emit_watermark(self, timestamp: int) -> None:
        pass


DISCARDING_OUTPUT = _DiscardingOutput()
