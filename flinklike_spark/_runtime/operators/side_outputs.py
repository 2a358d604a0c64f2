"""Side outputs of an operator: values emitted under an :class:`~flinklike_spark.datastream.output_tag.OutputTag`.

The operator chain gives each operator ``side_outputs`` (tag id -> Output),
built from the job graph's tagged edges; a tag nobody consumes has no entry,
and its values are dropped (as in Flink). Values are buffered per tag while
the operator processes a batch and emitted together by :meth:`flush`, each
with the event timestamp it was emitted with (as in Flink, the timestamp of
the element or timer being processed).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flinklike_spark.datastream.output_tag import OutputTag

__all__ = ["SideOutputCollector"]


class SideOutputCollector:
    """Buffers side-output values of one operator until :meth:`flush`."""

    __slots__ = ("_buffers", "_operator")

    def __init__(self, operator: Any) -> None:
        self._operator = operator
        self._buffers: dict[str, tuple[list[Any], list[int | None]]] = {}

    def collect(self, tag: OutputTag, value: Any, timestamp: int | None = None) -> None:
        if not isinstance(tag, OutputTag):
            raise TypeError(f"operator {self._operator.name!r}: side outputs need an OutputTag, got {tag!r}")
        if tag.tag_id in self._operator.side_outputs:
            values, stamps = self._buffers.setdefault(tag.tag_id, ([], []))
            values.append(value)
            stamps.append(timestamp)

    def split_into(
        self, produced: Iterable[Any], out: list[Any], out_ts: list | None = None, timestamp: int | None = None
    ) -> None:
        """Append ``produced`` to ``out`` (and ``timestamp`` to ``out_ts`` for each), except PyFlink-style
        ``(OutputTag, value)`` pairs, collected here with ``timestamp``."""
        for item in produced:
            if type(item) is tuple and len(item) == 2 and isinstance(item[0], OutputTag):
                self.collect(item[0], item[1], timestamp)
            else:
                out.append(item)
                if out_ts is not None:
                    out_ts.append(timestamp)

    def route(self, out: list[Any], out_ts: list) -> tuple[list[Any], list]:
        """``out`` and its timestamps without the ``(OutputTag, value)`` pairs, which are collected with
        their timestamps (cheap when there are none)."""
        if not any(type(item) is tuple for item in out):
            return out, out_ts
        main: list[Any] = []
        main_ts: list = []
        for item, timestamp in zip(out, out_ts, strict=True):
            self.split_into((item,), main, main_ts, timestamp)
        return main, main_ts

    def flush(self) -> None:
        if not self._buffers:
            return
        buffers, self._buffers = self._buffers, {}
        for tag_id, (values, stamps) in buffers.items():
            self._operator.side_outputs[tag_id].emit_rows(values, stamps)
