"""JobAutoscaler: Flink's autoscaler (FLIP-271) for one job of the adaptive scheduler.

Every ``autoscaler.standalone.control-loop.interval`` a thread of its own:

1. skips the tick unless the job is EXECUTING and every task runs; a new
   JobMaster (a rescale, a restore) clears the metrics and starts
   ``job.autoscaler.stabilization.interval``, during which nothing is
   collected (start-up and catch-up rates are not the job's steady rates);
2. samples every vertex's metrics into a :class:`MetricWindow`;
3. once the window is full, evaluates it (:func:`evaluate`). A scale-up of
   any vertex is decided at once. A scale-down is delayed as Flink's
   ``DelayedScaleDown`` does: it is decided once
   ``job.autoscaler.scale-down.interval`` passed since an evaluation first
   recommended a lower parallelism, unless one recommended the current (or a
   higher) parallelism meanwhile, and it goes to the highest parallelism
   recommended within the last interval (a vertex that would scale down keeps
   its parallelism in a scale-up decision until then). Evaluations between
   the thresholds do not restart the interval: on a busy machine the
   utilization of an over-provisioned vertex wanders across the lower one;
4. records a decision (:attr:`JobAutoscaler.decisions`, ``GET
   /jobs/:jobid/autoscaler`` and, with a checkpoint directory, one row per
   vertex in the Delta table ``<execution.checkpointing.dir>/scaling_decisions``)
   and, with ``job.autoscaler.scaling.enabled``, applies it through the job's
   resource requirements: each vertex's upper bound becomes its new
   parallelism, the rescale path of
   :class:`~flinklike_spark._runtime.cluster.adaptive_job.AdaptiveJob` does the rest
   (TaskExecutors started up to ``slotmanager.number-of-slots.max``, the job
   stopped with a checkpoint and restored at the new parallelism).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import pyarrow as pa
from deltalake import write_deltalake

from checkpointing.layout import SCALING_DECISIONS, CheckpointLayout
from checkpointing.schemas import SCALING_DECISIONS_SCHEMA
from flinklike_spark._runtime.autoscaler.evaluator import ScalingSummary, VertexTopology, evaluate
from flinklike_spark._runtime.autoscaler.metric_window import MetricWindow, VertexSample
from flinklike_spark._runtime.graph.job_graph import JobGraph, PartitionerKind
from flinklike_spark._runtime.jobmaster.resource_requirements import JobResourceRequirements, ParallelismBounds
from flinklike_spark.config import AutoscalerOptions

__all__ = ["JobAutoscaler", "ScalingDecision", "topology_of"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ScalingDecision:
    """A decision of the autoscaler: when, every vertex's evaluation, whether it was applied, and why."""

    decision_id: int
    timestamp: float  # epoch seconds
    summaries: Mapping[str, ScalingSummary]
    applied: bool
    reason: str

    @property
    def parallelism(self) -> dict[str, int]:
        return {v: s.new_parallelism for v, s in self.summaries.items()}

    def to_json(self) -> dict[str, Any]:
        return {"id": self.decision_id, "timestamp": int(self.timestamp * 1000), "applied": self.applied,
                "reason": self.reason, "vertices": [s.to_json() for s in self.summaries.values()]}  # fmt: skip

    def to_rows(self, job_id: str) -> list[dict[str, Any]]:
        import datetime

        at = datetime.datetime.fromtimestamp(self.timestamp, tz=datetime.UTC)
        return [
            {
                "job_id": job_id,
                "decision_id": self.decision_id,
                "decision_time": at,
                "vertex_id": v,
                "current_parallelism": s.current_parallelism,
                "new_parallelism": s.new_parallelism,
                "true_processing_rate": s.true_processing_rate if s.true_processing_rate != float("inf") else None,
                "target_rate": s.target_rate,
                "catch_up_rate": s.catch_up_rate,
                "busy_ratio": s.busy,
                "backlog": s.backlog,
                "applied": self.applied,
                "reason": self.reason,
            }  # fmt: skip
            for v, s in self.summaries.items()
        ]


