"""CollectSink: brings a job's output rows back to the client, for tests and examples.

Each writer keeps the batches it received and reports them as its accumulator.
The runtime ships writer accumulators back inside the job result, keyed by the
sink's ``name``: ``job_result.accumulators[name]`` is a list with one entry per
subtask (in subtask order), each entry the list of ``pa.RecordBatch`` that
subtask received (an empty list if it received none)::

    job_result.accumulators == {
        "collect": [
            [batch_0_a, batch_0_b],   # subtask 0
            [],                       # subtask 1 received nothing
        ],
        ...
    }

Everything a job writes to a CollectSink is held in memory (in the
TaskExecutor until the task ends, then in the client): use it for small outputs.
"""

from __future__ import annotations

import functools
from typing import Any

import pyarrow as pa

from flinklike_spark.common.types import records_of
from flinklike_spark.connector_api import Sink, SinkWriter, SinkWriterContext
from flinklike_spark.errors import ConfigurationError

__all__ = ["CollectSink", "CollectWriter"]


class _SinkOrClassMethod:
    """A method bound to the instance when called on one, else to the class."""

    def __init__(self, func) -> None:
        self._func = func
        functools.update_wrapper(self, func)

    def __get__(self, instance, owner):
        return functools.partial(self._func, owner if instance is None else instance)


def _is_collected(value: Any) -> bool:
    """Whether ``value`` has the shape of a CollectSink accumulator list (over subtasks)."""
    return isinstance(value, list) and all(
        entry is None or (isinstance(entry, list) and all(isinstance(b, pa.RecordBatch) for b in entry))
        for entry in value
    )


class CollectSink(Sink):
    """Collects every batch in memory and returns them to the client with the job result.

    Args:
        name: the accumulator name the rows come back under; distinct
            CollectSinks in one job need distinct names.

    Read the result with ``sink.rows(job_result)`` / ``sink.table(job_result)``,
    or on the class, ``CollectSink.rows(job_result)``, which finds the one
    CollectSink-shaped accumulator in the result (pass ``name=`` when there are
    several). ``job_result`` is any object with an ``accumulators: dict[str, list]``
    attribute holding, per name, one list of ``pa.RecordBatch`` per subtask in
    subtask order (``None`` for a subtask is read as empty). Rows come in
    subtask order, then in the order each subtask received them.
    """

    def __init__(self, name: str = "collect") -> None:
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"name must be a non-empty str, got {name!r}")
        self.name = name

    def __repr__(self) -> str:
        return f"CollectSink({self.name!r})"

    def create_writer(self, context: SinkWriterContext) -> CollectWriter:
        return CollectWriter()

    @_SinkOrClassMethod
    def batches(self_or_cls, job_result: Any, *, name: str | None = None) -> list[pa.RecordBatch]:
        """All collected batches, subtask 0's first.

        Raises:
            ConfigurationError: ``job_result`` has no ``accumulators`` dict, the
                name is missing from it, or (called on the class without a name)
                there is not exactly one CollectSink-shaped accumulator.
        """
        accumulators = getattr(job_result, "accumulators", None)
        if not isinstance(accumulators, dict):
            raise ConfigurationError(
                f"expected a job result with an 'accumulators' dict, got {type(job_result).__name__}"
            )
        if name is None and isinstance(self_or_cls, CollectSink):
            name = self_or_cls.name
        if name is None:
            candidates = sorted(k for k, v in accumulators.items() if _is_collected(v))
            if len(candidates) != 1:
                raise ConfigurationError(
                    f"cannot tell which accumulator holds the collected rows: candidates {candidates} "
                    f"(of {sorted(accumulators)}); call rows() on the sink instance or pass name="
                )
            name = candidates[0]
        if name not in accumulators:
            raise ConfigurationError(
                f"no accumulator named {name!r} in the job result; available: {sorted(accumulators)}"
            )
        per_subtask = accumulators[name]
        if not _is_collected(per_subtask):
            raise ConfigurationError(
                f"accumulator {name!r} is not a list (over subtasks) of lists of pyarrow.RecordBatch: "
                f"got {type(per_subtask).__name__}"
            )
        return [batch for entry in per_subtask if entry for batch in entry]

    @_SinkOrClassMethod
    def rows(self_or_cls, job_result: Any, *, name: str | None = None) -> list[dict]:
        """All collected records, as the job emitted them: dicts, Rows, tuples or values (see
        :meth:`batches` for the lookup and errors)."""
        return [row for batch in self_or_cls.batches(job_result, name=name) for row in records_of(batch)]

    @_SinkOrClassMethod
    def table(self_or_cls, job_result: Any, *, name: str | None = None) -> pa.Table:
        """All collected rows as one table; an empty table with no columns if nothing arrived."""
        batches = self_or_cls.batches(job_result, name=name)
        if not batches:
            return pa.table({})
        return pa.Table.from_batches(batches)


class CollectWriter(SinkWriter):
    """Keeps every non-empty batch it receives; ``accumulator()`` returns them."""

    def __init__(self) -> None:
        self._batches: list[pa.RecordBatch] = []

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows:
            self._batches.append(batch)

    def accumulator(self) -> list[pa.RecordBatch]:
        return list(self._batches)
