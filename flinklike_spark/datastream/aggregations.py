"""Built-in aggregate functions the engine can run vectorized (one Arrow batch at a time).

A window ``aggregate`` whose AggregateFunction is one of these (and whose
window function is None or :class:`KeyedWindowResult`) runs on grouped Arrow
kernels instead of calling Python once per record; so do the rolling field
aggregations ``KeyedStream.sum/min/max/min_by/max_by`` by field name. See
:mod:`flinklike_spark._runtime.operators.vectorized_aggregation` for when the
engine takes that path. The results are exactly those of the per-record path,
which these classes also implement (they are ordinary AggregateFunctions), so
a job gets the same output, checkpoints and rescaling either way.

Example -- a count and a sum per key and 1 s tumbling window::

    from flinklike_spark.datastream import aggregations as agg

    stream.key_by("key").window(TumblingEventTimeWindows.of(Time.seconds(1))).aggregate(
        agg.combine(agg.count(), agg.sum("amount")), agg.KeyedWindowResult("key")
    )  # rows {"key", "window_start", "window_end", "count", "amount"}

Contract of a built-in: ``get_result`` returns a dict ``{result name: value}``;
``count`` counts records, ``sum``/``min``/``max`` fold one numeric field of
dict records with ``+``, ``<`` and ``>`` (a null value is an error, as adding
None is in Python).
"""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import Iterable
from typing import Any

from flinklike_spark.datastream.functions import AggregateFunction, ProcessWindowFunction
from flinklike_spark.errors import ConfigurationError

__all__ = [
    "AGGREGATION_KINDS",
    "AggregateColumn",
    "BuiltinAggregateFunction",
    "KeyedWindowResult",
    "combine",
    "count",
    "max",
    "min",
    "sum",
]

#: The aggregations a built-in column may compute.
AGGREGATION_KINDS = ("count", "sum", "min", "max")


@dataclasses.dataclass(frozen=True, kw_only=True)
class AggregateColumn:
    """One result column: ``kind`` of ``field`` (None for ``count``) named ``name``."""

    kind: str
    field: str | None
    name: str

    def __post_init__(self) -> None:
        if self.kind not in AGGREGATION_KINDS:
            raise ConfigurationError(f"unknown aggregation {self.kind!r}; valid: {list(AGGREGATION_KINDS)}")
        if self.kind != "count" and (not isinstance(self.field, str) or not self.field):
            raise ConfigurationError(f"{self.kind}() needs a field name (a non-empty str), got {self.field!r}")
        if not isinstance(self.name, str) or not self.name:
            raise ConfigurationError(f"{self.kind}(): the result name must be a non-empty str, got {self.name!r}")


class BuiltinAggregateFunction(AggregateFunction):
    """An AggregateFunction of built-in columns; its accumulator is a list, one value per column.

    Args:
        columns: the result columns, in output order (distinct names).
    """

    def __init__(self, columns: Iterable[AggregateColumn]) -> None:
        self.columns: tuple[AggregateColumn, ...] = tuple(columns)
        if not self.columns:
            raise ConfigurationError("a built-in aggregate needs at least one column (count(), sum(field), ...)")
        names = [c.name for c in self.columns]
        if len(set(names)) != len(names):
            raise ConfigurationError(f"built-in aggregate result names must be distinct, got {names}")

    def __repr__(self) -> str:
        parts = ", ".join(f"{c.kind}({c.field or ''}) as {c.name}" for c in self.columns)
        return f"BuiltinAggregateFunction({parts})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BuiltinAggregateFunction) and other.columns == self.columns

    def __hash__(self) -> int:
        return hash(self.columns)

    def create_accumulator(self) -> list:
        return [0 if c.kind == "count" else None for c in self.columns]

    def add(self, value: Any, accumulator: list) -> list:
        for i, column in enumerate(self.columns):
            kind = column.kind
            if kind == "count":
                accumulator[i] += 1
                continue
            try:
                v = value[column.field]
            except (KeyError, TypeError, IndexError):
                raise KeyError(
                    f"{kind}({column.field!r}): the record has no field {column.field!r}: {value!r}"
                ) from None
            if v is None:
                raise TypeError(f"{kind}({column.field!r}): the field is null in {value!r}")
            current = accumulator[i]
            if current is None:
                accumulator[i] = v
            elif kind == "sum":
                accumulator[i] = current + v
            elif kind == "min":
                if v < current:
                    accumulator[i] = v
            elif v > current:
                accumulator[i] = v
        return accumulator

    def get_result(self, accumulator: list) -> dict:
        return {c.name: v for c, v in zip(self.columns, accumulator)}

    def merge(self, acc_a: list, acc_b: list) -> list:
        merged = []
        for column, a, b in zip(self.columns, acc_a, acc_b):
            if a is None or b is None:
                merged.append(b if a is None else a)
            elif column.kind in ("count", "sum"):
                merged.append(a + b)
            elif column.kind == "min":
                merged.append(b if b < a else a)
            else:
                merged.append(b if b > a else a)
        return merged


def count(name: str = "count") -> BuiltinAggregateFunction:
    """The number of records, as ``name``."""
    return BuiltinAggregateFunction([AggregateColumn(kind="count", field=None, name=name)])


def sum(field: str, name: str | None = None) -> BuiltinAggregateFunction:  # noqa: A001 - the aggregation's name
    """The sum of ``field``, as ``name`` (default: the field's name)."""
    return BuiltinAggregateFunction([AggregateColumn(kind="sum", field=field, name=name or field)])


def min(field: str, name: str | None = None) -> BuiltinAggregateFunction:  # noqa: A001
    """The smallest value of ``field``, as ``name`` (default: the field's name)."""
    return BuiltinAggregateFunction([AggregateColumn(kind="min", field=field, name=name or field)])


def max(field: str, name: str | None = None) -> BuiltinAggregateFunction:  # noqa: A001
    """The largest value of ``field``, as ``name`` (default: the field's name)."""
    return BuiltinAggregateFunction([AggregateColumn(kind="max", field=field, name=name or field)])


def combine(*aggregates: BuiltinAggregateFunction) -> BuiltinAggregateFunction:
    """One aggregate computing all columns of ``aggregates`` (result names must differ)."""
    for aggregate in aggregates:
        if not isinstance(aggregate, BuiltinAggregateFunction):
            raise ConfigurationError(f"combine() takes built-in aggregates (count(), sum(f), ...), got {aggregate!r}")
    return BuiltinAggregateFunction([c for a in aggregates for c in a.columns])


class KeyedWindowResult(ProcessWindowFunction):
    """Emits one row per fired pane: the key, the window's bounds and the aggregate's result dict.

    Args:
        key_name: the output field of the key.
        start_name / end_name: output fields of ``window.start`` / ``window.end`` (epoch ms, end exclusive).
    """

    def __init__(self, key_name: str = "key", *, start_name: str = "window_start", end_name: str = "window_end"):
        names = [key_name, start_name, end_name]
        if not builtins.all(isinstance(n, str) and n for n in names) or len(set(names)) != 3:
            raise ConfigurationError(f"KeyedWindowResult needs three distinct non-empty field names, got {names}")
        self.key_name = key_name
        self.start_name = start_name
        self.end_name = end_name

    def __repr__(self) -> str:
        return f"KeyedWindowResult({self.key_name!r}, start_name={self.start_name!r}, end_name={self.end_name!r})"

    def process(self, key: Any, context: ProcessWindowFunction.Context, elements: Iterable[Any]):
        window = context.window()
        for result in elements:
            yield {self.key_name: key, self.start_name: window.start, self.end_name: window.end, **result}
