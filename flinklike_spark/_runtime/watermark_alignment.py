"""Watermark alignment (FLIP-182, split level FLIP-217): the sources of a group keep their watermarks close.

``WatermarkStrategy.with_watermark_alignment(group, max_drift, update_interval)``
on a source gives each of its subtasks an :class:`AlignmentReporter`. Every
``update_interval`` it sends a :class:`WatermarkReport` (the subtask's
watermark, or ``MAX_WATERMARK`` while it is idle, has no split or has
finished) over ``JobMasterGateway.report_watermark`` to the JobMaster's
:class:`WatermarkAlignmentCoordinator`, which answers with the highest
watermark the subtask may reach: the lowest watermark reported in the group
plus the reporter's drift (Flink's ``maxAllowedWatermark``). The source
operator pauses the splits whose watermark is beyond it (the subtask as a
whole, if its reader cannot pause splits) and resumes them when an answer
lets them go on. Reports travel on the reporter's own thread, so the task's
loop never waits for the JobMaster; until the first answer nothing is held
back, and when the JobMaster cannot be reached the last answer stands.

As in Flink the coordinator keeps the newest report of each subtask (a newer
attempt replaces an older one's, an older attempt's late report is ignored)
and computes the lowest over the subtasks that have reported; alignment is
best effort: between two updates a subtask reads on to its last bound.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable

from flinklike_spark.common.watermark_strategy import MAX_WATERMARK, WatermarkAlignment

__all__ = ["AlignmentReporter", "WatermarkAlignmentCoordinator", "WatermarkReport"]

_log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class WatermarkReport:
    """One source subtask's watermark for its alignment group (Flink's ``ReportedWatermarkEvent``).

    Attributes:
        job_id: the job whose JobMaster coordinates the group.
        group: the ``watermark_group`` of the source's strategy.
        reporter: the subtask, ``<vertex id>/<subtask index>``.
        attempt: the subtask's attempt number (a newer attempt's report replaces an older one's).
        watermark: its current watermark; ``MAX_WATERMARK`` while idle, without splits, or finished.
        max_drift_ms: the drift of the reporter's own strategy (sources of a group may differ).
    """

    job_id: str
    group: str
    reporter: str
    attempt: int
    watermark: int
    max_drift_ms: int


class WatermarkAlignmentCoordinator:
    """The JobMaster's view of every alignment group of a job; thread safe (RPC threads report)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # group -> reporter -> (attempt, watermark)
        self._groups: dict[str, dict[str, tuple[int, int]]] = {}

    def report(self, report: WatermarkReport) -> int:
        """Record ``report``; return the highest watermark its subtask may reach (group minimum + drift)."""
        with self._lock:
            group = self._groups.setdefault(report.group, {})
            known = group.get(report.reporter)
            if known is None or report.attempt >= known[0]:
                group[report.reporter] = (report.attempt, report.watermark)
            lowest = min(watermark for _, watermark in group.values())
        if lowest == MAX_WATERMARK:
            return MAX_WATERMARK  # every subtask of the group is idle or finished
        return min(lowest + report.max_drift_ms, MAX_WATERMARK)

    def group_watermarks(self) -> dict[str, int]:
        """Each group's lowest reported watermark (for logs and tests)."""
        with self._lock:
            return {name: min(w for _, w in group.values()) for name, group in self._groups.items() if group}


class AlignmentReporter:
    """Reports one source subtask's watermark on a thread of its own and keeps the group's answer.

    The task thread calls :meth:`set_watermark` whenever the subtask's
    watermark (or idleness) changes and reads :attr:`max_allowed`; both are a
    plain attribute access. :meth:`close` stops the thread; its last report
    says ``MAX_WATERMARK`` so that a finished subtask does not hold the group back.
    """

    def __init__(
        self,
        alignment: WatermarkAlignment,
        send: Callable[[WatermarkReport], int],
        *,
        job_id: str,
        reporter: str,
        attempt: int,
        initial_watermark: int,
    ) -> None:
        self._alignment = alignment
        self._send = send
        self._base = WatermarkReport(
            job_id=job_id, group=alignment.watermark_group, reporter=reporter, attempt=attempt,
            watermark=initial_watermark, max_drift_ms=alignment.max_drift_ms,
        )  # fmt: skip
        self._watermark = initial_watermark
        self.max_allowed = MAX_WATERMARK
        self._stop = threading.Event()
        self._failing = False
        self._thread = threading.Thread(
            target=self._run, name=f"watermark-alignment {alignment.watermark_group} {reporter}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def set_watermark(self, watermark: int) -> None:
        self._watermark = watermark

    def close(self) -> None:
        self._stop.set()
        self._watermark = MAX_WATERMARK
        self._thread.join(timeout=5)
        if not self._failing:  # finished: the group no longer waits for this subtask (not retried if unreachable)
            self._report_once()

    def _run(self) -> None:
        interval = self._alignment.update_interval.total_seconds()
        while True:
            self._report_once()
            if self._stop.wait(interval):
                return

    def _report_once(self) -> None:
        report = dataclasses.replace(self._base, watermark=self._watermark)
        try:
            self.max_allowed = self._send(report)
        except Exception as e:  # noqa: BLE001 - the JobMaster unreachable for a while: the last answer stands
            if not self._failing:
                _log.warning(
                    "watermark alignment of %s (group %r): reporting to the JobMaster failed (retried every %s; "
                    "the last bound, %d, stands): %s",
                    report.reporter, report.group, self._alignment.update_interval, self.max_allowed, e,
                )  # fmt: skip
            self._failing = True
            return
        if self._failing:
            _log.info("watermark alignment of %s (group %r): reporting works again", report.reporter, report.group)
        self._failing = False
