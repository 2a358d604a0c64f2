"""JobAutoscaler's control loop on an injected clock: stabilization, full windows, the scale-down interval,
metrics-only mode and the Delta table of decisions (a real table in tmp_path)."""

from __future__ import annotations

import concurrent.futures

import pytest

from checkpointing.layout import CheckpointLayout
from connectors import read_delta_table
from flinklike_spark._runtime.autoscaler.job_autoscaler import JobAutoscaler
from flinklike_spark._runtime.autoscaler.metric_window import SubtaskCounters
from flinklike_spark._runtime.graph.job_graph import JobGraph, JobVertex, PartitionerKind, PartitionerSpec
from flinklike_spark._runtime.jobmaster.resource_requirements import JobResourceRequirements
from flinklike_spark.config import Configuration

pytestmark = pytest.mark.timeout(60)


class Job:
    """The part of an AdaptiveJob the autoscaler uses; a rescale changes the graph and the JobMaster at once."""

    def __init__(self, parallelism: int = 2, max_parallelism: int = 128) -> None:
        graph = JobGraph(job_id="job-1", name="scaled")
        graph.add_vertex(JobVertex(id="src", name="Source", parallelism=1, operators=["s"], is_source=True))
        graph.add_vertex(
            JobVertex(id="work", name="Work", parallelism=parallelism, operators=["w"], max_parallelism=max_parallelism)
        )
        graph.connect("src", "work", PartitionerSpec(kind=PartitionerKind.HASH, key_field="key"))
        self.job_id, self.graph, self.master = "job-1", graph, object()
        self.requirements = JobResourceRequirements.of(graph)
        self.updates: list[tuple[dict, str]] = []
        self.refuse = False
        self.slots = 1000  # what the cluster could give the job

    def slots_possible(self):
        return self.slots

    def running_master(self):
        return self.master

    def update_requirements(self, requirements, *, cause):
        if self.refuse:
            raise RuntimeError("the job is restarting")
        parallelism = {v: b.upper for v, b in requirements.bounds.items()}
        self.updates.append((parallelism, cause))
        self.requirements, self.graph, self.master = requirements, self.graph.with_parallelism(parallelism), object()
        done: concurrent.futures.Future = concurrent.futures.Future()
        done.set_result(None)
        return done


class Load:
    """Counters of the job's subtasks growing at ``rate`` records/s per vertex with ``busy`` of the work vertex."""

    def __init__(self, clock) -> None:
        self.clock, self.rate, self.busy, self.backlog = clock, 100.0, 0.5, 0.0
        self._busy_seconds, self._sampled_at = 0.0, 0.0  # ``busy`` may change between samples

    def sample(self, master) -> dict:
        t = self.clock[0]
        self._busy_seconds += self.busy * (t - self._sampled_at)
        self._sampled_at = t
        return {
            "src": {"s0": SubtaskCounters(t, self.rate * t, self.rate * t, 0.01 * t, self.backlog)},
            "work": {f"w{id(master)}": SubtaskCounters(t, self.rate * t, self.rate * t, self._busy_seconds, 0.0)},
        }


def autoscaler(tmp_path, job, load, clock, **options):
    config = Configuration({
        "job.autoscaler.enabled": True, "job.autoscaler.stabilization.interval": "2s",
        "job.autoscaler.metrics.window": "4s", "job.autoscaler.scale-down.interval": "10s", **options,
    }).autoscaler  # fmt: skip
    table = CheckpointLayout(base_url=str(tmp_path / "chk"))
    return JobAutoscaler(job, config, sample=load.sample, decisions_table=table, clock=lambda: clock[0])


def run(scaler, clock, until: float) -> list:
    """Tick once a second until ``until`` or the first decision; [(time, decision)] or []."""
    while clock[0] < until:
        clock[0] += 1.0
        decision = scaler.tick()
        if decision is not None:
            return [(clock[0], decision)]
    return []


def test_it_stabilizes_fills_a_window_then_scales_up_at_once_and_records_the_decision(tmp_path):
    clock, job = [0.0], Job()
    load = Load(clock)
    scaler = autoscaler(tmp_path, job, load, clock)
    load.busy = 1.0  # work processes 100/s on 2 subtasks, busy all the time
    assert run(scaler, clock, 1.0) == [] and scaler.status == "stabilizing"
    run(scaler, clock, 3.0)
    assert scaler.status == "collecting metrics"
    assert run(scaler, clock, 7.0) == []  # what arrives is what it processes at utilization 1.0 (0.7 + 0.3)

    def growing(master):
        sample = Load.sample(load, master)
        sample["src"]["s0"] = SubtaskCounters(clock[0], 100 * clock[0], 100 * clock[0], 0.01, 300 * clock[0])
        return sample

    scaler._sample = growing  # the backlog grows by 300/s: 400/s arrive
    [(at, decision)] = run(scaler, clock, 14.0)
    assert decision.reason.startswith("scale up: work 2->") and decision.applied
    assert job.updates and job.updates[0][1] == f"autoscaler: {decision.reason}"
    rows = read_delta_table(tmp_path / "chk" / "scaling_decisions").to_pylist()
    assert {(r["vertex_id"], r["current_parallelism"], r["new_parallelism"]) for r in rows} == {
        ("src", 1, 1), ("work", 2, decision.parallelism["work"])}  # fmt: skip
    assert scaler.to_json()["decisions"][0]["reason"] == decision.reason
    assert scaler.tick() is None and scaler.status == "stabilizing"  # a new JobMaster: stabilize again


