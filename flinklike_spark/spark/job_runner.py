"""The process that runs a bridged engine job, and :class:`EngineJob`, the one supervisor that starts it.

Both directions of the bridge supervise their job with :class:`EngineJob`
(see docs/architecture.md, "Spark bridge" and "One Spark job supervisor"):
behind ``spark.readStream.format("flinklike")`` the query's long-lived source
worker (the Python process where Spark calls
``initialOffset``/``latestOffset``/``commit``/``stop``) holds it; behind
``df.writeStream.format("flinklike").option("pipeline", ...)`` the driver's
:class:`~flinklike_spark.spark.writer_jobs.WriterJobOwner` does. It starts one
runner process and keeps the write end of the runner's stdin. The runner
builds the pipeline, resumes from the newest completed checkpoint in
``execution.checkpointing.dir`` if there is one, and runs the job on an
embedded MiniCluster (its TaskExecutors are its own children). When its stdin
reaches EOF (the supervisor stopped it, or died with the query or the Spark
driver), it cancels the job and exits, so no engine job outlives its Spark query.

The runner is found through the job's record (:mod:`flinklike_spark.spark.job_record_table`,
the Delta table ``<dir>/job``), which every process of the query can reach. A
runner claims the record before it builds the job and releases it with its
final state; a runner started while another live one holds it (an older one
still cancelling its job, or a second query on the same directory) waits for
it. The claim is a conditional Delta commit, so two runners never both run
the job; a runner that died is recognised by its pid, host and start time (or,
from another host, its stale heartbeat) and its claim taken over. The runner's
log is ``<dir>/_bridge/runner.log`` (a local temp directory for object-store dirs).

This module does not import pyspark: the runner is a plain engine process.
"""

from __future__ import annotations

import base64
import dataclasses
import faulthandler
import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake.exceptions import DeltaError

from checkpointing import CheckpointLayout, list_completed_checkpoints
from checkpointing.layout import resolve_storage
from flinklike_spark._runtime.operators.operator_spec import OperatorKind
from flinklike_spark.config import Configuration
from flinklike_spark.connector_api import Boundedness
from flinklike_spark.datastream import DataStream, StreamExecutionEnvironment
from flinklike_spark.errors import ConfigurationError, FlinklikeError, JobCancelledError
from flinklike_spark.spark.bridge_progress import ProgressReporter
from flinklike_spark.spark.bridge_tables import OUTPUT_TABLE, SparkOutputSink
from flinklike_spark.spark.fed_pipeline import build_fed_pipeline
from flinklike_spark.spark.job_record_table import HEARTBEAT_INTERVAL, JobRecord, JobRecordTable, ProcessId, RunnerState
from flinklike_spark.spark.pipeline_functions import check_call, resolve_pipeline

__all__ = [
    "OUTPUT_SINK_UID",
    "BridgeJobError",
    "EngineJob",
    "JobSpec",
    "RunnerClaim",
    "build_pipeline",
    "log_dir",
    "main",
    "resolve_pipeline",
]

_log = logging.getLogger(__name__)

OUTPUT_SINK_UID = "flinklike-spark-output"
_EXIT_FAILED = 3
_CLAIM_WAIT_SECONDS = 120.0


class BridgeJobError(FlinklikeError):
    """The engine job behind a Spark query failed or could not start; the message says why."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobSpec:
    """What the runner needs: everything a Spark source worker knows from the options.

    Attributes:
        pipeline: ``module:function``; the function takes a StreamExecutionEnvironment
            and returns the DataStream whose rows go to Spark.
        config: Flink configuration (keys spelled as Flink spells them).
        schema: the Arrow schema Spark reads (declared by the pipeline or given to Spark);
            None for a job fed by a writeStream (its returned stream declares it).
        directory: ``execution.checkpointing.dir``.
        input_schema: set for a job fed by ``df.writeStream.format("flinklike")``: the
            DataFrame's schema; the pipeline is then ``function(env, stream)``
            (:mod:`flinklike_spark.spark.fed_pipeline`).
        run_id: the Spark query run that feeds the job (writer pipelines; the
            runner records it, so the run's commits find their job).
        pipeline_args: the pipeline function's keyword arguments (option ``pipeline.args``).
    """

    pipeline: str
    config: Mapping[str, Any]
    schema: pa.Schema | None
    directory: str
    input_schema: pa.Schema | None = None
    run_id: str | None = None
    pipeline_args: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(
            {
                "pipeline": self.pipeline,
                "config": {k: str(v) if not isinstance(v, (int, float, bool)) else v for k, v in self.config.items()},
                "schema": _schema_to_text(self.schema),
                "directory": self.directory,
                "input_schema": _schema_to_text(self.input_schema),
                "run_id": self.run_id,
                "pipeline_args": dict(self.pipeline_args),
            }
        )

    @staticmethod
    def from_json(text: str) -> JobSpec:
        raw = json.loads(text)
        return JobSpec(
            pipeline=raw["pipeline"],
            config=raw["config"],
            schema=_schema_from_text(raw["schema"]),
            directory=raw["directory"],
            input_schema=_schema_from_text(raw.get("input_schema")),
            run_id=raw.get("run_id"),
            pipeline_args=raw.get("pipeline_args") or {},
        )

    def record_table(self) -> JobRecordTable:
        """The job's record (on the job's storage)."""
        return JobRecordTable(self.directory, Configuration(dict(self.config)).storage)


def _schema_to_text(schema: pa.Schema | None) -> str | None:
    return None if schema is None else base64.b64encode(schema.serialize().to_pybytes()).decode()


def _schema_from_text(text: str | None) -> pa.Schema | None:
    return None if text is None else pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


def log_dir(directory: str) -> Path:
    """Where the runner's log goes: ``<dir>/_bridge`` for local dirs, else a local temp dir per URL."""
    fs, root = resolve_storage(directory)
    protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    if "file" in protocols or "local" in protocols:
        path = Path(root) / "_bridge"
    else:  # a log file is appended to: the supervisor and its runner share a machine
        path = Path(tempfile.gettempdir()) / f"flinklike-bridge-{hashlib.sha1(directory.encode()).hexdigest()[:16]}"
    path.mkdir(parents=True, exist_ok=True)
    return path


