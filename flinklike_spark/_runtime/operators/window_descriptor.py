"""What a windowed stream builds: the picklable description of one window operator.

The API (``windowed_stream.py``) builds a :class:`WindowOperatorDescriptor`; it
travels as the ``function`` of a ``window`` OperatorSpec to the TaskExecutor,
where :class:`~flinklike_spark._runtime.operators.window_operator.WindowOperator`
runs it.
"""

from __future__ import annotations

import dataclasses
from enum import StrEnum
from typing import Any

from flinklike_spark.datastream.functions import (
    AggregateFunction,
)
from flinklike_spark.datastream.output_tag import OutputTag
from flinklike_spark.datastream.window import (
    MergingWindowAssigner,
    Trigger,
    WindowAssigner,
)
from flinklike_spark.datastream.window.evictors import Evictor
from flinklike_spark.errors import ConfigurationError

__all__ = ["PaneKind", "WindowOperatorDescriptor"]


class PaneKind(StrEnum):
    """How a pane holds its elements (Flink's window state descriptor)."""

    REDUCE = "reduce"  # the running reduce value
    AGGREGATE = "aggregate"  # an AggregateFunction accumulator
    LIST = "list"  # every element (apply / process)


@dataclasses.dataclass(kw_only=True)
class WindowOperatorDescriptor:
    """What a windowed stream's terminal call built; the ``function`` of a ``window`` OperatorSpec.

    Attributes:
        assigner: the window assigner.
        trigger: the trigger (the assigner's default unless ``trigger()`` was called).
        allowed_lateness: ms after a window's end during which late elements still update it.
        late_data_tag: side output for elements too late for all their windows (None: drop).
        pane_kind: one of :class:`PaneKind`.
        reduce_function: ``(a, b) -> c`` for REDUCE panes (a ReduceFunction or callable).
        aggregate_function: the AggregateFunction of AGGREGATE panes.
        window_function: WindowFunction / ProcessWindowFunction (keyed), AllWindowFunction /
            ProcessAllWindowFunction (``window_all``), or None (emit the pane's value).
        evictor: removes elements of a fired pane (:mod:`flinklike_spark.datastream.window.evictors`); with one, every
            pane keeps its elements with their timestamps and reduces/aggregates them when it fires.
    """

    assigner: WindowAssigner
    trigger: Trigger
    allowed_lateness: int = 0
    late_data_tag: OutputTag | None = None
    pane_kind: PaneKind = PaneKind.LIST
    reduce_function: Any = None
    aggregate_function: AggregateFunction | None = None
    window_function: Any = None
    evictor: Evictor | None = None

    def __post_init__(self) -> None:
        if self.allowed_lateness < 0:
            raise ConfigurationError(f"allowed_lateness must be >= 0 ms, got {self.allowed_lateness}")
        if isinstance(self.assigner, MergingWindowAssigner) and not self.trigger.can_merge():
            raise ConfigurationError(
                f"the trigger {self.trigger!r} cannot be used with merging windows ({self.assigner!r}): "
                f"its can_merge() is False"
            )

    def functions(self) -> list[Any]:
        return [f for f in (self.reduce_function, self.aggregate_function, self.window_function) if f is not None]