class ScaledJob(Protocol):
    """What the autoscaler needs of an :class:`~flinklike_spark._runtime.cluster.adaptive_job.AdaptiveJob`."""

    job_id: str
    requirements: JobResourceRequirements

    @property
    def graph(self) -> JobGraph: ...

    def running_master(self) -> object | None:
        """The JobMaster if the job is EXECUTING and every task runs, else None."""

    def update_requirements(self, requirements: JobResourceRequirements, *, cause: str) -> Any: ...

    def slots_possible(self) -> int:
        """The slots the job could hold, TaskExecutors that may still start included."""


def topology_of(graph: JobGraph) -> list[VertexTopology]:
    """The evaluator's view of ``graph``: inputs, forward-joined groups, bounds (topological order)."""
    group: dict[str, set[str]] = {v.id: {v.id} for v in graph}
    for edge in graph.edges():
        if edge.partitioner.kind is PartitionerKind.FORWARD:
            joined = group[edge.source_id] | group[edge.target_id]
            for member in joined:
                group[member] = joined
    return [
        VertexTopology(
            vertex_id=v.id,
            parallelism=v.parallelism,
            max_parallelism=v.max_parallelism,
            is_source=v.is_source,
            inputs=tuple(e.source_id for e in v.inputs),
            forward_peers=tuple(sorted(group[v.id] - {v.id})),
        )  # fmt: skip
        for v in graph
    ]


