"""The JSON bodies of Flink's REST API, built from a JobMaster's state.

Every function here reads a JobMaster's execution graph, failover handler and
checkpoint statistics, so it must run on the JobMaster's main thread (the
:class:`~flinklike_spark._runtime.rest.server.RestServerEndpoint` posts it
there). Field names and shapes follow Flink's REST API reference
(``/jobs/:jobid``, ``/jobs/:jobid/checkpoints`` ...): timestamps are epoch
milliseconds, durations milliseconds, sizes bytes, ``-1`` where Flink reports
"not yet" (an end time of a running job), statuses upper case.
"""

from __future__ import annotations

import math
import time
import traceback
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from checkpointing.schemas import CheckpointKind, SnapshotAlignment
from flinklike_spark._runtime.graph.execution_state import ExecutionState, JobStatus
from flinklike_spark._runtime.jobmaster.checkpoint_stats import (
    CheckpointStats,
    CheckpointStatsStatus,
    RestoredCheckpointStats,
)
from flinklike_spark._runtime.rest.metric_store import TaskMetricsView

__all__ = [
    "FLINK_VERSION",
    "backpressure_level",
    "checkpoint_config",
    "checkpoint_details",
    "checkpoint_statistics",
    "job_details",
    "job_exceptions",
    "job_metrics",
    "job_overview",
    "job_plan",
    "vertex_backpressure",
    "vertex_details",
    "vertex_watermarks",
]

#: The Flink release whose REST API this mirrors (the dashboard shows it).
FLINK_VERSION = "1.20-flinklike"

MetricsOf = Callable[[str], TaskMetricsView | None]  # execution full id -> its metrics, if reported

_EXECUTION_STATES = [s.name for s in ExecutionState] + ["RECONCILING"]


def _ms(seconds: float | None) -> int:
    return -1 if seconds is None else int(seconds * 1000)


def _dt_ms(value: datetime | None) -> int:
    return -1 if value is None else int(value.timestamp() * 1000)


def _job_times(master) -> tuple[int, int, int]:
    """(start, end, duration) of a job in ms; end is -1 while it runs."""
    history = master.graph.job_status_history
    start = history[0][0] if history else time.time()
    status = master.status
    end = history[-1][0] if status.is_globally_terminal and history else None
    return _ms(start), _ms(end), _ms((end if end is not None else time.time()) - start)


def _state_counts(states: Iterable[ExecutionState]) -> dict[str, int]:
    counts = dict.fromkeys(_EXECUTION_STATES, 0)
    for state in states:
        counts[state.name] += 1
    return counts


def _vertex_status(states: list[ExecutionState]) -> ExecutionState:
    """Flink's aggregate of subtask states: the 'least advanced' that matters."""
    order = [ExecutionState.FAILED, ExecutionState.CANCELING, ExecutionState.CANCELED, ExecutionState.CREATED,
             ExecutionState.SCHEDULED, ExecutionState.DEPLOYING, ExecutionState.INITIALIZING,
             ExecutionState.RUNNING, ExecutionState.FINISHED]  # fmt: skip
    present = set(states)
    return next(s for s in order if s in present)


def _subtask_times(execution) -> tuple[int, int, int]:
    stamps = execution.state_timestamps
    start = stamps.get(ExecutionState.DEPLOYING) or stamps.get(ExecutionState.SCHEDULED)
    end = next((stamps[s] for s in (ExecutionState.FINISHED, ExecutionState.CANCELED, ExecutionState.FAILED)
                if s in stamps and execution.state is s), None)  # fmt: skip
    duration = -1 if start is None else _ms((end if end is not None else time.time()) - start)
    return _ms(start), _ms(end), duration


def _io_metrics(metrics: list[TaskMetricsView | None], complete: bool) -> dict[str, Any]:
    """Flink's ``IOMetricsInfo`` of a vertex (or subtask): the sums over its subtasks."""

    def total(name: str) -> int:
        return int(sum(m.get(name, 0.0) for m in metrics if m))

    return {
        "read-bytes": total("numBytesIn"), "read-bytes-complete": complete,
        "write-bytes": total("numBytesOut"), "write-bytes-complete": complete,
        "read-records": total("numRecordsIn"), "read-records-complete": complete,
        "write-records": total("numRecordsOut"), "write-records-complete": complete,
        "accumulated-backpressured-time": total("accumulatedBackPressuredTimeMs"),
        "accumulated-idle-time": total("accumulatedIdleTimeMs"),
        "accumulated-busy-time": float(total("accumulatedBusyTimeMs")),
    }  # fmt: skip


