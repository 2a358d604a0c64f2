"""An operator Output that keeps what it is given, for tests that drive operators directly."""

from __future__ import annotations

from flinklike_spark._runtime.operators.stream_operator import Output
from flinklike_spark._runtime.record_timestamps import split_timestamps

__all__ = ["ListOutput"]


class ListOutput(Output):
    """Collects emitted rows (with their timestamps) and watermarks."""

    def __init__(self) -> None:
        self.rows: list = []
        self.timestamps: list = []
        self.watermarks: list[int] = []

    def emit_rows(self, rows, timestamps=None):
        self.rows.extend(rows)
        self.timestamps.extend(timestamps or [None] * len(rows))

    def emit_batch(self, batch):
        batch, timestamps = split_timestamps(batch)
        self.emit_rows(batch.to_pylist(), timestamps)

    def emit_watermark(self, timestamp):
        self.watermarks.append(timestamp)
