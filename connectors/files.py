"""FileSource and FileSink over fsspec (local paths, ``memory://``, object stores).

FileSource reads text files line by line: ``format="lines"`` gives one row
``{"line": str}`` per line, ``format="text"`` one plain ``str`` record per line
(PyFlink's text line format), ``format="json"`` reads newline-delimited JSON
objects (one object per line, blank lines skipped) into their fields. Each file
is one split; a split's position is the byte offset of the next unread line
(plus that line's number, for error messages), so a reader restored from a
snapshot continues exactly at the first line not yet returned.

FileSink writes one part file per subtask and attempt, named
``{prefix}-{subtask}-{attempt}-{n}{suffix}`` (``part-...`` and the format's
extension by default); it is written as ``<name>.inprogress``
and renamed to its final name in ``finish()``.
"""

from __future__ import annotations

import collections
import dataclasses
import json
from collections.abc import Iterator
from typing import IO, Any, Literal

import fsspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem

from connectors.file_system import FileSourceBuilder, RowFormatBuilder, StreamFormat
from flinklike_spark.common.serialization import Encoder
from flinklike_spark.common.types import RECORD_KIND_KEY, RecordKind, records_of
from flinklike_spark.connector_api import (
    Boundedness,
    ReadResult,
    Sink,
    SinkWriter,
    SinkWriterContext,
    Source,
    SourceReader,
    SourceReaderContext,
    SourceSplit,
)
from flinklike_spark.errors import (
    ConfigurationError,
    InputFilesNotFoundError,
    MalformedRecordError,
    SchemaMismatchError,
)
from flinklike_spark.storage import StorageAccess, StorageBound, StorageConfig, StorageLocation

__all__ = ["FileReader", "FileSink", "FileSource", "FileSplit", "FileWriter"]

_SOURCE_FORMATS = ("json", "lines", "text")
_SINK_FORMATS = {"json": ".json", "lines": ".txt", "parquet": ".parquet", "string": ""}
#: ``format="text"``: each line is one plain ``str`` record (PyFlink's ``StreamFormat.text_line_format()``).
_TEXT_SCHEMA = pa.schema([("f0", pa.string())], metadata={RECORD_KIND_KEY: RecordKind.VALUE})
_READ_CHUNK = 1 << 20
_BAD_TEXT_LIMIT = 120  # characters of an offending line quoted in error messages
_INFER_MAX_RECORDS = 1000
_INFER_MAX_BYTES = 1 << 20
_GLOB_CHARS = frozenset("*?[")


@dataclasses.dataclass(frozen=True, kw_only=True)
class FileSplit(SourceSplit):
    """One file, positioned at the start of its next unread line.

    Attributes:
        path: the file, as a URL fsspec opens (a plain path for local files).
        offset: byte offset of the first line not yet returned (0 = start).
        line_number: 1-based number of the line at ``offset`` (for error messages).
    """

    path: str
    offset: int = 0
    line_number: int = 1


def _check_positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigurationError(f"{name} must be a positive int (>= 1), got {value!r}")
    return value


def _truncate(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="replace")
    return text if len(text) <= _BAD_TEXT_LIMIT else text[:_BAD_TEXT_LIMIT] + "..."


def _parse_json_line(raw: bytes, path: str, line_number: int) -> dict | None:
    """The object on one NDJSON line, None for a blank line; raises MalformedRecordError."""
    if not raw.strip():
        return None
    try:
        value = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "not UTF-8"
        raise MalformedRecordError(
            f"malformed JSON in {path} line {line_number} ({reason}): {_truncate(raw)!r}",
            path=path,
            line_number=line_number,
        ) from exc
    if not isinstance(value, dict):
        raise MalformedRecordError(
            f"expected a JSON object in {path} line {line_number}, got {type(value).__name__}: {_truncate(raw)!r}",
            path=path,
            line_number=line_number,
        )
    return value


def _fsspec_options(storage: StorageConfig | None, url: str, explicit: dict[str, Any]) -> dict[str, Any]:
    return dict((storage or StorageConfig()).options(url, fsspec=explicit).fsspec)


