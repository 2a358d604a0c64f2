"""Conversion between Arrow batches and row dicts, with the stream's schema enforced.

A stream's schema is either declared (a source's schema, ``output_type=``) or
inferred from the first rows emitted to it, then fixed. A later row with other
fields or values of another type raises :class:`SchemaMismatchError` that names
the stream, the field and the schema; nothing of that batch is emitted.
"""

from __future__ import annotations

import pyarrow as pa

from flinklike_spark.errors import SchemaMismatchError

__all__ = ["RowsConverter"]


class RowsConverter:
    """Turns lists of row dicts into RecordBatches of one fixed schema."""

    __slots__ = ("_field_set", "_names", "schema", "stream_name")

    def __init__(self, schema: pa.Schema | None, *, stream_name: str) -> None:
        self.stream_name = stream_name
        self.schema: pa.Schema | None = None
        self._names: list[str] = []
        self._field_set: frozenset[str] = frozenset()
        if schema is not None:
            self._fix(schema)

    def _fix(self, schema: pa.Schema) -> None:
        self.schema = schema
        self._names = list(schema.names)
        self._field_set = frozenset(self._names)

    def to_batch(self, rows: list[dict]) -> pa.RecordBatch:
        """Convert ``rows`` (all or nothing).

        Raises:
            SchemaMismatchError: a row has missing or extra fields, or a value
                that does not fit its field's type.
        """
        if self.schema is None:
            try:
                batch = pa.RecordBatch.from_pylist(rows)
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                raise SchemaMismatchError(
                    f"stream {self.stream_name!r}: cannot infer an Arrow schema from rows like {rows[0]!r}: {exc}. "
                    f"Declare the schema with output_type=pyarrow.schema([...])"
                ) from exc
            if any(not isinstance(row, dict) for row in rows):
                self._raise_not_dict(rows)
            self._fix(batch.schema)
            self._check_fields(rows)
            return batch
        self._check_fields(rows)
        try:
            return pa.RecordBatch.from_pylist(rows, schema=self.schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
            raise SchemaMismatchError(self._describe_type_error(rows, exc)) from exc

    def _raise_not_dict(self, rows: list) -> None:
        bad = next(row for row in rows if not isinstance(row, dict))
        raise SchemaMismatchError(
            f"stream {self.stream_name!r}: functions must return rows as dict, got {type(bad).__name__}: {bad!r}"
        )

    def _check_fields(self, rows: list[dict]) -> None:
        names = self._field_set
        width = len(names)
        for row in rows:
            if type(row) is not dict:
                if not isinstance(row, dict):
                    self._raise_not_dict(rows)
            if len(row) != width or row.keys() != names:
                missing = sorted(names - row.keys())
                extra = sorted(row.keys() - names)
                raise SchemaMismatchError(
                    f"stream {self.stream_name!r}: record {_short(row)} does not match the stream's schema "
                    f"[{_schema_text(self.schema)}]: missing fields {missing}, unexpected fields {extra}"
                )

    def _describe_type_error(self, rows: list[dict], exc: Exception) -> str:
        assert self.schema is not None
        for field in self.schema:
            try:
                pa.array([row[field.name] for row in rows], type=field.type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
                for row in rows:
                    try:
                        pa.array([row[field.name]], type=field.type)
                    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
                        return (
                            f"stream {self.stream_name!r}: field {field.name!r} of record {_short(row)} has value "
                            f"{row[field.name]!r} ({type(row[field.name]).__name__}), which does not fit the "
                            f"stream's type {field.type} (schema [{_schema_text(self.schema)}])"
                        )
        return f"stream {self.stream_name!r}: rows do not fit schema [{_schema_text(self.schema)}]: {exc}"


def _schema_text(schema: pa.Schema | None) -> str:
    return ", ".join(f"{f.name}: {f.type}" for f in schema) if schema is not None else "?"


def _short(row: object) -> str:
    text = repr(row)
    return text if len(text) <= 200 else text[:197] + "..."