class JobAutoscaler:
    """Scales one job; :meth:`start` runs it, :meth:`close` stops it (also when the job ends).

    Args:
        job: the job (its graph, requirements and rescale path).
        options: the ``job.autoscaler.*`` settings.
        sample: one sample per vertex of the JobMaster's running tasks (metrics fetched
            if older than half an interval); vertices without metrics are left out.
        decisions_table: where decisions are recorded as Delta rows, or None.
        clock: monotonic seconds (injectable).
    """

    def __init__(
        self,
        job: ScaledJob,
        options: AutoscalerOptions,
        *,
        sample: Callable[[object], Mapping[str, VertexSample]],
        decisions_table: CheckpointLayout | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._job = job
        self._options = options
        self._sample = sample
        self._table = decisions_table
        self._clock = clock
        self._window = MetricWindow(options.metrics_window.total_seconds(), clock=clock)
        self._master: object | None = None  # the JobMaster whose metrics the window holds
        self._running_since = 0.0
        # vertex -> (first recommendation below its parallelism, [(time, parallelism) within the interval])
        self._scale_down_wishes: dict[str, tuple[float, list[tuple[float, int]]]] = {}
        self.decisions: list[ScalingDecision] = []
        self.last_evaluation: dict[str, ScalingSummary] = {}
        self.status = "waiting for the job to run"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"autoscaler-{job.job_id[:8]}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self, *, wait: float = 0.0) -> None:
        """Stop the control loop; wait up to ``wait`` seconds for a tick in progress (a Delta write) to end."""
        self._stop.set()
        if wait and self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(wait)

    def to_json(self) -> dict[str, Any]:
        """``GET /jobs/:jobid/autoscaler``."""
        return {
            "enabled": True, "scalingEnabled": self._options.scaling_enabled, "status": self.status,
            "lastEvaluation": [s.to_json() for s in self.last_evaluation.values()],
            "decisions": [d.to_json() for d in self.decisions],
        }  # fmt: skip

    def _run(self) -> None:
        interval = self._options.interval.total_seconds()
        while not self._stop.wait(interval):
            try:
                self.tick()
            except Exception:  # noqa: BLE001 - one bad tick (a metrics fetch timing out) must not end scaling
                log.warning("autoscaler of job %s: a tick failed", self._job.job_id, exc_info=True)

    def tick(self) -> ScalingDecision | None:
        """One control-loop pass (see the module docstring); the decision taken, if any."""
        master = self._job.running_master()
        now = self._clock()
        if master is None:
            self.status = "waiting for the job to run"
            self._master = None
            return None
        if master is not self._master:  # started, restored or rescaled: stabilise, then a fresh window
            self._master, self._running_since = master, now
            self._scale_down_wishes.clear()
            self._window.clear()
        if now - self._running_since < self._options.stabilization_interval.total_seconds():
            self.status = "stabilizing"
            return None
        self._window.add(self._sample(master))
        if not self._window.full():
            self.status = "collecting metrics"
            return None
        summaries = evaluate(topology_of(self._job.graph), self._window.averages(), self._options)
        self.last_evaluation = summaries
        self.status = "evaluating"
        return self._decide(summaries, now)

    def _decide(self, summaries: dict[str, ScalingSummary], now: float) -> ScalingDecision | None:
        interval = self._options.scale_down_interval.total_seconds()
        wishes = self._scale_down_wishes
        for v, s in summaries.items():
            if s.recommended_parallelism >= s.current_parallelism:
                wishes.pop(v, None)
            else:
                first, recent = wishes.get(v, (now, []))
                recent = [(at, p) for at, p in recent if at >= now - interval] + [(now, s.recommended_parallelism)]
                wishes[v] = (first, recent)
        most = self._job.slots_possible()  # a subtask of each vertex shares a slot: no vertex wider than this
        limited = {v for v, s in summaries.items() if s.new_parallelism > max(most, s.current_parallelism)}
        for v in limited:
            summaries[v] = dataclasses.replace(
                summaries[v], new_parallelism=max(most, summaries[v].current_parallelism)
            )
        ups = {v for v, s in summaries.items() if s.change > 0}
        downs = {v for v, s in summaries.items() if s.change < 0}
        due = {v for v in downs if v in wishes and now - wishes[v][0] >= interval}
        if not ups and not due:
            if limited:
                self.status = f"scale-up limited by the cluster's {most} slots (slotmanager.number-of-slots.max)"
            elif downs:
                self.status = "scale-down postponed (job.autoscaler.scale-down.interval)"
            return None
        summaries = {
            v: dataclasses.replace(s, new_parallelism=max(p for _, p in wishes[v][1])) if v in due
            else dataclasses.replace(s, new_parallelism=s.current_parallelism) if v in downs
            else s
            for v, s in summaries.items()
        }  # fmt: skip
        changed = {v: (s.current_parallelism, s.new_parallelism) for v, s in summaries.items() if s.change}
        reason = "scale up" if ups else "scale down"
        reason = f"{reason}: " + ", ".join(f"{v} {a}->{b}" for v, (a, b) in sorted(changed.items()))
        decision = ScalingDecision(
            decision_id=len(self.decisions) + 1, timestamp=time.time(), summaries=summaries,
            applied=self._options.scaling_enabled, reason=reason,
        )  # fmt: skip
        log.info("autoscaler of job %s: %s", self._job.job_id, reason)
        rescale = self._apply(decision) if decision.applied else None
        if decision.applied and rescale is None:
            decision = dataclasses.replace(decision, applied=False)
        self.decisions.append(decision)
        self._record(decision)
        if rescale is not None:
            try:
                rescale.result()  # the next tick sees the new JobMaster (or the old one, if the rescale failed)
            except Exception as exc:  # noqa: BLE001 - a failed rescale is in the job's /rescales; scaling goes on
                log.warning("autoscaler of job %s: the rescale of %s failed: %s", self._job.job_id, reason, exc)
        return decision

    def _apply(self, decision: ScalingDecision) -> Any:
        """Start the rescale of ``decision``: its future, or None if the job refused it now (reason logged)."""
        old = self._job.requirements.bounds
        requirements = JobResourceRequirements(
            {v: ParallelismBounds(min(old[v].lower, p), p) for v, p in decision.parallelism.items()}
        )
        self._window.clear()
        self._scale_down_wishes.clear()
        try:
            return self._job.update_requirements(requirements, cause=f"autoscaler: {decision.reason}")
        except Exception as exc:  # noqa: BLE001 - e.g. the job is restarting: the next full window decides again
            log.warning("autoscaler of job %s: %s not applied: %s", self._job.job_id, decision.reason, exc)
            return None

    def _record(self, decision: ScalingDecision) -> None:
        if self._table is None:
            return
        try:
            table = self._table.open_table(SCALING_DECISIONS, create=True)
            rows = pa.Table.from_pylist(decision.to_rows(self._job.job_id), schema=SCALING_DECISIONS_SCHEMA)
            write_deltalake(table, rows, mode="append")
        except Exception:  # noqa: BLE001 - a decision not recorded in Delta still shows in the REST API
            log.warning("autoscaler of job %s: could not record decision %d in %s", self._job.job_id,
                        decision.decision_id, self._table.table_uri(SCALING_DECISIONS), exc_info=True)  # fmt: skip
