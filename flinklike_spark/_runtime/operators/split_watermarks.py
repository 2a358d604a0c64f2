"""Per-split watermarks of one source subtask (Flink's ``WatermarkOutputMultiplexer`` behind ``ReaderOutput``).

A reader that reports its splits (``SourceReader.current_split_ids``) and tags
each batch with its split gets one :class:`WatermarkGenerator` per split. The
subtask's watermark is the minimum over the splits that are neither idle nor
finished: a split that has produced nothing yet holds it at its minimum, so a
Kafka partition that lags behind never makes the other partitions' records
late. With ``with_idleness(t)`` a split without records for ``t`` is left out
until it has records again (when every split is idle, the watermark is theirs that
went idle last, as a continuous check would have left it); a split that
finished is left out for good.
"""

from __future__ import annotations

from collections.abc import Collection

import pyarrow as pa

from flinklike_spark.common.watermark_strategy import MIN_WATERMARK, WatermarkGenerator, WatermarkStrategy

__all__ = ["SplitWatermarks"]


class _Split:
    __slots__ = ("generator", "had_records", "last_records_ms")

    def __init__(self, generator: WatermarkGenerator, now_ms: int) -> None:
        self.generator = generator
        self.last_records_ms = now_ms  # its idle time counts from its start until it has records
        self.had_records = False

    def went_idle_order(self) -> tuple[int, bool]:
        """Later is larger; of two splits idle since the same moment, the one with records went idle last."""
        return self.last_records_ms, self.had_records


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
        split.had_records = True
        generator = split.generator
        if generator.enabled:
            previous = None if source_timestamps is None else source_timestamps.to_pylist()
            return generator.assign(batch, previous)
        if source_timestamps is not None:
            generator.observe(source_timestamps)
        return source_timestamps

    def watermarks(self) -> dict[str, int]:
        """Each split's own watermark (watermark alignment pauses the splits that are ahead)."""
        return {split_id: split.generator.current_watermark() for split_id, split in self._splits.items()}

    def combined(self, now_ms: int) -> int | None:
        """The minimum watermark over the active splits; None when there is no split.

        When every split is idle it is the minimum over the splits that went idle
        last: the watermark a continuous evaluation would have reached at the
        moment only they were active. A poll that comes late (a busy machine)
        must not skip that moment, or the event time would stall for as long as
        the splits stay idle, where Flink's periodic check advances it.
        """
        splits = list(self._splits.values())
        if not splits:
            return None
        if self._idle_ms is not None:
            active = [split for split in splits if now_ms - split.last_records_ms < self._idle_ms]
            if not active:  # every split is idle: the ones that went idle last
                last = max(split.went_idle_order() for split in splits)
                active = [split for split in splits if split.went_idle_order() == last]
            splits = active
        return max(min(split.generator.current_watermark() for split in splits), MIN_WATERMARK)
