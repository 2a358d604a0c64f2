"""PrintSink: prints every row to stdout or stderr, like Flink's ``print()`` sink.

Each record prints as PyFlink's ``DataStream.print()`` prints it (:func:`printed_records`): a record of
a stream without a declared type (pickled) as ``str(record)``; a Row of a stream declared ``Types.ROW``
/ ``ROW_NAMED`` as PyFlink's Python side formats it, ``+I[a,2]`` (its row kind, then ``str`` of each
field, joined by ``,``); a tuple of a ``Types.TUPLE`` stream and a value of a basic type as Java's
``toString`` prints the Flink value PyFlink hands over (``(a,2)``, ``true``, ``1.0E7``, ``null``);
dicts, this engine's own records, as Python dicts.
"""

from __future__ import annotations

import decimal
import math
import sys
from typing import Any, Literal, TextIO

import numpy as np
import pyarrow as pa

from flinklike_spark.common.types import RecordKind, Row, declared_kind, records_of
from flinklike_spark.connector_api import Sink, SinkWriter, SinkWriterContext
from flinklike_spark.errors import ConfigurationError

__all__ = ["PrintSink", "PrintWriter", "printed_records"]

_STREAMS = ("stderr", "stdout")


class PrintSink(Sink):
    """Prints each row as ``{prefix}:{subtask+1}> {row}``, following Flink's PrintSinkOutputWriter.

    The line prefix is built as in Flink: ``prefix`` (if any), then, when the
    sink's parallelism is > 1, ``:`` (only after a prefix) and the 1-based subtask
    number, then ``"> "`` if anything came before. So with parallelism 1 and no
    prefix a row prints bare. Records print as in PyFlink (:func:`printed_records`); dicts as Python
    dicts, e.g. ``2> {'key': 1, 'seq': 0}``.

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
        stream.write("".join(f"{prefix}{text}\n" for text in printed_records(batch)))
        stream.flush()


def printed_records(batch: pa.RecordBatch) -> list[str]:
    """The records of ``batch`` (without a timestamp column) as PyFlink's ``print()`` prints them."""
    records = records_of(batch)
    kind = declared_kind(batch.schema)
    if kind == RecordKind.PICKLED:  # PyFlink maps a pickled stream with str() (str values as they are)
        return [record if isinstance(record, str) else str(record) for record in records]
    if kind in (RecordKind.NAMED_ROW, RecordKind.POSITIONAL_ROW):  # PyFlink's Python side formats Rows
        return [_row_text(record) for record in records]
    if kind in (RecordKind.TUPLE, RecordKind.VALUE):  # Java's toString of the Flink value
        arrow = pa.struct(list(batch.schema)) if kind == RecordKind.TUPLE else batch.schema.field(0).type
        return [_java_text(record, arrow) for record in records]
    return [str(record) for record in records]


def _row_text(row: Any) -> str:
    if not isinstance(row, Row):
        return str(row)
    return f"{row.get_row_kind()}[{','.join(str(value) for value in row)}]"


def _java_text(value: Any, arrow: pa.DataType) -> str:
    """``value`` (of Arrow type ``arrow``) as Java's ``toString`` of the value Flink holds for it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _java_floating(value, single=pa.types.is_float32(arrow))
    if isinstance(value, tuple) and pa.types.is_struct(arrow):  # Flink's Tuple: (f0,f1)
        return "(" + ",".join(_java_text(v, arrow.field(i).type) for i, v in enumerate(value)) + ")"
    if isinstance(value, Row) and pa.types.is_struct(arrow):  # Flink's Row: +I[f0, f1]
        return (
            f"{value.get_row_kind()}["
            + ", ".join(_java_text(v, arrow.field(i).type) for i, v in enumerate(value))
            + "]"
        )
    if isinstance(value, list) and (pa.types.is_list(arrow) or pa.types.is_large_list(arrow)):  # a java.util.List
        return "[" + ", ".join(_java_text(v, arrow.value_type) for v in value) + "]"
    return str(value)


def _java_floating(value: float, *, single: bool) -> str:
    """Java's ``Double.toString`` (``Float.toString`` when ``single``): ``1.5``, ``1.0E7``, ``1.0E-4``, ``NaN``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    shortest = str(np.float32(value)) if single else repr(value)  # the shortest digits that read back
    sign, digits, exponent = decimal.Decimal(shortest).normalize().as_tuple()
    text = "".join(map(str, digits))
    point = len(text) + exponent  # the decimal point's position in ``text``
    minus = "-" if sign else ""
    if 1e-3 <= abs(value) < 1e7:
        if point <= 0:
            return f"{minus}0.{'0' * -point}{text}"
        if point >= len(text):
            return f"{minus}{text}{'0' * (point - len(text))}.0"
        return f"{minus}{text[:point]}.{text[point:]}"
    return f"{minus}{text[0]}.{text[1:] or '0'}E{point - 1}"
