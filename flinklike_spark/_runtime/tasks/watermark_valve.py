"""Combining the watermarks and watermark statuses of a task's input channels."""

from __future__ import annotations

from flinklike_spark.common.watermark_strategy import MIN_WATERMARK

__all__ = ["WatermarkValve"]


class WatermarkValve:
    """Combines per-channel watermarks and watermark statuses (Flink's ``StatusWatermarkValve``).

    The combined watermark is the minimum over the channels that are active,
    not finished and *aligned*: an idle channel is left out, so an idle source
    subtask does not hold event time back. A channel that becomes active again
    rejoins the minimum only once its watermark has caught up with the combined
    one (until then its records may be late, as in Flink). When every open
    channel is idle the output is idle too: the highest channel watermark is
    emitted first (Flink does the same), then the IDLE status; the first
    channel to become active makes the output active again.

    ``input_*`` return ``(new combined watermark or None, new output status or None)``
    where a status is ``True`` for idle and ``False`` for active.
    """

    def __init__(self, num_channels: int) -> None:
        self._watermarks = [MIN_WATERMARK] * num_channels
        self._finished = [False] * num_channels
        self._idle = [False] * num_channels
        self._aligned = [True] * num_channels
        self.current = MIN_WATERMARK
        self.idle = False  # the output's status

    def _open(self, channel: int) -> bool:
        return not self._finished[channel]

    def _combined(self) -> int | None:
        candidates = [
            w for c, w in enumerate(self._watermarks)
            if self._open(c) and not self._idle[c] and self._aligned[c]
        ]  # fmt: skip
        return min(candidates) if candidates else None

    def input_watermark(self, channel: int, timestamp: int) -> int | None:
        """Record a channel's watermark; return the new combined watermark if it advanced."""
        if self._idle[channel]:
            return None  # Flink ignores watermarks of a channel it considers idle
        if timestamp > self._watermarks[channel]:
            self._watermarks[channel] = timestamp
            if timestamp >= self.current:
                self._aligned[channel] = True
        return self._advance()

    def input_status(self, channel: int, idle: bool) -> tuple[int | None, bool | None]:
        """Record a channel's WatermarkStatus; return (advanced watermark, changed output status)."""
        if self._idle[channel] == idle or not self._open(channel):
            return None, None
        self._idle[channel] = idle
        if idle:
            self._aligned[channel] = False
            if all(self._idle[c] for c in range(len(self._idle)) if self._open(c)):
                self.idle = True
                return self._advance_to_max(), True
            return self._advance(), None
        self._aligned[channel] = self._watermarks[channel] >= self.current
        if self.idle:
            self.idle = False
            return None, False
        return None, None

    def channel_finished(self, channel: int) -> tuple[int | None, bool | None]:
        """A channel ended; return (advanced watermark, changed output status): when the channels
        left open are all idle, the output becomes idle (at their highest watermark)."""
        self._finished[channel] = True
        still_open = [c for c in range(len(self._finished)) if self._open(c)]
        if still_open and not self.idle and all(self._idle[c] for c in still_open):
            self.idle = True
            return self._advance_to_max(), True
        return self._advance(), None

    def _advance_to_max(self) -> int | None:
        """All open channels are idle: the highest of their watermarks becomes the combined one."""
        open_marks = [w for c, w in enumerate(self._watermarks) if self._open(c)]
        if open_marks and max(open_marks) > self.current:
            self.current = max(open_marks)
            return self.current
        return None

    def _advance(self) -> int | None:
        combined = self._combined()
        if combined is not None and combined > self.current:
            self.current = combined
            return combined
        return None
