"""Side outputs of an operator: values emitted under an :class:`~flinklike_spark.output_tag.OutputTag`.

The operator chain gives each operator ``side_outputs`` (tag id -> Output),
built from the job graph's tagged edges; a tag nobody consumes has no entry,
and its values are dropped (as in Flink). Values are buffered per tag while
the operator processes a batch and emitted together by :meth:`flush`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flinklike_spark.output_tag import OutputTag

__all__ = ["SideOutputCollector"]


class SideOutputCollector:
    """Buffers side-output values of one operator until :meth:`flush`."""

    __slots__ = ("_buffers", "_operator")

    def __init__(self, operator: Any) -> None:
        self._operator = operator
        self._buffers: dict[str, list[Any]] = {}

    def collect(self, tag: OutputTag, value: Any) -> None:
        if not isinstance(tag, OutputTag):
            raise TypeError(f"operator {self._operator.name!r}: side outputs need an OutputTag, got {tag!r}")
        if tag.tag_id in self._operator.side_outputs:
            self._buffers.setdefault(tag.tag_id, []).append(value)

    def split_into(self, produced: Iterable[Any], out: list[Any]) -> None:
        """Append ``produced`` to ``out``, except PyFlink-style ``(OutputTag, value)`` pairs, collected here."""
        for item in produced:
            if type(item) is tuple and len(item) == 2 and isinstance(item[0], OutputTag):
                self.collect(item[0], item[1])
            else:
                out.append(item)

    def route(self, out: list[Any]) -> list[Any]:
        """``out`` without its ``(OutputTag, value)`` pairs, which are collected (cheap when there are none)."""
        if not any(type(item) is tuple for item in out):
            return out
        main: list[Any] = []
        self.split_into(out, main)
        return main

    def flush(self) -> None:
        if not self._buffers:
            return
        buffers, self._buffers = self._buffers, {}
        for tag_id, values in buffers.items():
            self._operator.side_outputs[tag_id].emit_rows(values)

