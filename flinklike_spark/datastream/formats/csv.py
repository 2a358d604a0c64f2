"""PyFlink's ``pyflink.datastream.formats.csv``: rows as CSV lines, both ways.

``CsvRowDeserializationSchema.Builder(Types.ROW_NAMED([...], [...])).build()``
reads each message as one CSV line into a ``Row`` (fields by position; an
empty field of a non-string type and the null literal are null; arrays are
split on the array element delimiter, ``;`` by default). A batch of messages
is read by Arrow's CSV reader at once when that cannot differ from reading
each line (string, integer and double fields, no quote character in the
batch, no comments, escapes or null literal); otherwise, and whenever Arrow
refuses the batch, line by line, which names the bad message.
``CsvRowSerializationSchema.Builder(type_info).build()`` writes a record
(``Row``, tuple or dict) as one line ending in the line delimiter (``\\n``).
A batch of records is written by Arrow kernels at once when that cannot differ
from writing each record (string and integer fields, no nulls, no value that
would need quoting or escaping); otherwise record by record.
"""

from __future__ import annotations

import csv
import io
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

from flinklike_spark.common.serialization import DeserializationSchema, SerializationSchema
from flinklike_spark.datastream.formats._rows import batch_columns, from_text, row_schema, row_values, to_text
from flinklike_spark.errors import ConfigurationError, MalformedRecordError

__all__ = ["CsvRowDeserializationSchema", "CsvRowSerializationSchema"]


def _char(where: str, name: str, value: str | None) -> str | None:
    if value is not None and (not isinstance(value, str) or len(value) != 1):
        raise ConfigurationError(f"{where}: {name} must be a single character, got {value!r}")
    return value


def _VECTORIZABLE(arrow_type: pa.DataType) -> bool:  # noqa: N802 - a predicate used like a constant
    """Field types that Arrow's CSV reader parses exactly as :func:`from_text` does (or refuses)."""
    return pa.types.is_string(arrow_type) or pa.types.is_integer(arrow_type) or pa.types.is_float64(arrow_type)


