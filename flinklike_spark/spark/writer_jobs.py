"""Who runs the engine job of ``df.writeStream.format("flinklike").option("pipeline", ...)``.

A Spark sink has no long-lived Python process of its own (pyspark 4.2): its
``commit(messages, batch_id)`` runs in a driver-side Python worker that Spark
may start afresh for every micro-batch, and no Python code hears that the
query stopped. The one process that lives exactly as long as the user's
queries and hears every start and stop is the user's driver process, through
a :class:`StreamingQueryListener`. So :func:`~flinklike_spark.spark.register`
installs a :class:`WriterJobOwner` there, and the job is supervised like the
reader's (:class:`~flinklike_spark.spark.job_runner.EngineJob`, the same
runner process, stdin EOF = stop). Everything the commit and the owner tell
each other goes through the job's one record
(:mod:`flinklike_spark.spark.job_record_table`, the Delta table ``<dir>/job``):

1. ``onQueryStarted`` (called synchronously, on the query's thread, before
   ``start()`` returns) makes the query run ``runId`` active in the owner, with
   the job directory of its sink options (:func:`query_write_options`).
2. Each micro-batch's ``commit`` (in Spark's worker) commits the input first,
   then requests the job for its run in the record (:func:`request_job`: the
   run id reaches it from the executors' task properties) and reads the run's
   status from the record (:func:`run_status`): the first commit of a run
   waits until the job runs, and a job that failed fails the commit, and so
   the query, with the runner's error.
3. The owner's thread takes its runs' requests (recording itself as their
   owner), starts the runner, restarts a runner that was killed (the job
   resumes from its latest checkpoint), records a failure in the request, and
   stops the job when ``onQueryTerminated`` arrives (the request is marked
   ended). If the driver process dies, the runner's stdin reaches EOF and it
   stops too.

Spark Connect runs listeners on the server, away from the client, so writer
pipelines need a classic session.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable
from enum import Enum
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

from flinklike_spark.spark.job_record_table import JobRecord, JobRecordTable, ProcessId, RunnerState, RunRequest
from flinklike_spark.spark.job_runner import BridgeJobError, EngineJob, JobSpec
from flinklike_spark.spark.options import WriteOptions

__all__ = [
    "RunState",
    "RunStatus",
    "WriterJobOwner",
    "install_owner",
    "query_write_options",
    "request_job",
    "run_status",
    "uninstall_owner",
    "wait_for_job",
]

_log = logging.getLogger(__name__)
_POLL_SECONDS = 0.2
#: How long :meth:`WriterJobOwner.close` waits for each of the owner's threads (s).
_CLOSE_WAIT_SECONDS = 60.0


class RunState(Enum):
    STARTING = "starting"  # the owner took the run; its job is not running yet
    RUNNING = "running"
    FAILED = "failed"
    STOPPED = "stopped"  # the query stopped (or the job was a bounded one that finished)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunStatus:
    state: RunState
    error: str | None = None


def run_status(record: JobRecord | None, run_id: str) -> RunStatus | None:
    """The status of query run ``run_id``'s job in ``record``; None while no owner has taken the run."""
    request = record.request if record is not None else None
    if request is None or request.run_id != run_id:
        return None
    if request.error is not None:
        return RunStatus(state=RunState.FAILED, error=request.error)
    if request.ended:
        return RunStatus(state=RunState.STOPPED)
    if request.owner is None:
        return None
    if record.run_id == run_id and record.state is RunnerState.RUNNING:
        return RunStatus(state=RunState.RUNNING)
    if record.run_id == run_id and record.state in (RunnerState.FINISHED, RunnerState.STOPPED):
        return RunStatus(state=RunState.STOPPED)
    return RunStatus(state=RunState.STARTING)


def request_job(table: JobRecordTable, spec: JobSpec, *, claim_timeout: float) -> None:
    """Ask the driver's owner, through the record, to run ``spec``'s job for run ``spec.run_id`` (idempotent).

    A request of another run that an owner holds open (a query that still
    feeds the same directory, or one whose termination its owner has not
    handled yet) is waited for.

    Raises:
        BridgeJobError: another run's request was still open after ``claim_timeout`` seconds.
    """
    run_id = spec.run_id
    deadline = time.monotonic() + claim_timeout
    other: dict[str, RunRequest] = {}

    def change(current: JobRecord | None) -> JobRecord | None:
        other.clear()
        request = current.request if current is not None else None
        if request is not None and request.run_id == run_id:
            return None  # an earlier commit of this run asked already
        if request is not None and request.is_open():
            other["request"] = request
            return None
        return dataclasses.replace(current or JobRecord(), request=RunRequest(run_id=run_id, spec=spec.to_json()))

    while True:
        table.update(change)
        held = other.get("request")
        if held is None:
            return
        if time.monotonic() > deadline:
            raise BridgeJobError(
                f'df.writeStream.format("flinklike") with option pipeline: the job in {spec.directory!r} is run '
                f"for query run {held.run_id} (driver pid {held.owner.pid} on {held.owner.host}); one running "
                f"query with option pipeline per directory: stop that query, or give this one its own "
                f"execution.checkpointing.dir"
            )
        time.sleep(_POLL_SECONDS)