class RunnerClaim:
    """A runner's hold on its job's record: claim it, write its states and heartbeat, release it.

    Every write is conditional on this runner still holding the record: if
    another runner took it over (this one looked dead to it), :attr:`lost` is
    set and nothing more is written.

    Args:
        table: the job's record.
        run_id: the Spark query run the job serves (recorded with the claim).
    """

    def __init__(self, table: JobRecordTable, run_id: str | None = None) -> None:
        self._table = table
        self._run_id = run_id
        self._me = ProcessId.current()
        self._write_lock = threading.Lock()
        self._last_write = 0.0
        self._stop_beat = threading.Event()
        self._beat: threading.Thread | None = None
        self.lost = threading.Event()

    def acquire(self, stop: threading.Event, timeout: float) -> JobRecord | None:
        """Claim the record (state STARTING), waiting while another live runner holds it.

        Returns:
            The claimed record; None if the job is a bounded one that already finished.

        Raises:
            BridgeJobError: another runner still held the record after ``timeout``
                seconds, or ``stop`` was set while waiting.
        """
        deadline = time.monotonic() + timeout
        seen: dict[str, JobRecord] = {}

        def change(current: JobRecord | None) -> JobRecord | None:
            seen.clear()
            if current is not None and current.runner_is_live() and current.runner != self._me:
                seen["holder"] = current
                return None
            if current is not None and current.state is RunnerState.FINISHED:
                seen["finished"] = current
                return None
            return dataclasses.replace(
                current or JobRecord(), pid=self._me.pid, host=self._me.host, started=self._me.started,
                state=RunnerState.STARTING, job_id=None, bounded=False, error=None, updated=time.time(),
                web_interface_url=None, progress=None, run_id=self._run_id,
            )  # fmt: skip

        while True:
            record = self._table.update(change)
            if "finished" in seen:
                return None
            holder = seen.get("holder")
            if holder is None:
                self._last_write = time.monotonic()
                return record
            if stop.is_set() or time.monotonic() > deadline:
                raise BridgeJobError(
                    f"another runner (pid {holder.pid} on {holder.host}, state {holder.state.value}) still holds "
                    f"the job in {self._table.uri}; gave up after {timeout:.0f} s"
                )
            time.sleep(0.2)

    def write(self, **changes: Any) -> bool:
        """Record ``changes`` (JobRecord fields) and a heartbeat; False if another runner holds the record now."""

        def change(current: JobRecord | None) -> JobRecord | None:
            if current is None or current.runner != self._me:
                return None
            return dataclasses.replace(current, **changes, updated=time.time())

        with self._write_lock:
            if self.lost.is_set():
                return False
            record = self._table.update(change)
            if record is None or record.runner != self._me:
                self.lost.set()
                return False
            self._last_write = time.monotonic()
            return True

    def start_heartbeat(self, on_lost: Callable[[], None]) -> None:
        """Refresh the record every :data:`HEARTBEAT_INTERVAL` seconds; call ``on_lost`` if it was taken over."""

        def beat() -> None:
            while not self._stop_beat.wait(min(1.0, HEARTBEAT_INTERVAL)):
                if time.monotonic() - self._last_write < HEARTBEAT_INTERVAL:
                    continue
                try:
                    held = self.write()
                except (DeltaError, OSError) as exc:  # storage trouble: the next beat retries
                    _log.warning("cannot refresh the job record in %s: %s", self._table.uri, exc)
                    continue
                if not held:
                    on_lost()
                    return

        self._beat = threading.Thread(target=beat, name="job-record-heartbeat", daemon=True)
        self._beat.start()

    def release(self, state: RunnerState, error: str | None = None) -> None:
        """Stop the heartbeat and record the final ``state`` (which no longer holds the job)."""
        self._stop_beat.set()
        if self._beat is not None:
            self._beat.join()
        self.write(state=state, error=error)


