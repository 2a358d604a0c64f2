"""NumberSequenceSource: the numbers ``start..end`` (inclusive) as rows ``{"value": n}``, in parallel.

PyFlink's ``NumberSequenceSource(start, end)``: the range is cut into one
split per subtask; a split's position is its next number, so a checkpoint
resumes exactly after the last number returned. Numbers are generated
vectorized, up to the task's batch size per poll.
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa

from flinklike_spark.connector_api import ReadResult, Source, SourceReader, SourceReaderContext, SourceSplit
from flinklike_spark.errors import ConfigurationError

__all__ = ["NumberSequenceSource", "NumberSequenceSplit"]

_SCHEMA = pa.schema([("value", pa.int64())])


@dataclasses.dataclass(frozen=True, kw_only=True)
class NumberSequenceSplit(SourceSplit):
    """The numbers ``next_number..last`` (inclusive) still to be read."""

    next_number: int
    last: int


class NumberSequenceSource(Source):
    def __init__(self, start: int, end: int) -> None:
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end)) or start > end:
            raise ConfigurationError(f"NumberSequenceSource needs ints start <= end, got {start!r}, {end!r}")
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"NumberSequenceSource({self.start}, {self.end})"

    def output_schema(self) -> pa.Schema:
        return _SCHEMA

    def create_splits(self, parallelism: int) -> list[NumberSequenceSplit]:
        total = self.end - self.start + 1
        splits = []
        for i in range(min(parallelism, total)):
            first = self.start + total * i // parallelism
            last = self.start + total * (i + 1) // parallelism - 1
            splits.append(NumberSequenceSplit(split_id=f"numbers-{i}", next_number=first, last=last))
        return splits

    def create_reader(self, context: SourceReaderContext) -> NumberSequenceReader:
        return NumberSequenceReader()


class NumberSequenceReader(SourceReader):
    def __init__(self) -> None:
        self._splits: list[NumberSequenceSplit] = []

    def add_splits(self, splits: list[SourceSplit]) -> None:
        for split in splits:
            if not isinstance(split, NumberSequenceSplit):
                raise ConfigurationError(f"NumberSequenceReader reads NumberSequenceSplit, got {type(split).__name__}")
            self._splits.append(split)

    def poll_next(self, max_rows: int) -> ReadResult:
        for index, split in enumerate(self._splits):
            if split.next_number <= split.last:
                stop = min(split.last + 1, split.next_number + max_rows)
                batch = pa.RecordBatch.from_arrays(
                    [pa.array(range(split.next_number, stop), pa.int64())], schema=_SCHEMA
                )
                self._splits[index] = dataclasses.replace(split, next_number=stop)
                return ReadResult(batch=batch)
        return ReadResult(end_of_input=True)

    def snapshot_state(self, checkpoint_id: int) -> list[NumberSequenceSplit]:
        return list(self._splits)