def wait_for_job(table: JobRecordTable, run_id: str, *, claim_timeout: float, start_timeout: float) -> None:
    """In a commit: return once the run's job runs; raise if it failed or no owner takes the run.

    Raises:
        BridgeJobError: the job failed (the runner's error), or no owner took the run within
            ``claim_timeout`` seconds, or the job did not run within ``start_timeout`` seconds.
    """
    claim_deadline = time.monotonic() + claim_timeout
    start_deadline = time.monotonic() + start_timeout
    while True:
        status = run_status(table.read(), run_id)
        if status is not None and status.state is RunState.FAILED:
            raise BridgeJobError(status.error or "the engine job failed")
        if status is not None and status.state in (RunState.RUNNING, RunState.STOPPED):
            return
        now = time.monotonic()
        if status is None and now > claim_deadline:
            raise BridgeJobError(
                f'df.writeStream.format("flinklike") with option pipeline: no driver process took the query run '
                f"{run_id} within {claim_timeout:.0f} s. The job is run by the driver process of a classic "
                f"SparkSession on which flinklike_spark.spark.register(spark) (or session()) was called; "
                f"Spark Connect sessions cannot run writer pipelines"
            )
        if now > start_deadline:
            raise BridgeJobError(f"the engine job of query run {run_id} did not start within {start_timeout:.0f} s")
        time.sleep(0.1)


@dataclasses.dataclass
class _Run:
    table: JobRecordTable
    job: EngineJob | None = None
    terminated: bool = False
    done: bool = False  # failed or stopped: nothing more to do


class WriterJobOwner(StreamingQueryListener):
    """Runs the engine jobs of this driver's writeStream queries with a pipeline (see the module docstring).

    One per SparkSession (:func:`install_owner`). Its thread starts when the first
    such query starts; :meth:`close` stops every job it runs and returns once
    the owner's threads are done.

    Args:
        resolve: the write options of a started query (called with its
            ``QueryStartedEvent``); None for a query that is not
            ``writeStream.format("flinklike")`` with option ``pipeline``.
    """

    def __init__(self, resolve: Callable[[Any], WriteOptions | None]) -> None:
        self._resolve = resolve
        self._me = ProcessId.current()
        self._runs: dict[str, _Run] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stoppers: list[threading.Thread] = []  # threads stopping the jobs of terminated runs
        self._closed = threading.Event()

    # -- listener callbacks (Spark's threads: only record, the owner's thread acts) ----------------

    def onQueryStarted(self, event) -> None:
        try:
            options = self._resolve(event)
        except Exception:  # noqa: BLE001 - a listener must not fail the query; its writer reports bad options
            _log.debug("cannot read the sink options of query %s", event.id, exc_info=True)
            return
        if options is None or options.pipeline is None:
            return
        with self._lock:
            self._runs.setdefault(str(event.runId), _Run(table=JobRecordTable(options.directory, options.storage)))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="flinklike-writer-jobs", daemon=True)
                self._thread.start()

    def onQueryProgress(self, event) -> None:
        pass

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        with self._lock:
            run = self._runs.get(str(event.runId))
            if run is not None:
                run.terminated = True

    # -- the owner's thread ------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._closed.wait(_POLL_SECONDS):
            with self._lock:
                runs = list(self._runs.items())
            for run_id, run in runs:
                if self._closed.is_set():
                    return
                try:
                    self._step(run_id, run)
                except Exception:  # noqa: BLE001 - one run's trouble must not stop the others
                    _log.exception("flinklike writer job of run %s", run_id)

    def _step(self, run_id: str, run: _Run) -> None:
        if run.done:
            return
        if run.terminated:
            self._finish(run_id, run)
            return
        if run.job is None:
            request = self._take(run_id, run.table)
            if request is None:
                return  # no micro-batch of the run committed yet
            run.job = EngineJob(JobSpec.from_json(request.spec))
        try:
            run.job.ensure_running()  # starts it, or resumes a killed runner from its latest checkpoint
        except BridgeJobError as exc:
            self._finish(run_id, run, error=str(exc))
            return
        if not run.job.running():
            record = run.job.record
            if record is not None and record.state is RunnerState.FINISHED:
                self._finish(run_id, run)

    def _take(self, run_id: str, table: JobRecordTable) -> RunRequest | None:
        """Record this process as the owner of the run's request; the request, or None if there is none."""

        def change(current: JobRecord | None) -> JobRecord | None:
            request = current.request if current is not None else None
            if request is None or request.run_id != run_id or request.owner == self._me:
                return None
            if request.error is not None or request.ended:
                return None
            return dataclasses.replace(current, request=dataclasses.replace(request, owner=self._me))

        record = table.update(change)
        request = record.request if record is not None else None
        return request if request is not None and request.run_id == run_id and request.owner == self._me else None

    def _finish(self, run_id: str, run: _Run, *, error: str | None = None, wait: bool = False) -> None:
        """Mark the run's request failed (``error``) or ended, and stop its job (in a thread unless ``wait``)."""
        run.done = True
        job, run.job = run.job, None

        def change(current: JobRecord | None) -> JobRecord | None:
            request = current.request if current is not None else None
            if request is None or request.run_id != run_id:
                return None
            ended = dataclasses.replace(request, error=error) if error else dataclasses.replace(request, ended=True)
            return dataclasses.replace(current, request=ended)

        run.table.update(change)
        if job is not None and wait:
            job.stop()
        elif job is not None:  # stopping waits for the job's cancellation: not on the loop
            stopper = threading.Thread(target=job.stop, name=f"stop-{run_id}", daemon=True)
            with self._lock:  # the finished ones are dropped: one owner serves a session's every query
                self._stoppers = [t for t in self._stoppers if t.is_alive()] + [stopper]
            stopper.start()

    def close(self) -> None:
        """Stop every job this owner runs; returns once none of the owner's threads runs any more (idempotent).

        Interpreter exit calls this (:func:`uninstall_owner`), so it must not
        leave a thread behind: a daemon thread still inside deltalake's native
        code when the interpreter finalizes is ended by Python 3.11 as it takes
        the GIL back (``pthread_exit``), which unwinds through deltalake's Rust
        frames and crashes the process (SIGSEGV at exit).
        """
        self._closed.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._join(self._thread)  # finishes the step it is in: then no run is touched by two threads
        with self._lock:
            runs = list(self._runs.items())
        for run_id, run in runs:
            if run.job is not None:
                self._finish(run_id, run, wait=True)
        with self._lock:
            stoppers, self._stoppers = self._stoppers, []
        for stopper in stoppers:
            self._join(stopper)

    @staticmethod
    def _join(thread: threading.Thread) -> None:
        thread.join(_CLOSE_WAIT_SECONDS)
        if thread.is_alive():
            _log.warning(
                "flinklike writer thread %s still runs after %.0f s; not waiting for it any longer",
                thread.name,
                _CLOSE_WAIT_SECONDS,
            )


