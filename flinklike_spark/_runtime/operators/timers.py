"""Keyed timers: event-time and processing-time, deduplicated per (timestamp, key).

Deletion is lazy: a deleted timer stays in the heap but is skipped when popped.
Event-time timers fire when the operator's watermark reaches their timestamp;
processing-time timers fire when the task's clock does.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any

from flinklike_spark.datastream.functions import TimeDomain

__all__ = ["KeyedTimers"]


class _TimerQueue:
    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Any]] = []
        self._live: set[tuple[int, Any]] = set()
        self._seq = itertools.count()

    def add(self, timestamp: int, key: Any) -> None:
        entry = (timestamp, key)
        if entry not in self._live:
            self._live.add(entry)
            heapq.heappush(self._heap, (timestamp, next(self._seq), key))

    def delete(self, timestamp: int, key: Any) -> None:
        self._live.discard((timestamp, key))

    def pop_due(self, until: int) -> list[tuple[int, Any]]:
        due = []
        heap = self._heap
        while heap and heap[0][0] <= until:
            timestamp, _, key = heapq.heappop(heap)
            if (timestamp, key) in self._live:
                self._live.discard((timestamp, key))
                due.append((timestamp, key))
        return due

    def pop_next_due(self, until: int) -> tuple[int, Any] | None:
        """The earliest live timer with timestamp <= ``until`` (removed), or None."""
        heap = self._heap
        while heap and heap[0][0] <= until:
            timestamp, _, key = heapq.heappop(heap)
            if (timestamp, key) in self._live:
                self._live.discard((timestamp, key))
                return timestamp, key
        return None

    def next_timestamp(self) -> int | None:
        heap = self._heap
        while heap and (heap[0][0], heap[0][2]) not in self._live:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def entries(self) -> list[tuple[int, Any]]:
        return sorted(self._live, key=lambda e: e[0])

    def __len__(self) -> int:
        return len(self._live)


class KeyedTimers:
    """The timers of one keyed operator subtask."""

    def __init__(self) -> None:
        self.event_time = _TimerQueue()
        self.processing_time = _TimerQueue()

    def advance_watermark(self, watermark: int, fire: Callable[[int, Any, TimeDomain], None]) -> None:
        """Fire every event-time timer with timestamp <= ``watermark``, oldest first.

        Timers registered by ``fire`` for timestamps <= ``watermark`` fire in the same call, in
        timestamp order with the others (one timer is taken at a time, as Flink's timer service does:
        a timer registered while firing can be earlier than timers already due).
        """
        queue = self.event_time
        while (due := queue.pop_next_due(watermark)) is not None:
            fire(due[0], due[1], TimeDomain.EVENT_TIME)

    def advance_processing_time(self, now_ms: int, fire: Callable[[int, Any, TimeDomain], None]) -> None:
        for timestamp, key in self.processing_time.pop_due(now_ms):
            fire(timestamp, key, TimeDomain.PROCESSING_TIME)

    def next_processing_time(self) -> int | None:
        return self.processing_time.next_timestamp()
