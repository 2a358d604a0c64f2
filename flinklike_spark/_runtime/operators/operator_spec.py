"""The picklable description of one operator of a chain.

The JobGraph carries an :class:`OperatorSpec` per operator; the TaskExecutor
instantiates it with
:func:`~flinklike_spark._runtime.operators.operator_registry.create_operator`,
which looks its ``kind`` up in the registry of operator classes. This module
names the kinds only, so that the operator classes can import the spec without
importing each other.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from enum import StrEnum
from typing import Any

import pyarrow as pa

from flinklike_spark.common.watermark_strategy import WatermarkStrategy
from flinklike_spark.connector_api import SourceSplit

__all__ = ["OperatorKind", "OperatorSpec", "operator_kind"]


class OperatorKind(StrEnum):
    """What an operator does: the key of the registry of operator classes (``Transformation.kind``).

    The values are what job graphs, execution plans and the REST API show; a
    ``str`` enum, so a kind compares equal to (and serializes as) its value.
    """

    ASYNC_WAIT = "async_wait"
    CO_PROCESS = "co_process"
    FILTER = "filter"
    FLAT_MAP = "flat_map"
    KEYED_CO_PROCESS = "keyed_co_process"
    KEYED_FILTER = "keyed_filter"
    KEYED_FLAT_MAP = "keyed_flat_map"
    KEYED_MAP = "keyed_map"
    KEYED_PROCESS = "keyed_process"
    KEYED_REDUCE = "keyed_reduce"
    MAP = "map"
    MAP_BATCHES = "map_batches"
    PROCESS = "process"
    SIDE_OUTPUT = "side_output"
    SINK = "sink"
    SOURCE = "source"
    TIMESTAMPS_WATERMARKS = "timestamps_watermarks"
    WINDOW = "window"


def operator_kind(kind: OperatorKind | str) -> OperatorKind:
    """``kind`` as an :class:`OperatorKind` (also from its string value).

    Raises:
        ValueError: no operator kind has that value (the message lists the valid ones).
    """
    try:
        return OperatorKind(kind)
    except ValueError:
        raise ValueError(
            f"unknown operator kind {kind!r}; valid kinds: {sorted(k.value for k in OperatorKind)}"
        ) from None


@dataclasses.dataclass(kw_only=True)
class OperatorSpec:
    """A picklable description of one operator in a chain.

    Attributes:
        uid: stable id (user-given with ``.uid()`` or derived); names state.
        name: display name.
        kind: what the operator does (its ``OperatorKind``; its string value is accepted too).
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
    kind: OperatorKind
    function: Any = None
    input_schema: pa.Schema | None = None
    input_name: str | None = None
    output_schema: pa.Schema | None = None
    key_field: str | None = None
    key_selector: Callable[[dict], Any] | None = None
    timestamp_strategy: WatermarkStrategy | None = None
    splits: Iterable[SourceSplit] = ()
    chained_outputs: list[int] = dataclasses.field(default_factory=list)
    network_outputs: list[int] = dataclasses.field(default_factory=list)
    # outputs that carry a side output instead of the main output
    chained_output_tags: dict[int, str] = dataclasses.field(default_factory=dict)
    network_output_tags: dict[int, str] = dataclasses.field(default_factory=dict)
    side_output_schemas: dict[str, pa.Schema | None] = dataclasses.field(default_factory=dict)
    #: whether a built-in aggregation may run vectorized (BATCH execution keeps rolling ones per record)
    vectorizable: bool = True

    def __post_init__(self) -> None:
        self.kind = operator_kind(self.kind)

    def network_output_schema(self, edge_index: int) -> pa.Schema | None:
        """Declared schema of the rows this operator sends on its output edge ``edge_index``."""
        tag = self.network_output_tags.get(edge_index)
        return self.output_schema if tag is None else self.side_output_schemas.get(tag)
