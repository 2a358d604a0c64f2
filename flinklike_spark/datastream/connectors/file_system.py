"""PyFlink's ``pyflink.datastream.connectors.file_system``: a face; the file connector's home is
:mod:`connectors.files` (sources and sinks) and :mod:`connectors.file_system` (PyFlink's builders)."""

from connectors.file_system import FileSourceBuilder, OutputFileConfig, RollingPolicy, RowFormatBuilder, StreamFormat
from connectors.files import FileSink, FileSource

__all__ = ["FileSink", "FileSource", "FileSourceBuilder", "OutputFileConfig", "RollingPolicy", "RowFormatBuilder",
           "StreamFormat"]  # fmt: skip
