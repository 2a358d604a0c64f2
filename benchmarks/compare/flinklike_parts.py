"""The operators the flinklike-spark runners share (``engine_flinklike.py`` and ``scenarios_flinklike.py``)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from flinklike_spark import KeyedProcessFunction, Sink, SinkWriter, ValueStateDescriptor

__all__ = ["CountUntil", "SummarySink", "SummaryWriter"]


class SummaryWriter(SinkWriter):
    """Counts rows and sums one column (``column``)."""

    def __init__(self, column: str) -> None:
        self.column = column
        self.rows = 0
        self.total = 0

    def write(self, batch: pa.RecordBatch) -> None:
        self.rows += batch.num_rows
        self.total += pc.sum(batch.column(self.column)).as_py() or 0

    def accumulator(self):
        return {"rows": self.rows, "total": self.total}


class SummarySink(Sink):
    name = "summary"

    def __init__(self, column: str) -> None:
        self.column = column

    def create_writer(self, context):
        return SummaryWriter(self.column)


class CountUntil(KeyedProcessFunction):
    """Per-record keyed count in ValueState; emits the key's count when it reaches ``target``."""

    def __init__(self, target: int) -> None:
        self.target = target

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        current = (self.count.value() or 0) + 1
        self.count.update(current)
        if current == self.target:
            yield {"key": value["key"], "count": current}
