"""The operators of one subtask wired together (Flink's ``OperatorChain``).

Operators are set up tail-to-head, so every chaining output points at a set-up
operator; opened tail-to-head and finished/closed head-to-tail.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from flinklike_spark._runtime.operators.operator_registry import create_operator
from flinklike_spark._runtime.operators.operator_spec import OperatorSpec
from flinklike_spark._runtime.operators.stream_operator import (
    OperatorContext,
    Output,
    RestoredState,
    StreamOperator,
)
from flinklike_spark._runtime.tasks.record_writer import (
    DISCARDING_OUTPUT,
    BroadcastingOutput,
    ChainingOutput,
    RecordWriterOutput,
)

__all__ = ["OperatorChain"]

log = logging.getLogger(__name__)


class OperatorChain:
    """The operators of one subtask wired together; ``head`` receives the task's input."""

    def __init__(
        self,
        specs: Sequence[OperatorSpec],
        network_outputs: Sequence[RecordWriterOutput],
        context: OperatorContext,
    ) -> None:
        self.operators: list[StreamOperator] = [create_operator(spec) for spec in specs]
        self.network_outputs = list(network_outputs)
        # Wire tail-first so every ChainingOutput points at a set-up operator.
        for index in reversed(range(len(specs))):
            spec = specs[index]
            # outputs fed by a side output (tagged) are wired apart from the main output
            tagged: dict[str | None, list[Output]] = {None: []}
            for i in spec.chained_outputs:
                tagged.setdefault(spec.chained_output_tags.get(i), []).append(ChainingOutput(self.operators[i]))
            for i in spec.network_outputs:
                tagged.setdefault(spec.network_output_tags.get(i), []).append(self.network_outputs[i])
            combined = {tag: _combine(outputs) for tag, outputs in tagged.items()}
            main = combined.pop(None)
            if combined:
                main = _WatermarksToSideOutputs(main, list(combined.values()))
                self.operators[index].side_outputs = combined
            self.operators[index].setup(context, main)
        self.head = self.operators[0]
        self._opened: list[StreamOperator] = []

    def open(self, restored: Mapping[str, RestoredState] | None = None) -> None:
        """Initialize state (``restored``: uid -> RestoredState) and open, tail to head."""
        restored = restored or {}
        for operator in reversed(self.operators):
            operator.initialize_state(restored.get(operator.uid))
            operator.open()
            self._opened.append(operator)

    def finish_operators(self) -> None:
        """End of input: finish every operator, head to tail (they flush what they hold)."""
        for operator in self.operators:
            operator.finish()

    def end_data(self) -> None:
        """Tell the consumers that no record or watermark follows (EndOfData)."""
        for output in self.network_outputs:
            output.end_data()

    def end_outputs(self) -> None:
        """End every output partition (EndOfPartition)."""
        for output in self.network_outputs:
            output.finish()

    def close(self) -> BaseException | None:
        """Close every opened operator head-to-tail; return the first error (others are logged)."""
        first: BaseException | None = None
        for operator in self.operators:
            if operator not in self._opened:
                continue
            try:
                operator.close()
            except BaseException as exc:  # noqa: BLE001 - keep closing the others
                if first is None:
                    first = exc
                else:
                    log.warning("error closing operator %s: %r", operator.name, exc)
        return first

    def final_committables(self) -> dict[str, list[Any]]:
        """Operator uid -> committables of two-phase-commit sinks left uncommitted at the end of input."""
        return {op.uid: pending for op in self.operators if (pending := op.final_committables())}

    def accumulators(self) -> dict[str, Any]:
        result = {}
        for operator in self.operators:
            value = operator.accumulator()
            if value is not None:
                result[getattr(operator.spec.function, "name", operator.uid)] = value
        return result


def _combine(outputs: list[Output]) -> Output:
    return outputs[0] if len(outputs) == 1 else (BroadcastingOutput(outputs) if outputs else DISCARDING_OUTPUT)


class _WatermarksToSideOutputs(Output):
    """The main output of an operator with side outputs: records go to ``main``, watermarks to all
    (as in Flink, a side-output stream carries its producer's event time)."""

    def __init__(self, main: Output, sides: list[Output]) -> None:
        self._main = main
        self._all = [main, *sides]

    def emit_rows(self, rows: list[dict], timestamps=None) -> None:
        self._main.emit_rows(rows, timestamps)

    def emit_batch(self, batch) -> None:
        self._main.emit_batch(batch)

    def emit_watermark(self, timestamp: int) -> None:
        for output in self._all:
            output.emit_watermark(timestamp)

    def emit_watermark_status(self, idle: bool) -> None:
        for output in self._all:
            output.emit_watermark_status(idle)
