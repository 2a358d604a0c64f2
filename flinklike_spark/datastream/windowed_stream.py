"""``WindowedStream`` and ``AllWindowedStream``: what ``window``/``count_window``/``window_all`` return.

As in PyFlink, a windowed stream is configured (``trigger``,
``allowed_lateness``, ``side_output_late_data``) and ended by one window
function call -- ``reduce``, ``aggregate``, ``apply`` or ``process`` -- that
returns the StreamLike of the window results. The work happens in the
runtime's :class:`~flinklike_spark._runtime.operators.window_operator.WindowOperator`.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from flinklike_spark._runtime.operators.operator_spec import OperatorKind
from flinklike_spark._runtime.operators.window_descriptor import PaneKind, WindowOperatorDescriptor
from flinklike_spark.datastream.functions import (
    AggregateFunction,
    AllWindowFunction,
    ProcessAllWindowFunction,
    ProcessWindowFunction,
    ReduceFunction,
    WindowFunction,
)
from flinklike_spark.datastream.output_tag import OutputTag
from flinklike_spark.datastream.stream_protocols import KeyedStreamLike, StreamLike
from flinklike_spark.datastream.window import Time, Trigger, WindowAssigner
from flinklike_spark.datastream.window.evictors import Evictor
from flinklike_spark.datastream.window.windows import _millis
from flinklike_spark.errors import ConfigurationError

__all__ = ["AllWindowedStream", "WindowedStream"]


class WindowedStream:
    """A keyed stream cut into windows by ``assigner``.

    Args:
        keyed_stream: the KeyedStreamLike being windowed.
        assigner: the WindowAssigner.
    """

    _keyed_functions = (WindowFunction, ProcessWindowFunction)
    _all = False

    def __init__(self, keyed_stream: KeyedStreamLike, assigner: WindowAssigner) -> None:
        if not isinstance(assigner, WindowAssigner):
            raise ConfigurationError(f"window() expects a WindowAssigner, got {assigner!r}")
        if assigner.is_event_time() and keyed_stream.get_watermark_strategy() is None:
            raise ConfigurationError(
                f"{assigner!r} windows by event time, but the stream has no timestamps: pass a WatermarkStrategy "
                f"with a timestamp assigner to from_source(...) (or use a processing-time assigner)"
            )
        self._stream = keyed_stream
        self._assigner = assigner
        self._trigger: Trigger | None = None
        self._lateness = 0
        self._late_tag: OutputTag | None = None
        self._evictor: Evictor | None = None

    def trigger(self, trigger: Trigger) -> WindowedStream:
        """Replace the assigner's default trigger."""
        if not isinstance(trigger, Trigger):
            raise ConfigurationError(f"trigger() expects a Trigger, got {trigger!r}")
        self._trigger = trigger
        return self

    def evictor(self, evictor: Evictor) -> WindowedStream:
        """Remove elements of each fired pane before and/or after the window function
        (``CountEvictor``, ``TimeEvictor``, ``DeltaEvictor`` or your own :class:`Evictor`)."""
        if not isinstance(evictor, Evictor):
            raise ConfigurationError(f"evictor() expects an Evictor (CountEvictor.of(...), ...), got {evictor!r}")
        self._evictor = evictor
        return self

    def allowed_lateness(self, time_ms: int | Time) -> WindowedStream:
        """How long (ms, or a Time) after a window's end late elements still update it (event time)."""
        lateness = _millis(time_ms, "allowed_lateness")
        if lateness < 0:
            raise ConfigurationError(f"allowed_lateness must be >= 0 ms, got {lateness}")
        self._lateness = lateness
        return self

    def side_output_late_data(self, output_tag: OutputTag) -> WindowedStream:
        """Send elements too late for all their windows to ``output_tag`` instead of dropping them;
        read them with ``result.get_side_output(output_tag)``."""
        if not isinstance(output_tag, OutputTag):
            raise ConfigurationError(f"side_output_late_data expects an OutputTag, got {output_tag!r}")
        self._late_tag = output_tag
        return self

    # -- window functions ---------------------------------------------------------------------

    def reduce(self, reduce_function: Any, window_function: Any = None, output_type: pa.Schema | None = None):
        """Incrementally reduce each pane with ``reduce_function(a, b)``; emit the result per firing
        (or pass it, as the only element, to ``window_function``)."""
        if not (isinstance(reduce_function, ReduceFunction) or callable(reduce_function)):
            raise ConfigurationError(f"reduce expects a ReduceFunction or a callable, got {reduce_function!r}")
        self._check_window_function(window_function, optional=True)
        output = (
            output_type if output_type is not None or window_function is not None else self._stream.get_output_schema()
        )
        return self._build(
            PaneKind.REDUCE, output, "Reduce", reduce_function=reduce_function, window_function=window_function
        )

    def aggregate(
        self,
        aggregate_function: AggregateFunction,
        window_function: Any = None,
        accumulator_type: Any = None,
        output_type: pa.Schema | None = None,
    ):
        """Incrementally aggregate each pane with an AggregateFunction; emit ``get_result`` per firing
        (or pass it to ``window_function``). ``accumulator_type`` is accepted for PyFlink compatibility."""
        if not isinstance(aggregate_function, AggregateFunction):
            raise ConfigurationError(f"aggregate expects an AggregateFunction, got {aggregate_function!r}")
        self._check_window_function(window_function, optional=True)
        return self._build(
            PaneKind.AGGREGATE,
            output_type,
            "Aggregate",
            aggregate_function=aggregate_function,
            window_function=window_function,
        )

    def apply(self, window_function: Any, output_type: pa.Schema | None = None):
        """Run a WindowFunction (``apply(key, window, inputs)``) over all elements of each fired pane."""
        self._check_window_function(window_function, optional=False, process=False)
        return self._build(PaneKind.LIST, output_type, "Apply", window_function=window_function)

    def process(self, process_window_function: Any, output_type: pa.Schema | None = None):
        """Run a ProcessWindowFunction (``process(key, context, elements)``) over each fired pane."""
        self._check_window_function(process_window_function, optional=False, apply=False)
        return self._build(PaneKind.LIST, output_type, "Process", window_function=process_window_function)

    def _check_window_function(self, function: Any, *, optional: bool, apply: bool = True, process: bool = True):
        if function is None and optional:
            return
        apply_type, process_type = self._keyed_functions
        allowed = tuple(t for t, ok in ((apply_type, apply), (process_type, process)) if ok)
        if not isinstance(function, allowed):
            names = " or ".join(t.__name__ for t in allowed)
            raise ConfigurationError(f"{type(self).__name__} expects a {names} here, got {function!r}")

    def _build(self, pane_kind: str, output_type: pa.Schema | None, what: str, **functions: Any) -> StreamLike:
        trigger = self._trigger or self._assigner.get_default_trigger(self._stream.get_execution_environment())
        descriptor = WindowOperatorDescriptor(
            assigner=self._assigner,
            trigger=trigger,
            allowed_lateness=self._lateness,
            late_data_tag=self._late_tag,
            pane_kind=pane_kind,
            evictor=self._evictor,
            **functions,
        )
        stream = self._stream
        key = stream.key
        result = stream.transform(
            OperatorKind.WINDOW,
            f"Window({self._assigner!r}, {trigger!r}, {what})",
            descriptor,
            output_type,
            key_field=key if isinstance(key, str) else None,
            key_selector=None if isinstance(key, str) else key,
        )
        t = result.get_transformation()
        if self._late_tag is not None:
            t.side_output_schemas[self._late_tag.tag_id] = self._late_tag.type_info or stream.get_output_schema()
        if self._all:
            t.parallelism = 1
        return result


class AllWindowedStream(WindowedStream):
    """Windows over a whole (non-keyed) stream: one window operator with parallelism 1."""

    _keyed_functions = (AllWindowFunction, ProcessAllWindowFunction)
    _all = True
