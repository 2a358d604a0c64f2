"""The process that runs the engine job behind ``spark.readStream.format("flinklike")``.

Who owns the job (see docs/architecture.md, "Spark bridge"): the Spark query's
long-lived source worker (the Python process where Spark calls
``initialOffset``/``latestOffset``/``commit``/``stop``) starts one runner
process per query with :meth:`EngineJob.ensure_running` and keeps the write
end of the runner's stdin. The runner builds the pipeline, resumes from the
newest completed checkpoint in ``execution.checkpointing.dir`` if there is
one, and runs the job on an embedded MiniCluster (its TaskExecutors are its
own children). When its stdin reaches EOF (the source's ``stop()``, or the
source worker died with the query or the Spark driver), it cancels the job
and exits, so no engine job outlives its Spark query.

The runner is found through the checkpoint directory, which every process of
the query can reach: ``_bridge/job.json`` is its record (pid, job id, state,
error) and ``_bridge/job.lock`` an exclusive lock it holds while the job runs,
so a runner started while an older one still shuts down waits for it.

This module does not import pyspark: the runner is a plain engine process.
"""

from __future__ import annotations

import base64
import dataclasses
import fcntl
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
from collections.abc import Mapping
from enum import Enum
from pathlib import Path
from typing import Any

import pyarrow as pa

from checkpointing import CheckpointLayout, list_completed_checkpoints
from checkpointing.layout import resolve_storage
from flinklike_spark.config import Configuration
from flinklike_spark.connector_api import Boundedness
from flinklike_spark.datastream import DataStream, StreamExecutionEnvironment
from flinklike_spark.errors import ConfigurationError, FlinklikeError, JobCancelledError
from flinklike_spark.spark.bridge_progress import ProgressReporter
from flinklike_spark.spark.bridge_tables import OUTPUT_TABLE, SparkOutputSink
from flinklike_spark.spark.fed_pipeline import build_fed_pipeline
from flinklike_spark.spark.pipeline_functions import resolve_pipeline

__all__ = [
    "OUTPUT_SINK_UID",
    "BridgeJobError",
    "EngineJob",
    "JobRecord",
    "JobSpec",
    "RunnerState",
    "build_pipeline",
    "main",
    "read_record",
    "record_dir",
    "resolve_pipeline",
]

_log = logging.getLogger(__name__)

OUTPUT_SINK_UID = "flinklike-spark-output"
_EXIT_FAILED = 3
_LOCK_WAIT_SECONDS = 120.0


class BridgeJobError(FlinklikeError):
    """The engine job behind a Spark query failed or could not start; the message says why."""