def _vertex_summary(ejv, metrics_of: MetricsOf) -> dict[str, Any]:
    executions = [v.current_execution for v in ejv.task_vertices]
    states = [e.state for e in executions]
    times = [_subtask_times(e) for e in executions]
    starts = [t[0] for t in times if t[0] >= 0]
    status = _vertex_status(states)
    start = min(starts) if starts else -1
    end = max(t[1] for t in times) if all(s.is_terminal for s in states) else -1
    metrics = [metrics_of(e.attempt_id.full_id) for e in executions]
    return {
        "id": ejv.id,
        "name": ejv.job_vertex.name,
        "maxParallelism": ejv.job_vertex.max_parallelism,
        "parallelism": ejv.parallelism,
        "status": status.name,
        "start-time": start,
        "end-time": end,
        "duration": -1 if start < 0 else (end if end >= 0 else _ms(time.time())) - start,
        "tasks": _state_counts(states),
        "metrics": _io_metrics(metrics, complete=all(s.is_terminal for s in states)),
    }


def job_plan(master) -> dict[str, Any]:
    """``/jobs/:jobid/plan``'s ``plan``: the job graph's nodes with their inputs."""
    graph = master.job_graph
    nodes = []
    for vertex in graph.vertices.values():
        nodes.append({
            "id": vertex.id,
            "parallelism": vertex.parallelism,
            "operator": "",
            "operator_strategy": "",
            "description": vertex.name,
            "inputs": [
                {"num": edge.input_index, "id": edge.source_id,
                 "ship_strategy": edge.partitioner.kind.name, "exchange": "pipelined_bounded"}
                for edge in vertex.inputs
            ],
            "optimizer_properties": {},
        })  # fmt: skip
    return {"jid": master.job_id, "name": graph.name, "type": "STREAMING", "nodes": nodes}


def job_overview(master) -> dict[str, Any]:
    """One entry of ``/jobs/overview``."""
    start, end, duration = _job_times(master)
    history = master.graph.job_status_history
    counts = [v.current_execution.state for v in master.graph.vertices()]
    return {
        "jid": master.job_id,
        "name": master.job_graph.name,
        "state": master.status.name,
        "start-time": start,
        "end-time": end,
        "duration": duration,
        "last-modification": _ms(history[-1][0]) if history else start,
        # Flink's JobDetails spell these lower case and add the total (unlike a vertex's "tasks")
        "tasks": {"total": len(counts), **{state.lower(): n for state, n in _state_counts(counts).items()}},
    }


def job_details(master, metrics_of: MetricsOf) -> dict[str, Any]:
    """``/jobs/:jobid``."""
    start, end, duration = _job_times(master)
    timestamps = dict.fromkeys((s.name for s in JobStatus), 0)
    for at, status in master.graph.job_status_history:
        timestamps[status.name] = _ms(at)
    vertices = [_vertex_summary(ejv, metrics_of) for ejv in master.graph.job_vertices.values()]
    status_counts = dict.fromkeys(_EXECUTION_STATES, 0)
    for vertex in vertices:
        status_counts[vertex["status"]] += 1
    return {
        "jid": master.job_id,
        "name": master.job_graph.name,
        "isStoppable": False,
        "state": master.status.name,
        "job-type": "STREAMING",
        "start-time": start,
        "end-time": end,
        "duration": duration,
        "maxParallelism": max((v.max_parallelism for v in master.job_graph.vertices.values()), default=-1),
        "now": _ms(time.time()),
        "timestamps": timestamps,
        "vertices": vertices,
        "status-counts": status_counts,
        "plan": job_plan(master),
    }


def _subtask_metrics_info(metrics: TaskMetricsView | None, complete: bool) -> dict[str, Any]:
    return _io_metrics([metrics], complete)


