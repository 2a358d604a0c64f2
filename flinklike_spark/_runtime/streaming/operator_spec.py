"""The picklable description of one operator of a chain, and the registry of operator kinds.

The JobGraph carries an :class:`OperatorSpec` per operator; the TaskExecutor
instantiates it with :meth:`OperatorSpec.create`, which looks its ``kind`` up
in :data:`OPERATOR_CLASSES`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from types import MappingProxyType
from typing import Any

import pyarrow as pa

from flinklike_spark._runtime.streaming.async_operator import AsyncWaitOperator
from flinklike_spark._runtime.streaming.co_operators import CoProcessOperator, KeyedCoProcessOperator
from flinklike_spark._runtime.streaming.keyed_operators import (
    KeyedFilterOperator,
    KeyedFlatMapOperator,
    KeyedMapOperator,
    KeyedReduceOperator,
)
from flinklike_spark._runtime.streaming.operators import (
    FilterOperator,
    FlatMapOperator,
    MapBatchesOperator,
    MapOperator,
    SideOutputOperator,
    StreamOperator,
)
from flinklike_spark._runtime.streaming.process_operators import KeyedProcessOperator, ProcessOperator
from flinklike_spark._runtime.streaming.sink_operator import SinkOperator
from flinklike_spark._runtime.streaming.source_operator import SourceOperator
from flinklike_spark._runtime.streaming.vectorized_aggregation import vectorized_operator_class
from flinklike_spark._runtime.streaming.watermark_operator import TimestampsAndWatermarksOperator
from flinklike_spark._runtime.streaming.window_operator import WindowOperator
from flinklike_spark.watermarks import WatermarkStrategy

__all__ = ["OPERATOR_CLASSES", "OperatorSpec"]

#: Operator kind (``Transformation.kind``) -> the operator class that runs it.
OPERATOR_CLASSES: MappingProxyType[str, type[StreamOperator]] = MappingProxyType({
    "source": SourceOperator,
    "map": MapOperator,
    "flat_map": FlatMapOperator,
    "filter": FilterOperator,
    "map_batches": MapBatchesOperator,
    "process": ProcessOperator,
    "keyed_process": KeyedProcessOperator,
    "sink": SinkOperator,
    "side_output": SideOutputOperator,
    "window": WindowOperator,
    "keyed_map": KeyedMapOperator,
    "keyed_flat_map": KeyedFlatMapOperator,
    "keyed_filter": KeyedFilterOperator,
    "keyed_reduce": KeyedReduceOperator,
    "timestamps_watermarks": TimestampsAndWatermarksOperator,
    "co_process": CoProcessOperator,
    "keyed_co_process": KeyedCoProcessOperator,
    "async_wait": AsyncWaitOperator,
})  # fmt: skip


@dataclasses.dataclass(kw_only=True)
class OperatorSpec:
    """A picklable description of one operator in a chain.

    Attributes:
        uid: stable id (user-given with ``.uid()`` or derived); names state.
        name: display name.
        kind: a key of :data:`OPERATOR_CLASSES` ("map", "sink", ...).
        function: the user function, source or sink.
        input_schema: declared schema of the input stream (None = inferred).
        input_name: name of the input stream for error messages.
        key_field / key_selector: the key of a keyed operator.
        timestamp_strategy: the stream's watermark strategy (event timestamps).
        splits: source splits of this subtask (filled in at deployment).
        chained_outputs: indices (in the vertex's operator list) of chained successors.
        network_outputs: indices of the vertex's output edges this operator feeds.
        chained_output_tags / network_output_tags: of those, the ones fed by a side
            output: index -> OutputTag id.
        side_output_schemas: declared schema per side-output tag id (None: inferred).
    """

    uid: str
    name: str
    kind: str
    function: Any = None
    input_schema: pa.Schema | None = None
    input_name: str | None = None
    output_schema: pa.Schema | None = None
    key_field: str | None = None
    key_selector: Callable[[dict], Any] | None = None
    timestamp_strategy: WatermarkStrategy | None = None
    splits: Iterable[Any] = ()
    chained_outputs: list[int] = dataclasses.field(default_factory=list)
    network_outputs: list[int] = dataclasses.field(default_factory=list)
    # outputs that carry a side output instead of the main output
    chained_output_tags: dict[int, str] = dataclasses.field(default_factory=dict)
    network_output_tags: dict[int, str] = dataclasses.field(default_factory=dict)
    side_output_schemas: dict[str, pa.Schema | None] = dataclasses.field(default_factory=dict)
    #: whether a built-in aggregation may run vectorized (BATCH execution keeps rolling ones per record)
    vectorizable: bool = True

    def __post_init__(self) -> None:
        if self.kind not in OPERATOR_CLASSES:
            raise ValueError(f"unknown operator kind {self.kind!r}; valid kinds: {sorted(OPERATOR_CLASSES)}")

    def create(self) -> StreamOperator:
        """The operator; a keyed or window aggregation of built-ins runs vectorized where it can
        (same output, timestamps and state layout as the per-record operator)."""
        cls = OPERATOR_CLASSES[self.kind]
        if self.vectorizable:
            cls = vectorized_operator_class(self) or cls
        return cls(self)

    def network_output_schema(self, edge_index: int) -> pa.Schema | None:
        """Declared schema of the rows this operator sends on its output edge ``edge_index``."""
        tag = self.network_output_tags.get(edge_index)
        return self.output_schema if tag is None else self.side_output_schemas.get(tag)
