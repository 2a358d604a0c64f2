"""The engine's progress behind a ``readStream.format("flinklike")`` query, where Spark users can find it.

pyspark 4.2's Python data source API has no hook for a source's custom
metrics in ``StreamingQueryProgress`` (Scala sources implement
``ReportsSourceMetrics``; Python stream readers can only report their latest
offset). So the bridge's runner reports the engine's progress itself: every
:data:`PROGRESS_INTERVAL` seconds it asks its job's REST API (on loopback)
and writes the answer into the runner's record (``job_record(dir).progress``,
next to ``web_interface_url``) and one line into its log
(``<checkpoint dir>/_bridge/runner.log``).

The progress dict uses Flink's names: the job metrics ``numRestarts``,
``numberOfCompletedCheckpoints``, ``numberOfFailedCheckpoints``,
``lastCheckpointDuration`` (ms), ``lastCheckpointSize`` (bytes), the job's
``state``, and ``vertices``: ``{vertex name: {"read-records", "write-records"}}``.

This module does not import pyspark: it runs in the runner process.
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.request
from collections.abc import Callable
from typing import Any

__all__ = ["JOB_METRICS", "PROGRESS_INTERVAL", "ProgressReporter", "fetch_progress"]

_log = logging.getLogger(__name__)

PROGRESS_INTERVAL = 5.0
"""Seconds between two progress reports of a bridged job."""

JOB_METRICS = ("numRestarts", "numberOfCompletedCheckpoints", "numberOfFailedCheckpoints", "lastCheckpointDuration",
               "lastCheckpointSize")  # fmt: skip


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def fetch_progress(base_url: str, job_id: str) -> dict[str, Any]:
    """The job's progress from its REST API at ``base_url`` (raises OSError if it does not answer)."""
    job = _get(f"{base_url}/jobs/{job_id}")
    metrics = _get(f"{base_url}/jobs/{job_id}/metrics?get={','.join(JOB_METRICS)}")
    progress: dict[str, Any] = {"state": job["state"]}
    progress.update({m["id"]: float(m["value"]) for m in metrics})
    progress["vertices"] = {
        v["name"]: {"read-records": v["metrics"]["read-records"], "write-records": v["metrics"]["write-records"]}
        for v in job["vertices"]
    }
    return progress


def describe(progress: dict[str, Any]) -> str:
    """One log line: state, checkpoints, restarts and records per vertex."""
    vertices = "; ".join(f"{name}: {v['read-records']} in, {v['write-records']} out"
                         for name, v in progress.get("vertices", {}).items())  # fmt: skip
    return (
        f"{progress.get('state')}, {int(progress.get('numberOfCompletedCheckpoints', 0))} checkpoints completed "
        f"(last {int(progress.get('lastCheckpointDuration', -1))} ms, {int(progress.get('lastCheckpointSize', -1))} "
        f"bytes), {int(progress.get('numberOfFailedCheckpoints', 0))} failed, "
        f"{int(progress.get('numRestarts', 0))} restarts; {vertices}"
    )


class ProgressReporter:
    """Reports a running job's progress to ``write`` and the log every ``interval`` seconds until ``stop``.

    Args:
        client: the job's JobClient (its ``web_interface_url`` and ``job_id``).
        write: called with each progress dict (on the reporter's thread).
        interval: seconds between reports.
    """

    def __init__(self, client, write: Callable[[dict[str, Any]], None], *, interval: float = PROGRESS_INTERVAL) -> None:
        self._client = client
        self._write = write
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="bridge-progress", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        url, job_id = self._client.web_interface_url, self._client.job_id
        while not self._stop.wait(self._interval):
            try:
                progress = fetch_progress(url, job_id)
            except (OSError, ValueError, KeyError) as exc:  # the job is ending: the next report or none
                _log.debug("no progress of job %s: %s", job_id, exc)
                continue
            if self._stop.is_set():
                return
            self._write(progress)
            _log.info("engine job %s: %s", job_id, describe(progress))

    def stop(self) -> None:
        """Stop reporting; returns once no report is being written any more."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