def vertex_details(master, vertex_id: str, metrics_of: MetricsOf) -> dict[str, Any]:
    """``/jobs/:jobid/vertices/:vertexid``: the vertex and one entry per subtask (current attempt)."""
    ejv = master.graph.get_job_vertex(vertex_id)
    subtasks = []
    for vertex in ejv.task_vertices:
        execution = vertex.current_execution
        start, end, duration = _subtask_times(execution)
        slot = execution.last_slot
        subtasks.append({
            "subtask": vertex.subtask_index,
            "status": execution.state.name,
            "attempt": execution.attempt_number,
            "endpoint": _endpoint(slot) if slot is not None else "(unassigned)",
            "start-time": start,
            "end-time": end,
            "duration": duration,
            "metrics": _subtask_metrics_info(metrics_of(execution.attempt_id.full_id), execution.is_terminal),
            "taskmanager-id": slot.resource_id if slot is not None else "(unassigned)",
            "start_time": start,
            "status-duration": _status_durations(execution),
        })  # fmt: skip
    return {
        "id": ejv.id,
        "name": ejv.job_vertex.name,
        "parallelism": ejv.parallelism,
        "maxParallelism": ejv.job_vertex.max_parallelism,
        "now": _ms(time.time()),
        "subtasks": subtasks,
    }


def _endpoint(slot) -> str:
    """``host:port`` of the TaskExecutor holding ``slot`` (Flink's ``endpoint``)."""
    return slot.physical.address.rpartition("://")[2]


def _status_durations(execution) -> dict[str, int]:
    """Milliseconds the attempt spent in each state it entered (the current one until now)."""
    history = execution.history
    result = {}
    for (at, state), following in zip(history, [*history[1:], (time.time(), None)], strict=True):
        end = following[0] if not (state.is_terminal and following[1] is None) else at
        result[state.name] = result.get(state.name, 0) + _ms(end - at)
    return result


def backpressure_level(ratio: float) -> str:
    """Flink's thresholds: up to 10 % of the time backpressured is ok, up to 50 % low, above high."""
    return "ok" if ratio <= 0.10 else ("low" if ratio <= 0.5 else "high")


def vertex_backpressure(master, vertex_id: str, metrics_of: MetricsOf) -> dict[str, Any]:
    """``/jobs/:jobid/vertices/:vertexid/backpressure`` from ``backPressuredTimeMsPerSecond`` (Flink >= 1.13)."""
    ejv = master.graph.get_job_vertex(vertex_id)
    subtasks = []
    for vertex in ejv.task_vertices:
        execution = vertex.current_execution
        metrics = metrics_of(execution.attempt_id.full_id) or {}
        ratio = metrics.get("backPressuredTimeMsPerSecond", 0.0) / 1000.0
        level = backpressure_level(ratio)
        subtasks.append({
            "subtask": vertex.subtask_index,
            "attempt-number": execution.attempt_number,
            "backpressureLevel": level,
            "backpressure-level": level,  # the spelling of Flink's older REST docs
            "ratio": round(ratio, 3),
            "idleRatio": round(metrics.get("idleTimeMsPerSecond", 0.0) / 1000.0, 3),
            "busyRatio": round(metrics.get("busyTimeMsPerSecond", 0.0) / 1000.0, 3),
        })  # fmt: skip
    worst = backpressure_level(max((s["ratio"] for s in subtasks), default=0.0))
    return {
        "status": "ok",
        "backpressureLevel": worst,
        "backpressure-level": worst,
        "end-timestamp": _ms(time.time()),
        "subtasks": subtasks,
    }


def vertex_watermarks(master, vertex_id: str, metrics_of: MetricsOf) -> list[dict[str, str]]:
    """``/jobs/:jobid/vertices/:vertexid/watermarks``: ``<subtask>.currentInputWatermark`` per subtask."""
    ejv = master.graph.get_job_vertex(vertex_id)
    result = []
    for vertex in ejv.task_vertices:
        metrics = metrics_of(vertex.current_execution.attempt_id.full_id) or {}
        if "currentInputWatermark" in metrics:
            result.append({"id": f"{vertex.subtask_index}.currentInputWatermark",
                           "value": str(int(metrics["currentInputWatermark"]))})  # fmt: skip
    return result