def _display_path(fs: fsspec.AbstractFileSystem, path: str) -> str:
    return path if isinstance(fs, LocalFileSystem) else fs.unstrip_protocol(path)


class FileSource(StorageBound, Source):
    """Rows from text files: one per line (``"lines"``) or per JSON object (``"json"``).

    Args:
        path_or_glob: a file, a directory (all files below it), a glob, or a
            list of those; local paths or fsspec URLs (``memory://``, ``s3://``...).
        format: ``"lines"`` gives the schema ``line: string`` (trailing ``\\r``
            stripped, empty lines kept); ``"text"`` the same lines as plain ``str``
            records (PyFlink's ``StreamFormat.text_line_format()``); ``"json"`` reads one JSON object per
            line (blank lines skipped) into the fields of ``schema``.
        schema: the Arrow schema of JSON rows. If None it is inferred from the
            first records (up to 1000) of the first file that has any; a field
            that is null in all of them gets the null type, so pass a schema for
            sparse data. Fields missing in a record are null, extra ones ignored.
            Only valid with ``format="json"``.
        storage_options: passed to fsspec (credentials, endpoints...), over what the
            job's configuration (``s3.*``, ``fs.azure.account.*``) gives for the URL.
        batch_size: maximum rows per returned batch.

    Raises:
        ConfigurationError: bad format, schema with ``"lines"``, non-positive batch_size.
        InputFilesNotFoundError: (from ``create_splits`` / schema inference) a
            path or glob matched no file.
        MalformedRecordError: (from ``poll_next``) a line is not a JSON object,
            does not fit the schema, or is not UTF-8; names file, line and text.

    Files are listed when splits are created: splits are the files in sorted
    order, split ``i`` read by subtask ``i % parallelism``. The source is bounded.

    PyFlink's form builds the same source: ``FileSource.for_record_stream_format(
    StreamFormat.text_line_format(), *paths).build()`` (``format="text"``).
    """

    @classmethod
    def for_record_stream_format(cls, stream_format: StreamFormat, *paths: str) -> FileSourceBuilder:
        """PyFlink's builder: one ``str`` record per line of ``paths``."""
        return FileSourceBuilder(stream_format, paths, lambda paths: cls(paths, format="text"))

    def __init__(
        self,
        path_or_glob: str | list[str],
        *,
        format: Literal["lines", "json", "text"] = "lines",
        schema: pa.Schema | None = None,
        storage_options: dict[str, Any] | None = None,
        batch_size: int = 4096,
    ) -> None:
        patterns = [path_or_glob] if isinstance(path_or_glob, str) else list(path_or_glob)
        if not patterns or not all(isinstance(p, str) and p for p in patterns):
            raise ConfigurationError(
                f"path_or_glob must be a non-empty path string or a non-empty list of them, got {path_or_glob!r}"
            )
        if format not in _SOURCE_FORMATS:
            raise ConfigurationError(f"format must be one of {list(_SOURCE_FORMATS)}, got {format!r}")
        if schema is not None:
            if format != "json":
                raise ConfigurationError(f"schema applies only to format='json', got format={format!r}")
            if not isinstance(schema, pa.Schema):
                raise ConfigurationError(f"schema must be a pyarrow.Schema or None, got {type(schema).__name__}")
        if storage_options is not None and not isinstance(storage_options, dict):
            raise ConfigurationError(f"storage_options must be a dict or None, got {storage_options!r}")
        self.patterns = patterns
        self.format = format
        self.storage_options = dict(storage_options or {})
        self.storage: StorageConfig | None = None  # the job's settings, bound when the job is built
        self.batch_size = _check_positive_int("batch_size", batch_size)
        self.schema_inferred = schema is None and format == "json"
        self._schema = {"lines": pa.schema([("line", pa.string())]), "text": _TEXT_SCHEMA}.get(format, schema)

    def __repr__(self) -> str:
        return f"FileSource({self.patterns!r}, format={self.format!r}, batch_size={self.batch_size})"

    def storage_urls(self) -> tuple[str, ...]:
        return tuple(self.patterns)

    def _url_to_fs(self, url: str) -> tuple[fsspec.AbstractFileSystem, str]:
        return fsspec.core.url_to_fs(url, **_fsspec_options(self.storage, url, self.storage_options))

    @property
    def boundedness(self) -> Boundedness:
        return Boundedness.BOUNDED

    def output_schema(self) -> pa.Schema:
        if self._schema is None:
            self._schema = self._infer_schema()
        return self._schema

    def list_files(self) -> list[str]:
        """Every file the patterns match, sorted; raises InputFilesNotFoundError for a pattern matching none."""
        found: set[str] = set()
        for pattern in self.patterns:
            fs, root = self._url_to_fs(pattern)
            if any(c in root for c in _GLOB_CHARS):
                matches = [p for p, info in fs.glob(root, detail=True).items() if info.get("type") == "file"]
            elif fs.isdir(root):
                matches = fs.find(root)
            elif fs.isfile(root):
                matches = [root]
            else:
                matches = []
            if not matches:
                raise InputFilesNotFoundError(f"no file matches {pattern!r}")
            found.update(_display_path(fs, m) for m in matches)
        return sorted(found)

    def create_splits(self, parallelism: int) -> list[FileSplit]:
        _check_positive_int("parallelism", parallelism)
        return [FileSplit(split_id=path, path=path) for path in self.list_files()]

    def create_reader(self, context: SourceReaderContext) -> FileReader:
        return FileReader(self, context)

    def open_file(self, path: str) -> IO[bytes]:
        """Open ``path`` (a split's path) for binary reading with this source's storage options."""
        fs, root = self._url_to_fs(path)
        return fs.open(root, "rb")

    def _infer_schema(self) -> pa.Schema:
        for path in self.list_files():
            records = list(self._first_records(path))
            if records:
                names = list(dict.fromkeys(name for record in records for name in record))
                fields = []
                for name in names:
                    try:
                        column = pa.array([record.get(name) for record in records])
                    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                        raise ConfigurationError(
                            f"cannot infer the type of JSON field {name!r} from the first records of {path} "
                            f"({exc}); pass schema= to FileSource"
                        ) from exc
                    fields.append(pa.field(name, column.type))
                return pa.schema(fields)
        raise ConfigurationError(
            f"cannot infer a schema: no JSON record in any file matching {self.patterns!r}; pass schema= to FileSource"
        )

    def _first_records(self, path: str) -> Iterator[dict]:
        count = size = 0
        with self.open_file(path) as f:
            for line_number, raw in enumerate(f, start=1):
                record = _parse_json_line(raw, path, line_number)
                if record is not None:
                    yield record
                    count += 1
                size += len(raw)
                if count >= _INFER_MAX_RECORDS or size >= _INFER_MAX_BYTES:
                    return


