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
from flinklike_spark._runtime.operators.operator_spec import OperatorSpec
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

#: Operator kind (one of ``OPERATOR_KINDS``) -> the operator class that runs it.
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
