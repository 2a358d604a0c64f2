"""DefaultScheduler with in-memory slot allocator and deployer, driven by ManualMainThreadExecutor."""

from __future__ import annotations

import concurrent.futures
import threading

import pytest

from flinklike_spark._runtime.graph.execution_graph import ExecutionAttemptID, ExecutionGraph, ExecutionVertexID
from flinklike_spark._runtime.graph.execution_state import ExecutionState, JobStatus
from flinklike_spark._runtime.graph.job_graph import JobGraph, JobVertex, PartitionerKind, PartitionerSpec
from flinklike_spark._runtime.jobmaster.main_thread import ManualMainThreadExecutor
from flinklike_spark._runtime.jobmaster.scheduler import DefaultScheduler
from flinklike_spark._runtime.jobmaster.versioner import ExecutionVertexVersioner
from flinklike_spark.errors import IllegalStateTransition, SlotAllocationError, StaleDeploymentError

S = ExecutionState
FORWARD = PartitionerSpec(kind=PartitionerKind.FORWARD)


def vid(name: str, i: int) -> ExecutionVertexID:
    return ExecutionVertexID(job_vertex_id=name, subtask_index=i)


SRC0, SRC1, SINK0, SINK1 = vid("src", 0), vid("src", 1), vid("sink", 0), vid("sink", 1)
ALL = [SRC0, SRC1, SINK0, SINK1]


def job_graph() -> JobGraph:
    """src(2) -forward-> sink(2): two pipelined regions."""
    g = JobGraph(job_id="job-1", name="test job")
    g.add_vertex(JobVertex(id="src", name="Source", parallelism=2, operators=["src"], is_source=True))
    g.add_vertex(JobVertex(id="sink", name="Sink", parallelism=2, operators=["sink"]))
    g.connect("src", "sink", FORWARD)
    return g


class FakeSlotAllocator:
    def __init__(self) -> None:
        self.pending: dict[ExecutionVertexID, concurrent.futures.Future] = {}
        self.request_batches: list[list[ExecutionVertexID]] = []
        self.cancelled: list[ExecutionVertexID] = []
        self.released: list[str] = []
        self._count = 0

    def allocate_slots(self, requests):
        self.request_batches.append(list(requests))
        futures = {v: concurrent.futures.Future() for v in requests}
        self.pending.update(futures)
        return futures

    def cancel(self, vertex_id):
        self.cancelled.append(vertex_id)
        future = self.pending.get(vertex_id)
        if future is not None and not future.done():
            future.cancel()

    def release(self, slot):
        self.released.append(slot)

    def offer(self, *vertex_ids) -> list[str]:
        slots = []
        for vertex_id in vertex_ids:
            self._count += 1
            slot = f"slot{self._count}:{vertex_id}"
            self.pending[vertex_id].set_result(slot)
            slots.append(slot)
        return slots

    def fail(self, vertex_id, exc):
        self.pending[vertex_id].set_exception(exc)


class FakeDeployer:
    def __init__(self) -> None:
        self.deployed: list[tuple[ExecutionAttemptID, str]] = []
        self.acks: dict[ExecutionAttemptID, concurrent.futures.Future] = {}
        self.cancelled: list[ExecutionAttemptID] = []

    def deploy(self, execution, slot):
        assert execution.state is S.DEPLOYING and execution.assigned_slot == slot
        self.deployed.append((execution.attempt_id, slot))
        future = concurrent.futures.Future()
        self.acks[execution.attempt_id] = future
        return future

    def cancel(self, execution):
        self.cancelled.append(execution.attempt_id)


class RecordingListener:
    def __init__(self) -> None:
        self.failures: list[tuple[ExecutionAttemptID, BaseException]] = []
        self.on_failure = None

    def on_task_failure(self, execution, cause):
        assert execution.state is S.FAILED
        self.failures.append((execution.attempt_id, cause))
        if self.on_failure is not None:
            self.on_failure(execution)


