"""Helpers of the REST, Prometheus and dashboard tests: HTTP calls and Flink's documented response fields."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

__all__ = [
    "BACKPRESSURE_FIELDS",
    "BACKPRESSURE_SUBTASK_FIELDS",
    "CHECKPOINTS_FIELDS",
    "CHECKPOINT_CONFIG_FIELDS",
    "CHECKPOINT_COUNTS_FIELDS",
    "CHECKPOINT_FIELDS",
    "CHECKPOINT_LATEST_FIELDS",
    "CHECKPOINT_SUMMARY_FIELDS",
    "COMPLETED_CHECKPOINT_FIELDS",
    "CONFIG_FIELDS",
    "EXCEPTIONS_FIELDS",
    "EXCEPTION_ENTRY_FIELDS",
    "FEATURES_FIELDS",
    "HARDWARE_FIELDS",
    "IO_METRICS_FIELDS",
    "JOB_DETAILS_FIELDS",
    "JOB_OVERVIEW_FIELDS",
    "JOB_VERTEX_FIELDS",
    "OVERVIEW_FIELDS",
    "PLAN_FIELDS",
    "PLAN_NODE_FIELDS",
    "STATS_SUMMARY_FIELDS",
    "SUBTASK_FIELDS",
    "TASKMANAGER_FIELDS",
    "TASK_STATES",
    "VERTEX_DETAILS_FIELDS",
    "get",
    "has_fields",
    "request",
    "wait_for",
]

# Field names of the responses, as Flink's REST API reference documents them (flink-docs rest_v1_dispatcher and
# the OpenAPI specification generated from Flink's message classes, e.g. SubtaskBackPressureInfo.backpressureLevel).
CONFIG_FIELDS = {"refresh-interval", "timezone-name", "timezone-offset", "flink-version", "flink-revision", "features"}
FEATURES_FIELDS = {"web-submit", "web-cancel", "web-history", "web-rescale"}
OVERVIEW_FIELDS = {"taskmanagers", "slots-total", "slots-available", "jobs-running", "jobs-finished",
                   "jobs-cancelled", "jobs-failed", "flink-version", "flink-commit"}  # fmt: skip
JOB_OVERVIEW_FIELDS = {"jid", "name", "state", "start-time", "end-time", "duration", "last-modification", "tasks"}
JOB_DETAILS_FIELDS = {"jid", "name", "isStoppable", "state", "job-type", "start-time", "end-time", "duration",
                      "maxParallelism", "now", "timestamps", "vertices", "status-counts", "plan"}  # fmt: skip
JOB_VERTEX_FIELDS = {"id", "name", "maxParallelism", "parallelism", "status", "start-time", "end-time", "duration",
                     "tasks", "metrics"}  # fmt: skip
IO_METRICS_FIELDS = {"read-bytes", "read-bytes-complete", "write-bytes", "write-bytes-complete", "read-records",
                     "read-records-complete", "write-records", "write-records-complete",
                     "accumulated-backpressured-time", "accumulated-idle-time", "accumulated-busy-time"}  # fmt: skip
TASK_STATES = {"CREATED", "SCHEDULED", "DEPLOYING", "INITIALIZING", "RUNNING", "FINISHED", "CANCELING", "CANCELED",
               "FAILED", "RECONCILING"}  # fmt: skip
PLAN_FIELDS = {"jid", "name", "type", "nodes"}
PLAN_NODE_FIELDS = {"id", "parallelism", "operator", "operator_strategy", "description", "optimizer_properties"}
CHECKPOINTS_FIELDS = {"counts", "summary", "latest", "history"}
CHECKPOINT_COUNTS_FIELDS = {"restored", "total", "in_progress", "completed", "failed"}
CHECKPOINT_SUMMARY_FIELDS = {"checkpointed_size", "state_size", "end_to_end_duration", "alignment_buffered",
                             "processed_data", "persisted_data"}  # fmt: skip
STATS_SUMMARY_FIELDS = {"min", "max", "avg", "p50", "p90", "p95", "p99", "p999"}
CHECKPOINT_LATEST_FIELDS = {"completed", "savepoint", "failed", "restored"}
CHECKPOINT_FIELDS = {"className", "id", "status", "is_savepoint", "trigger_timestamp", "latest_ack_timestamp",
                     "checkpointed_size", "state_size", "end_to_end_duration", "alignment_buffered", "processed_data",
                     "persisted_data", "num_subtasks", "num_acknowledged_subtasks", "checkpoint_type",
                     "tasks"}  # fmt: skip
COMPLETED_CHECKPOINT_FIELDS = CHECKPOINT_FIELDS | {"external_path", "discarded"}
CHECKPOINT_CONFIG_FIELDS = {"mode", "interval", "timeout", "min_pause", "max_concurrent", "externalization",
                            "state_backend", "checkpoint_storage", "unaligned_checkpoints",
                            "tolerable_failed_checkpoints", "aligned_checkpoint_timeout",
                            "checkpoints_after_tasks_finish"}  # fmt: skip
EXCEPTIONS_FIELDS = {"root-exception", "timestamp", "all-exceptions", "truncated", "exceptionHistory"}
EXCEPTION_ENTRY_FIELDS = {"exceptionName", "stacktrace", "timestamp", "taskName", "endpoint", "taskManagerId",
                          "failureLabels", "concurrentExceptions"}  # fmt: skip
VERTEX_DETAILS_FIELDS = {"id", "name", "parallelism", "maxParallelism", "now", "subtasks"}
SUBTASK_FIELDS = {"subtask", "status", "attempt", "endpoint", "start-time", "end-time", "duration", "metrics",
                  "taskmanager-id", "status-duration"}  # fmt: skip
BACKPRESSURE_FIELDS = {"status", "backpressureLevel", "end-timestamp", "subtasks"}
BACKPRESSURE_SUBTASK_FIELDS = {"subtask", "attempt-number", "backpressureLevel", "ratio", "idleRatio", "busyRatio"}
TASKMANAGER_FIELDS = {"id", "path", "dataPort", "jmxPort", "timeSinceLastHeartbeat", "slotsNumber", "freeSlots",
                      "totalResource", "freeResource", "hardware", "memoryConfiguration", "blocked"}  # fmt: skip
HARDWARE_FIELDS = {"cpuCores", "physicalMemory", "freeMemory", "managedMemory"}


def request(url: str, method: str = "GET", body: Any = None) -> tuple[int, Any]:
    """(HTTP status, parsed JSON body) of one request; error statuses are returned, not raised."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def get(url: str) -> Any:
    status, body = request(url)
    assert status == 200, f"GET {url}: {status} {body}"
    return body


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 60.0, interval: float = 0.2) -> Any:
    """Poll ``probe`` until it returns something truthy; fail naming ``what`` and the last value."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"{what} within {timeout} s; last: {last!r}")


def has_fields(value: dict, fields: set[str], what: str) -> None:
    """``value`` carries every one of Flink's ``fields`` (the engine may add more)."""
    missing = fields - set(value)
    assert not missing, f"{what} lacks Flink's fields {sorted(missing)}: {sorted(value)}"
