"""User metrics of a job's functions: PyFlink's ``MetricGroup`` with counters, gauges, meters, distributions.

``runtime_context.get_metrics_group()`` in a function's ``open`` gives the
metric group of its operator (subtask); metrics registered there are updated
on the task thread and read with the task's own metrics
(``JobClient.task_metrics()``: ``"<operator>.<group>...<name>"`` keys; the
REST API's ``/jobs/:jobid/vertices/:vertexid/subtasks/metrics`` under the same
names; Prometheus as ``flink_taskmanager_job_task_operator_<group>_<name>``
with an ``operator_name`` label)::

    class Parse(MapFunction):
        def open(self, runtime_context):
            self.bad = runtime_context.get_metrics_group().counter("bad_records")

        def map(self, value):
            if not value["ok"]:
                self.bad.inc()
            return value

Reads from other threads may see a value a few updates old (as Flink's
reporters do); no lock is taken on the record path.
"""

from __future__ import annotations

import collections
import math
import re
import time
from collections.abc import Callable
from typing import Any

__all__ = ["Counter", "Distribution", "Gauge", "Meter", "MetricGroup", "MetricRegistry"]

_NAME = re.compile(r"[A-Za-z0-9_.\-]+")


def _check_name(name: str, what: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"{what} name must be a non-empty string of letters, digits, '_', '-', '.'; got {name!r}")
    return name


class Counter:
    """A count that goes up (and down): ``inc(n)``, ``dec(n)``, ``get_count()``."""

    __slots__ = ("_count",)

    def __init__(self) -> None:
        self._count = 0

    def inc(self, n: int = 1) -> None:
        self._count += n

    def dec(self, n: int = 1) -> None:
        self._count -= n

    def get_count(self) -> int:
        return self._count

    def values(self) -> dict[str, float]:
        return {"": self._count}


class Gauge:
    """A value read when metrics are reported: ``obj()`` (PyFlink's ``gauge(name, obj)``)."""

    __slots__ = ("_read",)

    def __init__(self, read: Callable[[], Any]) -> None:
        if not callable(read):
            raise TypeError(f"a gauge needs a callable returning a number, got {read!r}")
        self._read = read

    def get_value(self) -> Any:
        return self._read()

    def values(self) -> dict[str, float]:
        try:
            value = self._read()
        except Exception:  # noqa: BLE001 - a failing gauge must not fail the report of the others
            return {}
        return {"": value} if isinstance(value, (int, float)) and not isinstance(value, bool) else {}


class Meter:
    """Events and their rate per second over the last ``time_span_in_seconds``: ``mark_event(n)``."""

    __slots__ = ("_clock", "_count", "_events", "_span")

    def __init__(self, time_span_in_seconds: int = 60, *, clock: Callable[[], float] = time.monotonic) -> None:
        if not isinstance(time_span_in_seconds, int) or time_span_in_seconds < 1:
            raise ValueError(f"time_span_in_seconds must be an int >= 1, got {time_span_in_seconds!r}")
        self._span = time_span_in_seconds
        self._clock = clock
        self._count = 0
        self._events: collections.deque[tuple[int, int]] = collections.deque()  # (second, events in it)

    def mark_event(self, value: int = 1) -> None:
        self._count += value
        second = int(self._clock())
        if self._events and self._events[-1][0] == second:
            self._events[-1] = (second, self._events[-1][1] + value)
        else:
            self._events.append((second, value))
            while self._events and self._events[0][0] <= second - self._span:
                self._events.popleft()

    def get_count(self) -> int:
        return self._count

    def get_rate(self) -> float:
        """Events per second over the time span (fewer seconds while the meter is younger)."""
        now = int(self._clock())
        recent = [(s, n) for s, n in list(self._events) if s > now - self._span]
        if not recent:
            return 0.0
        return sum(n for _, n in recent) / max(1, min(self._span, now - recent[0][0] + 1))

    def values(self) -> dict[str, float]:
        return {"count": self._count, "rate": self.get_rate()}


class Distribution:
    """Count, sum, min, max and mean of reported values: ``update(value)`` (PyFlink's distribution)."""

    __slots__ = ("_count", "_max", "_min", "_sum")

    def __init__(self) -> None:
        self._count, self._sum, self._min, self._max = 0, 0.0, math.inf, -math.inf

    def update(self, value: float) -> None:
        self._count += 1
        self._sum += value
        self._min = min(self._min, value)
        self._max = max(self._max, value)

    def values(self) -> dict[str, float]:
        if not self._count:
            return {"count": 0}
        return {
            "count": self._count, "sum": self._sum, "min": self._min, "max": self._max,
            "mean": self._sum / self._count,
        }  # fmt: skip


class MetricRegistry:
    """The user metrics of one task: what its metric groups registered, by full name."""

    def __init__(self) -> None:
        self._metrics: dict[str, Counter | Gauge | Meter | Distribution] = {}

    def register(self, name: str, metric: Any) -> Any:
        """Register ``metric`` under ``name``, or return the one registered there (same kind) before."""
        known = self._metrics.get(name)
        if known is None:
            self._metrics[name] = metric
            return metric
        if type(known) is not type(metric):
            raise ValueError(
                f"metric {name!r} is a {type(known).__name__}, cannot register it as a {type(metric).__name__}"
            )
        return known

    def snapshot(self) -> dict[str, float]:
        """``{"<name>" or "<name>.<field>": value}`` of every metric (numbers only)."""
        result: dict[str, float] = {}
        for name, metric in list(self._metrics.items()):
            for field, value in metric.values().items():
                result[f"{name}.{field}" if field else name] = value
        return result


class MetricGroup:
    """A named scope of metrics (PyFlink's ``MetricGroup``); ``add_group`` nests scopes."""

    def __init__(self, registry: MetricRegistry, scope: tuple[str, ...]) -> None:
        self._registry = registry
        self._scope = scope

    def add_group(self, name: str, extra: str | None = None) -> MetricGroup:
        """A subgroup ``name`` (with ``extra``: the key-value group ``name.extra``, as in PyFlink)."""
        parts = (_check_name(name, "group"),) if extra is None else (name, _check_name(extra, "group value"))
        return MetricGroup(self._registry, self._scope + parts)

    def _name(self, name: str) -> str:
        return ".".join((*self._scope, _check_name(name, "metric")))

    def counter(self, name: str) -> Counter:
        return self._registry.register(self._name(name), Counter())

    def gauge(self, name: str, obj: Callable[[], Any]) -> Gauge:
        return self._registry.register(self._name(name), Gauge(obj))

    def meter(self, name: str, time_span_in_seconds: int = 60) -> Meter:
        return self._registry.register(self._name(name), Meter(time_span_in_seconds))

    def distribution(self, name: str) -> Distribution:
        return self._registry.register(self._name(name), Distribution())
