"""The registry of operator kinds: each ``OperatorSpec.kind`` -> the operator class that runs it.

Kept apart from :mod:`~flinklike_spark._runtime.operators.operator_spec`: the
operator classes import the spec (their constructor takes one), and this module
imports every operator class, so neither import runs in a circle.
"""

from __future__ import annotations

from types import MappingProxyType

from flinklike_spark._runtime.operators.async_operator import AsyncWaitOperator
from flinklike_spark._runtime.operators.co_operators import CoProcessOperator, KeyedCoProcessOperator
from flinklike_spark._runtime.operators.keyed_operators import (
    KeyedFilterOperator,
    KeyedFlatMapOperator,
    KeyedMapOperator,
    KeyedReduceOperator,
)
from flinklike_spark._runtime.operators.operator_spec import OperatorKind, OperatorSpec
from flinklike_spark._runtime.operators.process_operators import KeyedProcessOperator, ProcessOperator
from flinklike_spark._runtime.operators.sink_operator import SinkOperator
from flinklike_spark._runtime.operators.source_operator import SourceOperator
from flinklike_spark._runtime.operators.stream_operator import (
    FilterOperator,
    FlatMapOperator,
    MapBatchesOperator,
    MapOperator,
    SideOutputOperator,
    StreamOperator,
)
from flinklike_spark._runtime.operators.vectorized_aggregation import vectorized_operator_class
from flinklike_spark._runtime.operators.watermark_operator import TimestampsAndWatermarksOperator
from flinklike_spark._runtime.operators.window_operator import WindowOperator

__all__ = ["OPERATOR_CLASSES", "create_operator"]

#: Operator kind -> the operator class that runs it.
OPERATOR_CLASSES: MappingProxyType[OperatorKind, type[StreamOperator]] = MappingProxyType({
    OperatorKind.SOURCE: SourceOperator,
    OperatorKind.MAP: MapOperator,
    OperatorKind.FLAT_MAP: FlatMapOperator,
    OperatorKind.FILTER: FilterOperator,
    OperatorKind.MAP_BATCHES: MapBatchesOperator,
    OperatorKind.PROCESS: ProcessOperator,
    OperatorKind.KEYED_PROCESS: KeyedProcessOperator,
    OperatorKind.SINK: SinkOperator,
    OperatorKind.SIDE_OUTPUT: SideOutputOperator,
    OperatorKind.WINDOW: WindowOperator,
    OperatorKind.KEYED_MAP: KeyedMapOperator,
    OperatorKind.KEYED_FLAT_MAP: KeyedFlatMapOperator,
    OperatorKind.KEYED_FILTER: KeyedFilterOperator,
    OperatorKind.KEYED_REDUCE: KeyedReduceOperator,
    OperatorKind.TIMESTAMPS_WATERMARKS: TimestampsAndWatermarksOperator,
    OperatorKind.CO_PROCESS: CoProcessOperator,
    OperatorKind.KEYED_CO_PROCESS: KeyedCoProcessOperator,
    OperatorKind.ASYNC_WAIT: AsyncWaitOperator,
})  # fmt: skip


def create_operator(spec: OperatorSpec) -> StreamOperator:
    """The operator ``spec`` describes.

    A keyed or window aggregation of built-ins runs vectorized where it can
    (same output, timestamps and state layout as the per-record operator),
    unless ``spec.vectorizable`` is False.
    """
    cls = OPERATOR_CLASSES[spec.kind]
    if spec.vectorizable:
        cls = vectorized_operator_class(spec) or cls
    return cls(spec)
