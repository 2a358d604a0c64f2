"""The autoscaler's metrics: every subtask's counters per control-loop tick, kept for ``job.autoscaler.metrics.window``.

A sample holds, per vertex and per current execution attempt, the counters the
TaskExecutor reported last (:meth:`MetricStore.raw
<flinklike_spark._runtime.rest.metric_store.MetricStore.raw>`): the task's
uptime, records in and out, busy seconds (neither idle nor backpressured) and,
for a source, its backlog (Flink's ``pendingRecords``). Rates over the window
are counter differences over the same attempt's uptime between the oldest and
newest sample that hold it: exact whatever the reports' timing, as Flink's
autoscaler uses accumulated busy time and record counts. A vertex one of whose
subtasks has not reported yet is left out of that tick.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Iterable, Mapping

from flinklike_spark._runtime.autoscaler.evaluator import VertexRates

__all__ = ["MetricWindow", "SubtaskCounters", "VertexSample", "sample_vertex"]


@dataclasses.dataclass(frozen=True)
class SubtaskCounters:
    """One execution attempt's counters since it started (seconds of its own uptime)."""

    uptime: float
    records_in: float
    records_out: float
    busy: float
    backlog: float


VertexSample = Mapping[str, SubtaskCounters]
"""A vertex's subtasks in one sample: execution attempt id -> counters."""


def sample_vertex(raw: Iterable[tuple[str, Mapping[str, float] | None]]) -> VertexSample | None:
    """A vertex's sample from ``(attempt id, raw snapshot)`` of every subtask; None if one has not reported."""
    sample = {}
    for attempt, snapshot in raw:
        if snapshot is None or "uptime_seconds" not in snapshot:
            return None
        uptime = float(snapshot["uptime_seconds"])
        idle = float(snapshot.get("idle_seconds", 0.0)) + float(snapshot.get("backpressured_seconds", 0.0))
        sample[attempt] = SubtaskCounters(
            uptime=uptime, records_in=float(snapshot.get("records_in", 0)),
            records_out=float(snapshot.get("records_out", 0)), busy=max(0.0, uptime - idle),
            backlog=float(snapshot.get("pending_records", 0.0)),
        )  # fmt: skip
    return sample or None


class MetricWindow:
    """Samples of the last ``window`` seconds; :meth:`full` once they span the window.

    Args:
        window: seconds of samples kept (``job.autoscaler.metrics.window``).
        clock: seconds, monotonic.
    """

    def __init__(self, window: float, *, clock: Callable[[], float]) -> None:
        self._window = window
        self._clock = clock
        self._samples: collections.deque[tuple[float, Mapping[str, VertexSample]]] = collections.deque()
        self._started: float | None = None

    def clear(self) -> None:
        self._samples.clear()
        self._started = None

    def add(self, samples: Mapping[str, VertexSample]) -> None:
        now = self._clock()
        if self._started is None:
            self._started = now
        self._samples.append((now, dict(samples)))
        while len(self._samples) > 2 and self._samples[1][0] <= now - self._window:
            self._samples.popleft()  # keep one sample at or before the window's start

    def full(self) -> bool:
        """Samples were collected for a whole window (since the last :meth:`clear`)."""
        return self._started is not None and self._clock() - self._started >= self._window and len(self._samples) > 1

    def averages(self) -> dict[str, VertexRates]:
        """Per vertex, over the window: rates and busy share of its subtasks, the newest backlog and its growth."""
        rates = {}
        for vertex_id in self._samples[-1][1] if self._samples else ():
            seen = [(at, samples[vertex_id]) for at, samples in self._samples if vertex_id in samples]
            (first_at, first), (last_at, last) = seen[0], seen[-1]
            records_in = records_out = 0.0
            busiest = 0.0
            for attempt, end in last.items():
                start = next((s[attempt] for _, s in seen if attempt in s), end)
                span = end.uptime - start.uptime
                if span <= 0:
                    continue
                records_in += (end.records_in - start.records_in) / span
                records_out += (end.records_out - start.records_out) / span
                busiest = max(busiest, min(1.0, (end.busy - start.busy) / span))
            backlog = sum(c.backlog for c in last.values())
            growth = (
                (backlog - sum(c.backlog for c in first.values())) / (last_at - first_at) if last_at > first_at else 0.0
            )
            rates[vertex_id] = VertexRates(records_in, records_out, busiest, backlog=backlog, backlog_growth=growth)
        return rates
