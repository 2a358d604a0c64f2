"""JobClient and JobExecutionResult: how a user follows and ends a submitted job."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import os
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from flinklike_spark._runtime.graph.execution_state import JobStatus
from flinklike_spark.errors import (
    CheckpointStorageError,
    ConfigurationError,
    JobClientTimeoutError,
    JobExecutionError,
    JobNotRunningError,
)
from flinklike_spark.storage import StorageConfig

__all__ = ["JobClient", "JobExecutionResult", "JobResultFuture", "copy_savepoint"]

log = logging.getLogger(__name__)

_UNSET: Any = object()
_DEFAULT_TIMEOUT = 600.0
"""Seconds the waiting savepoint forms wait by default."""

#: The one line a Ctrl-C while waiting logs (the job id, its status after the cancel).
INTERRUPTED_MESSAGE = "interrupted: cancelled job %s (%s after the interrupt); its local cluster is stopped"

_INTERRUPT_CANCEL_TIMEOUT = 10.0
"""Seconds ``wait`` gives a job to reach CANCELED after Ctrl-C before it closes the cluster anyway."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobExecutionResult:
    """The outcome of a finished job.

    Attributes:
        job_id: the job's id.
        job_name: its name.
        net_runtime: wall time from submission to the end.
        accumulators: name -> list with one value per subtask (in subtask order),
            e.g. the batches a CollectSink received.
    """

    job_id: str
    job_name: str
    net_runtime: timedelta
    accumulators: dict[str, list[Any]]

    def get_job_id(self) -> str:
        return self.job_id

    def get_net_runtime(self) -> timedelta:
        return self.net_runtime

    def get_accumulator_result(self, name: str) -> list[Any]:
        return self.accumulators[name]


class JobResultFuture:
    """PyFlink's ``CompletableFuture`` of a job's result: ``result(timeout)``, ``done()``, ``exception()``."""

    def __init__(self, client: JobClient) -> None:
        self._client = client

    def result(self, timeout: float | None = None) -> JobExecutionResult:
        """The result once the job ended; raises its failure (see :meth:`JobClient.wait`)."""
        return self._client.wait(timeout)

    def done(self) -> bool:
        return self._client.done()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        try:
            self._client.wait(timeout)
        except JobClientTimeoutError:
            raise
        except JobExecutionError as exc:
            return exc
        return None