def test_a_scale_down_waits_for_the_interval_and_metrics_only_mode_applies_nothing(tmp_path):
    clock, job = [0.0], Job(parallelism=8)
    load = Load(clock)
    load.busy = 0.05  # idle: 8 subtasks for 100/s
    scaler = autoscaler(tmp_path, job, load, clock, **{"job.autoscaler.scaling.enabled": "false"})
    assert run(scaler, clock, 12.0) == [] and scaler.status.startswith("scale-down postponed")
    [(at, decision)] = run(scaler, clock, 18.0)
    assert at >= 2 + 4 + 10 and decision.reason.startswith("scale down: work 8->")
    assert not decision.applied and job.updates == []  # scaling.enabled false: decided and recorded only


def test_a_utilization_wandering_between_the_thresholds_delays_no_scale_down_beyond_its_interval(tmp_path):
    """As Flink's DelayedScaleDown: only a recommendation of the current parallelism restarts the interval, and
    the scale-down goes to the highest parallelism recommended within the last interval."""
    clock, job = [0.0], Job(parallelism=8, max_parallelism=720)  # key-group aligned: 4 and 6 divide 720
    load = Load(clock)
    load.busy = 0.1  # 8 subtasks for 100/s: below the lower threshold (0.4), recommends 4 (at most 0.6 down)
    scaler = autoscaler(tmp_path, job, load, clock)
    assert run(scaler, clock, 8.0) == [] and scaler.status.startswith("scale-down postponed")
    load.busy = 0.45  # between the thresholds: nothing to do now, but 6 would be enough
    assert run(scaler, clock, 13.0) == [] and scaler.last_evaluation["work"].recommended_parallelism == 6
    load.busy = 0.1
    [(at, decision)] = run(scaler, clock, 20.0)
    assert at < 2 + 4 + 10 + 4, at  # the interval ran from the first recommendation below 8
    assert decision.reason == "scale down: work 8->6" and job.updates[0][0]["work"] == 6

    clock[0] += 10.0  # a new JobMaster (6 subtasks): stabilize, fill a window, wish again
    load.busy = 0.1
    assert run(scaler, clock, clock[0] + 9.0) == [] and scaler.status.startswith("scale-down postponed")
    load.busy = 0.9  # the recommendation reaches the current parallelism: the interval starts again
    assert run(scaler, clock, clock[0] + 5.0) == []
    load.busy = 0.1
    assert run(scaler, clock, clock[0] + 8.0) == [] and scaler.status.startswith("scale-down postponed")


def test_a_scale_up_goes_no_wider_than_the_slots_the_cluster_can_give(tmp_path):
    clock, job = [0.0], Job(parallelism=2)
    job.slots = 3
    load = Load(clock)
    load.busy = 1.0
    load.backlog = 0.0
    scaler = autoscaler(tmp_path, job, load, clock)

    def growing(master):  # 400/s arrive, 100/s are processed: it wants far more than 3 subtasks
        sample = Load.sample(load, master)
        sample["src"]["s0"] = SubtaskCounters(clock[0], 100 * clock[0], 100 * clock[0], 0.01, 300 * clock[0])
        return sample

    scaler._sample = growing
    [(_, decision)] = run(scaler, clock, 10.0)
    assert decision.reason == "scale up: work 2->3" and job.updates[0][0]["work"] == 3
    assert run(scaler, clock, clock[0] + 10.0) == []  # at 3 of 3 slots: no decision to repeat
    assert scaler.status.startswith("scale-up limited by the cluster's 3 slots")
    assert scaler.last_evaluation["work"].recommended_parallelism > 3


def test_a_decision_the_job_refuses_is_recorded_as_not_applied(tmp_path):
    clock, job = [0.0], Job(parallelism=8)
    job.refuse = True
    load = Load(clock)
    load.busy = 0.05
    scaler = autoscaler(tmp_path, job, load, clock, **{"job.autoscaler.scale-down.interval": "0s"})
    [(_, decision)] = run(scaler, clock, 8.0)
    assert not decision.applied and job.updates == []