class _OpenSplit:
    """A split being read: its file handle and the bytes read but not yet returned."""

    __slots__ = ("split", "handle", "buffer", "offset", "line_number")

    def __init__(self, split: FileSplit, handle: IO[bytes]) -> None:
        self.split = split
        self.handle = handle
        self.buffer = b""  # file bytes starting at ``offset``
        self.offset = split.offset
        self.line_number = split.line_number

    def read_lines(self, limit: int) -> tuple[list[bytes], bool]:
        """Up to ``limit`` complete lines (without ``\\n``) and whether the file is exhausted.

        Advances ``offset`` / ``line_number`` past the returned lines. A last line
        without a trailing newline is returned at end of file.
        """
        lines: list[bytes] = []
        consumed = 0
        at_eof = False
        while len(lines) < limit:
            parts = self.buffer.split(b"\n", limit - len(lines))
            complete, rest = parts[:-1], parts[-1]
            lines.extend(complete)
            consumed += sum(map(len, complete)) + len(complete)
            self.buffer = rest
            if len(lines) == limit:
                break
            chunk = self.handle.read(_READ_CHUNK)
            if not chunk:
                if rest:
                    lines.append(rest)
                    consumed += len(rest)
                    self.buffer = b""
                at_eof = True
                break
            self.buffer = rest + chunk
        self.offset += consumed
        self.line_number += len(lines)
        return lines, at_eof and not self.buffer

    def position(self) -> FileSplit:
        return dataclasses.replace(self.split, offset=self.offset, line_number=self.line_number)