class Harness:
    def __init__(self, *, listener: bool = True) -> None:
        self.graph = ExecutionGraph.from_job_graph(job_graph())
        self.main = ManualMainThreadExecutor()
        self.slots = FakeSlotAllocator()
        self.deployer = FakeDeployer()
        self.versioner = ExecutionVertexVersioner()
        self.listener = RecordingListener() if listener else None
        self.scheduler = DefaultScheduler(
            self.graph,
            slot_allocator=self.slots,
            deployer=self.deployer,
            versioner=self.versioner,
            main_thread=self.main,
            failure_listener=self.listener,
        )

    def execution(self, vertex_id):
        return self.graph.get_vertex(vertex_id).current_execution

    def attempt(self, vertex_id):
        return self.execution(vertex_id).attempt_id

    def state(self, vertex_id):
        return self.execution(vertex_id).state

    def deploy_all(self):
        self.scheduler.start_scheduling()
        self.slots.offer(*ALL)
        self.main.trigger_all()
        assert [self.state(v) for v in ALL] == [S.DEPLOYING] * 4

    def report(self, vertex_id, *states, cause=None):
        results = [self.scheduler.update_task_execution_state(self.attempt(vertex_id), s, cause) for s in states]
        return results

    def run_all(self, vertex_ids):
        for v in vertex_ids:
            assert self.report(v, S.INITIALIZING, S.RUNNING) == [True, True]


def test_deploys_only_after_all_slots_arrived():
    h = Harness()
    h.scheduler.start_scheduling()
    assert h.scheduler.job_status is JobStatus.RUNNING
    assert h.slots.request_batches == [ALL]
    assert [h.state(v) for v in ALL] == [S.SCHEDULED] * 4

    h.slots.offer(SRC0, SRC1, SINK0)
    h.main.trigger_all()
    assert h.deployer.deployed == []
    assert [h.state(v) for v in ALL] == [S.SCHEDULED] * 4

    # the last slot arrives on another thread: its completion is re-posted to the main thread
    t = threading.Thread(target=h.slots.offer, args=(SINK1,))
    t.start()
    t.join(5)
    assert h.deployer.deployed == []
    h.main.trigger_all()
    assert [a for a, _ in h.deployer.deployed] == [h.attempt(v) for v in ALL]
    assert [h.state(v) for v in ALL] == [S.DEPLOYING] * 4
    assert h.execution(SINK1).assigned_slot == "slot4:sink-1"


def test_superseded_deployment_is_refused_and_its_slot_released():
    h = Harness()
    h.scheduler.start_scheduling()
    old_attempt = h.attempt(SRC0)
    slots = h.slots.offer(*ALL)  # completions are queued, not yet processed by the main thread
    restarted = h.scheduler.restart_vertices([SRC0])
    assert h.execution(SRC0).attempt_number == 1  # old attempt was SCHEDULED -> CANCELED -> reset
    assert restarted.done() and restarted.exception() is None
    assert h.graph.get_vertex(SRC0).prior_executions[0].state is S.CANCELED

    h.main.trigger_all()
    deployed = [a for a, _ in h.deployer.deployed]
    assert old_attempt not in deployed
    assert deployed == [h.attempt(v) for v in (SRC1, SINK0, SINK1)]
    assert h.slots.released == [slots[0]]
    assert h.state(SRC0) is S.SCHEDULED

    h.slots.offer(SRC0)
    h.main.trigger_all()
    assert h.deployer.deployed[-1][0] == h.attempt(SRC0)
    assert h.state(SRC0) is S.DEPLOYING


def test_version_bump_alone_refuses_the_deployment():
    h = Harness()
    h.scheduler.start_scheduling()
    (slot,) = h.slots.offer(SRC0)
    h.versioner.record_vertex_modification(SRC0)
    h.slots.offer(SRC1, SINK0, SINK1)
    h.main.trigger_all()
    assert h.attempt(SRC0) not in [a for a, _ in h.deployer.deployed]
    assert len(h.deployer.deployed) == 3
    assert h.slots.released == [slot]


