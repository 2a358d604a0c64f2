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
from typing import Any

import pyarrow as pa

from flinklike_spark._runtime.operators.rows import RowsConverter
from flinklike_spark.connector_api import ReadResult, Source, SourceReader, SourceReaderContext, SourceSplit
from flinklike_spark.errors import ConfigurationError

__all__ = ["CollectionReader", "CollectionSource", "CollectionSplit"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class CollectionSplit(SourceSplit):
    """The whole collection, positioned at row ``next_row``."""

    next_row: int = 0


class CollectionSource(Source):
    """Records from a Python collection: dicts, PyFlink ``Row``s or tuples (or plain values when
    ``schema`` is a basic type's, e.g. ``Types.STRING()``).

    Args:
        rows: the records; all of one kind, with the same fields.
        schema: their Arrow schema (None: inferred from the records).
        batch_size: records per poll (None: as many as the task asks for).
    """

    def __init__(self, rows: Iterable[Any], *, schema: pa.Schema | None = None, batch_size: int | None = None) -> None:
        self.rows = [dict(row) if type(row) is dict else row for row in rows]
        if not self.rows and schema is None:
            raise ConfigurationError("from_collection of no rows needs a schema (type_info)")
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise ConfigurationError(f"batch_size must be a positive int or None, got {batch_size!r}")
        if self.rows:
            # Converting them all now checks the records and fixes the schema (with their kind).
            schema = RowsConverter(schema, stream_name="Collection Source").to_batch(self.rows).schema
        self.schema = schema
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
        self._converter: RowsConverter | None = None

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
        if self._converter is None:
            self._converter = RowsConverter(self._source.schema, stream_name="Collection Source")
        return ReadResult(batch=self._converter.to_batch(piece))

    def snapshot_state(self, checkpoint_id: int) -> list[CollectionSplit]:
        return [dataclasses.replace(split, next_row=self._next) for split in self._splits]
