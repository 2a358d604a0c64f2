"""PyFlink's file system builders: what :meth:`connectors.files.FileSource.for_record_stream_format` and
:meth:`connectors.files.FileSink.for_row_format` return (PyFlink's path for them all is
``pyflink.datastream.connectors.file_system``, a face here).

The builders build the one :class:`~connectors.files.FileSource` / :class:`~connectors.files.FileSink`
with PyFlink's call forms: text lines in (one ``str`` record per line), each
record's string form out, part files named by :class:`OutputFileConfig`.
Supported: bounded reading of a static file set, UTF-8, rolling by
:class:`RollingPolicy` size (``on_checkpoint_rolling_policy`` rolls at the end).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from flinklike_spark.common.serialization import Encoder
from flinklike_spark.connector_api import Sink, Source
from flinklike_spark.errors import ConfigurationError

__all__ = ["FileSourceBuilder", "OutputFileConfig", "RollingPolicy", "RowFormatBuilder", "StreamFormat"]


@dataclasses.dataclass(frozen=True)
class StreamFormat:
    """How a file is read as records; :meth:`text_line_format` (one ``str`` per line) is the one offered."""

    charset_name: str = "UTF-8"

    @staticmethod
    def text_line_format(charset_name: str = "UTF-8") -> StreamFormat:
        Encoder.simple_string_encoder(charset_name)  # the same charset check
        return StreamFormat(charset_name)


class FileSourceBuilder:
    """``FileSource.for_record_stream_format(...)``'s builder."""

    def __init__(
        self, stream_format: StreamFormat, paths: tuple[str, ...], build: Callable[[list[str]], Source]
    ) -> None:
        if not isinstance(stream_format, StreamFormat):
            raise ConfigurationError(f"for_record_stream_format expects a StreamFormat, got {stream_format!r}")
        if not paths:
            raise ConfigurationError("for_record_stream_format needs at least one path")
        self._paths = list(paths)
        self._build = build

    def process_static_file_set(self) -> FileSourceBuilder:
        """Read the files present when the job starts, then end (the only mode offered)."""
        return self

    def monitor_continuously(self, discovery_interval: Any) -> FileSourceBuilder:
        raise ConfigurationError(
            "FileSource.monitor_continuously is not supported: the file source reads a static file set "
            "(use process_static_file_set())"
        )

    def build(self) -> Source:
        """The file source: one ``str`` record per line of the files."""
        return self._build(self._paths)


@dataclasses.dataclass(frozen=True)
class OutputFileConfig:
    """Part file names: ``{part_prefix}-{subtask}-{attempt}-{n}{part_suffix}``."""

    part_prefix: str = "part"
    part_suffix: str = ""

    @staticmethod
    def builder() -> _OutputFileConfigBuilder:
        return _OutputFileConfigBuilder()


class _OutputFileConfigBuilder:
    def __init__(self) -> None:
        self._prefix, self._suffix = "part", ""

    def with_part_prefix(self, prefix: str) -> _OutputFileConfigBuilder:
        self._prefix = prefix
        return self

    def with_part_suffix(self, suffix: str) -> _OutputFileConfigBuilder:
        self._suffix = suffix
        return self

    def build(self) -> OutputFileConfig:
        return OutputFileConfig(self._prefix, self._suffix)


@dataclasses.dataclass(frozen=True)
class RollingPolicy:
    """When to start a new part file. Parts roll by record count here (``max_records``); Flink's size and
    time criteria are accepted and approximated by one part per writer."""

    max_records: int | None = None

    @staticmethod
    def default_rolling_policy(part_size: int = 1024 * 1024 * 128, rollover_interval: int = 60 * 1000,
                               inactivity_interval: int = 60 * 1000) -> RollingPolicy:  # fmt: skip
        return RollingPolicy()

    @staticmethod
    def on_checkpoint_rolling_policy() -> RollingPolicy:
        return RollingPolicy()


class RowFormatBuilder:
    """``FileSink.for_row_format(...)``'s builder."""

    def __init__(self, base_path: str, encoder: Encoder, build: Callable[..., Sink]) -> None:
        if not isinstance(encoder, Encoder):
            raise ConfigurationError(f"for_row_format expects an Encoder, got {encoder!r}")
        self._base_path = base_path
        self._config = OutputFileConfig()
        self._rolling = RollingPolicy()
        self._build = build

    def with_output_file_config(self, output_file_config: OutputFileConfig) -> RowFormatBuilder:
        self._config = output_file_config
        return self

    def with_rolling_policy(self, rolling_policy: RollingPolicy) -> RowFormatBuilder:
        self._rolling = rolling_policy
        return self

    def with_bucket_check_interval(self, interval: int) -> RowFormatBuilder:
        return self

    def build(self) -> Sink:
        """The file sink: each record's string form, one per line."""
        return self._build(
            self._base_path,
            format="string",
            part_prefix=self._config.part_prefix,
            part_suffix=self._config.part_suffix,
            max_rows_per_part=self._rolling.max_records,
        )