def test_stale_and_unknown_attempt_updates_are_ignored():
    h = Harness()
    h.deploy_all()
    h.run_all(ALL)
    old = h.attempt(SRC0)
    h.scheduler.restart_vertices([SRC0])
    assert h.state(SRC0) is S.CANCELING and h.deployer.cancelled == [old]
    assert h.scheduler.update_task_execution_state(old, S.CANCELED) is True
    new = h.attempt(SRC0)
    assert new != old and h.state(SRC0) is S.SCHEDULED

    assert h.scheduler.update_task_execution_state(old, S.RUNNING) is False
    assert h.scheduler.update_task_execution_state(old, S.FAILED, RuntimeError("late")) is False
    unknown = ExecutionAttemptID(job_vertex_id="src", subtask_index=0, attempt_number=1)
    assert h.scheduler.update_task_execution_state(unknown, S.FAILED, RuntimeError("?")) is False
    ghost = ExecutionAttemptID(job_vertex_id="ghost", subtask_index=0, attempt_number=0)
    assert h.scheduler.update_task_execution_state(ghost, S.RUNNING) is False
    assert h.state(SRC0) is S.SCHEDULED
    assert h.listener.failures == []


def test_illegal_or_duplicate_reports_are_ignored():
    h = Harness()
    h.deploy_all()
    assert h.report(SRC0, S.RUNNING) == [False]  # DEPLOYING -> RUNNING skips INITIALIZING
    assert h.report(SRC0, S.INITIALIZING, S.INITIALIZING) == [True, False]
    assert h.state(SRC0) is S.INITIALIZING


def test_job_finishes_when_every_execution_finished():
    h = Harness()
    h.deploy_all()
    h.run_all(ALL)
    for v in ALL[:-1]:
        assert h.report(v, S.FINISHED) == [True]
        assert h.scheduler.job_status is JobStatus.RUNNING
    assert not h.scheduler.termination_future.done()
    assert h.report(SINK1, S.FINISHED) == [True]
    assert h.scheduler.job_status is JobStatus.FINISHED
    assert h.scheduler.termination_future.result(0) is JobStatus.FINISHED
    assert sorted(h.slots.released) == sorted(slot for _, slot in h.deployer.deployed)


def test_failed_execution_notifies_listener_and_releases_slot():
    h = Harness()
    h.deploy_all()
    h.run_all(ALL)
    cause = RuntimeError("user code failed")
    assert h.report(SINK0, S.FAILED, cause=cause) == [True]
    assert h.state(SINK0) is S.FAILED
    assert h.execution(SINK0).failure_cause is cause
    assert h.listener.failures == [(h.attempt(SINK0), cause)]
    assert h.slots.released == ["slot3:sink-0"]
    assert h.scheduler.job_status is JobStatus.RUNNING  # the decision belongs to the listener


def test_failed_slot_request_fails_the_execution():
    h = Harness()
    h.scheduler.start_scheduling()
    error = SlotAllocationError("no slot within 10 s")
    h.slots.offer(SRC0, SRC1, SINK0)
    h.slots.fail(SINK1, error)
    h.main.trigger_all()
    assert h.state(SINK1) is S.FAILED
    assert h.listener.failures == [(h.attempt(SINK1), error)]
    assert len(h.deployer.deployed) == 3


def test_failed_deploy_future_fails_the_execution():
    h = Harness()
    h.deploy_all()
    error = ConnectionError("TaskExecutor unreachable")
    h.deployer.acks[h.attempt(SRC1)].set_exception(error)
    h.deployer.acks[h.attempt(SRC0)].set_result(None)
    h.main.trigger_all()
    assert h.state(SRC1) is S.FAILED and h.state(SRC0) is S.DEPLOYING
    assert h.listener.failures == [(h.attempt(SRC1), error)]
    assert h.slots.released == ["slot2:src-1"]


def test_without_listener_a_failure_fails_the_job():
    h = Harness(listener=False)
    h.deploy_all()
    h.run_all(ALL)
    cause = RuntimeError("boom")
    h.report(SRC0, S.FAILED, cause=cause)
    assert h.scheduler.job_status is JobStatus.FAILING
    assert sorted(map(str, h.deployer.cancelled)) == sorted(str(h.attempt(v)) for v in (SRC1, SINK0, SINK1))
    for v in (SRC1, SINK0):
        h.report(v, S.CANCELED)
    assert h.scheduler.job_status is JobStatus.FAILING
    h.report(SINK1, S.FAILED, cause=RuntimeError("while cancelling"))
    assert h.state(SINK1) is S.CANCELED  # a failure while CANCELING completes the cancel (Flink)
    assert h.scheduler.job_status is JobStatus.FAILED
    assert h.scheduler.job_failure_cause is cause
    assert h.scheduler.termination_future.result(0) is JobStatus.FAILED


