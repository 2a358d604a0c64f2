"""MetricStore: the latest task metrics of a cluster, with Flink's metric names and per-second rates.

TaskExecutors send their tasks' raw counters (``records_in``, ``bytes_out``,
``idle_seconds`` ..., see :class:`~flinklike_spark._runtime.tasks.stream_task.TaskMetrics`)
with every heartbeat; the REST API also asks them directly when the newest
values are older than ``metrics.fetcher.update-interval`` (Flink's
``MetricFetcher``). The store turns two successive reports of one execution
into rates (the counters' growth over the task's own uptime, so no clock of
another machine is involved) and names everything as Flink does:
``numRecordsIn``, ``numRecordsInPerSecond``, ``busyTimeMsPerSecond``,
``currentInputWatermark``, a source's ``pendingRecords`` ...; user metrics keep their names.

Thread-safe: heartbeats (RPC threads) write, REST and Prometheus threads read.
The task threads pay nothing for it: the counters exist anyway and are read,
racily, only when a report is built.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

__all__ = ["RAW_TASK_METRICS", "MetricStore", "TaskMetricsView", "flink_task_metrics"]

#: The raw counters of TaskMetrics.snapshot() (everything else in a snapshot is a user metric).
RAW_TASK_METRICS = frozenset({
    "records_in", "records_out", "bytes_in", "bytes_out", "backpressured_seconds", "idle_seconds",
    "uptime_seconds", "input_watermark", "pending_records",
})  # fmt: skip

_COUNTERS = {"numRecordsIn": "records_in", "numRecordsOut": "records_out", "numBytesIn": "bytes_in",
             "numBytesOut": "bytes_out"}  # fmt: skip

TaskMetricsView = dict[str, float]


def flink_task_metrics(latest: Mapping[str, float], previous: Mapping[str, float] | None) -> TaskMetricsView:
    """Flink's task metrics from the newest raw snapshot and the one before it (None: the first).

    Rates are over the interval between the two snapshots (since the task's
    start for the first one). Time shares are milliseconds per second, as
    Flink's ``busyTimeMsPerSecond``: busy is what neither idle nor
    backpressured time took.
    """
    result: TaskMetricsView = {}
    for name, raw in _COUNTERS.items():
        result[name] = float(latest.get(raw, 0))
    uptime = float(latest.get("uptime_seconds", 0.0))
    base = previous if previous is not None and previous.get("uptime_seconds", 0.0) < uptime else None
    span = uptime - (base.get("uptime_seconds", 0.0) if base is not None else 0.0)

    def rate(raw: str) -> float:
        if span <= 0:
            return 0.0
        return max(0.0, (float(latest.get(raw, 0)) - float(base.get(raw, 0) if base is not None else 0)) / span)

    for name, raw in _COUNTERS.items():
        result[f"{name}PerSecond"] = rate(raw)
    idle = min(1000.0, rate("idle_seconds") * 1000.0)
    backpressured = min(1000.0 - idle, rate("backpressured_seconds") * 1000.0)
    result["idleTimeMsPerSecond"] = idle
    result["backPressuredTimeMsPerSecond"] = backpressured
    result["busyTimeMsPerSecond"] = max(0.0, 1000.0 - idle - backpressured) if span > 0 else 0.0
    idle_ms = float(latest.get("idle_seconds", 0.0)) * 1000.0
    backpressured_ms = float(latest.get("backpressured_seconds", 0.0)) * 1000.0
    result["accumulatedIdleTimeMs"] = idle_ms
    result["accumulatedBackPressuredTimeMs"] = backpressured_ms
    result["accumulatedBusyTimeMs"] = max(0.0, uptime * 1000.0 - idle_ms - backpressured_ms)
    if "input_watermark" in latest:
        result["currentInputWatermark"] = float(latest["input_watermark"])
    if "pending_records" in latest:  # a source's backlog (FLIP-33)
        result["pendingRecords"] = float(latest["pending_records"])
    for name, value in latest.items():
        if name not in RAW_TASK_METRICS:
            result[name] = value
    return result


class MetricStore:
    """Latest metrics per execution attempt (``full_id``), in Flink's names.

    Args:
        clock: monotonic seconds (injectable), for the age of the newest report.
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._raw: dict[str, tuple[Mapping[str, float], Mapping[str, float] | None]] = {}
        self._views: dict[str, TaskMetricsView] = {}
        self._updated = -float("inf")

    def add_task_metrics(self, metrics: Mapping[str, Mapping[str, float]]) -> None:
        """Take one TaskExecutor's report: ``{execution full id: raw snapshot}``."""
        with self._lock:
            for execution_id, snapshot in metrics.items():
                known = self._raw.get(execution_id)
                previous = known[0] if known is not None else None
                if previous is not None and previous.get("uptime_seconds", 0) >= snapshot.get("uptime_seconds", 0):
                    continue  # an older report arriving late
                self._raw[execution_id] = (snapshot, previous)
                self._views[execution_id] = flink_task_metrics(snapshot, previous)
            self._updated = self._clock()

    def age(self) -> float:
        """Seconds since the newest report (infinite before the first)."""
        with self._lock:
            return self._clock() - self._updated

    def refresh_if_older(self, max_age: float, fetch: Callable[[], Mapping[str, Mapping[str, float]]]) -> None:
        """Ask ``fetch`` (every TaskExecutor) for new values if the newest are older than ``max_age`` seconds."""
        if self.age() > max_age:
            self.add_task_metrics(fetch())

    def task(self, execution_id: str) -> TaskMetricsView | None:
        with self._lock:
            view = self._views.get(execution_id)
            return dict(view) if view is not None else None

    def raw(self, execution_id: str) -> Mapping[str, float] | None:
        """The newest raw snapshot of an execution (its counters since it started), or None."""
        with self._lock:
            known = self._raw.get(execution_id)
            return dict(known[0]) if known is not None else None

    def forget(self, keep: Callable[[str], bool]) -> None:
        """Drop the metrics of executions for which ``keep(execution_id)`` is False."""
        with self._lock:
            for execution_id in [e for e in self._raw if not keep(e)]:
                del self._raw[execution_id]
                self._views.pop(execution_id, None)
