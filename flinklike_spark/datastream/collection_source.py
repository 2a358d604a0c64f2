"""CollectionSource: a bounded source of in-memory rows (``env.from_collection``).

The rows are read in order by one subtask (as Flink's ``fromCollection``, a
non-parallel source), ``batch_size`` rows per poll; the position is the index
of the next row, so a checkpoint resumes exactly after the last row returned.
With ``batch_size=1`` the source emits a watermark after every row, which
makes event-time tests with out-of-order and late rows deterministic.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from flinklike_spark._runtime.operators.rows import RowsConverter
from flinklike_spark.common.types import Row
from flinklike_spark.connector_api import ReadResult, Source, SourceReader, SourceReaderContext, SourceSplit
from flinklike_spark.errors import ConfigurationError

__all__ = ["CollectionReader", "CollectionSource", "CollectionSplit"]

_LOG = logging.getLogger(__name__)

#: Arrow's narrow integer types -> Flink's type name and bit width (Java's byte, short, int).
_NARROW_INTS = {pa.int8(): ("BYTE", 8), pa.int16(): ("SHORT", 16), pa.int32(): ("INT", 32)}


def _narrowed_as_java_does(rows: list[Any], schema: pa.Schema) -> list[Any]:
    """``rows`` with each int of a declared BYTE, SHORT or INT field that does not fit it wrapped around, as
    PyFlink's ``from_collection`` does (Java's narrowing conversion: ``(short) 43878 == -21658``); a warning
    names the first such value. Rows are dicts (by name), tuples, lists or Rows (by position), or plain
    values of a one-field schema; other rows, and nested fields, are left to the converter's checks."""
    narrow = [
        (i, field.name, *_NARROW_INTS[field.type]) for i, field in enumerate(schema) if field.type in _NARROW_INTS
    ]
    if not narrow:
        return rows
    wrapped: list[tuple[Any, Any, str]] = []

    def fit(value: Any, type_name: str, bits: int) -> Any:
        if type(value) is not int or -(1 << (bits - 1)) <= value < 1 << (bits - 1):
            return value
        java = (value + (1 << (bits - 1))) % (1 << bits) - (1 << (bits - 1))
        wrapped.append((value, java, type_name))
        return java

    def narrowed(row: Any) -> Any:
        if type(row) is dict:
            return {**row, **{name: fit(row[name], t, bits) for _, name, t, bits in narrow if name in row}}
        if isinstance(row, (tuple, list, Row)) and len(row) == len(schema):
            values = list(row)
            for i, _, t, bits in narrow:
                values[i] = fit(values[i], t, bits)
            if values == list(row):
                return row
            return type(row)(values) if type(row) in (tuple, list) else _same_row(row, values)
        if len(schema) == 1 and type(row) is int:
            return fit(row, narrow[0][2], narrow[0][3])
        return row

    result = [narrowed(row) for row in rows]
    if wrapped:
        value, java, type_name = wrapped[0]
        _LOG.warning(
            "from_collection: %d value(s) do not fit their declared type and wrap around as in PyFlink (Java's "
            "narrowing conversion), e.g. %r as %s is %r",
            len(wrapped),
            value,
            type_name,
            java,
        )
    return result


def _same_row(row: Any, values: list[Any]) -> Any:
    """A copy of PyFlink ``Row`` ``row`` (its field names and kind) holding ``values``."""
    copy = Row(*values)
    if row.get_field_names():
        copy.set_field_names(list(row.get_field_names()))
    copy.set_row_kind(row.get_row_kind())
    return copy


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
        if self.rows and schema is not None:
            self.rows = _narrowed_as_java_does(self.rows, schema)
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