class CsvRowDeserializationSchema(DeserializationSchema):
    """A CSV line per message -> a ``Row`` (Flink's ``CsvRowDeserializationSchema``). Build with :class:`Builder`."""

    def __init__(
        self, *, type_info: Any, field_delimiter: str = ",", allow_comments: bool = False,
        array_element_delimiter: str = ";", quote_character: str | None = '"', escape_character: str | None = None,
        null_literal: str | None = None, ignore_parse_errors: bool = False,
    ) -> None:  # fmt: skip
        where = "CsvRowDeserializationSchema"
        self._schema = row_schema(where, type_info)
        self.field_delimiter = _char(where, "field delimiter", field_delimiter)
        self.allow_comments = bool(allow_comments)
        self.array_element_delimiter = array_element_delimiter
        self.quote_character = _char(where, "quote character", quote_character)
        self.escape_character = _char(where, "escape character", escape_character)
        self.null_literal = null_literal
        self.ignore_parse_errors = bool(ignore_parse_errors)

    class Builder:
        """PyFlink's builder: ``CsvRowDeserializationSchema.Builder(type_info).set_...(...).build()``."""

        def __init__(self, type_info: Any) -> None:
            if type_info is None:
                raise TypeError("Type information must not be None")
            self._options: dict[str, Any] = {"type_info": type_info}

        def _set(self, key: str, value: Any) -> CsvRowDeserializationSchema.Builder:
            self._options[key] = value
            return self

        def set_field_delimiter(self, delimiter: str):
            return self._set("field_delimiter", delimiter)

        def set_allow_comments(self, allow_comments: bool):
            return self._set("allow_comments", allow_comments)

        def set_array_element_delimiter(self, delimiter: str):
            return self._set("array_element_delimiter", delimiter)

        def set_quote_character(self, c: str):
            return self._set("quote_character", c)

        def set_escape_character(self, c: str):
            return self._set("escape_character", c)

        def set_null_literal(self, null_literal: str):
            return self._set("null_literal", null_literal)

        def set_ignore_parse_errors(self, ignore_parse_errors: bool):
            return self._set("ignore_parse_errors", ignore_parse_errors)

        def build(self) -> CsvRowDeserializationSchema:
            return CsvRowDeserializationSchema(**self._options)

    def produced_schema(self) -> pa.Schema:
        return self._schema

    def _field(self, text: str, arrow_type: pa.DataType) -> Any:
        if self.null_literal is not None and text == self.null_literal:
            return None
        if text == "" and not pa.types.is_string(arrow_type):
            return None
        if pa.types.is_list(arrow_type):
            return [self._field(part, arrow_type.value_type) for part in text.split(self.array_element_delimiter)]
        return from_text(text, arrow_type)

    def deserialize_batch(self, messages: list[bytes]) -> pa.RecordBatch:
        batch = self._read_at_once(messages)
        return batch if batch is not None else super().deserialize_batch(messages)

    def _read_at_once(self, messages: list[bytes]) -> pa.RecordBatch | None:
        """``messages`` read by Arrow's CSV reader, or None where its reading could differ from :meth:`deserialize`."""
        if not messages or self.allow_comments or self.escape_character is not None or self.null_literal is not None:
            return None
        if not all(_VECTORIZABLE(field.type) for field in self._schema):
            return None
        data = b"\n".join(messages)
        if data.count(b"\n") != len(messages) - 1 or b"\r" in data:
            return None  # a message of several lines, or one ending in a line break
        if self.quote_character is not None and self.quote_character.encode() in data:
            return None  # Python's strict quoting and Arrow's disagree on malformed quotes
        try:
            table = pa_csv.read_csv(
                pa.py_buffer(data),
                read_options=pa_csv.ReadOptions(column_names=self._schema.names, use_threads=False),
                parse_options=pa_csv.ParseOptions(delimiter=self.field_delimiter, quote_char=False),
                convert_options=pa_csv.ConvertOptions(
                    column_types=dict(zip(self._schema.names, self._schema.types, strict=True)),
                    null_values=[""], strings_can_be_null=False,
                ),
            )  # fmt: skip
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None  # a malformed line or a field that does not fit its type: line by line says which
        if table.num_rows != len(messages):
            return None  # an empty message (Arrow skips empty lines)
        columns = [table.column(name).combine_chunks() for name in self._schema.names]
        return pa.RecordBatch.from_arrays(columns, schema=self._schema)

    def deserialize(self, message: bytes) -> dict | None:
        try:
            line = bytes(message).decode("utf-8").rstrip("\r\n")
            if self.allow_comments and line.lstrip().startswith("#"):
                return None
            reader = csv.reader(
                [line], delimiter=self.field_delimiter, quotechar=self.quote_character,
                escapechar=self.escape_character, quoting=csv.QUOTE_MINIMAL if self.quote_character else csv.QUOTE_NONE,
                strict=True,
            )  # fmt: skip
            fields = next(reader, [])
            if len(fields) != len(self._schema):
                raise ValueError(f"{len(fields)} fields, the type has {len(self._schema)}")
            record = {}
            for text, field in zip(fields, self._schema, strict=True):
                try:
                    record[field.name] = self._field(text, field.type)
                except (ValueError, TypeError, ArithmeticError) as e:
                    raise ValueError(f"field {field.name!r} ({field.type}): {e}") from e
            return record
        except (ValueError, TypeError, csv.Error) as e:
            if self.ignore_parse_errors:
                return None
            raise MalformedRecordError(
                f"CsvRowDeserializationSchema: cannot read {bytes(message)[:200]!r} as a row of "
                f"{self._schema.names}: {e} (set_ignore_parse_errors(True) skips such messages)"
            ) from e


