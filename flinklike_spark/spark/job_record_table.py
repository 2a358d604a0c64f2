"""The one record of a bridged engine job: the Delta table ``<dir>/job`` beside the bridge tables.

Both directions of the Spark bridge supervise their engine job through this
record (see docs/architecture.md, "One Spark job supervisor"): the runner
process that runs the job (:mod:`flinklike_spark.spark.job_runner`) claims it,
keeps it fresh and releases it; a ``writeStream`` query's commit requests the
job in it and the driver's owner takes the request
(:mod:`flinklike_spark.spark.writer_jobs`). Every process of a query reaches it
through ``execution.checkpointing.dir`` and the job's storage settings, on a
local disk or an object store alike.

The table holds no rows. Each version of the record is one commit: the record
as JSON in the commit info (key ``flinklike.job``, so ``DESCRIBE HISTORY`` in
Spark lists every state the job went through) with app transaction
``(RECORD_APP_ID, seq)``. A writer reads the newest record, changes it and
commits on the snapshot it read (:meth:`JobRecordTable.update`); Delta's
conflict detection rejects the commit if another writer committed a version of
the record meanwhile (both carry the same app id), and the writer retries on
the newer record. delta-rs commits are atomic on a local file system and, with
conditional puts, on S3 and Azure, so two runners can never both claim the
job: that replaces a lock file.

A runner that died is told apart from one that runs by its identity in the
record (:class:`ProcessId`: pid, host, process start time) on its own host,
and elsewhere by its heartbeat (``updated``, refreshed every
:data:`HEARTBEAT_INTERVAL` seconds; older than :data:`STALE_AFTER` seconds is dead).

This module does not import pyspark.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import socket
import time
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any

import psutil
import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.transaction import CommitProperties, Transaction

from flinklike_spark.config import Configuration
from flinklike_spark.spark.bridge_tables import BridgeTable
from flinklike_spark.storage import StorageConfig

__all__ = [
    "HEARTBEAT_INTERVAL",
    "JOB_TABLE",
    "RECORD_APP_ID",
    "STALE_AFTER",
    "JobRecord",
    "JobRecordTable",
    "ProcessId",
    "RunRequest",
    "RunnerState",
    "read_record",
]

_log = logging.getLogger(__name__)

JOB_TABLE = "job"
#: Every version of the record carries this app transaction: concurrent writers of the record conflict.
RECORD_APP_ID = "flinklike/job-record"
_RECORD_KEY = "flinklike.job"
#: Seconds between two heartbeats of a running runner.
HEARTBEAT_INTERVAL = 5.0
#: A runner on another host whose heartbeat is older than this is taken for dead.
STALE_AFTER = 30.0
_HISTORY_DEPTH = 16  # commits searched for the record (someone else may have committed to the table)
_ATTEMPTS = 200  # record writers are few; a lost race is retried at once on the newer record
#: The table keeps one hour of record history; delta-rs checkpoints the log every 100 versions.
_TABLE_CONFIGURATION = {"delta.logRetentionDuration": "interval 1 hours", "delta.checkpointInterval": "100"}
_SCHEMA = pa.schema([pa.field("unused", pa.string())])  # a Delta table needs a schema; the record has no rows


class RunnerState(Enum):
    """The state of the job as its runner records it."""

    IDLE = "idle"  # requested by a writeStream query; no runner ran it yet
    STARTING = "starting"
    RUNNING = "running"
    FINISHED = "finished"  # a bounded job ended: it is never started again
    STOPPED = "stopped"  # cancelled because its Spark query stopped
    FAILED = "failed"


_LIVE_STATES = frozenset({RunnerState.STARTING, RunnerState.RUNNING})


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProcessId:
    """A process, told apart from a later one with the same pid by its start time.

    Attributes:
        pid: the process id on ``host``.
        host: ``socket.gethostname()`` of the process.
        started: the process's start time (epoch seconds, as psutil reports it).
    """

    pid: int
    host: str
    started: float

    @staticmethod
    def current() -> ProcessId:
        return ProcessId.of(psutil.Process().pid)

    @staticmethod
    def of(pid: int) -> ProcessId:
        """The process ``pid`` on this host (raises psutil.NoSuchProcess if there is none)."""
        return ProcessId(pid=pid, host=socket.gethostname(), started=psutil.Process(pid).create_time())

    def is_alive(self, heartbeat: float | None = None, *, now: float | None = None) -> bool:
        """Whether the process runs: on this host by its pid and start time, elsewhere by ``heartbeat``.

        Args:
            heartbeat: the process's last heartbeat (epoch seconds); None: it keeps none,
                so a process on another host is taken to run.
        """
        if self.host != socket.gethostname():
            return heartbeat is None or (now if now is not None else time.time()) - heartbeat < STALE_AFTER
        try:
            process = psutil.Process(self.pid)
            return abs(process.create_time() - self.started) < 0.01 and process.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunRequest:
    """A ``writeStream`` query run asking the driver's owner to run the job (writer pipelines only).

    Attributes:
        run_id: the Spark query run (``StreamingQuery.runId``) feeding the job.
        spec: the job's :class:`~flinklike_spark.spark.job_runner.JobSpec` as JSON.
        owner: the driver process that took the request (None: not taken yet).
        error: why the owner could not run the job (it fails the run's next commit).
        ended: the run terminated; its owner stopped the job.
    """

    run_id: str
    spec: str
    owner: ProcessId | None = None
    error: str | None = None
    ended: bool = False

    def is_open(self) -> bool:
        """Taken by an owner that still runs, and neither failed nor ended."""
        return self.owner is not None and self.error is None and not self.ended and self.owner.is_alive()


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobRecord:
    """The job's record: its runner (the supervisor process) and, for writer pipelines, the run's request.

    Attributes:
        pid, host, started: the runner process that claimed the record (pid 0: none yet).
        state: what the runner recorded.
        job_id: the engine job's id while it runs.
        bounded: whether the job's sources are all bounded.
        error: why the job failed (with state FAILED).
        updated: the runner's last heartbeat (epoch seconds).
        web_interface_url: the engine job's dashboard and REST API (``rest.port``
            of the query's options; a free port if unset and 8081 is taken).
        progress: the engine's progress, refreshed every few seconds while the job
            runs (see :mod:`flinklike_spark.spark.bridge_progress`): Flink's job metrics
            (``numRestarts``, ``numberOfCompletedCheckpoints``, ``lastCheckpointDuration``
            ...) and per vertex ``read-records`` / ``write-records``.
        run_id: the Spark query run whose job the runner runs (writer pipelines; else None).
        request: the newest run request (writer pipelines; else None).
        seq: the record's version (the app transaction version it was committed with).
    """

    pid: int = 0
    state: RunnerState = RunnerState.IDLE
    host: str = ""
    started: float = 0.0
    job_id: str | None = None
    bounded: bool = False
    error: str | None = None
    updated: float = 0.0
    web_interface_url: str | None = None
    progress: dict[str, Any] | None = None
    run_id: str | None = None
    request: RunRequest | None = None
    seq: int = 0

    @property
    def runner(self) -> ProcessId | None:
        return ProcessId(pid=self.pid, host=self.host, started=self.started) if self.pid else None

    def runner_is_live(self) -> bool:
        """Whether a runner holds the job: it recorded STARTING or RUNNING and still runs."""
        runner = self.runner
        return self.state in _LIVE_STATES and runner is not None and runner.is_alive(self.updated)

    def to_json(self) -> str:
        raw = dataclasses.asdict(self) | {"state": self.state.value}
        return json.dumps(raw)

    @staticmethod
    def from_json(text: str) -> JobRecord:
        raw = json.loads(text)
        request = raw.pop("request", None)
        if request is not None:
            owner = request.pop("owner", None)
            request = RunRequest(**request, owner=None if owner is None else ProcessId(**owner))
        return JobRecord(**(raw | {"state": RunnerState(raw["state"]), "request": request}))


class JobRecordTable:
    """The record table of the job in ``directory`` (``<directory>/job``).

    Args:
        directory: the job's ``execution.checkpointing.dir``.
        storage: the job's object-store settings (``s3.*``, ``fs.azure.account.*``).
    """

    def __init__(self, directory: str, storage: StorageConfig | None = None) -> None:
        self._table = BridgeTable(f"{directory.rstrip('/')}/{JOB_TABLE}", storage=storage)
        self.uri = self._table.uri

    def _open(self) -> DeltaTable | None:
        try:
            return DeltaTable(self.uri, storage_options=self._table.storage_options)
        except TableNotFoundError:
            return None

    @staticmethod
    def _record_of(table: DeltaTable) -> JobRecord | None:
        for info in table.history(_HISTORY_DEPTH):  # newest first
            text = info.get(_RECORD_KEY)
            if text is not None:
                return JobRecord.from_json(text)
        return None

    def read(self) -> JobRecord | None:
        """The newest record, or None if none was ever written."""
        table = self._open()
        return None if table is None else self._record_of(table)

    def update(self, change: Callable[[JobRecord | None], JobRecord | None]) -> JobRecord | None:
        """Commit ``change(newest record)`` unless another writer commits a record first; then retry on that one.

        ``change`` may be called several times, each time with the newest record;
        it returns the new record, or None to write nothing.

        Returns:
            The record committed, or the newest record if ``change`` returned None.

        Raises:
            deltalake.exceptions.DeltaError: the table cannot be created or written.
        """
        for attempt in range(1, _ATTEMPTS + 1):
            table = self._open() or self._create()
            current = self._record_of(table)
            new = change(current)
            if new is None:
                return current
            new = dataclasses.replace(new, seq=(current.seq if current is not None else 0) + 1)
            try:
                table.create_write_transaction(
                    [], mode="append", schema=table.schema(), partition_by=[],
                    commit_properties=CommitProperties(
                        app_transactions=[Transaction(RECORD_APP_ID, new.seq)],
                        custom_metadata={_RECORD_KEY: new.to_json()},
                    ),
                )  # fmt: skip
            except CommitFailedError:
                if attempt == _ATTEMPTS:
                    raise
                time.sleep(random.uniform(0.0, 0.02))  # racing writers do not retry in lockstep
                continue
            return new
        raise AssertionError("unreachable")

    def _create(self) -> DeltaTable:
        self._table.fs.makedirs(self._table.root, exist_ok=True)
        try:
            DeltaTable.create(
                self.uri, _SCHEMA, mode="ignore", configuration=dict(_TABLE_CONFIGURATION),
                storage_options=self._table.storage_options,
            )  # fmt: skip
        except DeltaError:
            pass  # another writer created it first
        return DeltaTable(self.uri, storage_options=self._table.storage_options)


def read_record(directory: str, storage: StorageConfig | Mapping[str, Any] | None = None) -> JobRecord | None:
    """The job record for ``directory``, or None if none was ever written.

    Args:
        storage: the job's storage settings when ``directory`` is on an object store:
            a StorageConfig, or the job's configuration keys (``s3.*``, ...).
    """
    if storage is not None and not isinstance(storage, StorageConfig):
        storage = Configuration(dict(storage)).storage
    return JobRecordTable(directory, storage).read()