class RunnerState(Enum):
    STARTING = "starting"
    RUNNING = "running"
    FINISHED = "finished"  # a bounded job ended: it is never started again
    STOPPED = "stopped"  # cancelled because its Spark query stopped
    FAILED = "failed"


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
    """

    pipeline: str
    config: Mapping[str, Any]
    schema: pa.Schema | None
    directory: str
    input_schema: pa.Schema | None = None

    def to_json(self) -> str:
        return json.dumps(
            {
                "pipeline": self.pipeline,
                "config": {k: str(v) if not isinstance(v, (int, float, bool)) else v for k, v in self.config.items()},
                "schema": _schema_to_text(self.schema),
                "directory": self.directory,
                "input_schema": _schema_to_text(self.input_schema),
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
        )


def _schema_to_text(schema: pa.Schema | None) -> str | None:
    return None if schema is None else base64.b64encode(schema.serialize().to_pybytes()).decode()


def _schema_from_text(text: str | None) -> pa.Schema | None:
    return None if text is None else pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobRecord:
    """The runner's record in ``_bridge/job.json``.

    Attributes:
        web_interface_url: the engine job's dashboard and REST API (``rest.port``
            of the query's options; a free port if unset and 8081 is taken).
        progress: the engine's progress, refreshed every few seconds while the job
            runs (see :mod:`flinklike_spark.spark.bridge_progress`): Flink's job metrics
            (``numRestarts``, ``numberOfCompletedCheckpoints``, ``lastCheckpointDuration``
            ...) and per vertex ``read-records`` / ``write-records``.
    """

    pid: int
    state: RunnerState
    job_id: str | None = None
    bounded: bool = False
    error: str | None = None
    updated: float = 0.0
    web_interface_url: str | None = None
    progress: dict[str, Any] | None = None


def record_dir(directory: str) -> Path:
    """Where a job's record and lock live: ``<dir>/_bridge`` for local dirs, else a local temp dir per URL."""
    fs, root = resolve_storage(directory)
    protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    if "file" in protocols or "local" in protocols:
        path = Path(root) / "_bridge"
    else:  # locks need a local file system; the source worker and runner share a machine
        path = Path(tempfile.gettempdir()) / f"flinklike-bridge-{hashlib.sha1(directory.encode()).hexdigest()[:16]}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def read_record(directory: str) -> JobRecord | None:
    """The runner's record for ``directory``, or None if no runner ever wrote one."""
    try:
        raw = json.loads((record_dir(directory) / "job.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return JobRecord(**(raw | {"state": RunnerState(raw["state"])}))


def _write_record(directory: str, record: JobRecord) -> None:
    path = record_dir(directory) / "job.json"
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    raw = dataclasses.asdict(record) | {"state": record.state.value, "updated": time.time()}
    tmp.write_text(json.dumps(raw))
    os.replace(tmp, path)  # readers never see a half-written record


def build_pipeline(pipeline: str, config: Configuration) -> tuple[StreamExecutionEnvironment, DataStream]:
    """Import ``module:function``, call it on a new environment, and check it returned a DataStream.

    Raises:
        ConfigurationError: the spec is malformed, the module or function cannot be
            imported, or the function does not return a DataStream.
    """
    function = resolve_pipeline(pipeline)
    env = StreamExecutionEnvironment.get_execution_environment(config)
    stream = function(env)
    if not isinstance(stream, DataStream):
        raise ConfigurationError(
            f"option pipeline={pipeline!r} returned {type(stream).__name__}; it must return the DataStream "
            f"whose rows go to Spark (e.g. the result of .process(...) or .map(...)), without a sink"
        )
    return env, stream


def _is_bounded(env: StreamExecutionEnvironment) -> bool:
    sources = [t.function for t in env.transformations if t.kind == "source"]
    return all(s.boundedness is Boundedness.BOUNDED for s in sources)


def _run(spec: JobSpec, stop: threading.Event) -> RunnerState:
    directory = spec.directory
    config = Configuration(spec.config)
    if list_completed_checkpoints(CheckpointLayout(base_url=directory, storage=config.storage)):
        config = config.with_values({"execution.state-recovery.path": directory})
    if spec.input_schema is None:
        env, stream = build_pipeline(spec.pipeline, config)
        schema = spec.schema
    else:  # fed by a writeStream: function(env, stream), its own sinks and maybe a stream for Spark
        env, stream = build_fed_pipeline(spec.pipeline, config, spec.input_schema)
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
    client = env.execute_async(f"spark bridge: {spec.pipeline}")
    bounded = _is_bounded(env)
    running = JobRecord(pid=os.getpid(), state=RunnerState.RUNNING, job_id=client.job_id, bounded=bounded,
                        web_interface_url=client.web_interface_url)  # fmt: skip
    _write_record(directory, running)
    _log.info("engine job %s runs; its dashboard and REST API: %s", client.job_id, client.web_interface_url)
    threading.Thread(target=lambda: (stop.wait(), client.cancel()), name="cancel-on-stop", daemon=True).start()
    reporter = ProgressReporter(client, lambda progress: _write_record(
        directory, dataclasses.replace(running, progress=progress)))  # fmt: skip
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
    lock_path = record_dir(spec.directory) / "job.lock"
    with open(lock_path, "a+") as lock:
        deadline = time.monotonic() + _LOCK_WAIT_SECONDS
        while True:  # an older runner may still be cancelling its job
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if stop.is_set() or time.monotonic() > deadline:
                    _log.error("another runner holds %s; giving up", lock_path)
                    return _EXIT_FAILED
                time.sleep(0.2)
        previous = read_record(spec.directory)
        if previous is not None and previous.state is RunnerState.FINISHED:
            _log.info("the bounded job in %s already finished; not starting it again", spec.directory)
            return 0
        _write_record(spec.directory, JobRecord(pid=os.getpid(), state=RunnerState.STARTING))
        try:
            state = _run(spec, stop)
        except Exception as exc:  # noqa: BLE001 - every failure is reported through the record
            cause = exc.__cause__ if exc.__cause__ is not None else exc
            error = f"{type(exc).__name__}: {exc}"
            if cause is not exc:
                error += f" (caused by {type(cause).__name__}: {cause})"
            _log.exception("engine job failed")
            _write_record(spec.directory, JobRecord(pid=os.getpid(), state=RunnerState.FAILED, error=error))
            return _EXIT_FAILED
        previous = read_record(spec.directory)
        _write_record(
            spec.directory,
            dataclasses.replace(previous, state=state) if previous else JobRecord(pid=os.getpid(), state=state),
        )
        return 0


class EngineJob:
    """The Spark source's handle on its runner process (used in Spark's source worker only).

    Call order: :meth:`ensure_running` before every offset request; :meth:`stop`
    once, when the Spark query stops. Not thread-safe (Spark calls one method at a time).
    """

    def __init__(self, spec: JobSpec) -> None:
        self._spec = spec
        self._process: subprocess.Popen | None = None
        self._stopped = False

    @property
    def record(self) -> JobRecord | None:
        return read_record(self._spec.directory)

    def ensure_running(self) -> None:
        """Start the runner unless it runs or its bounded job finished; restart it if it was killed.

        Raises:
            BridgeJobError: the runner reported a failure (bad pipeline, a task failed, ...).
        """
        if self._stopped:
            raise BridgeJobError("the Spark source was stopped; its engine job is not restarted")
        process = self._process
        if process is not None and process.poll() is None:
            return
        record = self.record
        if process is not None:
            if process.returncode == _EXIT_FAILED:
                error = record.error if record is not None and record.state is RunnerState.FAILED else None
                raise BridgeJobError(
                    f"the engine job of pipeline {self._spec.pipeline!r} failed: "
                    f"{error or 'see ' + str(record_dir(self._spec.directory) / 'runner.log')}"
                )
        if record is not None and record.state is RunnerState.FINISHED:
            if process is not None:
                _log.info("engine job of pipeline %r finished", self._spec.pipeline)
            self._process = None  # a bounded job ended: its output is all committed
            return
        if process is not None:
            _log.warning("engine job runner exited with %s; resuming it from its latest checkpoint",
                         process.returncode)
        self._spawn()

    def _spawn(self) -> None:
        env = dict(os.environ)
        # The runner imports what this worker can import (pipeline modules shipped by Spark included).
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.exists(p))
        log = open(record_dir(self._spec.directory) / "runner.log", "ab")  # noqa: SIM115 - handed to the child
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
