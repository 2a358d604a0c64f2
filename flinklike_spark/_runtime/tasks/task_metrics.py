"""The counters of a running task (records and bytes in and out, busy, idle and backpressured time)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pyarrow as pa

from flinklike_spark.metrics import MetricRegistry

__all__ = ["TaskMetrics"]


class TaskMetrics:
    """Counters the task thread updates and the TaskExecutor reads (racy reads are fine).

    ``records_out`` counts what the chain emits: the rows its network outputs
    and its sinks took (``count_out`` adds them up when asked).
    """

    def __init__(
        self,
        count_out: Callable[[], int] = lambda: 0,
        user: MetricRegistry | None = None,
        *,
        count_bytes_out: Callable[[], int] = lambda: 0,
        input_watermark: Callable[[], int] | None = None,
        pending_records: Callable[[], int | None] | None = None,
    ) -> None:
        self.records_in = 0
        self.bytes_in = 0  # network input only (Flink's numBytesIn), see count_input
        self._row_bytes = 0.0
        self._until_sample = 0
        self._user = user
        self._count_out = count_out
        self._count_bytes_out = count_bytes_out
        self._input_watermark = input_watermark
        self._pending_records = pending_records
        self.backpressured_seconds = 0.0
        self.idle_seconds = 0.0
        self.started = time.monotonic()

    @property
    def records_out(self) -> int:
        return self._count_out()

    def count_input(self, batch: pa.RecordBatch) -> None:
        """Count a buffer from the network: its rows, and its Arrow bytes.

        ``RecordBatch.nbytes`` costs ~20 us (more than the rest of a buffer's
        bookkeeping), so the bytes per row are measured on every 32nd buffer and
        the others are counted at that rate: exact for fixed-width rows, an
        estimate otherwise.
        """
        rows = batch.num_rows
        self.records_in += rows
        self._until_sample -= 1
        if self._until_sample <= 0:
            self._until_sample = 32
            self._row_bytes = batch.nbytes / rows if rows else 0.0
        self.bytes_in += int(rows * self._row_bytes)

    def snapshot(self) -> dict[str, float]:
        pending = self._pending_records() if self._pending_records is not None else None
        return {
            "records_in": self.records_in,
            "records_out": self.records_out,
            "bytes_in": self.bytes_in,
            "bytes_out": self._count_bytes_out(),
            **({"input_watermark": self._input_watermark()} if self._input_watermark is not None else {}),
            **({"pending_records": pending} if pending is not None else {}),
            "backpressured_seconds": self.backpressured_seconds,
            "idle_seconds": self.idle_seconds,
            "uptime_seconds": time.monotonic() - self.started,
            **(self._user.snapshot() if self._user is not None else {}),
        }
