"""CheckpointCoordinator: triggers checkpoints at the sources, collects acknowledgements, commits.

Flink's ``CheckpointCoordinator`` on the JobMaster's main thread:

* periodic triggering every ``execution.checkpointing.interval`` (no trigger
  while ``max-concurrent-checkpoints`` are pending, within ``min-pause`` of
  the last completion, or while a task is neither RUNNING nor FINISHED);
* checkpoints after tasks finished (FLIP-147,
  ``execution.checkpointing.checkpoints-after-tasks-finish``, Flink's
  ``DefaultCheckpointPlanCalculator``): a checkpoint is triggered at the
  RUNNING tasks all of whose upstream tasks FINISHED (the sources, and tasks
  whose inputs all ended), waits for every RUNNING task, and records the
  vertices whose every subtask FINISHED (``finished_vertices`` in the
  ``checkpoints`` row; a restore deploys them finished). A task that finishes
  while a checkpoint waits for it counts as finished in that checkpoint: it
  ends only after a checkpoint holding its final state completed. With the
  option off, or for a savepoint, every task must be RUNNING;
* a checkpoint is *pending* until every task acknowledged it; then the
  :class:`~checkpointing.CheckpointCommitter` commits its files and writes the
  ``checkpoints`` row last (on the I/O pool), the tasks are notified
  (``notify_checkpoint_complete``: two-phase-commit sinks commit) and older
  checkpoints beyond ``num-retained`` are deleted;
* a decline, the ``timeout``, or a failed commit aborts it (tasks are told
  ``notify_checkpoint_aborted``). Failures caused by the checkpoint itself
  (I/O, expiry, commit) count toward ``tolerable-failed-checkpoints``; one
  more than that fails the job. A completed checkpoint resets the count.

Shutdown (:meth:`CheckpointCoordinator.stop`): pending checkpoints that are
still collecting acknowledgements are aborted, but a checkpoint whose commit
is running is left to finish, because its outcome is only known once the
commit returns: a checkpoint that is durable on storage is reported completed,
never failed. ``stop`` returns a future that completes (on the main thread)
once every storage operation (commit, retention, discarding files) has
returned and its callback ran; the JobMaster completes the job only then, so
nothing of the job is written after ``execute()`` returned.

Barriers carry the options the configuration asks for: unaligned checkpoints
(``unaligned.enabled``) start aligned with a timeout when
``aligned-checkpoint-timeout`` > 0 and switch to unaligned when it expires;
savepoints are always aligned.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from checkpointing import (
    CheckpointCommitter,
    CheckpointLayout,
    CheckpointRecord,
    StateHandle,
    list_completed_checkpoints,
    retain,
)
from checkpointing.maintenance import MaintenanceSchedule
from checkpointing.savepoint_marker import savepoint_path
from checkpointing.schemas import FINISHED_VERTICES_PROPERTY, CheckpointKind, SnapshotAlignment
from flinklike_spark._runtime.checkpoint_messages import CheckpointAck, CheckpointDecline
from flinklike_spark._runtime.deployment import RestoreDeployment
from flinklike_spark._runtime.gateways import TaskExecutorGateway
from flinklike_spark._runtime.graph.execution_graph import ExecutionAttemptID, ExecutionGraph, ExecutionVertexID
from flinklike_spark._runtime.graph.execution_state import ExecutionState
from flinklike_spark._runtime.jobmaster.checkpoint_stats import CheckpointStatsTracker, RestoredCheckpointStats
from flinklike_spark._runtime.network.events import (
    AlignmentType,
    CheckpointBarrier,
    CheckpointOptions,
)
from flinklike_spark.config import CheckpointingMode, CheckpointingOptions
from flinklike_spark.errors import CheckpointCommitConflictError, CheckpointDeclineReason, CheckpointFailedError
from flinklike_spark.storage import StorageConfig

__all__ = ["CheckpointCoordinator", "CompletedCheckpointInfo"]

log = logging.getLogger(__name__)

_COMMIT_ATTEMPTS = 4

# Declines that say something is wrong with checkpointing itself (Flink's counted failure reasons).
_COUNTED_REASONS = frozenset({CheckpointDeclineReason.IO_FAILURE})


@dataclasses.dataclass(frozen=True, kw_only=True)
class CompletedCheckpointInfo:
    """What a caller of :meth:`CheckpointCoordinator.trigger` gets back."""

    checkpoint_id: int
    kind: CheckpointKind
    mode: SnapshotAlignment
    storage: str
    job_id: str
    duration: timedelta
    finished_vertices: frozenset[str] = frozenset()  # vertices fully finished when it was taken

    @property
    def path(self) -> str:
        """A restore path for ``execution.state-recovery.path``; a savepoint's is a directory (its ``_metadata``)."""
        return savepoint_path(self.storage, self.job_id, self.checkpoint_id)

    def result(self, timeout: float | None = None) -> str:
        """:attr:`path`: so that PyFlink's ``client.trigger_savepoint().result()`` also reads the waiting form."""
        return self.path

    def __repr__(self) -> str:
        return (
            f"CompletedCheckpointInfo(checkpoint_id={self.checkpoint_id}, kind={self.kind.name}, "
            f"path={self.path!r}, duration={self.duration})"
        )