def test_cancel():
    h = Harness()
    h.scheduler.start_scheduling()
    h.slots.offer(SRC0, SRC1, SINK0, SINK1)
    h.main.trigger_all()
    h.run_all([SRC0, SRC1])
    h.report(SINK0, S.INITIALIZING)  # SINK1 stays DEPLOYING

    h.scheduler.cancel()
    assert h.scheduler.job_status is JobStatus.CANCELLING
    assert [h.state(v) for v in ALL] == [S.CANCELING] * 4
    assert h.deployer.cancelled == [h.attempt(v) for v in ALL]
    assert h.report(SRC0, S.RUNNING) == [False]  # a late report does not undo the cancel
    for v in (SRC0, SRC1):
        assert h.report(v, S.CANCELED) == [True]
    # A consumer whose producer was cancelled first fails on the released partition
    # before its own cancel arrives: that completes its cancellation, it is no failure.
    assert h.report(SINK0, S.FAILED, cause=RuntimeError("partition was released")) == [True]
    assert h.state(SINK0) is S.CANCELED
    assert h.scheduler.job_status is JobStatus.CANCELLING
    assert h.report(SINK1, S.FINISHED) == [True]  # finishing while cancelling completes the cancel
    assert h.state(SINK1) is S.CANCELED
    assert h.scheduler.job_status is JobStatus.CANCELED
    assert h.scheduler.termination_future.result(0) is JobStatus.CANCELED
    assert h.listener.failures == []
    h.scheduler.cancel()  # idempotent
    assert h.scheduler.job_status is JobStatus.CANCELED


def test_cancel_before_slots_arrive_withdraws_requests_and_returns_late_slots():
    h = Harness()
    h.scheduler.start_scheduling()
    (late,) = h.slots.offer(SRC0)  # arrived, but the main thread has not processed it yet
    h.scheduler.cancel()
    assert [h.state(v) for v in ALL] == [S.CANCELED] * 4
    assert h.slots.cancelled == ALL
    assert h.scheduler.job_status is JobStatus.CANCELED
    h.main.trigger_all()
    assert h.deployer.deployed == []
    assert h.slots.released == [late]


def test_region_restart_by_listener_keeps_other_region_running():
    h = Harness()
    h.listener.on_failure = lambda execution: h.scheduler.restart_vertices([SRC0, SINK0])
    h.deploy_all()
    h.run_all(ALL)
    first_src0, first_sink0 = h.attempt(SRC0), h.attempt(SINK0)
    h.report(SINK0, S.FAILED, cause=RuntimeError("boom"))
    assert h.state(SRC0) is S.CANCELING and h.deployer.cancelled == [first_src0]
    assert h.attempt(SINK0) == first_sink0  # waits until the whole region is terminal
    h.scheduler.update_task_execution_state(first_src0, S.CANCELED)
    assert [h.execution(v).attempt_number for v in (SRC0, SINK0)] == [1, 1]
    assert h.slots.request_batches[-1] == [SRC0, SINK0]
    assert [h.state(v) for v in ALL] == [S.SCHEDULED, S.RUNNING, S.SCHEDULED, S.RUNNING]
    h.slots.offer(SRC0, SINK0)
    h.main.trigger_all()
    assert [a for a, _ in h.deployer.deployed[-2:]] == [h.attempt(SRC0), h.attempt(SINK0)]
    h.run_all([SRC0, SINK0])
    for v in ALL:
        h.report(v, S.FINISHED)
    assert h.scheduler.job_status is JobStatus.FINISHED


def test_restart_dropped_when_job_cancelled_meanwhile():
    h = Harness()
    h.deploy_all()
    h.run_all(ALL)
    restarted = h.scheduler.restart_vertices([SRC0])
    h.scheduler.cancel()
    for v in ALL:
        h.report(v, S.CANCELED)
    assert h.scheduler.job_status is JobStatus.CANCELED
    with pytest.raises(StaleDeploymentError, match="CANCELLING"):
        restarted.result(0)
    assert h.execution(SRC0).attempt_number == 0