def build_pipeline(
    pipeline: str, config: Configuration, args: Mapping[str, Any] | None = None
) -> tuple[StreamExecutionEnvironment, DataStream]:
    """Import ``module:function``, call it as ``function(env, **args)`` on a new environment, and check it
    returned a DataStream.

    Raises:
        ConfigurationError: the spec is malformed, the module or function cannot be
            imported, it does not take ``args``, or it does not return a DataStream.
    """
    function = resolve_pipeline(pipeline)
    env = StreamExecutionEnvironment.get_execution_environment(config)
    args = dict(args or {})
    how = "a readStream pipeline is called as function(env), with option pipeline.args as keyword arguments"
    check_call(pipeline, function, how, env, **args)
    stream = function(env, **args)
    if not isinstance(stream, DataStream):
        raise ConfigurationError(
            f"option pipeline={pipeline!r} returned {type(stream).__name__}; it must return the DataStream "
            f"whose rows go to Spark (e.g. the result of .process(...) or .map(...)), without a sink"
        )
    return env, stream


def _is_bounded(env: StreamExecutionEnvironment) -> bool:
    sources = [t.function for t in env.transformations if t.kind is OperatorKind.SOURCE]
    return all(s.boundedness is Boundedness.BOUNDED for s in sources)


def _run(spec: JobSpec, stop: threading.Event, claim: RunnerClaim) -> RunnerState:
    directory = spec.directory
    config = Configuration(spec.config)
    if list_completed_checkpoints(CheckpointLayout(base_url=directory, storage=config.storage)):
        config = config.with_values({"execution.state-recovery.path": directory})
    if spec.input_schema is None:
        env, stream = build_pipeline(spec.pipeline, config, spec.pipeline_args)
        schema = spec.schema
    else:  # fed by a writeStream: function(env, stream), its own sinks and maybe a stream for Spark
        env, stream = build_fed_pipeline(spec.pipeline, config, spec.input_schema, spec.pipeline_args)
        schema = spec.schema or (stream.get_output_schema() if stream is not None else None)
        if stream is not None and schema is None:
            raise ConfigurationError(
                f"pipeline {spec.pipeline!r} returns a stream without a declared schema: pass output_type= "
                f"to its last operator"
            )
    if stream is not None:
        (
            stream.sink_to(SparkOutputSink(f"{directory.rstrip('/')}/{OUTPUT_TABLE}", schema))
            .name("Sink: Spark")
            .uid(OUTPUT_SINK_UID)
            .set_parallelism(1)
        )
    if stop.is_set():  # stopped (or taken over) while the job was being built
        return RunnerState.STOPPED
    client = env.execute_async(f"spark bridge: {spec.pipeline}")
    threading.Thread(target=lambda: (stop.wait(), client.cancel()), name="cancel-on-stop", daemon=True).start()
    claim.write(state=RunnerState.RUNNING, job_id=client.job_id, bounded=_is_bounded(env),
                web_interface_url=client.web_interface_url)  # fmt: skip
    _log.info("engine job %s runs; its dashboard and REST API: %s", client.job_id, client.web_interface_url)

    def report(progress: dict[str, Any]) -> None:
        try:
            claim.write(progress=progress)
        except (DeltaError, OSError) as exc:  # the next report retries
            _log.warning("cannot record the job's progress: %s", exc)

    reporter = ProgressReporter(client, report)
    reporter.start()
    try:
        client.wait()
    except JobCancelledError:
        if stop.is_set():
            return RunnerState.STOPPED
        raise
    finally:
        reporter.stop()
    return RunnerState.FINISHED


