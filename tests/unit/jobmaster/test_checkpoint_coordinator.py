"""CheckpointCoordinator against shutdown: commits in flight when the job ends.

Real Delta storage (``tmp_path``), a real execution graph, and a
ManualMainThreadExecutor, so the interleaving of "the commit finished on the
storage thread" and "the job ended" is chosen by the test instead of by luck.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from datetime import timedelta

import pytest

from checkpointing import list_completed_checkpoints
from flinklike_spark._runtime.checkpoint_messages import CheckpointAck
from flinklike_spark._runtime.graph.execution_graph import ExecutionGraph
from flinklike_spark._runtime.graph.execution_state import ExecutionState
from flinklike_spark._runtime.graph.job_graph import JobGraph, JobVertex, PartitionerKind, PartitionerSpec
from flinklike_spark._runtime.jobmaster.checkpoint_coordinator import CheckpointCoordinator
from flinklike_spark._runtime.jobmaster.main_thread import ManualMainThreadExecutor
from flinklike_spark.config import Configuration
from flinklike_spark.errors import CheckpointFailedError

pytestmark = pytest.mark.timeout(60)

S = ExecutionState


def _graph() -> ExecutionGraph:
    g = JobGraph(job_id="0123456789abcdef0123456789abcdef", name="coordinator test")
    g.add_vertex(JobVertex(id="src", name="Source", parallelism=1, operators=["src"], is_source=True))
    g.add_vertex(JobVertex(id="sink", name="Sink", parallelism=1, operators=["sink"]))
    g.connect("src", "sink", PartitionerSpec(kind=PartitionerKind.FORWARD))
    graph = ExecutionGraph.from_job_graph(g)
    for vertex in graph.vertices():
        for state in (S.SCHEDULED, S.DEPLOYING, S.INITIALIZING, S.RUNNING):
            vertex.current_execution.transition(state)
    return graph


class _RecordingGateway:
    """Records the TaskExecutorGateway calls the coordinator makes, as (method, arguments)."""

    def __init__(self, sent: list) -> None:
        self._sent = sent

    def trigger_checkpoint(self, execution_id, barrier):
        self._sent.append(("trigger_checkpoint", (execution_id, barrier)))
        return True

    def notify_checkpoint_complete(self, execution_id, checkpoint_id):
        self._sent.append(("notify_checkpoint_complete", (execution_id, checkpoint_id)))

    def notify_checkpoint_aborted(self, execution_id, checkpoint_id):
        self._sent.append(("notify_checkpoint_aborted", (execution_id, checkpoint_id)))


class Harness:
    def __init__(self, directory: str, **config: object) -> None:
        self.graph = _graph()
        self.main = ManualMainThreadExecutor()
        self.sent: list[tuple[str, object]] = []
        self.rpcs: list[concurrent.futures.Future] = []
        self.hold_rpcs = False  # leave RPC futures pending, for the test to complete
        self.failures: list[BaseException] = []
        options = Configuration(
            {"execution.checkpointing.dir": directory, "execution.checkpointing.timeout": "60 s", **config}
        ).checkpointing
        self.coordinator = CheckpointCoordinator(
            graph=self.graph,
            options=options,
            main_thread=self.main,
            send=self._send,
            fail_job=self.failures.append,
        )

    def _send(self, execution, call):
        call(_RecordingGateway(self.sent))
        future: concurrent.futures.Future = concurrent.futures.Future()
        self.rpcs.append(future)
        if not self.hold_rpcs:
            future.set_result(True)
        return future

    def execution(self, vertex_id: str):
        return next(v.current_execution for v in self.graph.vertices() if v.id.job_vertex_id == vertex_id)

    def finish(self, vertex_id: str) -> None:
        execution = self.execution(vertex_id)
        execution.transition(S.FINISHED)
        self.coordinator.task_finished(execution.attempt_id.full_id, execution.vertex_id)

    def acknowledge_all(self, checkpoint_id: int, *, only: str | None = None) -> None:
        for vertex in self.graph.vertices():
            if only is not None and vertex.id.job_vertex_id != only:
                continue
            attempt = vertex.current_execution.attempt_id.full_id
            self.coordinator.receive_ack(
                CheckpointAck(
                    job_id=self.graph.job_id,
                    execution_id=attempt,
                    checkpoint_id=checkpoint_id,
                    handles=(),
                    mode="aligned",
                    alignment=timedelta(0),
                )
            )

    def wait_for_posted_work(self, timeout: float = 30.0) -> None:
        """Block until the storage thread posted its result to the (manual) main thread."""
        deadline = time.monotonic() + timeout
        while self.main.num_queued == 0:
            assert time.monotonic() < deadline, "the storage thread posted nothing"
            time.sleep(0.01)


def test_a_commit_in_flight_when_the_job_ends_completes_and_is_reported_completed(tmp_path):
    h = Harness(str(tmp_path))
    future = h.coordinator.trigger("savepoint")
    h.main.trigger_all()
    h.acknowledge_all(1)  # all acknowledged: the commit starts on the storage thread
    h.wait_for_posted_work()  # the commit is durable; its callback waits for the main thread

    drained = h.coordinator.stop("job FINISHED")  # the job ended meanwhile
    drained_before_the_commit_was_handled = drained is not None and drained.done()
    h.main.trigger_all()  # before the fix: InvalidStateError (a result set on the future stop() had failed)

    assert [c.checkpoint_id for c in list_completed_checkpoints(str(tmp_path))] == [1]
    assert future.result(0).checkpoint_id == 1, "a durable savepoint is never reported failed"
    assert [c.checkpoint_id for c in h.coordinator.completed] == [1]
    assert not drained_before_the_commit_was_handled, "the job must not complete while a commit's outcome is unknown"
    assert drained.done()
    assert h.failures == []


def test_stop_waits_for_storage_work_before_it_reports_drained(tmp_path):
    h = Harness(str(tmp_path))
    future = h.coordinator.trigger()
    h.main.trigger_all()
    h.acknowledge_all(1)
    drained = h.coordinator.stop("job FINISHED")  # the commit may still be running
    deadline = time.monotonic() + 30
    while not drained.done():
        assert time.monotonic() < deadline, "the coordinator never drained"
        h.main.trigger_all()
        time.sleep(0.01)
    # Drained means nothing of the job is written any more: the result is known and durable.
    assert future.result(0).checkpoint_id == 1
    assert [c.checkpoint_id for c in list_completed_checkpoints(str(tmp_path))] == [1]


def test_stop_without_work_in_flight_drains_at_once_and_fails_pending_checkpoints(tmp_path):
    h = Harness(str(tmp_path))
    future = h.coordinator.trigger()
    h.main.trigger_all()
    drained = h.coordinator.stop("job CANCELED")  # nobody acknowledged: not committing
    h.main.trigger_all()
    assert drained.done()
    with pytest.raises(CheckpointFailedError, match="job CANCELED"):
        future.result(0)
    assert h.coordinator.stop("again") is drained, "stop is idempotent"


def test_an_rpc_answer_after_the_main_thread_shut_down_raises_nowhere(tmp_path, caplog):
    # "main thread executor 'jobmaster-main' is shut down" was logged from RPC callbacks
    # that posted to the main thread after the cluster had closed it.
    h = Harness(str(tmp_path))
    h.hold_rpcs = True
    h.coordinator.trigger()
    h.main.trigger_all()
    h.main.shutdown()  # the cluster closed
    with caplog.at_level(logging.DEBUG):
        for rpc in h.rpcs:
            rpc.set_result(False)  # "the source task is not running"
    assert h.rpcs, "the trigger sent nothing"
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


# -- checkpoints after tasks finished (FLIP-147) ---------------------------------------------------


def test_with_the_source_finished_the_checkpoint_starts_at_the_running_task_and_records_the_source(tmp_path):
    h = Harness(str(tmp_path))
    h.finish("src")
    future = h.coordinator.trigger()
    h.main.trigger_all()
    sink = h.execution("sink").attempt_id.full_id
    assert [args[0] for method, args in h.sent if method == "trigger_checkpoint"] == [sink], (
        "the trigger goes to the running task whose upstream finished, not to the finished source"
    )
    h.acknowledge_all(1, only="sink")  # the finished source is not waited for
    h.wait_for_posted_work()
    h.main.trigger_all()
    assert future.result(0).finished_vertices == frozenset({"src"})
    assert [c.finished_vertices for c in list_completed_checkpoints(str(tmp_path))] == [frozenset({"src"})]
    assert h.coordinator.finished_vertices(1) == frozenset({"src"})


def test_a_task_that_finishes_while_the_checkpoint_waits_for_it_counts_as_finished(tmp_path):
    h = Harness(str(tmp_path))
    future = h.coordinator.trigger()
    h.main.trigger_all()
    h.acknowledge_all(1, only="sink")
    h.finish("src")  # it ended after its final checkpoint; its state cannot change any more
    h.wait_for_posted_work()
    h.main.trigger_all()
    assert future.result(0).finished_vertices == frozenset({"src"})


def test_no_checkpoint_once_every_task_finished_or_with_the_option_off(tmp_path):
    h = Harness(str(tmp_path))
    h.finish("src")
    h.finish("sink")
    with pytest.raises(CheckpointFailedError, match="every task finished"):
        h.coordinator.trigger().result(0)
    off = Harness(str(tmp_path / "off"), **{"execution.checkpointing.checkpoints-after-tasks-finish": False})
    off.execution("src").transition(S.FINISHED)
    with pytest.raises(CheckpointFailedError, match="tasks not running"):
        off.coordinator.trigger().result(0)