def _stack_trace(error: BaseException) -> str:
    remote = getattr(error, "remote_traceback", "")
    if remote:
        return f"{type(error).__module__}.{type(error).__name__}: {error}"
    return "".join(traceback.format_exception(type(error), error, error.__traceback__))


def job_exceptions(master, max_exceptions: int = 20) -> dict[str, Any]:
    """``/jobs/:jobid/exceptions``: the root exception and the exception history, newest first."""
    history = list(master.failover.handler.exception_history)
    entries = []
    for entry in reversed(history[-max_exceptions:]):
        cause = entry.root_cause
        name = getattr(cause, "exception_type", "") or f"{type(cause).__module__}.{type(cause).__name__}"
        location, resource_id = _task_location(master, entry.task) if entry.task is not None else (None, None)
        entries.append({
            "exceptionName": name,
            "stacktrace": _stack_trace(cause),
            "timestamp": _dt_ms(entry.timestamp),
            "taskName": entry.task,
            "location": location,
            "endpoint": location,
            "taskManagerId": resource_id,
            "failureLabels": {},
            "concurrentExceptions": [],
        })  # fmt: skip
    failure = master.scheduler.job_failure_cause if master.status is JobStatus.FAILED else None
    root = failure or (history[-1].root_cause if history else None)
    return {
        "root-exception": _stack_trace(root) if root is not None else None,
        "timestamp": entries[0]["timestamp"] if entries else None,
        "all-exceptions": [],
        "truncated": len(history) > max_exceptions,
        "exceptionHistory": {"entries": entries, "truncated": len(history) > max_exceptions},
    }


def _task_location(master, task: str) -> tuple[str | None, str | None]:
    """(``host:port``, resource id) of the TaskExecutor a task ``"<name> (<i>/<n>)#<attempt>"`` ran on, if known."""
    for vertex in master.graph.vertices():
        for execution in (*vertex.prior_executions, vertex.current_execution):
            label = f"{vertex.job_vertex.name} ({vertex.subtask_index + 1}/{vertex.job_vertex.parallelism})"
            slot = execution.last_slot
            if task == f"{label}#{execution.attempt_number}" and slot is not None:
                return _endpoint(slot), slot.resource_id
    return None, None


# -- checkpoints -------------------------------------------------------------------------------


def _summary(values: list[float]) -> dict[str, float]:
    """Flink's ``StatsSummaryDto``: min, max, avg and percentiles of the completed checkpoints."""
    if not values:
        return {"min": 0, "max": 0, "avg": 0, "p50": 0.0, "p90": 0.0, "p95": 0.0, "p99": 0.0, "p999": 0.0}
    ordered = sorted(values)

    def quantile(q: float) -> float:
        return float(ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))])

    return {
        "min": int(ordered[0]), "max": int(ordered[-1]), "avg": int(sum(ordered) / len(ordered)),
        "p50": quantile(0.5), "p90": quantile(0.9), "p95": quantile(0.95), "p99": quantile(0.99),
        "p999": quantile(0.999),
    }  # fmt: skip


#: Flink's REST class name of a checkpoint's statistics, by status.
_STATISTICS_CLASSES = {
    CheckpointStatsStatus.IN_PROGRESS: ".PendingCheckpointStatistics",
    CheckpointStatsStatus.COMPLETED: ".CompletedCheckpointStatistics",
    CheckpointStatsStatus.FAILED: ".FailedCheckpointStatistics",
}


def _checkpoint_type(stats: CheckpointStats) -> str:
    if stats.kind is CheckpointKind.SAVEPOINT:
        return "SAVEPOINT"
    unaligned = stats.unaligned or any(s.mode is not SnapshotAlignment.ALIGNED for s in stats.subtasks)
    return "UNALIGNED_CHECKPOINT" if unaligned else "CHECKPOINT"


