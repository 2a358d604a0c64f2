"""CollectionSource: a bounded source of in-memory rows (``env.from_collection``).

The rows are read in order by one subtask (as Flink's ``fromCollection``, a
non-parallel source), ``batch_size`` rows per poll; the position is the index
of the next row, so a checkpoint resumes exactly after the last row returned.
With ``batch_size=1`` the source emits a watermark after every row, which
makes event-time tests with out-of-order and late rows deterministic.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import pyarrow as pa

from flinklike_spark.connector_api import ReadResult, Source, SourceReader, SourceReaderContext, SourceSplit
from flinklike_spark.errors import ConfigurationError

__all__ = ["CollectionReader", "CollectionSource", "CollectionSplit"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class CollectionSplit(SourceSplit):
    """The whole collection, positioned at row ``next_row``."""

    next_row: int = 0


class CollectionSource(Source):
    """Rows (dicts) from a Python collection.

    Args:
        rows: the rows; all must have the same fields.
        schema: their Arrow schema (None: inferred from the rows).
        batch_size: rows per poll (None: as many as the task asks for).
    """

    def __init__(self, rows: Iterable[dict], *, schema: pa.Schema | None = None, batch_size: int | None = None) -> None:
        self.rows = [dict(row) for row in rows]
        if not self.rows and schema is None:
            raise ConfigurationError("from_collection of no rows needs a schema (type_info)")
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise ConfigurationError(f"batch_size must be a positive int or None, got {batch_size!r}")
        self.schema = schema if schema is not None else pa.RecordBatch.from_pylist(self.rows).schema
        self.batch_size = batch_size

    def __repr__(self) -> str:
        return f"CollectionSource({len(self.rows)} rows)"

    def output_schema(self) -> pa.Schema:
        return self.schema

    def create_splits(self, parallelism: int) -> list[CollectionSplit]:
        return [CollectionSplit(split_id="collection")]

    def create_reader(self, context: SourceReaderContext) -> CollectionReader:
        return CollectionReader(self)


class CollectionReader(SourceReader):
    def __init__(self, source: CollectionSource) -> None:
        self._source = source
        self._splits: list[CollectionSplit] = []
        self._next = 0

    def add_splits(self, splits: list[SourceSplit]) -> None:
        for split in splits:
            if not isinstance(split, CollectionSplit):
                raise ConfigurationError(f"CollectionReader reads CollectionSplit, got {type(split).__name__}")
            self._splits.append(split)
            self._next = split.next_row

    def poll_next(self, max_rows: int) -> ReadResult:
        rows = self._source.rows
        if not self._splits or self._next >= len(rows):
            return ReadResult(end_of_input=True)
        size = min(max_rows, self._source.batch_size or max_rows)
        piece = rows[self._next : self._next + size]
        self._next += len(piece)
        return ReadResult(batch=pa.RecordBatch.from_pylist(piece, schema=self._source.schema))

    def snapshot_state(self, checkpoint_id: int) -> list[CollectionSplit]:
        return [dataclasses.replace(split, next_row=self._next) for split in self._splits]
