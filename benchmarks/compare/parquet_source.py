"""flinklike-spark's source over the shared Parquet files (``inputs.py``): one split per file.

The harness's ``parquet`` variant reads the same files as Spark's file stream, so that the
two engines can be compared on one source. A bounded source; split ``i`` (file ``i``, in order)
is read by subtask ``i % parallelism``; batches of ``batch_size`` rows with the columns
``key`` and ``seq`` (``ts`` is Spark's; the job derives event time from ``seq``, as with the generator).
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pyarrow.parquet as pq

from flinklike_spark.connector_api import ReadResult, Source, SourceReader, SourceReaderContext, SourceSplit

__all__ = ["ParquetFiles"]

_SCHEMA = pa.schema([("key", pa.int64()), ("seq", pa.int64())])


@dataclasses.dataclass(frozen=True, kw_only=True)
class ParquetSplit(SourceSplit):
    """One file; ``rows_read`` rows of it already returned."""

    path: str
    rows_read: int = 0


class ParquetFiles(Source):
    def __init__(self, paths: list[str], batch_size: int) -> None:
        self.paths = list(paths)
        self.batch_size = batch_size

    def output_schema(self) -> pa.Schema:
        return _SCHEMA

    def create_splits(self, parallelism: int) -> list[ParquetSplit]:
        return [ParquetSplit(split_id=f"file-{n:05d}", path=p) for n, p in enumerate(self.paths)]

    def create_reader(self, context: SourceReaderContext) -> SourceReader:
        return _Reader(self.batch_size)


class _Reader(SourceReader):
    def __init__(self, batch_size: int) -> None:
        self.batch_size = batch_size
        self.pending: list[ParquetSplit] = []
        self.current: ParquetSplit | None = None
        self.batches = None
        self.leftover: pa.RecordBatch | None = None

    def add_splits(self, splits: list[SourceSplit]) -> None:
        self.pending.extend(splits)

    def poll_next(self, max_rows: int) -> ReadResult:
        while True:
            if self.batches is None:
                if not self.pending:
                    return ReadResult(end_of_input=True)
                self.current = self.pending.pop(0)
                self.batches = self._open(self.current)
            batch, self.leftover = (
                (self.leftover, None) if self.leftover is not None else (next(self.batches, None), None)
            )
            if batch is not None:
                if batch.num_rows > max_rows:
                    batch, self.leftover = batch.slice(0, max_rows), batch.slice(max_rows)
                self.current = dataclasses.replace(self.current, rows_read=self.current.rows_read + batch.num_rows)
                return ReadResult(batch=batch)
            self.batches = self.current = None

    def _open(self, split: ParquetSplit):
        skip = split.rows_read
        for batch in pq.ParquetFile(split.path).iter_batches(batch_size=self.batch_size, columns=["key", "seq"]):
            if skip >= batch.num_rows:
                skip -= batch.num_rows
                continue
            yield pa.RecordBatch.from_arrays(batch.slice(skip).columns, schema=_SCHEMA)
            skip = 0

    def snapshot_state(self, checkpoint_id: int) -> list[SourceSplit]:
        return ([self.current] if self.current is not None else []) + list(self.pending)
