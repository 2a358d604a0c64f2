"""The autoscaler's decision: each vertex's parallelism from its true processing rate and its target rate (FLIP-271).

Pure functions over window averages (:class:`VertexRates`), so that every rule
is unit-tested without a job. For each vertex, in topological order:

- its **true processing rate** is what it would process if it were busy all
  the time: ``records in per second / busy share`` (the busiest subtask's
  share, Flink's default aggregator);
- its **target rate** is what arrives: at a source, the rows it read per
  second plus its backlog's growth per second (a Kafka topic's lag growing
  means more arrives than is read); downstream, each input's target rate times
  that input's output ratio (records out / records in). A source's backlog
  also asks for ``backlog / job.autoscaler.catch-up.duration`` on top, passed
  downstream the same way;
- the capacity a vertex needs at utilisation ``u`` is ``target / u + catch-up
  (+ target x restart.time / catch-up.duration`` for what piles up while the
  rescale runs);
- it is rescaled only if its true rate is below the capacity at ``target +
  boundary`` (scale up) or above the capacity at ``target - boundary`` (with
  the restart, scale down); then to ``ceil(p x capacity at target / true
  rate)``, the factor capped by ``scale-up.max-factor`` and
  ``scale-down.max-factor``, bounded by ``vertex.min/max-parallelism`` and the
  vertex's max parallelism, and moved up to a divisor of the max parallelism
  (up to half of it) so that key groups spread evenly, as Flink does.

Vertices joined by a forward edge keep one parallelism: the larger of theirs.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

from flinklike_spark.config import AutoscalerOptions

__all__ = ["ScalingSummary", "VertexRates", "VertexTopology", "evaluate", "key_group_aligned"]


@dataclasses.dataclass(frozen=True)
class VertexTopology:
    """A vertex as the evaluator sees it: its inputs (vertex ids), forward-joined neighbours and bounds."""

    vertex_id: str
    parallelism: int
    max_parallelism: int
    is_source: bool
    inputs: tuple[str, ...] = ()
    forward_peers: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class VertexRates:
    """A vertex's metrics averaged over the metrics window.

    Attributes:
        records_in: rows in per second, all subtasks (a source: rows it read).
        records_out: rows out per second, all subtasks.
        busy: the busiest subtask's busy share (0..1).
        backlog: a source's pending records at the end of the window (0 elsewhere).
        backlog_growth: a source's pending records' growth per second over the window.
    """

    records_in: float
    records_out: float
    busy: float
    backlog: float = 0.0
    backlog_growth: float = 0.0

    @property
    def true_processing_rate(self) -> float:
        """Rows per second the vertex processes when busy all the time (inf if it was never busy)."""
        return math.inf if self.busy <= 1e-3 else self.records_in / self.busy

    @property
    def output_ratio(self) -> float:
        return self.records_out / self.records_in if self.records_in > 0 else 0.0


@dataclasses.dataclass(frozen=True)
class ScalingSummary:
    """One vertex's evaluation: its rates, the capacity thresholds, and the parallelism it should get.

    ``recommended_parallelism`` is the parallelism at the target utilization;
    ``new_parallelism`` is that only if the vertex is outside its thresholds,
    else the current one (a scale-down waits on recommendations; see
    :class:`~flinklike_spark._runtime.autoscaler.job_autoscaler.JobAutoscaler`).
    """

    vertex_id: str
    current_parallelism: int
    new_parallelism: int
    recommended_parallelism: int
    true_processing_rate: float
    target_rate: float
    catch_up_rate: float
    scale_up_threshold: float
    scale_down_threshold: float
    busy: float
    backlog: float

    @property
    def change(self) -> int:
        return self.new_parallelism - self.current_parallelism

    def to_json(self) -> dict[str, float | int | str]:
        def finite(x: float) -> float | None:
            return round(x, 3) if math.isfinite(x) else None

        return {
            "vertexId": self.vertex_id, "currentParallelism": self.current_parallelism,
            "newParallelism": self.new_parallelism, "recommendedParallelism": self.recommended_parallelism,
            "trueProcessingRate": finite(self.true_processing_rate),
            "targetRate": finite(self.target_rate), "catchUpRate": finite(self.catch_up_rate),
            "scaleUpThreshold": finite(self.scale_up_threshold),
            "scaleDownThreshold": finite(self.scale_down_threshold), "busyRatio": finite(self.busy),
            "backlog": finite(self.backlog),
        }  # fmt: skip


def _capacity(
    target: float, catch_up: float, utilization: float, options: AutoscalerOptions, *, restart: bool
) -> float:
    """Rows per second a vertex needs to process ``target`` at ``utilization`` and work off its backlog."""
    catch_up_seconds = options.catch_up_duration.total_seconds()
    at_utilization = target / max(utilization, 1e-3)
    restart_rate = at_utilization * options.restart_time.total_seconds() / catch_up_seconds if restart else 0.0
    return catch_up + restart_rate + at_utilization


def key_group_aligned(parallelism: int, max_parallelism: int) -> int:
    """The smallest divisor of ``max_parallelism`` from ``parallelism`` up to half of it, else ``parallelism``."""
    for candidate in range(parallelism, max_parallelism // 2 + 1):
        if max_parallelism % candidate == 0:
            return candidate
    return parallelism


def _new_parallelism(vertex: VertexTopology, factor: float, options: AutoscalerOptions) -> int:
    capped = min(max(factor, 1.0 - options.scale_down_max_factor), 1.0 + options.scale_up_max_factor)
    ceiling = min(options.vertex_max_parallelism, vertex.max_parallelism)
    wanted = max(options.vertex_min_parallelism, min(ceiling, math.ceil(vertex.parallelism * capped - 1e-9)))
    return min(ceiling, key_group_aligned(wanted, vertex.max_parallelism))


def evaluate(
    topology: Sequence[VertexTopology], rates: Mapping[str, VertexRates], options: AutoscalerOptions
) -> dict[str, ScalingSummary]:
    """Each vertex's summary (``topology`` in topological order, sources first); see the module docstring.

    A vertex without rates (no metrics yet) keeps its parallelism and passes no target downstream.
    """
    target: dict[str, float] = {}
    catch_up: dict[str, float] = {}
    summaries: dict[str, ScalingSummary] = {}
    up_utilization = min(1.0, options.target_utilization + options.utilization_boundary)
    down_utilization = max(0.0, options.target_utilization - options.utilization_boundary)
    for vertex in topology:
        r = rates.get(vertex.vertex_id)
        if r is None:
            continue
        if vertex.is_source:
            target[vertex.vertex_id] = max(0.0, r.records_in + r.backlog_growth)
            catch_up[vertex.vertex_id] = r.backlog / options.catch_up_duration.total_seconds()
        else:
            known = [u for u in vertex.inputs if u in target]
            target[vertex.vertex_id] = sum(target[u] * rates[u].output_ratio for u in known)
            catch_up[vertex.vertex_id] = sum(catch_up[u] * rates[u].output_ratio for u in known)
        t, c, true_rate = target[vertex.vertex_id], catch_up[vertex.vertex_id], r.true_processing_rate
        up = _capacity(t, c, up_utilization, options, restart=False)
        down = _capacity(t, c, down_utilization, options, restart=True) if down_utilization > 0 else math.inf
        wanted = _capacity(t, c, options.target_utilization, options, restart=True)
        recommended = _new_parallelism(vertex, 0.0 if math.isinf(true_rate) else wanted / true_rate, options)
        new = recommended if true_rate < up or true_rate > down else vertex.parallelism
        summaries[vertex.vertex_id] = ScalingSummary(
            vertex_id=vertex.vertex_id, current_parallelism=vertex.parallelism, new_parallelism=new,
            recommended_parallelism=recommended, true_processing_rate=true_rate, target_rate=t, catch_up_rate=c,
            scale_up_threshold=up, scale_down_threshold=down, busy=r.busy, backlog=r.backlog,
        )  # fmt: skip
    for vertex in topology:  # forward-joined vertices keep one parallelism
        group = [v for v in (vertex.vertex_id, *vertex.forward_peers) if v in summaries]
        top = max((summaries[v].new_parallelism for v in group), default=0)
        recommended = max((summaries[v].recommended_parallelism for v in group), default=0)
        for v in group:
            summaries[v] = dataclasses.replace(
                summaries[v], new_parallelism=max(top, summaries[v].new_parallelism),
                recommended_parallelism=max(recommended, summaries[v].recommended_parallelism),
            )  # fmt: skip
    return summaries