class CsvRowSerializationSchema(SerializationSchema):
    """A record -> a CSV line (Flink's ``CsvRowSerializationSchema``). Build with :class:`Builder`."""

    def __init__(
        self, *, type_info: Any, field_delimiter: str = ",", line_delimiter: str = "\n",
        array_element_delimiter: str = ";", quote_character: str | None = '"', escape_character: str | None = None,
        null_literal: str = "",
    ) -> None:  # fmt: skip
        where = "CsvRowSerializationSchema"
        self._names = row_schema(where, type_info).names
        self.field_delimiter = _char(where, "field delimiter", field_delimiter)
        if line_delimiter not in ("\n", "\r", "\r\n", ""):
            raise ConfigurationError(
                f"{where}: line delimiter must be '\\n', '\\r', '\\r\\n' or '', got {line_delimiter!r}"
            )
        self.line_delimiter = line_delimiter
        self.array_element_delimiter = array_element_delimiter
        self.quote_character = _char(where, "quote character", quote_character)
        self.escape_character = _char(where, "escape character", escape_character)
        self.null_literal = null_literal

    class Builder:
        """PyFlink's builder: ``CsvRowSerializationSchema.Builder(type_info).set_...(...).build()``."""

        def __init__(self, type_info: Any) -> None:
            if type_info is None:
                raise TypeError("Type information must not be None")
            self._options: dict[str, Any] = {"type_info": type_info}

        def _set(self, key: str, value: Any) -> CsvRowSerializationSchema.Builder:
            self._options[key] = value
            return self

        def set_field_delimiter(self, c: str):
            return self._set("field_delimiter", c)

        def set_line_delimiter(self, delimiter: str):
            return self._set("line_delimiter", delimiter)

        def set_array_element_delimiter(self, delimiter: str):
            return self._set("array_element_delimiter", delimiter)

        def disable_quote_character(self):
            return self._set("quote_character", None)

        def set_quote_character(self, c: str):
            return self._set("quote_character", c)

        def set_escape_character(self, c: str):
            return self._set("escape_character", c)

        def set_null_literal(self, s: str):
            return self._set("null_literal", s)

        def build(self) -> CsvRowSerializationSchema:
            return CsvRowSerializationSchema(**self._options)

    def serialize(self, element: Any) -> bytes:
        values = row_values("CsvRowSerializationSchema", element, self._names)
        out = io.StringIO()
        writer = csv.writer(
            out, delimiter=self.field_delimiter, quotechar=self.quote_character or '"',
            escapechar=self.escape_character, lineterminator=self.line_delimiter,
            quoting=csv.QUOTE_MINIMAL if self.quote_character else csv.QUOTE_NONE,
        )  # fmt: skip
        texts = [to_text(value, self.array_element_delimiter) for value in values]
        writer.writerow([self.null_literal if text is None else text for text in texts])
        return out.getvalue().encode()

    def serialize_batch(self, batch: pa.RecordBatch) -> list[bytes]:
        columns = self._plain_columns(batch)
        if columns is None:
            return super().serialize_batch(batch)
        texts = [c if pa.types.is_string(c.type) else c.cast(pa.string()) for c in columns]
        lines = pc.binary_join_element_wise(*texts, self.field_delimiter)
        if self.line_delimiter:
            lines = pc.binary_join_element_wise(lines, self.line_delimiter, "")
        return lines.cast(pa.binary()).to_pylist()

    def _holds_special(self, column: pa.StringArray) -> bool:
        """Whether a string of ``column`` holds a special character. ASCII ones are looked up per byte of the
        column's UTF-8 data (no byte of a multi-byte character is ASCII); any other one by a regex."""
        special = {self.field_delimiter, "\r", "\n", *self.line_delimiter}  # what the csv module quotes or escapes
        special |= {self.quote_character or '"'} | ({self.escape_character} if self.escape_character else set())
        if any(ord(c) > 127 for c in special):
            needs_quoting = "[" + "".join(f"\\x{{{ord(c):x}}}" for c in sorted(special)) + "]"  # RE2's escapes
            return pc.any(pc.match_substring_regex(column, needs_quoting)).as_py() or False
        data_buffer = column.buffers()[2]
        if len(column) == 0 or data_buffer is None:
            return False
        table = np.zeros(256, dtype=bool)
        table[[ord(c) for c in special]] = True
        offsets = np.frombuffer(column.buffers()[1], dtype=np.int32, count=len(column) + 1, offset=4 * column.offset)
        data = np.frombuffer(data_buffer, dtype=np.uint8)[offsets[0] : offsets[-1]]
        return bool(table[data].any())

    def _plain_columns(self, batch: pa.RecordBatch) -> list[pa.Array] | None:
        """The batch's columns (:func:`batch_columns`) when writing them with Arrow kernels gives :meth:`serialize`'s
        bytes for every record, else None: string or integer fields without nulls, and no string that the ``csv``
        module would quote or escape (it holds the delimiter, a quote or escape character, a line break, or is
        the single empty field of a one-field type)."""
        columns = batch_columns(batch, self._names)
        if columns is None:
            return None
        for column in columns:
            if column.null_count:
                return None
            if pa.types.is_string(column.type):
                if self._holds_special(column):
                    return None
                if len(columns) == 1 and pc.any(pc.equal(column, "")).as_py():
                    return None
            elif not pa.types.is_integer(column.type):
                return None
        return columns