def main() -> int:
    """Runner entry point: a JobSpec as the first stdin line; EOF on stdin stops the job."""
    faulthandler.enable(all_threads=True)  # a native crash leaves every thread's stack on stderr
    # Warnings only: a job checkpointing every second would log five lines a second at INFO.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    _log.setLevel(logging.INFO)
    logging.getLogger("flinklike_spark.spark.bridge_progress").setLevel(logging.INFO)  # a line every 5 s
    spec = JobSpec.from_json(sys.stdin.readline())
    stop = threading.Event()

    def watch_stdin() -> None:
        while sys.stdin.readline():
            pass
        stop.set()

    threading.Thread(target=watch_stdin, name="stdin-eof", daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    claim = RunnerClaim(spec.record_table(), spec.run_id)
    try:
        if claim.acquire(stop, _CLAIM_WAIT_SECONDS) is None:
            _log.info("the bounded job in %s already finished; not starting it again", spec.directory)
            return 0
    except BridgeJobError as exc:
        _log.error("%s", exc)
        return _EXIT_FAILED

    def taken_over() -> None:
        _log.error("another runner took over the job in %s (this one looked dead to it); cancelling", spec.directory)
        stop.set()

    claim.start_heartbeat(taken_over)
    try:
        state = _run(spec, stop, claim)
    except Exception as exc:  # noqa: BLE001 - every failure is reported through the record
        cause = exc.__cause__ if exc.__cause__ is not None else exc
        error = f"{type(exc).__name__}: {exc}"
        if cause is not exc:
            error += f" (caused by {type(cause).__name__}: {cause})"
        _log.exception("engine job failed")
        claim.release(RunnerState.FAILED, error)
        return _EXIT_FAILED
    if claim.lost.is_set():
        return _EXIT_FAILED
    claim.release(state)
    return 0


class EngineJob:
    """The one supervisor of a bridged job's runner process (a source worker's or the driver's).

    Call order: :meth:`ensure_running` before every offset request (or on every
    owner step); :meth:`stop` once, when the Spark query stops. Not thread-safe
    (Spark calls one method at a time).
    """

    def __init__(self, spec: JobSpec) -> None:
        self._spec = spec
        self._table = spec.record_table()
        self._process: subprocess.Popen | None = None
        self._stopped = False
        self._finished = False  # the bounded job ended: nothing is left to start (no record read per request)

    @property
    def record(self) -> JobRecord | None:
        return self._table.read()

    @property
    def pid(self) -> int | None:
        """The pid of the runner this supervisor started (None: none runs)."""
        return None if self._process is None else self._process.pid

    def ensure_running(self) -> None:
        """Start the runner unless it runs or its bounded job finished; restart it if it was killed.

        Raises:
            BridgeJobError: the runner reported a failure (bad pipeline, a task failed, ...).
        """
        if self._stopped:
            raise BridgeJobError("the Spark source was stopped; its engine job is not restarted")
        if self._finished:
            return
        process = self._process
        if process is not None and process.poll() is None:
            return
        record = self.record
        if process is not None:
            if process.returncode == _EXIT_FAILED:
                error = record.error if record is not None and record.state is RunnerState.FAILED else None
                raise BridgeJobError(
                    f"the engine job of pipeline {self._spec.pipeline!r} failed: "
                    f"{error or 'see ' + str(log_dir(self._spec.directory) / 'runner.log')}"
                )
        if record is not None and record.state is RunnerState.FINISHED:
            if process is not None:
                _log.info("engine job of pipeline %r finished", self._spec.pipeline)
            self._process = None  # a bounded job ended: its output is all committed
            self._finished = True
            return
        if process is not None:
            _log.warning("engine job runner exited with %s; resuming it from its latest checkpoint", process.returncode)
        self._spawn()

    def _spawn(self) -> None:
        env = dict(os.environ)
        # The runner imports what this worker can import (pipeline modules shipped by Spark included).
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.exists(p))
        log = open(log_dir(self._spec.directory) / "runner.log", "ab")  # noqa: SIM115 - handed to the child
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "flinklike_spark.spark.job_runner"],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # Spark's signals to this worker must not hit the job
            )
        finally:
            log.close()
        self._process.stdin.write((self._spec.to_json() + "\n").encode())
        self._process.stdin.flush()

    def wait_started(self, timeout: float = 600.0) -> JobRecord | None:
        """Block until this handle's runner recorded that its job runs (or ended); return the record.

        Raises:
            BridgeJobError: the runner failed, or did not start the job within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while True:
            self.ensure_running()
            record = self.record
            if self._process is None:  # a finished bounded job: nothing was started
                return record
            if record is not None and record.pid == self._process.pid and record.state is not RunnerState.STARTING:
                return record
            if time.monotonic() > deadline:
                raise BridgeJobError(f"the engine job of {self._spec.pipeline!r} did not start within {timeout} s")
            time.sleep(0.1)

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stop(self, timeout: float = 60.0) -> None:
        """Close the runner's stdin (it cancels the job and exits); kill it after ``timeout`` seconds."""
        self._stopped = True
        process, self._process = self._process, None
        if process is None:
            return
        try:
            process.stdin.close()
        except OSError:
            pass
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


if __name__ == "__main__":
    sys.exit(main())
