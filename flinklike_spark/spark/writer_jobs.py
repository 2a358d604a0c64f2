"""Who runs the engine job of ``df.writeStream.format("flinklike").option("pipeline", ...)``.

A Spark sink has no long-lived Python process of its own (pyspark 4.2): its
``commit(messages, batch_id)`` runs in a driver-side Python worker that Spark
may start afresh for every micro-batch, and no Python code hears that the
query stopped. The one process that lives exactly as long as the user's
queries and hears every start and stop is the user's driver process, through
a :class:`StreamingQueryListener`. So :func:`~flinklike_spark.spark.register`
installs a :class:`WriterJobOwner` there, and the job is owned like the
reader's (:class:`~flinklike_spark.spark.job_runner.EngineJob`, the same
runner process, stdin EOF = stop):

1. ``onQueryStarted`` (called synchronously before ``start()`` returns) makes the
   query run ``runId`` active in the owner.
2. Each micro-batch's ``commit`` (in Spark's worker) commits the input first,
   then registers the run with its :class:`JobSpec` in a driver-local registry
   (:func:`register_run`; the run id reaches it from the executors' task
   properties) and reads the owner's status for the run (:func:`run_status`): the
   first commit of a run waits until the job runs, and a job that failed fails
   the commit, and so the query, with the runner's error.
3. The owner's thread starts the runner for a registered active run, restarts
   a runner that was killed (the job resumes from its latest checkpoint),
   records a failure, and stops the job when ``onQueryTerminated`` arrives. If
   the driver process dies, the runner's stdin reaches EOF and it stops too.

The registry is a local directory of the driver's machine: the driver process
and Spark's driver-side workers share it. Spark Connect runs listeners on the
server, away from the client, so writer pipelines need a classic session.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import logging
import os
import tempfile
import threading
import time
from enum import Enum
from pathlib import Path

from pyspark.sql.streaming import StreamingQueryListener

from flinklike_spark.spark.job_runner import BridgeJobError, EngineJob, JobSpec, RunnerState

__all__ = [
    "RunState",
    "RunStatus",
    "WriterJobOwner",
    "install_owner",
    "register_run",
    "registry_dir",
    "run_status",
    "uninstall_owner",
    "wait_for_job",
]

_log = logging.getLogger(__name__)
_POLL_SECONDS = 0.2


class RunState(Enum):
    STARTING = "starting"  # the owner started the runner; its job is not running yet
    RUNNING = "running"
    FAILED = "failed"
    STOPPED = "stopped"  # the query stopped (or the job was a bounded one that finished)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunStatus:
    state: RunState
    error: str | None = None


def registry_dir() -> Path:
    """The driver-local directory of run registrations and statuses (``$TMPDIR/flinklike-spark-writer-runs``)."""
    path = Path(tempfile.gettempdir()) / "flinklike-spark-writer-runs"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _write_json(path: Path, value: dict) -> None:
    tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(value))
    os.replace(tmp, path)  # readers never see half a file


def register_run(run_id: str, spec: JobSpec) -> None:
    """Record that query run ``run_id`` feeds the job ``spec`` (idempotent; called by each commit)."""
    path = registry_dir() / f"{run_id}.spec.json"
    if not path.exists():
        _write_json(path, {"spec": spec.to_json()})


def run_status(run_id: str) -> RunStatus | None:
    """The owner's status of run ``run_id``; None while no owner has taken it."""
    try:
        raw = json.loads((registry_dir() / f"{run_id}.status.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return RunStatus(state=RunState(raw["state"]), error=raw.get("error"))


def _set_status(run_id: str, status: RunStatus) -> None:
    _write_json(registry_dir() / f"{run_id}.status.json", {"state": status.state.value, "error": status.error})


@dataclasses.dataclass
class _Run:
    job: EngineJob | None = None
    terminated: bool = False
    done: bool = False  # failed or stopped: nothing more to do


class WriterJobOwner(StreamingQueryListener):
    """Runs the engine jobs of this driver's writeStream queries with a pipeline (see the module docstring).

    One per SparkSession (:func:`install_owner`). Its thread starts when the first
    query starts; :meth:`close` stops every job it runs.
    """

    def __init__(self) -> None:
        self._runs: dict[str, _Run] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()

    # -- listener callbacks (Spark's threads: only record, the owner's thread acts) ----------------

    def onQueryStarted(self, event) -> None:
        with self._lock:
            self._runs.setdefault(str(event.runId), _Run())
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
                try:
                    self._step(run_id, run)
                except Exception:  # noqa: BLE001 - one run's trouble must not stop the others
                    _log.exception("flinklike writer job of run %s", run_id)

    def _step(self, run_id: str, run: _Run) -> None:
        if run.done:
            return
        if run.terminated:
            self._finish(run_id, run, RunStatus(state=RunState.STOPPED))
            return
        if run.job is None:
            spec_path = registry_dir() / f"{run_id}.spec.json"
            if not spec_path.exists():
                return  # not a flinklike writer with a pipeline, or no micro-batch committed yet
            spec = JobSpec.from_json(json.loads(spec_path.read_text())["spec"])
            run.job = EngineJob(spec)
            _set_status(run_id, RunStatus(state=RunState.STARTING))
        try:
            run.job.ensure_running()  # starts it, or resumes a killed runner from its latest checkpoint
        except BridgeJobError as exc:
            self._finish(run_id, run, RunStatus(state=RunState.FAILED, error=str(exc)))
            return
        record = run.job.record
        if record is None:
            return
        if not run.job.running():
            if record.state is RunnerState.FINISHED:
                self._finish(run_id, run, RunStatus(state=RunState.STOPPED))
            return
        process = run.job._process
        if record.pid == process.pid and record.state is RunnerState.RUNNING:
            if run_status(run_id) != RunStatus(state=RunState.RUNNING):
                _set_status(run_id, RunStatus(state=RunState.RUNNING))

    def _finish(self, run_id: str, run: _Run, status: RunStatus) -> None:
        run.done = True
        job, run.job = run.job, None
        _set_status(run_id, status)
        (registry_dir() / f"{run_id}.spec.json").unlink(missing_ok=True)
        if job is not None:  # stopping waits for the job's cancellation: not on the loop
            threading.Thread(target=job.stop, name=f"stop-{run_id}", daemon=True).start()

    def close(self) -> None:
        """Stop every job this owner runs (idempotent)."""
        self._closed.set()
        with self._lock:
            runs = list(self._runs.items())
        for run_id, run in runs:
            if run.job is not None:
                run.done = True
                run.job.stop()
                _set_status(run_id, RunStatus(state=RunState.STOPPED))


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
        owner = _OWNERS[key] = WriterJobOwner()
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


def wait_for_job(run_id: str, *, claim_timeout: float, start_timeout: float) -> None:
    """In a commit: return once the run's job runs; raise if it failed or no owner takes the run.

    Raises:
        BridgeJobError: the job failed (the runner's error), or no owner took the run within
            ``claim_timeout`` seconds, or the job did not run within ``start_timeout`` seconds.
    """
    claim_deadline = time.monotonic() + claim_timeout
    start_deadline = time.monotonic() + start_timeout
    while True:
        status = run_status(run_id)
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