class JobClient:
    """A handle on a running job (PyFlink's ``JobClient``).

    ``wait`` returns the result or raises :class:`JobExecutionError` (whose
    ``__cause__`` is the root failure, e.g. the user's exception as a
    RemoteTaskError with its traceback). A KeyboardInterrupt (Ctrl-C) while
    waiting cancels the job and shuts its local cluster down before it
    propagates.

    ``web_interface_url`` is the cluster's REST API and web dashboard
    (``rest.port``), e.g. ``http://127.0.0.1:8081``; it serves the job until
    ``wait`` closed a cluster the job owns.

    Thread rules: every method may be called from any thread. Requests that
    need the job (``cancel``, ``trigger_savepoint``) check its status and are
    posted under one lock that ``wait`` also holds while it closes the cluster,
    so a request never reaches a cluster that is shutting down: it sees the
    final status instead.
    """

    def __init__(
        self,
        *,
        job_id: str,
        result: concurrent.futures.Future,
        status: Callable[[], Any],
        cancel: Callable[[], None],
        metrics: Callable[[], dict[str, dict[str, float]]],
        trigger_savepoint: Callable[[], concurrent.futures.Future],
        stop_with_savepoint: Callable[[], concurrent.futures.Future],
        on_done: Callable[[], None] | None = None,
        exception_history: Callable[[], tuple[Any, ...]] = tuple,
        attempts: Callable[[], dict[str, int]] = dict,
        restarts: Callable[[], int] | None = None,
        pending_checkpoints: Callable[[], list[str]] = list,
        web_interface_url: str | None = None,
        collect_results: Any = None,
        placement: Callable[[], dict[str, dict]] = dict,
        storage: StorageConfig | None = None,
        resource_requirements: Any = None,
        start_task_executors: Callable[[int], list[str]] | None = None,
    ) -> None:
        self._start_task_executors = start_task_executors
        self._storage = storage
        self._requirements = resource_requirements  # the engine's AdaptiveJob; None for a job without a cluster
        self.web_interface_url = web_interface_url
        self._placement = placement
        #: engine-internal: the job's ``execute_and_collect`` results
        #: (a ``_runtime.collect_results.CollectResults``), None where the job has no client channel
        self.collect_results = collect_results
        self._pending_checkpoints = pending_checkpoints
        self._restarts = restarts
        self._exception_history = exception_history
        self._attempts = attempts
        self._trigger_savepoint = trigger_savepoint
        self._stop_with_savepoint = stop_with_savepoint
        self.job_id = job_id
        self._result = result
        self._status = status
        self._cancel = cancel
        self._metrics = metrics
        self._on_done = on_done
        self._lock = threading.RLock()

    def get_job_id(self) -> str:
        return self.job_id

    def get_job_status(self):
        """The current JobStatus (CREATED, RUNNING, FINISHED, FAILED, CANCELED, ...)."""
        return self._status()

    def cancel(self) -> None:
        """Cancel the job; ``wait`` then raises JobCancelledError.

        As in Flink, cancelling a job that is already CANCELED does nothing.

        Raises:
            JobNotRunningError: the job already FINISHED or FAILED (it was not cancelled).
        """
        with self._lock:
            status = self._status()
            if status is JobStatus.CANCELED:
                return
            if status.is_globally_terminal:
                raise JobNotRunningError(
                    f"job {self.job_id} was not cancelled: it already {status.name}",
                    job_id=self.job_id,
                    status=status.name,
                )
            self._cancel()

    def trigger_savepoint(self, savepoint_directory: str | os.PathLike[str] | None = None, *, timeout=_UNSET):
        """Take a savepoint (always aligned); the job keeps running.

        Two forms:

        * ``trigger_savepoint()`` or ``trigger_savepoint(timeout=s)``: waits and returns the
          savepoint's :class:`CompletedCheckpointInfo` (``.path`` restores it). This engine's form.
        * ``trigger_savepoint(savepoint_directory)``: PyFlink's form. Returns at once a
          ``concurrent.futures.Future`` whose ``result()`` is the savepoint's path; see
          :meth:`stop_with_savepoint` for where the savepoint is written.

        Raises:
            CheckpointFailedError: the savepoint did not complete.
            ConfigurationError: no ``execution.checkpointing.dir`` is configured (a job
                checkpointing without one keeps its checkpoints only while it runs).
            JobNotRunningError: the job is already FINISHED, FAILED or CANCELED.
            JobClientTimeoutError: no result within ``timeout`` seconds (the job
                keeps running; the savepoint may still complete, or be aborted
                after ``execution.checkpointing.timeout``).
        """
        if isinstance(savepoint_directory, (int, float)) and not isinstance(savepoint_directory, bool):
            savepoint_directory, timeout = None, savepoint_directory  # the earlier positional timeout
        if savepoint_directory is not None:
            return self._savepoint_future(self._trigger_savepoint, "a savepoint", savepoint_directory)
        return self._savepoint(
            self._trigger_savepoint,
            "a savepoint",
            _DEFAULT_TIMEOUT if timeout is _UNSET else timeout,
            "the job keeps running (the savepoint may still complete, or is aborted after "
            "execution.checkpointing.timeout)",
        )

    def stop_with_savepoint(
        self,
        advance_to_end_of_time: bool | float | None = None,
        savepoint_directory: str | os.PathLike[str] | None = None,
        *,
        timeout=_UNSET,
    ):
        """Take a savepoint and stop the job right after it (Flink's stop-with-savepoint).

        No checkpoint is taken after the savepoint, so no sink commits output
        beyond it and resuming from the savepoint is exactly once. ``wait``
        then raises JobCancelledError. If the savepoint fails, the job keeps running.

        Two forms:

        * ``stop_with_savepoint()``, ``stop_with_savepoint(timeout=s)`` (or ``stop_with_savepoint(s)``):
          waits and returns the savepoint's :class:`CompletedCheckpointInfo`. This engine's form.
        * ``stop_with_savepoint(advance_to_end_of_time, savepoint_directory=None)``: PyFlink's
          form. Returns at once a ``concurrent.futures.Future`` whose ``result()`` is the
          savepoint's path. The savepoint is taken in the job's checkpoint directory
          (``execution.checkpointing.dir``); a ``savepoint_directory`` elsewhere then gets a
          self-contained copy (written as :class:`~flinklike_spark.state_processor.SavepointWriter`
          writes one) and the path is the copy's. ``advance_to_end_of_time=True`` (Flink's
          ``--drain``) is refused: this engine does not drain a job.

        Raises:
            ConfigurationError: ``advance_to_end_of_time`` is True.
            JobClientTimeoutError: the savepoint did not complete within
                ``timeout`` seconds; the job stops when it completes (or keeps
                running if it fails).
            and what :meth:`trigger_savepoint` raises.
        """
        what = "stop-with-savepoint"
        if isinstance(advance_to_end_of_time, bool):  # PyFlink's form
            if advance_to_end_of_time:
                raise ConfigurationError(
                    f"stop_with_savepoint(advance_to_end_of_time=True) of job {self.job_id}: draining (Flink's "
                    f"--drain: the final watermark before the savepoint) is not supported; stop with "
                    f"advance_to_end_of_time=False, or let a bounded input end"
                )
            return self._savepoint_future(self._stop_with_savepoint, what, savepoint_directory)
        if advance_to_end_of_time is not None:  # the earlier positional timeout
            timeout = advance_to_end_of_time
        return self._savepoint(
            self._stop_with_savepoint,
            what,
            _DEFAULT_TIMEOUT if timeout is _UNSET else timeout,
            "the job stops when its savepoint completes, or keeps running if the savepoint fails",
        )

    def get_resource_requirements(self) -> dict[str, Any]:
        """The job's resource requirements, as ``GET /jobs/:jobid/resource-requirements`` returns them.

        FLIP-291's shape: ``{vertex_id: {"parallelism": {"lowerBound": l, "upperBound": u}}}``.
        """
        return self._adaptive().requirements.to_json()

    def update_resource_requirements(self, requirements: dict[str, Any]) -> dict[str, Any] | None:
        """Change the job's resource requirements (``PUT /jobs/:jobid/resource-requirements``); blocks.

        Under ``jobmanager.scheduler: adaptive``, if the parallelism the bounds allow with the
        cluster's slots differs from the job's, the job rescales: a checkpoint and a stop, then
        the job at the new parallelism from that checkpoint (docs/elastic.md). Returns the rescale
        (cause, parallelism before and after, checkpoint, duration), or None if the parallelism stays.

        Raises:
            RescaleRefusedError: the default scheduler, bounds that are not valid for the job
                (the message names them), or fewer slots than a lower bound; the job runs on.
            JobNotRunningError: the job is over or restarting.
            CheckpointFailedError: the rescale's checkpoint failed; the job runs on unchanged.
        """
        with self._lock:
            status = self._status()
            if status.is_globally_terminal:
                raise JobNotRunningError(
                    f"cannot rescale job {self.job_id}: it is already {status.name}", job_id=self.job_id,
                    status=status.name,
                )  # fmt: skip
        rescale = self._adaptive().put_requirements_json(requirements, cause="JobClient.update_resource_requirements")
        event = rescale.result()
        return None if event is None else event.to_json()

    def start_task_executors(self, count: int = 1) -> list[str]:
        """Add ``count`` TaskExecutors to the job's cluster (Flink: one more ``taskmanager.sh start``); blocks.

        Returns their resource ids once they registered. Their slots are free; under
        ``scheduler-mode: reactive`` the job scales up to them (docs/elastic.md).

        Raises:
            JobNotRunningError: the job has no cluster of its own to grow, or it is over.
            FlinklikeError: they did not register (the message says why).
        """
        with self._lock:
            status = self._status()
            if self._start_task_executors is None or status.is_globally_terminal:
                raise JobNotRunningError(
                    f"cannot add TaskExecutors for job {self.job_id}: it is {status.name} or has no cluster",
                    job_id=self.job_id, status=status.name,
                )  # fmt: skip
        return self._start_task_executors(count)

    def _adaptive(self) -> Any:
        if self._requirements is None:
            raise JobNotRunningError(f"job {self.job_id} has no JobMaster to ask for resource requirements")
        return self._requirements

    def _savepoint_future(
        self, trigger: Callable[[], concurrent.futures.Future], what: str, directory: str | os.PathLike[str] | None
    ) -> concurrent.futures.Future[str]:
        """PyFlink's form: a future of the savepoint's path (of its copy in ``directory``, if that is elsewhere)."""
        target = None if directory is None else os.fspath(directory)
        taken = self._start_savepoint(trigger, what)
        result: concurrent.futures.Future[str] = concurrent.futures.Future()

        def finish(done: concurrent.futures.Future) -> None:
            try:
                info = done.result()
                if target is None or _same_directory(target, info.storage):
                    result.set_result(info.path)
                    return
                result.set_result(copy_savepoint(info.path, target, self._storage, f"{what} of job {self.job_id}"))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller through the future
                result.set_exception(exc)

        taken.add_done_callback(lambda done: threading.Thread(target=finish, args=(done,), daemon=True).start())
        return result

    def _start_savepoint(
        self, trigger: Callable[[], concurrent.futures.Future], what: str
    ) -> concurrent.futures.Future:
        with self._lock:
            status = self._status()
            if status.is_globally_terminal:
                raise JobNotRunningError(
                    f"cannot take {what} of job {self.job_id}: it is already {status.name}",
                    job_id=self.job_id,
                    status=status.name,
                )
            return trigger()

    def _savepoint(
        self, trigger: Callable[[], concurrent.futures.Future], what: str, timeout: float | None, after_timeout: str
    ):
        future = self._start_savepoint(trigger, what)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            pending = "; ".join(self._pending_checkpoints()) or "no checkpoint is pending"
            raise JobClientTimeoutError(
                f"{what} of job {self.job_id} did not complete within {timeout} s ({pending}); {after_timeout}"
            ) from None

    def task_metrics(self) -> dict[str, dict[str, float]]:
        """Latest per-task counters (records in/out, backpressured and idle seconds)."""
        return self._metrics()

    def get_exception_history(self) -> tuple[Any, ...]:
        """Every failure of the job so far, oldest first (Flink's exception history).

        Each entry has ``timestamp`` (UTC datetime), ``root_cause`` (the
        exception; a task's is a RemoteTaskError with its traceback), ``task``
        (``"<name> (<i>/<n>)#<attempt>"``, None for a global failure),
        ``restarted`` (the subtasks restarted for it, ``"<vertex>-<subtask>"``)
        and ``will_restart`` (False for the failure that failed the job).
        """
        return self._exception_history()

    @property
    def num_restarts(self) -> int:
        """How many restart attempts the job made (Flink's ``numRestarts``).

        Failures that arrive while a restart is still pending are part of that
        attempt (``exponential-delay`` merges them), so this may be lower than
        the number of failures that restarted tasks.
        """
        if self._restarts is not None:
            return self._restarts()
        return sum(1 for entry in self._exception_history() if entry.will_restart)

    def get_attempt_numbers(self) -> dict[str, int]:
        """``"<vertex>-<subtask>" -> current attempt number`` (0 until the subtask first restarts)."""
        return self._attempts()

    def get_task_placement(self) -> dict[str, dict]:
        """``"<vertex>-<subtask>" -> {"state", "attempt", "resource_id", "pid", "deployed_at"}`` of each
        subtask's current attempt: its ExecutionState name, attempt number, the TaskExecutor (and its
        process id) it was deployed to, and when it got that slot and entered DEPLOYING (epoch seconds;
        these three are None before deployment)."""
        return self._placement()

    def done(self) -> bool:
        return self._result.done()

    def wait(self, timeout: float | None = None) -> JobExecutionResult:
        """Block until the job ends; return its result or raise its failure.

        Raises:
            JobClientTimeoutError: the job did not end within ``timeout`` seconds
                (it keeps running).
            JobExecutionError: the job failed or was cancelled.
            KeyboardInterrupt: Ctrl-C while waiting; the job was cancelled and
                its local cluster closed first.
        """
        try:
            result = self._result.result(timeout)
        except concurrent.futures.TimeoutError:
            raise JobClientTimeoutError(f"job {self.job_id} did not finish within {timeout} s") from None
        except JobExecutionError:
            self._finish()
            raise
        except KeyboardInterrupt:
            self._cancel_after_interrupt()
            raise
        self._finish()
        return result

    def get_job_execution_result(self) -> JobResultFuture:
        """A future of the job's result, as PyFlink returns: ``.result()`` waits (and raises the failure)."""
        return JobResultFuture(self)

    def _cancel_after_interrupt(self) -> None:
        """Cancel, give the job a moment to reach CANCELED, close the cluster. A second
        Ctrl-C skips the wait (the TaskExecutor processes still exit with this process)."""
        try:
            with self._lock:
                if not self._status().is_globally_terminal:
                    self._cancel()
            concurrent.futures.wait([self._result], timeout=_INTERRUPT_CANCEL_TIMEOUT)
        finally:
            self._finish()
        log.warning(INTERRUPTED_MESSAGE, self.job_id, self._status().name)

    def _finish(self) -> None:
        with self._lock:
            if self._on_done is not None:
                on_done, self._on_done = self._on_done, None
                on_done()


def copy_savepoint(path: str, target: str, storage: Any, what: str) -> str:
    """A self-contained copy of the completed savepoint at ``path`` in directory ``target`` (written by
    :class:`~flinklike_spark.state_processor.SavepointWriter`); the copy's path.

    Raises:
        CheckpointStorageError: the copy failed; the message names ``what`` and where the savepoint itself is.
    """
    from flinklike_spark.state_processor import SavepointWriter

    try:
        return SavepointWriter.from_existing_savepoint(path, storage=storage).write(target, storage=storage)
    except Exception as exc:  # the savepoint itself is complete: say where it is
        raise CheckpointStorageError(
            f"{what} completed at {path}, but its copy into {target!r} failed ({type(exc).__name__}: {exc}); "
            f"restore from {path}, or copy it with SavepointWriter.from_existing_savepoint(path).write(directory)",
            url=target,
        ) from exc


def _same_directory(target: str, storage: str) -> bool:
    """True when ``target`` names the checkpoint directory ``storage`` (a local path in any spelling, or a URL)."""
    if "://" in target or "://" in storage:
        return target.rstrip("/") == storage.rstrip("/")
    return os.path.realpath(target) == os.path.realpath(storage)