def test_deploy_requires_created_executions_and_running_job():
    h = Harness()
    h.deploy_all()
    with pytest.raises(IllegalStateTransition, match="DEPLOYING"):
        h.scheduler.allocate_slots_and_deploy([SRC0])
    h.scheduler.cancel()
    with pytest.raises(IllegalStateTransition, match="CANCELLING"):
        h.scheduler.allocate_slots_and_deploy([SRC0])


def test_scheduler_methods_refuse_other_threads():
    h = Harness()
    errors = []

    def off_main():
        try:
            h.scheduler.update_task_execution_state(h.attempt(SRC0), S.SCHEDULED)
        except RuntimeError as exc:
            errors.append(exc)

    t = threading.Thread(target=off_main, name="rpc-thread")
    t.start()
    t.join(5)
    assert len(errors) == 1 and "rpc-thread" in str(errors[0])
    assert h.state(SRC0) is S.CREATED


def _running_harness() -> Harness:
    h = Harness()
    h.deploy_all()
    h.run_all(ALL)
    return h


def test_restart_waits_for_the_backoff_and_the_cancellations_then_restores_before_requesting_slots():
    from datetime import timedelta

    h = _running_harness()
    restored: list[list[ExecutionVertexID]] = []
    done = h.scheduler.restart_vertices(
        [SRC0, SINK0],
        delay=timedelta(seconds=2),
        restore=lambda ids: restored.append((ids, len(h.slots.request_batches))),
    )
    h.report(SRC0, S.CANCELED)
    h.report(SINK0, S.CANCELED)
    h.main.advance(timedelta(seconds=1.9))
    assert not done.done() and restored == [] and h.execution(SRC0).attempt_number == 0
    batches = len(h.slots.request_batches)
    h.main.advance(timedelta(seconds=0.1))
    assert done.result(0) is None
    assert restored == [([SRC0, SINK0], batches)], "restore runs on the new attempts, before their slot requests"
    assert [h.execution(v).attempt_number for v in (SRC0, SINK0)] == [1, 1]
    assert h.slots.request_batches[-1] == [SRC0, SINK0]


def test_restart_after_the_backoff_still_waits_for_a_slow_cancellation():
    from datetime import timedelta

    h = _running_harness()
    done = h.scheduler.restart_vertices([SRC0, SINK0], delay=timedelta(seconds=1))
    h.report(SINK0, S.CANCELED)
    h.main.advance(timedelta(seconds=5))
    assert not done.done() and h.state(SRC0) is S.CANCELING
    h.report(SRC0, S.CANCELED)
    assert done.result(0) is None and h.execution(SRC0).attempt_number == 1


def test_a_restart_superseded_by_a_newer_one_does_nothing():
    from datetime import timedelta

    h = _running_harness()
    restores = []
    first = h.scheduler.restart_vertices([SRC0, SINK0], delay=timedelta(seconds=1), restore=restores.append)
    h.report(SRC0, S.CANCELED)
    h.report(SINK0, S.CANCELED)
    second = h.scheduler.restart_vertices([SRC0, SINK0], delay=timedelta(seconds=2), restore=restores.append)
    h.main.advance(timedelta(seconds=1))
    assert first.result(0) is None and restores == [] and h.execution(SRC0).attempt_number == 0
    h.main.advance(timedelta(seconds=1))
    assert second.result(0) is None and restores == [[SRC0, SINK0]]
    assert [h.execution(v).attempt_number for v in (SRC0, SINK0)] == [1, 1], "one new attempt, not two"


def test_a_failing_restore_fails_the_restart_and_deploys_nothing():
    h = _running_harness()
    batches = len(h.slots.request_batches)

    def restore(ids):
        raise RuntimeError("no restore point")

    done = h.scheduler.restart_vertices([SRC0, SINK0], restore=restore)
    h.report(SRC0, S.CANCELED)
    h.report(SINK0, S.CANCELED)
    with pytest.raises(RuntimeError, match="no restore point"):
        done.result(0)
    assert len(h.slots.request_batches) == batches
    assert h.state(SRC0) is S.CREATED and h.scheduler.job_status is JobStatus.RUNNING