def _task_stats(stats: CheckpointStats, master) -> dict[str, dict[str, Any]]:
    tasks = {}
    for ejv in master.graph.job_vertices.values():
        acks = [s for s in stats.subtasks if s.vertex_id == ejv.id]
        latest = max((s.ack_time for s in acks), default=None)
        tasks[ejv.id] = {
            "id": stats.checkpoint_id,
            "status": stats.status.value,
            "latest_ack_timestamp": _dt_ms(latest),
            "checkpointed_size": sum(s.state_size for s in acks),
            "state_size": sum(s.state_size for s in acks),
            "end_to_end_duration": -1 if latest is None else _ms((latest - stats.trigger_time).total_seconds()),
            "alignment_buffered": 0,
            "processed_data": 0,
            "persisted_data": sum(s.persisted_data for s in acks),
            "num_subtasks": ejv.parallelism,
            "num_acknowledged_subtasks": len(acks),
        }
    return tasks


def _checkpoint_entry(stats: CheckpointStats, master) -> dict[str, Any]:
    """One checkpoint as Flink's ``CheckpointStatistics`` (Completed/Failed/Pending)."""
    latest = stats.latest_ack_time
    if stats.duration is not None:
        duration = _ms(stats.duration.total_seconds())
    elif latest is not None:
        duration = _ms((latest - stats.trigger_time).total_seconds())
    else:
        duration = 0
    entry: dict[str, Any] = {
        "className": _STATISTICS_CLASSES[stats.status],
        "id": stats.checkpoint_id,
        "status": stats.status.value,
        "is_savepoint": stats.kind is CheckpointKind.SAVEPOINT,
        "savepointFormat": "CANONICAL" if stats.kind is CheckpointKind.SAVEPOINT else None,
        "trigger_timestamp": _dt_ms(stats.trigger_time),
        "latest_ack_timestamp": _dt_ms(latest),
        "checkpointed_size": stats.state_size,
        "state_size": stats.state_size,
        "end_to_end_duration": duration,
        "alignment_buffered": 0,
        "processed_data": 0,
        "persisted_data": stats.persisted_data,
        "num_subtasks": stats.num_subtasks,
        "num_acknowledged_subtasks": len(stats.subtasks),
        "checkpoint_type": _checkpoint_type(stats),
        "tasks": _task_stats(stats, master),
    }
    if stats.status is CheckpointStatsStatus.COMPLETED:
        entry["external_path"] = stats.external_path
        entry["discarded"] = False
    elif stats.status is CheckpointStatsStatus.FAILED:
        entry["failure_timestamp"] = _dt_ms(stats.failure_time)
        entry["failure_message"] = stats.failure_message
    return entry


def checkpoint_statistics(master) -> dict[str, Any] | None:
    """``/jobs/:jobid/checkpoints``; None if the job has no checkpointing."""
    if master.checkpoints is None:
        return None
    tracker = master.checkpoints.stats
    history = tracker.history()
    completed = [s for s in history if s.status is CheckpointStatsStatus.COMPLETED]
    return {
        "counts": {
            "restored": tracker.num_restored,
            "total": tracker.num_completed + tracker.num_failed + tracker.num_in_progress,
            "in_progress": tracker.num_in_progress,
            "completed": tracker.num_completed,
            "failed": tracker.num_failed,
        },
        "summary": {
            "checkpointed_size": _summary(tracker.completed_sizes),
            "state_size": _summary(tracker.completed_sizes),
            "end_to_end_duration": _summary([d * 1000 for d in tracker.completed_durations]),
            "alignment_buffered": _summary([0.0 for _ in completed]),
            "processed_data": _summary([0.0 for _ in completed]),
            "persisted_data": _summary(tracker.completed_persisted),
        },
        "latest": {
            "completed": _checkpoint_entry(tracker.latest_completed, master) if tracker.latest_completed else None,
            "savepoint": _checkpoint_entry(tracker.latest_savepoint, master) if tracker.latest_savepoint else None,
            "failed": _checkpoint_entry(tracker.latest_failed, master) if tracker.latest_failed else None,
            "restored": _restored_entry(tracker.latest_restored),
        },
        "history": [_checkpoint_entry(s, master) for s in history],
    }