@dataclasses.dataclass(kw_only=True, eq=False)
class _Pending:
    checkpoint_id: int
    kind: CheckpointKind
    trigger_time: datetime
    started: float
    waiting: set[str]
    finished: set[ExecutionVertexID] = dataclasses.field(default_factory=set)  # subtasks that had finished
    finished_vertices: frozenset[str] = frozenset()  # the fully finished vertices, once all acknowledged
    acks: list[CheckpointAck] = dataclasses.field(default_factory=list)
    future: concurrent.futures.Future[CompletedCheckpointInfo] = dataclasses.field(
        default_factory=concurrent.futures.Future
    )
    timeout: Any = None
    committing: bool = False
    commit: concurrent.futures.Future[None] | None = None  # the storage commit, once all acknowledged


class CheckpointCoordinator:
    """Runs the checkpoints of one job; every method runs on the JobMaster's main thread.

    Args:
        graph: the job's execution graph (whose current executions are asked).
        options: the checkpointing configuration (``directory`` must be set).
        main_thread: the JobMaster's main-thread executor.
        send: ``send(execution, call)`` -> Future of ``call(gateway)`` on the
            :class:`~flinklike_spark._runtime.gateways.TaskExecutorGateway` of the task's TaskExecutor.
        fail_job: called once the tolerable failures are exceeded (a global failure of the job,
            which the restart strategy may restart).
        first_checkpoint_id: ids continue after a restored checkpoint.
        lineage_id: recorded in every checkpoint, so that a job restored from it
            keeps its sinks' transactional ids (default: this job's id).
        storage: the job's object-store settings for ``options.directory``.
        stats: the statistics to go on with (a rescaled job's); a new tracker if None.
    """

    def __init__(
        self,
        *,
        graph: ExecutionGraph,
        options: CheckpointingOptions,
        main_thread,
        send: Callable[[Any, Callable[[TaskExecutorGateway], Any]], concurrent.futures.Future],
        fail_job: Callable[[BaseException], None],
        first_checkpoint_id: int = 1,
        lineage_id: str = "",
        storage: StorageConfig | None = None,
        stats: CheckpointStatsTracker | None = None,
    ) -> None:
        if options.directory is None:
            raise ValueError("checkpointing needs execution.checkpointing.dir")
        self._layout = CheckpointLayout(base_url=options.directory, storage=storage)
        self._graph = graph
        self._options = options
        self._main = main_thread
        self._send = send
        # Storage work (commit, retention, discarding) runs on one thread of its own,
        # so a job's commits and deletions never race each other.
        self._io = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-storage")
        self._fail_job = fail_job
        self._next_id = first_checkpoint_id
        self._lineage_id = lineage_id or graph.job_id
        self._pending: dict[int, _Pending] = {}
        self._committer: CheckpointCommitter | None = None
        self._last_completion = 0.0
        self._consecutive_failures = 0
        self._periodic = None
        self._checkpoint_when_running = False  # set by restore_started()
        self._stopped = False
        self._suspended = False  # stop-with-savepoint: no periodic checkpoint after the savepoint
        self._maintenance = MaintenanceSchedule()  # which retentions also vacuum and clean the tables' logs
        self._storage_ops = 0  # storage operations whose callback has not yet run on the main thread
        self._drained: concurrent.futures.Future[None] | None = None  # set by stop()
        self.completed: list[CompletedCheckpointInfo] = []
        self.num_failed = 0
        self.stats = stats or CheckpointStatsTracker()  # for the REST API and metrics

    @property
    def storage(self) -> CheckpointLayout:
        """The checkpoint directory with the settings to reach it."""
        return self._layout

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start periodic triggering (if an interval is configured)."""
        if self._options.interval is not None and not self._stopped:
            self._periodic = self._main.schedule(self._options.interval, self._periodic_trigger)

    def stop(self, reason: str) -> concurrent.futures.Future[None]:
        """Stop triggering and abort the pending checkpoints that are not committing; idempotent.

        A checkpoint whose commit is running completes or fails by the commit's
        outcome. Returns a future that completes on the main thread once no
        storage operation of this coordinator is running or will start (the
        same future on every call).
        """
        self._stopped = True
        if self._periodic is not None:
            self._periodic.cancel()
        for pending in list(self._pending.values()):
            if not pending.committing:
                self._abort(pending, reason, notify=False, counts=False, quiet=True)
        if self._drained is None:
            self._drained = concurrent.futures.Future()
        self._maybe_drained()
        return self._drained

    def _maybe_drained(self) -> None:
        drained = self._drained
        if drained is not None and not drained.done() and self._storage_ops == 0:
            self._io.shutdown(wait=False)  # idle: nothing runs, and nothing may start any more
            drained.set_result(None)

    def _run_storage(
        self, fn: Callable[..., Any], *args: Any, then: Callable[[concurrent.futures.Future], None] | None = None
    ) -> concurrent.futures.Future | None:
        """Run ``fn(*args)`` on the storage thread, then ``then(future)`` on the main thread.

        Counted until ``then`` ran, so :meth:`stop`'s future waits for it. Once
        drained, nothing new starts (returns None). Returns the storage
        thread's future, which completes without the main thread.
        """
        if self._drained is not None and self._drained.done():
            log.debug("checkpoint storage of job %s is drained; dropping %s", self._graph.job_id, fn)
            return None
        self._storage_ops += 1

        def in_main_thread(future: concurrent.futures.Future) -> None:
            self._storage_ops -= 1
            try:
                if then is not None:
                    then(future)
                elif future.exception() is not None:
                    log.warning("checkpoint storage operation failed", exc_info=future.exception())
            finally:
                self._maybe_drained()

        future = self._io.submit(fn, *args)
        future.add_done_callback(lambda f: self._post(lambda: in_main_thread(f)))
        return future

    def _post(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the main thread; from a callback of another thread's future."""
        try:
            self._main.execute(fn)
        except RuntimeError:  # the main thread is gone: the cluster closed; the job is over
            log.debug("checkpoint coordinator of job %s: %s came after shutdown", self._graph.job_id, fn)

    # -- failover (called by the FailoverCoordinator) -------------------------------------------

    def abort_pending(self, reason: str) -> None:
        """Abort the pending checkpoints that still wait for acknowledgements (a task failed).

        Not counted as checkpoint failures. Checkpoints whose commit already
        started are left to finish: :meth:`latest_restore_point` waits for them.
        Periodic triggering goes on; it resumes once every task runs again.
        """
        for pending in [p for p in self._pending.values() if not p.committing]:
            self._abort(pending, reason, counts=False, quiet=True)

    def latest_restore_point(self, *, wait: timedelta) -> int | None:
        """The id of the newest checkpoint or savepoint of this job that completed, or None.

        Blocks up to ``wait`` for commits in flight: a checkpoint whose
        ``checkpoints`` row is being written while tasks restart must either be
        the restore point or never complete; restoring an older one would let
        the restarted sinks write again what that checkpoint's sinks commit.
        """
        ids = [c.checkpoint_id for c in self.completed]
        for pending in list(self._pending.values()):
            if pending.commit is None:
                continue
            try:
                pending.commit.result(wait.total_seconds())
            except TimeoutError:
                raise CheckpointFailedError(
                    f"checkpoint {pending.checkpoint_id} is still committing after {wait}; cannot choose a restore point"
                ) from None
            except Exception:  # noqa: BLE001 - a failed commit is not a restore point
                continue
            ids.append(pending.checkpoint_id)
        return max(ids, default=None)

    def describe_pending(self) -> list[str]:
        """What each pending checkpoint waits for, oldest first (for timeouts the user sees)."""
        now = time.monotonic()
        described = []
        for pending in self._pending.values():
            age = now - pending.started
            if pending.committing:
                waits = "its commit to the checkpoint storage"
            else:
                missing = sorted(str(ExecutionAttemptID.from_full_id(e)) for e in pending.waiting)
                waits = f"acknowledgements from {missing}"
            described.append(f"{pending.kind} {pending.checkpoint_id} waits for {waits} after {age:.1f} s")
        return described

    def suspend_periodic(self) -> None:
        """Trigger no periodic checkpoint until :meth:`resume_periodic` (stop-with-savepoint)."""
        self._suspended = True

    def resume_periodic(self) -> None:
        self._suspended = False

    def restore_started(self, restore: RestoreDeployment, *, is_savepoint: bool | None = None) -> None:
        """Tasks are deploying from ``restore`` (a failover or a restored job): checkpoint once they all run.

        The first checkpoint after a restore does not wait for the next periodic
        tick (up to an interval later): the sooner one completes, the less input
        a second failure replays. Periodic triggering counts its interval anew
        from there. The restore is reported to the REST API (Flink's ``latest.restored``);
        ``is_savepoint`` None: as this job's own statistics know the checkpoint.
        """
        self._checkpoint_when_running = True
        if is_savepoint is None:
            known = self.stats.checkpoint(restore.checkpoint_id) if restore.job_id == self._graph.job_id else None
            is_savepoint = known is not None and known.kind is CheckpointKind.SAVEPOINT
        self.stats.report_restored(
            RestoredCheckpointStats(
                checkpoint_id=restore.checkpoint_id,
                restore_time=datetime.now(UTC),
                external_path=savepoint_path(restore.storage.base_url, restore.job_id, restore.checkpoint_id),
                job_id=restore.job_id,
                is_savepoint=is_savepoint,
            )
        )

    def task_running(self) -> None:
        """A task reached RUNNING (main thread): after a restore, trigger as soon as every task runs."""
        if not self._checkpoint_when_running or self._stopped or self._options.interval is None:
            return
        if not self._graph.every_task_running():
            return
        self._checkpoint_when_running = False
        if self._suspended or self._pending:
            return
        log.info("job %s: every task runs after the restore; checkpointing now", self._graph.job_id)
        if self._periodic is not None:
            self._periodic.cancel()
        self._periodic_trigger()

    def _periodic_trigger(self) -> None:
        if self._stopped:
            return
        if self._suspended:
            self._periodic = self._main.schedule(self._options.interval, self._periodic_trigger)
            return
        try:
            if (
                len(self._pending) < self._options.max_concurrent
                and time.monotonic() - self._last_completion >= self._options.min_pause.total_seconds()
            ):
                self.trigger()
        finally:
            self._periodic = self._main.schedule(self._options.interval, self._periodic_trigger)

    # -- triggering ------------------------------------------------------------------------------

    def _barrier_options(self, kind: CheckpointKind) -> CheckpointOptions:
        if kind is CheckpointKind.SAVEPOINT:
            return CheckpointOptions(checkpoint_type=CheckpointKind.SAVEPOINT, alignment=AlignmentType.FORCED_ALIGNED)
        options = self._options
        if not options.unaligned or options.mode is CheckpointingMode.AT_LEAST_ONCE:
            return CheckpointOptions()
        if options.aligned_checkpoint_timeout > timedelta(0):
            return CheckpointOptions(aligned_checkpoint_timeout=options.aligned_checkpoint_timeout)
        return CheckpointOptions(alignment=AlignmentType.UNALIGNED)

    def trigger(
        self, kind: CheckpointKind = CheckpointKind.CHECKPOINT
    ) -> concurrent.futures.Future[CompletedCheckpointInfo]:
        """Trigger a checkpoint (or savepoint) now; the future completes or fails with it."""
        future: concurrent.futures.Future[CompletedCheckpointInfo] = concurrent.futures.Future()
        executions = [v.current_execution for v in self._graph.vertices()]
        after_finish = self._options.checkpoints_after_tasks_finish and kind is CheckpointKind.CHECKPOINT
        ready = (ExecutionState.RUNNING, ExecutionState.FINISHED) if after_finish else (ExecutionState.RUNNING,)
        not_running = [str(e.attempt_id) for e in executions if e.state not in ready]
        running = [e for e in executions if e.state is ExecutionState.RUNNING]
        if self._stopped or not_running or not running:
            reason = (
                "checkpointing is stopped" if self._stopped
                else f"tasks not running: {not_running}" if not_running else "every task finished"
            )  # fmt: skip
            future.set_exception(CheckpointFailedError(f"{kind} not triggered: {reason}"))
            return future
        checkpoint_id = self._next_id
        self._next_id += 1
        now = time.time()
        pending = _Pending(
            checkpoint_id=checkpoint_id,
            kind=kind,
            trigger_time=datetime.fromtimestamp(now, tz=UTC),
            started=time.monotonic(),
            waiting={e.attempt_id.full_id for e in running},
            finished={e.vertex_id for e in executions if e.state is ExecutionState.FINISHED},
            future=future,
        )
        self._pending[checkpoint_id] = pending
        alignment = self._barrier_options(kind).alignment
        unaligned = alignment is not AlignmentType.ALIGNED and kind is CheckpointKind.CHECKPOINT
        self.stats.report_pending(checkpoint_id, kind, pending.trigger_time, len(running), unaligned=unaligned)
        pending.timeout = self._main.schedule(self._options.timeout, lambda: self._expire(checkpoint_id))
        barrier = CheckpointBarrier(checkpoint_id, int(now * 1000), self._barrier_options(kind))
        log.info("triggering %s %d of job %s (%s)", kind, checkpoint_id, self._graph.job_id, barrier.options)
        for execution in self._tasks_to_trigger(running):
            execution_id = execution.attempt_id.full_id
            sent = self._send(execution, lambda gateway, e=execution_id: gateway.trigger_checkpoint(e, barrier))
            sent.add_done_callback(lambda f, cid=checkpoint_id: self._on_trigger_sent(cid, f))
        return future

    def _tasks_to_trigger(self, running: list) -> list:
        """The running tasks no barrier reaches: sources, and tasks whose upstream tasks all FINISHED."""
        graph = self._graph
        return [
            e for e in running
            if all(graph.get_vertex(p).current_execution.state is ExecutionState.FINISHED
                   for p in graph.get_producers(e.vertex_id))
        ]  # fmt: skip

    def task_finished(self, execution_id: str, vertex_id: ExecutionVertexID) -> None:
        """A task FINISHED: the pending checkpoints waiting for it record it as finished.

        A task ends only after a checkpoint that holds its final state
        completed (or, without a final checkpoint, when nothing is checkpointed
        any more), so leaving its state out of a later checkpoint loses nothing.
        """
        for pending in [p for p in self._pending.values() if not p.committing and execution_id in p.waiting]:
            pending.waiting.discard(execution_id)
            pending.finished.add(vertex_id)
            if not pending.waiting and pending.acks:
                self._complete(pending)
            elif not pending.waiting:
                self._abort(pending, "every task finished", counts=False, quiet=True)

    def _on_trigger_sent(self, checkpoint_id: int, sent: concurrent.futures.Future) -> None:
        error = sent.exception()
        if error is None and sent.result() is not False:
            return
        cause = error or "the source task is not running"
        self._post(lambda: self._trigger_failed(checkpoint_id, cause))

    def _trigger_failed(self, checkpoint_id: int, cause: object) -> None:
        pending = self._pending.get(checkpoint_id)
        if pending is not None:
            self._abort(pending, f"could not trigger at a source: {cause}", counts=False)

    # -- acknowledgements -------------------------------------------------------------------------

    def receive_ack(self, ack: CheckpointAck) -> None:
        pending = self._pending.get(ack.checkpoint_id)
        if pending is None or ack.execution_id not in pending.waiting:
            log.debug("ignoring late or unknown acknowledgement %s/%s", ack.checkpoint_id, ack.execution_id)
            return
        pending.waiting.discard(ack.execution_id)
        pending.acks.append(ack)
        attempt = ExecutionAttemptID.from_full_id(ack.execution_id)
        self.stats.report_ack(ack.checkpoint_id, attempt.job_vertex_id, attempt.subtask_index, ack, datetime.now(UTC))
        if not pending.waiting:
            self._complete(pending)

    def receive_decline(self, decline: CheckpointDecline) -> None:
        pending = self._pending.get(decline.checkpoint_id)
        if pending is None:
            return
        attempt = ExecutionAttemptID.from_full_id(decline.execution_id)
        self._abort(
            pending,
            f"task {attempt} declined: {decline.reason.name}: {decline.message}",
            counts=decline.reason in _COUNTED_REASONS,
        )

    def _expire(self, checkpoint_id: int) -> None:
        pending = self._pending.get(checkpoint_id)
        if pending is not None and not pending.committing:
            waiting = sorted(str(ExecutionAttemptID.from_full_id(e)) for e in pending.waiting)
            self._abort(pending, f"expired after {self._options.timeout} waiting for {waiting}", counts=True)

    # -- completion and abort ----------------------------------------------------------------------

    def _complete(self, pending: _Pending) -> None:
        pending.committing = True
        handles: list[StateHandle] = [h for ack in pending.acks for h in ack.handles]
        mode = SnapshotAlignment.of_checkpoint(ack.mode for ack in pending.acks)
        finished = pending.finished_vertices = self._fully_finished(pending.finished)
        record = CheckpointRecord(
            trigger_time=pending.trigger_time,
            completion_time=datetime.now(UTC),  # the last acknowledgement: Flink's end-to-end duration
            kind=pending.kind,
            mode=mode,
            max_alignment=max((ack.alignment for ack in pending.acks), default=timedelta(0)),
            parallelism={jv.id: jv.parallelism for jv in self._graph.job_graph},
            max_parallelism={jv.id: jv.max_parallelism for jv in self._graph.job_graph},
            lineage_id=self._lineage_id,
            job_graph_fingerprint=self._graph.job_graph.fingerprint(),
            properties={FINISHED_VERTICES_PROPERTY: json.dumps(sorted(finished))} if finished else {},
        )
        job_id = self._graph.job_id

        def commit() -> None:
            if self._committer is None:
                self._committer = CheckpointCommitter(self.storage)
            for attempt in range(_COMMIT_ATTEMPTS):
                try:
                    self._committer.commit(job_id, pending.checkpoint_id, handles, record)
                    return
                except Exception as exc:
                    if self._is_durable(job_id, pending.checkpoint_id):
                        # The completion row is written last: the checkpoint is complete, whatever failed after.
                        log.warning("commit of checkpoint %d raised after it was durable: %r", pending.checkpoint_id,
                                    exc)  # fmt: skip
                        return
                    # Idempotent: a retry continues where a conflicting concurrent
                    # writer (another job's retention, say) made this one fail.
                    if not isinstance(exc, CheckpointCommitConflictError) or attempt + 1 == _COMMIT_ATTEMPTS:
                        raise
                    time.sleep(0.05 * (attempt + 1))

        duration = timedelta(seconds=time.monotonic() - pending.started)
        pending.commit = self._run_storage(commit, then=lambda f: self._committed(pending, mode, duration, f, finished))

    def _fully_finished(self, finished: set[ExecutionVertexID]) -> frozenset[str]:
        """Ids of the job vertices all of whose subtasks are in ``finished``."""
        return frozenset(
            jv.id for jv in self._graph.job_graph
            if all(ExecutionVertexID(job_vertex_id=jv.id, subtask_index=i) in finished for i in range(jv.parallelism))
        )  # fmt: skip

    def finished_vertices(self, checkpoint_id: int) -> frozenset[str]:
        """The vertices recorded as fully finished in completed checkpoint ``checkpoint_id`` of this job."""
        committing = [p for p in self._pending.values() if p.committing]  # latest_restore_point may name one
        return next(
            (c.finished_vertices for c in [*self.completed, *committing] if c.checkpoint_id == checkpoint_id),
            frozenset(),
        )

    def _is_durable(self, job_id: str, checkpoint_id: int) -> bool:
        """True if the ``checkpoints`` table holds the completion row of ``checkpoint_id`` (storage thread)."""
        try:
            return any(c.checkpoint_id == checkpoint_id for c in list_completed_checkpoints(self.storage, job_id))
        except Exception:  # noqa: BLE001 - unreadable storage: the commit's own error is reported
            log.debug("could not read back the checkpoints table of job %s", job_id, exc_info=True)
            return False

    def _committed(
        self,
        pending: _Pending,
        mode: str,
        record_duration: timedelta,
        commit: concurrent.futures.Future,
        finished: frozenset[str] = frozenset(),
    ) -> None:
        error = commit.exception()
        if error is not None:
            pending.committing = False
            self._abort(pending, f"commit failed: {type(error).__name__}: {error}", counts=True)
            return
        checkpoint_id = pending.checkpoint_id
        self._pending.pop(checkpoint_id, None)
        if pending.timeout is not None:
            pending.timeout.cancel()
        self._last_completion = time.monotonic()
        self._consecutive_failures = 0
        info = CompletedCheckpointInfo(
            checkpoint_id=checkpoint_id,
            kind=pending.kind,
            mode=mode,
            storage=self._layout.base_url,
            job_id=self._graph.job_id,
            duration=record_duration,
            finished_vertices=finished,
        )
        self.completed.append(info)
        self.stats.report_completed(checkpoint_id, record_duration, info.path)
        log.info(
            "completed %s %d of job %s (%s) in %.0f ms",
            pending.kind, checkpoint_id, self._graph.job_id, mode, info.duration.total_seconds() * 1000,
        )  # fmt: skip
        # Completing n subsumes every older pending checkpoint (Flink).
        for older in [p for c, p in self._pending.items() if c < checkpoint_id and not p.committing]:
            self._abort(older, f"subsumed by checkpoint {checkpoint_id}", counts=False)
        self._notify_all(lambda gateway, execution_id: gateway.notify_checkpoint_complete(execution_id, checkpoint_id))
        if pending.kind is CheckpointKind.CHECKPOINT:
            job_id, retained = self._graph.job_id, self._options.num_retained
            self._run_storage(self._retain, job_id, retained)
        pending.future.set_result(info)

    def _retain(self, job_id: str, retained: int) -> None:
        full_vacuum = self._maintenance.due()  # runs on the one storage thread
        try:
            retain(self.storage, job_id, retained, full_vacuum=full_vacuum)
        except Exception:  # noqa: BLE001 - retention is best effort; the next completion retries
            log.warning("retention of job %s checkpoints failed", job_id, exc_info=True)

    def _abort(self, pending: _Pending, reason: str, *, notify: bool = True, counts: bool, quiet: bool = False) -> None:
        if self._pending.pop(pending.checkpoint_id, None) is None:
            return
        if pending.timeout is not None:
            pending.timeout.cancel()
        self.num_failed += 1
        self.stats.report_failed(pending.checkpoint_id, datetime.now(UTC), reason)
        log.log(
            logging.INFO if quiet else logging.WARNING,
            "%s %d of job %s aborted: %s", pending.kind, pending.checkpoint_id, self._graph.job_id, reason,
        )  # fmt: skip
        if notify:
            aborted = pending.checkpoint_id
            self._notify_all(lambda gateway, execution_id: gateway.notify_checkpoint_aborted(execution_id, aborted))
        handles = [h for ack in pending.acks for h in ack.handles]
        if handles:
            self._run_storage(self._discard_files, handles)
        pending.future.set_exception(CheckpointFailedError(f"{pending.kind} {pending.checkpoint_id} failed: {reason}"))
        if counts:
            self._consecutive_failures += 1
            tolerable = self._options.tolerable_failures
            if self._consecutive_failures > tolerable and not self._stopped:
                self._consecutive_failures = 0  # a restarted job starts with the full tolerance again
                self._fail_job(
                    CheckpointFailedError(
                        f"exceeded the checkpoint tolerable failure threshold "
                        f"(execution.checkpointing.tolerable-failed-checkpoints: {tolerable}); last failure: {reason}"
                    )
                )

    def _discard_files(self, handles: list[StateHandle]) -> None:
        try:
            if self._committer is None:
                self._committer = CheckpointCommitter(self.storage)
            self._committer.abort(handles)
        except Exception:  # noqa: BLE001 - orphans are removed by retention later
            log.debug("could not delete the files of an aborted checkpoint", exc_info=True)

    def _notify_all(self, notify: Callable[[TaskExecutorGateway, str], None]) -> None:
        """Call ``notify(gateway, execution id)`` for every running task."""
        for vertex in self._graph.vertices():
            execution = vertex.current_execution
            if execution.state is ExecutionState.RUNNING:
                execution_id = execution.attempt_id.full_id
                self._send(execution, lambda gateway, e=execution_id: notify(gateway, e))