def query_write_options(spark, event) -> WriteOptions | None:
    """The options of a started query that writes ``format("flinklike")`` with option ``pipeline``; else None.

    pyspark's ``QueryStartedEvent`` names the query only. Its sink's options are
    in the query's logical plan in the JVM (``WriteToMicroBatchDataSource.writeOptions``
    in Spark 4.2, the pinned platform), which the query's thread has built when it
    posts the event.
    """
    query = spark.streams.get(str(event.id))
    if query is None:
        return None
    plan = query._jsq.streamingQuery().logicalPlan()
    if plan.getClass().getSimpleName() != "WriteToMicroBatchDataSource" or plan.table().name() != "flinklike":
        return None
    java = spark._jvm.scala.jdk.javaapi.CollectionConverters.asJava(plan.writeOptions())
    options = WriteOptions.parse({str(key): str(java.get(key)) for key in java.keySet()})
    return options if options.pipeline is not None else None


_OWNERS: dict[int, WriterJobOwner] = {}
#: How long interpreter exit waits for Spark's listener bus to deliver what it holds (ms).
_DRAIN_MS = 10_000


def install_owner(spark) -> WriterJobOwner | None:
    """Add a :class:`WriterJobOwner` to ``spark``'s queries once (None on Spark Connect: see the module docstring).

    The owner is removed again when the interpreter exits, before the JVM stops
    (:func:`uninstall_owner`).
    """
    from flinklike_spark.spark.connect_sessions import is_connect_session

    if is_connect_session(spark):
        return None
    key = id(spark._jsparkSession)
    owner = _OWNERS.get(key)
    if owner is None:
        owner = _OWNERS[key] = WriterJobOwner(functools.partial(query_write_options, spark))
        spark.streams.addListener(owner)
        # atexit runs its functions last-registered first, and pyspark registers none that stops
        # the JVM: it stops when this process's end closes its stdin, and then delivers pending
        # query events to the listener through a callback server that is already gone, which
        # prints a StreamingQueryListenerBus ERROR with a Py4JException per event. Removed here
        # first, the listener gets no event after the interpreter started to exit.
        atexit.register(uninstall_owner, spark)
    return owner


def uninstall_owner(spark) -> None:
    """Stop the jobs of ``spark``'s owner and remove it from the session's listeners (idempotent).

    Called at interpreter exit for every session :func:`install_owner` served;
    a session whose JVM is already gone has nothing left to remove.
    """
    owner = _OWNERS.pop(id(spark._jsparkSession), None)
    if owner is None:
        return
    owner.close()
    if spark.sparkContext._jsc is None:  # stopped: its listener bus is gone with it
        return
    try:
        spark.streams.removeListener(owner)
        # An event the listener bus was delivering when the listener was removed still calls it: wait
        # until the bus is empty, while this process can still answer (LiveListenerBus.waitUntilEmpty).
        spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty(_DRAIN_MS)
    except Exception as exc:  # noqa: BLE001 - py4j raises several types for a JVM that is going away
        _log.debug("could not remove the flinklike query listener: %s", exc)
