"""Idle detection for ``WatermarkStrategy.with_idleness`` (Flink's ``WatermarksWithIdleness``).

An output that has seen no record for the idle timeout (processing time) is
marked idle (a ``WatermarkStatus`` IDLE event downstream, so the watermark
valves there leave it out); its next record marks it active first. Sources
and ``assign_timestamps_and_watermarks`` use it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

__all__ = ["IdlenessTracker"]


class IdlenessTracker:
    """Tracks one output's activity; ``emit_status(idle)`` is called on every change."""

    __slots__ = ("_emit", "_idle", "_last_ms", "_timeout_ms")

    def __init__(self, timeout: timedelta, emit_status: Callable[[bool], None], *, now_ms: int) -> None:
        self._timeout_ms = int(timeout.total_seconds() * 1000)
        self._emit = emit_status
        self._last_ms = now_ms
        self._idle = False

    @property
    def idle(self) -> bool:
        return self._idle

    def on_records(self, now_ms: int) -> None:
        """Records are about to be emitted: become active first if idle."""
        self._last_ms = now_ms
        if self._idle:
            self._idle = False
            self._emit(False)

    def check(self, now_ms: int) -> None:
        """Become idle if no record came for the timeout."""
        if not self._idle and now_ms - self._last_ms >= self._timeout_ms:
            self._idle = True
            self._emit(True)

    def next_check_ms(self) -> int | None:
        """When the output becomes idle if no record comes (None: it is idle already)."""
        return None if self._idle else self._last_ms + self._timeout_ms

    def end(self) -> None:
        """End of input: leave idleness, so the final watermark is not ignored downstream."""
        if self._idle:
            self._idle = False
            self._emit(False)