class FileReader(SourceReader):
    """Reads its :class:`FileSplit` s one file after another.

    ``snapshot_state`` returns the split being read (positioned at its next
    unread line) and the splits not started yet; finished files are dropped.
    """

    def __init__(self, source: FileSource, context: SourceReaderContext) -> None:
        self._source = source
        self._context = context
        self._pending: collections.deque[FileSplit] = collections.deque()
        self._current: _OpenSplit | None = None
        self._schema: pa.Schema | None = None

    def add_splits(self, splits: list[SourceSplit]) -> None:
        for split in splits:
            if not isinstance(split, FileSplit):
                raise ConfigurationError(f"FileReader can only read FileSplit, got {type(split).__name__}: {split!r}")
            self._pending.append(split)

    def open(self) -> None:
        self._schema = self._source.output_schema()

    def poll_next(self, max_rows: int) -> ReadResult:
        _check_positive_int("max_rows", max_rows)
        if self._schema is None:
            self._schema = self._source.output_schema()
        limit = min(max_rows, self._source.batch_size)
        while True:
            if self._current is None:
                if not self._pending:
                    return ReadResult(end_of_input=True)
                split = self._pending[0]
                handle = self._source.open_file(split.path)
                try:
                    handle.seek(split.offset)
                except BaseException:
                    handle.close()
                    raise
                self._pending.popleft()
                self._current = _OpenSplit(split, handle)
            current = self._current
            first_line = current.line_number
            lines, at_eof = current.read_lines(limit)
            # A decoding error fails the task; the reader is not used again, only closed.
            batch = self._to_batch(lines, current.split.path, first_line)
            if at_eof:
                current.handle.close()
                self._current = None
            if batch is not None and batch.num_rows:
                return ReadResult(batch=batch)

    def _to_batch(self, lines: list[bytes], path: str, first_line: int) -> pa.RecordBatch | None:
        if not lines:
            return None
        if self._source.format in ("lines", "text"):
            lines = [line[:-1] if line.endswith(b"\r") else line for line in lines]
            try:
                column = pa.array(lines, type=pa.binary()).cast(pa.string())
            except pa.ArrowInvalid as exc:
                index = next(i for i, line in enumerate(lines) if not _is_utf8(line))
                raise MalformedRecordError(
                    f"line {first_line + index} of {path} is not valid UTF-8: {_truncate(lines[index])!r}",
                    path=path,
                    line_number=first_line + index,
                ) from exc
            return pa.RecordBatch.from_arrays([column], schema=self._schema)
        records = []
        line_numbers = []
        for index, raw in enumerate(lines):
            record = _parse_json_line(raw, path, first_line + index)
            if record is not None:
                records.append(record)
                line_numbers.append(first_line + index)
        if not records:
            return None
        try:
            return pa.RecordBatch.from_pylist(records, schema=self._schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            for record, line_number in zip(records, line_numbers, strict=True):
                try:
                    pa.RecordBatch.from_pylist([record], schema=self._schema)
                except (pa.ArrowInvalid, pa.ArrowTypeError) as row_exc:
                    hint = " (inferred from the first records; pass schema= to FileSource)"
                    raise MalformedRecordError(
                        f"JSON record in {path} line {line_number} does not match the schema "
                        f"{self._schema}{hint if self._source.schema_inferred else ''}: {row_exc}; "
                        f"record: {_truncate(json.dumps(record).encode())!r}",
                        path=path,
                        line_number=line_number,
                    ) from row_exc
            raise MalformedRecordError(
                f"JSON records in {path} lines {first_line}..{first_line + len(lines) - 1} "
                f"do not match the schema {self._schema}: {exc}",
                path=path,
                line_number=first_line,
            ) from exc

    def snapshot_state(self, checkpoint_id: int) -> list[FileSplit]:
        current = [self._current.position()] if self._current is not None else []
        return current + list(self._pending)

    def close(self) -> None:
        if self._current is not None:
            handle, self._current = self._current.handle, None
            handle.close()


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


class FileSink(StorageBound, Sink):
    """Writes rows to part files under the directory ``path``.

    Args:
        path: a directory (local path or fsspec URL); created if missing.
        format: ``"json"`` (one JSON object per line, ``.json``), ``"lines"``
            (the single column's values as text, one per line, ``.txt``; nulls
            become empty lines), ``"parquet"`` (``.parquet``), or ``"string"`` (each
            record's ``str()``, one per line: PyFlink's ``Encoder.simple_string_encoder()``).
        storage_options: passed to fsspec, over what the job's configuration gives for ``path``.
        max_rows_per_part: roll to a new part file once a part holds at least
            this many rows (checked after each batch, so a part may exceed it by
            less than one batch); None = one part per writer.
        part_prefix / part_suffix: part file names (Flink's ``OutputFileConfig``);
            the suffix defaults to the format's extension.

    Each writer writes ``{part_prefix}-{subtask}-{attempt}-{n}{part_suffix}`` (``n`` counts the
    parts of that writer from 0) as ``<name>.inprogress`` and renames it in
    ``finish()`` (or when rolling). A writer that received no rows writes no
    file. ``close()`` without ``finish()`` (a failure) deletes the in-progress
    part. Not transactional: parts finished by a failed attempt stay.

    PyFlink's form builds the same sink: ``FileSink.for_row_format(path,
    Encoder.simple_string_encoder()).build()`` (``format="string"``).
    """

    @classmethod
    def for_row_format(cls, base_path: str, encoder: Encoder) -> RowFormatBuilder:
        """PyFlink's builder: each record's string form, one per line, in part files under ``base_path``."""
        return RowFormatBuilder(base_path, encoder, cls)

    @property
    def columnar_input(self) -> bool:  # type: ignore[override]
        """JSON objects and Parquet columns come from fields; "lines" and "string" read records."""
        return self.format in ("json", "parquet")

    def __init__(
        self,
        path: str,
        *,
        format: Literal["json", "lines", "parquet", "string"] = "json",
        storage_options: dict[str, Any] | None = None,
        max_rows_per_part: int | None = None,
        part_prefix: str = "part",
        part_suffix: str | None = None,
    ) -> None:
        if not isinstance(path, str) or not path:
            raise ConfigurationError(f"path must be a non-empty directory path or URL, got {path!r}")
        if format not in _SINK_FORMATS:
            raise ConfigurationError(f"format must be one of {sorted(_SINK_FORMATS)}, got {format!r}")
        if storage_options is not None and not isinstance(storage_options, dict):
            raise ConfigurationError(f"storage_options must be a dict or None, got {storage_options!r}")
        if not isinstance(part_prefix, str) or not part_prefix or "/" in part_prefix:
            raise ConfigurationError(f"part_prefix must be a non-empty file name prefix, got {part_prefix!r}")
        if part_suffix is not None and (not isinstance(part_suffix, str) or "/" in part_suffix):
            raise ConfigurationError(
                f"part_suffix must be a file name suffix (e.g. '.txt') or None, got {part_suffix!r}"
            )
        self.path = path
        self.format = format
        self.part_prefix = part_prefix
        self.part_suffix = _SINK_FORMATS[format] if part_suffix is None else part_suffix
        self.storage_options = dict(storage_options or {})
        self.storage: StorageConfig | None = None  # the job's settings, bound when the job is built
        self.max_rows_per_part = (
            None if max_rows_per_part is None else _check_positive_int("max_rows_per_part", max_rows_per_part)
        )

    def __repr__(self) -> str:
        return f"FileSink({self.path!r}, format={self.format!r})"

    def storage_urls(self) -> tuple[str, ...]:
        return (self.path,)

    def storage_locations(self) -> tuple[StorageLocation, ...]:
        options = (self.storage or StorageConfig()).options(self.path, fsspec=self.storage_options)
        return (StorageLocation(url=self.path, what="FileSink directory", access=StorageAccess.WRITE,
                                options=options),)  # fmt: skip

    def create_writer(self, context: SinkWriterContext) -> FileWriter:
        return FileWriter(self, context)


class FileWriter(SinkWriter):
    """Writes one subtask's rows of a :class:`FileSink`."""

    def __init__(self, sink: FileSink, context: SinkWriterContext) -> None:
        self._sink = sink
        self._context = context
        self._fs: fsspec.AbstractFileSystem | None = None
        self._root = ""
        self._part_index = 0
        self._handle: IO[bytes] | None = None
        self._parquet: pq.ParquetWriter | None = None
        self._part_path = ""
        self._rows_in_part = 0
        self.finished_parts: list[str] = []

    def open(self) -> None:
        sink = self._sink
        self._fs, self._root = fsspec.core.url_to_fs(
            sink.path, **_fsspec_options(sink.storage, sink.path, sink.storage_options)
        )
        self._fs.makedirs(self._root, exist_ok=True)

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        if self._fs is None:
            self.open()
        if self._handle is None:
            self._start_part(batch.schema)
        fmt = self._sink.format
        if fmt == "parquet":
            if batch.schema != self._parquet.schema:
                raise SchemaMismatchError(
                    f"FileSink {self._sink.path!r}: batch schema {batch.schema} differs from the part's schema "
                    f"{self._parquet.schema}"
                )
            self._parquet.write_batch(batch)
        elif fmt == "json":
            text = "".join(json.dumps(row, default=str, ensure_ascii=False) + "\n" for row in batch.to_pylist())
            self._handle.write(text.encode("utf-8"))
        elif fmt == "string":  # PyFlink's Encoder.simple_string_encoder(): each record's string form
            self._handle.write("".join(f"{record}\n" for record in records_of(batch)).encode("utf-8"))
        else:
            if batch.num_columns != 1:
                raise ConfigurationError(
                    f"FileSink format='lines' needs exactly one column, got {batch.schema.names}; "
                    f"use format='json' or 'parquet' for several columns"
                )
            values = pc.fill_null(pc.cast(batch.column(0), pa.string()), "")
            self._handle.write(("\n".join(values.to_pylist()) + "\n").encode("utf-8"))
        self._rows_in_part += batch.num_rows
        limit = self._sink.max_rows_per_part
        if limit is not None and self._rows_in_part >= limit:
            self._finish_part()

    def finish(self) -> None:
        if self._handle is not None:
            self._finish_part()

    def close(self) -> None:
        if self._handle is None:
            return
        in_progress = self._part_path + ".inprogress"
        try:
            self._close_handle()
        finally:
            if self._fs.exists(in_progress):
                self._fs.rm(in_progress)

    def _start_part(self, schema: pa.Schema) -> None:
        ctx = self._context
        sink = self._sink
        name = f"{sink.part_prefix}-{ctx.subtask_index}-{ctx.attempt_number}-{self._part_index}{sink.part_suffix}"
        self._part_path = f"{self._root.rstrip('/')}/{name}"
        self._handle = self._fs.open(self._part_path + ".inprogress", "wb")
        if self._sink.format == "parquet":
            self._parquet = pq.ParquetWriter(self._handle, schema)
        self._rows_in_part = 0

    def _close_handle(self) -> None:
        handle, parquet = self._handle, self._parquet
        self._handle = self._parquet = None
        try:
            if parquet is not None:
                parquet.close()
        finally:
            handle.close()

    def _finish_part(self) -> None:
        self._close_handle()
        self._fs.mv(self._part_path + ".inprogress", self._part_path)
        self.finished_parts.append(_display_path(self._fs, self._part_path))
        self._part_index += 1