def _restored_entry(restored: RestoredCheckpointStats | None) -> dict[str, Any] | None:
    """``latest.restored``: Flink's ``RestoredCheckpointStatistics`` of the last restore, or None."""
    if restored is None:
        return None
    return {
        "id": restored.checkpoint_id,
        "restore_timestamp": _dt_ms(restored.restore_time),
        "is_savepoint": restored.is_savepoint,
        "external_path": restored.external_path,
    }


def checkpoint_details(master, checkpoint_id: int) -> dict[str, Any] | None:
    """``/jobs/:jobid/checkpoints/details/:checkpointid``, plus each subtask's alignment (``subtasks``)."""
    if master.checkpoints is None:
        return None
    stats = master.checkpoints.stats.get(checkpoint_id)
    if stats is None:
        return None
    entry = _checkpoint_entry(stats, master)
    entry["subtasks"] = [
        {
            "vertex_id": s.vertex_id,
            "index": s.subtask,
            "status": "completed",
            "ack_timestamp": _dt_ms(s.ack_time),
            "end_to_end_duration": _ms((s.ack_time - stats.trigger_time).total_seconds()),
            "state_size": s.state_size,
            "checkpointed_size": s.state_size,
            "alignment": {
                "buffered": 0,
                "processed": 0,
                "persisted": s.persisted_data,
                "duration": _ms(s.alignment.total_seconds()),
            },  # fmt: skip
            "unaligned_checkpoint": s.mode is not SnapshotAlignment.ALIGNED,
        }
        for s in stats.subtasks
    ]
    return entry


def checkpoint_config(master, config) -> dict[str, Any] | None:
    """``/jobs/:jobid/checkpoints/config`` of a job run with ``config``; None if it has no checkpointing."""
    if master.checkpoints is None:
        return None
    options = config.checkpointing
    interval = options.interval
    storage = master.checkpoint_storage
    return {
        "mode": options.mode.value,
        "interval": _ms(interval.total_seconds()) if interval is not None else 0x7FFFFFFFFFFFFFFF,
        "timeout": _ms(options.timeout.total_seconds()),
        "min_pause": _ms(options.min_pause.total_seconds()),
        "max_concurrent": options.max_concurrent,
        "externalization": {"enabled": storage.outlives_job, "delete_on_cancellation": not storage.outlives_job},
        "state_backend": "HashMapStateBackend",
        "checkpoint_storage": (
            f"DeltaCheckpointStorage ({options.directory})"
            if storage.outlives_job
            else f"JobManagerCheckpointStorage (for the job's lifetime: {storage.options.directory})"
        ),
        "unaligned_checkpoints": options.unaligned,
        "tolerable_failed_checkpoints": options.tolerable_failures,
        "aligned_checkpoint_timeout": _ms(options.aligned_checkpoint_timeout.total_seconds()),
        "checkpoints_after_tasks_finish": True,
        "state_changelog_enabled": False,
        "changelog_periodic_materialization_interval": -1,
        "changelog_storage": "none",
    }


def job_metrics(master) -> dict[str, float]:
    """The job-level metrics (Flink's JobManager job scope)."""
    result: dict[str, float] = {
        "numRestarts": float(master.failover.handler.number_of_restarts),
        "uptime": float(_ms(time.time() - master.graph.job_status_history[0][0]))
        if master.status is JobStatus.RUNNING else 0.0,
    }  # fmt: skip
    if master.checkpoints is not None:
        tracker = master.checkpoints.stats
        latest = tracker.latest_completed
        result.update({
            "numberOfCompletedCheckpoints": float(tracker.num_completed),
            "numberOfFailedCheckpoints": float(tracker.num_failed),
            "numberOfInProgressCheckpoints": float(tracker.num_in_progress),
            "totalNumberOfCheckpoints": float(tracker.num_completed + tracker.num_failed + tracker.num_in_progress),
            "lastCheckpointDuration": float(_ms(latest.duration.total_seconds())) if latest and latest.duration
            else -1.0,
            "lastCheckpointSize": float(latest.state_size) if latest else -1.0,
            "lastCheckpointFullSize": float(latest.state_size) if latest else -1.0,
            "lastCheckpointPersistedData": float(latest.persisted_data) if latest else -1.0,
        })  # fmt: skip
    return result
