"""Per-split watermarks of one source subtask (Flink's ``WatermarkOutputMultiplexer`` behind ``ReaderOutput``).

A reader that reports its splits (``SourceReader.current_split_ids``) and tags
each batch with its split gets one :class:`WatermarkGenerator` per split. The
subtask's watermark is the minimum over the splits that are neither idle nor
finished: a split that has produced nothing yet holds it at its minimum, so a
Kafka partition that lags behind never makes the other partitions' records
late. With ``with_idleness(t)`` a split without records for ``t`` is left out
until it has records again; a split that finished is left out for good.
"""

from __future__ import annotations

from collections.abc import Collection

import pyarrow as pa

from flinklike_spark.watermarks import MIN_WATERMARK, WatermarkGenerator, WatermarkStrategy

__all__ = ["SplitWatermarks"]


class _Split:
    __slots__ = ("generator", "last_records_ms")

    def __init__(self, generator: WatermarkGenerator, now_ms: int) -> None:
        self.generator = generator
        self.last_records_ms = now_ms


class SplitWatermarks:
    """One generator per split; :meth:`combined` is the subtask's watermark. Used by one thread."""

    def __init__(self, strategy: WatermarkStrategy) -> None:
        self._strategy = strategy
        self._idle_ms = None if strategy.idle_timeout is None else int(strategy.idle_timeout.total_seconds() * 1000)
        self._splits: dict[str, _Split] = {}

    def update_splits(self, split_ids: Collection[str], now_ms: int) -> None:
        """The reader's current splits: new ones start (at the minimum), finished ones are released."""
        for split_id in split_ids:
            if split_id not in self._splits:
                self._splits[split_id] = _Split(self._strategy.create_generator(), now_ms)
        for split_id in [s for s in self._splits if s not in split_ids]:
            del self._splits[split_id]

    def assign(
        self, split_id: str, batch: pa.RecordBatch, source_timestamps: pa.Array | None, now_ms: int
    ) -> pa.Array | list | None:
        """The event timestamps of ``batch`` (rows of ``split_id``), tracked by that split's generator.

        With a timestamp assigner its result (given the source's timestamps as
        ``record_timestamp``); without one, the source's own timestamps.
        """
        split = self._splits.get(split_id)
        if split is None:  # rows of a split the reader did not report: track it from now on
            split = self._splits[split_id] = _Split(self._strategy.create_generator(), now_ms)
        split.last_records_ms = now_ms
        generator = split.generator
        if generator.enabled:
            previous = None if source_timestamps is None else source_timestamps.to_pylist()
            return generator.assign(batch, previous)
        if source_timestamps is not None:
            generator.observe(source_timestamps)
        return source_timestamps

    def combined(self, now_ms: int) -> int | None:
        """The minimum watermark over active splits; None when every split is idle or there is none."""
        active = [
            split.generator.current_watermark()
            for split in self._splits.values()
            if self._idle_ms is None or now_ms - split.last_records_ms < self._idle_ms
        ]
        if not active:
            return None
        return max(min(active), MIN_WATERMARK)
