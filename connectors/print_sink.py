"""PrintSink: prints every row to stdout or stderr, like Flink's ``print()`` sink."""

from __future__ import annotations

import sys
from typing import Literal, TextIO

import pyarrow as pa

from flinklike_spark.connector_api import Sink, SinkWriter, SinkWriterContext
from flinklike_spark.errors import ConfigurationError
from flinklike_spark.row import records_of

__all__ = ["PrintSink", "PrintWriter"]

_STREAMS = ("stderr", "stdout")


class PrintSink(Sink):
    """Prints each row as ``{prefix}:{subtask+1}> {row}``, following Flink's PrintSinkOutputWriter.

    The line prefix is built as in Flink: ``prefix`` (if any), then, when the
    sink's parallelism is > 1, ``:`` (only after a prefix) and the 1-based subtask
    number, then ``"> "`` if anything came before. So with parallelism 1 and no
    prefix a row prints bare. Rows print as Python dicts, e.g.
    ``2> {'key': 1, 'seq': 0}``.

    Args:
        prefix: the sink identifier printed first; None or "" for none.
        stream: ``"stdout"`` or ``"stderr"``; looked up in ``sys`` at each write
            (so redirection and test capture work, and the sink pickles).
    """

    def __init__(self, *, prefix: str | None = None, stream: Literal["stdout", "stderr"] = "stdout") -> None:
        if prefix is not None and not isinstance(prefix, str):
            raise ConfigurationError(f"prefix must be a str or None, got {prefix!r}")
        if stream not in _STREAMS:
            raise ConfigurationError(f"stream must be one of {list(_STREAMS)}, got {stream!r}")
        self.prefix = prefix or ""
        self.stream = stream

    def __repr__(self) -> str:
        return f"PrintSink(prefix={self.prefix!r}, stream={self.stream!r})"

    def create_writer(self, context: SinkWriterContext) -> PrintWriter:
        return PrintWriter(self, context)


class PrintWriter(SinkWriter):
    """Writes one subtask's rows of a :class:`PrintSink`; one ``write`` call per batch."""

    def __init__(self, sink: PrintSink, context: SinkWriterContext) -> None:
        self._sink = sink
        head = sink.prefix
        if context.parallelism > 1:
            head = f"{head}:{context.subtask_index + 1}" if head else str(context.subtask_index + 1)
        self.line_prefix = f"{head}> " if head else ""

    def _stream(self) -> TextIO:
        return sys.stdout if self._sink.stream == "stdout" else sys.stderr

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        prefix = self.line_prefix
        stream = self._stream()
        stream.write("".join(f"{prefix}{row}\n" for row in records_of(batch)))  # as emitted: dicts, Rows, tuples
        stream.flush()
