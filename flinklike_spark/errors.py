"""The exception hierarchy of flinklike-spark.

Every error the library raises derives from :class:`FlinklikeError`. Errors
cross process boundaries (TaskExecutor -> JobMaster -> client), so every
subclass pickles cleanly: constructors take only the message as positional
argument, and extra fields are keyword-only with defaults.
"""

from __future__ import annotations

from enum import Enum

__all__ = [
    "BrokenChannelError",
    "CancelTaskError",
    "CheckpointCommitConflictError",
    "CheckpointDeclineReason",
    "CheckpointDeclinedError",
    "CheckpointFailedError",
    "CheckpointNotFoundError",
    "CheckpointStorageError",
    "ClosedChannelError",
    "CommittedSinkOutputError",
    "ConfigurationError",
    "CorruptCheckpointError",
    "EventDecodingError",
    "FlinklikeError",
    "FunctionResultError",
    "IllegalStateTransition",
    "IncompatibleCheckpointError",
    "IncompatibleStateTypeError",
    "InputFilesNotFoundError",
    "InvalidProgramError",
    "JobCancelledError",
    "JobClientTimeoutError",
    "JobExecutionError",
    "JobNotRunningError",
    "MalformedRecordError",
    "NetworkError",
    "NoResourceAvailableError",
    "NonRecoverableError",
    "NonRecoverableTaskError",
    "PartitionNotFoundError",
    "ProducerFailedError",
    "RemoteTaskError",
    "RescaleRefusedError",
    "RpcAuthenticationError",
    "RpcTimeoutError",
    "SchemaMismatchError",
    "SchemaRegistryError",
    "SinkCommitError",
    "SinkFencedError",
    "SlotAllocationError",
    "SlotNotFoundError",
    "StaleDeploymentError",
    "StateLossError",
    "StateNotFoundError",
    "StateProcessorError",
    "StateTypeError",
    "StorageUnavailableError",
    "TaskExecutorLostError",
    "UnsupportedSnapshotFormatError",
    "import_error_hint",
    "is_channel_error",
    "is_non_recoverable",
    "mark_non_recoverable",
]


class FlinklikeError(Exception):
    """Root of every error raised by flinklike-spark."""


class ConfigurationError(FlinklikeError, ValueError):
    """A configuration key or value is invalid; the message names the valid choices."""


class IllegalStateTransition(FlinklikeError, RuntimeError):
    """A state machine was asked to take an edge its transition table does not have."""

    def __init__(self, message: str, *, source: object = None, target: object = None) -> None:
        super().__init__(message)
        self.source = source
        self.target = target

    def __reduce__(self):
        return (_rebuild_illegal_transition, (str(self), self.source, self.target))


def _rebuild_illegal_transition(message, source, target):
    return IllegalStateTransition(message, source=source, target=target)


class SchemaMismatchError(FlinklikeError, TypeError):
    """A record's fields do not match the schema of the stream it is emitted to."""


class SchemaRegistryError(FlinklikeError, OSError):
    """A schema registry could not be reached, or refused a request (registering a schema, fetching one).

    The message names the registry's URL, the request and the registry's answer. Like any I/O failure of a
    task, it fails the task and the restart strategy applies (a registry that is down may come back).
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class FunctionResultError(FlinklikeError, TypeError):
    """A user function returned or yielded something of the wrong type (a map returning
    None, a ``process_element`` returning a dict instead of yielding it); the message
    names the operator and what its function must return."""


class InvalidProgramError(FlinklikeError, TypeError):
    """The program cannot run as written, found before the job starts (Flink's
    ``InvalidProgramException``): e.g. a function, source or sink that cannot be
    pickled to ship it to the TaskExecutors. The message names the operator."""


class SlotAllocationError(FlinklikeError):
    """A slot could not be allocated (no free slot, wrong job, table not running)."""


class SlotNotFoundError(SlotAllocationError, LookupError):
    """No slot is known for the given allocation id or index."""


class TaskExecutorLostError(FlinklikeError):
    """A TaskExecutor died or stopped heartbeating; the tasks it ran failed with this cause."""


class StaleDeploymentError(FlinklikeError):
    """A deployment was refused because its execution vertex version was superseded."""


class NetworkError(FlinklikeError, ConnectionError):
    """Base class of data-plane and control-plane transport errors."""


class ClosedChannelError(NetworkError):
    """The channel was closed by this side; using it again is a programming error."""


class BrokenChannelError(NetworkError):
    """The peer went away or broke the connection (process died, socket reset)."""


class CancelTaskError(FlinklikeError):
    """Raised inside a task to end it CANCELED instead of FAILED (Flink's ``CancelTaskException``).

    For errors that are a consequence of a failure or cancellation elsewhere:
    only the root cause should count (and be reported) as a task failure.
    """


class ProducerFailedError(CancelTaskError, BrokenChannelError):
    """The producer of a consumed partition failed or was cancelled and released it.

    Flink's ``ProducerFailedException``: the consumer ends CANCELED, because
    the producer's own failure (or the cancellation) is what is reported.
    """


class RpcAuthenticationError(NetworkError, PermissionError):
    """A control or data connection presented a missing or wrong cluster secret."""


class RemoteTaskError(FlinklikeError):
    """An exception raised by user code or the runtime inside a task.

    The original exception may not be importable (or picklable) in the client,
    so it travels as its type name, message and formatted traceback.
    """

    def __init__(
        self,
        message: str,
        *,
        task_name: str = "",
        exception_type: str = "",
        remote_traceback: str = "",
    ) -> None:
        super().__init__(message)
        self.task_name = task_name
        self.exception_type = exception_type
        self.remote_traceback = remote_traceback

    def __reduce__(self):
        return (
            _rebuild_remote_task_error,
            (super().__str__(), self.task_name, self.exception_type, self.remote_traceback),
        )

    def __str__(self) -> str:
        base = super().__str__()
        if self.remote_traceback:
            return f"{base}\n\nRemote traceback (task {self.task_name}):\n{self.remote_traceback}"
        return base


def _rebuild_remote_task_error(message, task_name, exception_type, remote_traceback):
    return RemoteTaskError(
        message,
        task_name=task_name,
        exception_type=exception_type,
        remote_traceback=remote_traceback,
    )


class JobExecutionError(FlinklikeError):
    """A job failed; ``__cause__`` holds the root failure (often a :class:`RemoteTaskError`)."""

    def __init__(self, message: str, *, job_id: str = "") -> None:
        super().__init__(message)
        self.job_id = job_id

    def __reduce__(self):
        return (_rebuild_job_execution_error, (str(self), self.job_id))


def _rebuild_job_execution_error(message, job_id):
    return JobExecutionError(message, job_id=job_id)


class JobCancelledError(JobExecutionError):
    """The job was cancelled before it finished.

    ``cancelled_by`` says who asked (the program, a REST request such as the
    dashboard's Cancel button, stop-with-savepoint, the cluster closing; empty
    if unknown); ``last_checkpoint`` is the restore path
    (``execution.state-recovery.path``) of the job's newest completed
    checkpoint or savepoint, None if none completed.
    """

    def __init__(
        self, message: str, *, job_id: str = "", cancelled_by: str = "", last_checkpoint: str | None = None
    ) -> None:
        super().__init__(message, job_id=job_id)
        self.cancelled_by = cancelled_by
        self.last_checkpoint = last_checkpoint

    def __reduce__(self):
        return (_rebuild_job_cancelled_error, (str(self), self.job_id, self.cancelled_by, self.last_checkpoint))


def _rebuild_job_cancelled_error(message, job_id, cancelled_by="", last_checkpoint=None):
    return JobCancelledError(message, job_id=job_id, cancelled_by=cancelled_by, last_checkpoint=last_checkpoint)


class JobNotRunningError(FlinklikeError):
    """A request needs a running job but the job is already over (e.g. a savepoint of a
    FINISHED job, or cancelling a job that FINISHED or FAILED: Flink's
    ``FlinkJobTerminatedWithoutCancellationException``). ``status`` is the job's
    final status name (``"FINISHED"``, ``"FAILED"``, ``"CANCELED"``)."""

    def __init__(self, message: str, *, job_id: str = "", status: str = "") -> None:
        super().__init__(message)
        self.job_id = job_id
        self.status = status

    def __reduce__(self):
        return (_rebuild_job_not_running_error, (str(self), self.job_id, self.status))


def _rebuild_job_not_running_error(message, job_id, status):
    return JobNotRunningError(message, job_id=job_id, status=status)


class RescaleRefusedError(FlinklikeError, ValueError):
    """A rescale the job or the cluster cannot do (bad resource requirements, too few slots, the
    default scheduler); the job runs on unchanged. The message names the value and what is valid."""


class JobClientTimeoutError(FlinklikeError, TimeoutError):
    """A :class:`~flinklike_spark.job_client.JobClient` call did not complete within its
    ``timeout``; the message says what was waited for and for how long. The job keeps
    running."""


class CheckpointStorageError(FlinklikeError, OSError):
    """Checkpoint storage could not be read or written; the message names the URL and the cause.

    ``url`` is the storage location (base URL, table or file) that failed.
    """

    def __init__(self, message: str, *, url: str = "") -> None:
        super().__init__(message)
        self.url = url

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""

    def __reduce__(self):
        return (_rebuild_checkpoint_storage_error, (type(self), str(self), self.url))


class StorageUnavailableError(FlinklikeError, OSError):
    """A storage location of a job (checkpoint directory, restore path, a connector's path)
    cannot be used, found when the job is submitted, before any task is deployed.

    ``url`` is the location and ``what`` the setting or connector that names it
    (``execution.checkpointing.dir``, ``sink 'orders' (DeltaSink table)``...). A
    location that works at submission and fails later fails the tasks or
    checkpoints instead, and the restart strategy applies.
    """

    def __init__(self, message: str, *, url: str = "", what: str = "") -> None:
        super().__init__(message)
        self.url = url
        self.what = what

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""

    def __reduce__(self):
        return (_rebuild_storage_unavailable_error, (str(self), self.url, self.what))


def _rebuild_storage_unavailable_error(message, url, what):
    return StorageUnavailableError(message, url=url, what=what)


class CheckpointCommitConflictError(CheckpointStorageError):
    """A checkpoint commit lost a Delta commit race (delta-rs's ``CommitFailedError`` is its ``__cause__``).

    Checkpoint commits are idempotent, so the coordinator retries this one on
    the table's newer version (another job's retention or commit won the race).
    """


def _rebuild_checkpoint_storage_error(cls, message, url):
    return cls(message, url=url)


class CheckpointNotFoundError(CheckpointStorageError, LookupError):
    """No completed (or no restorable) checkpoint matches the request."""


class IncompatibleCheckpointError(CheckpointStorageError, ValueError):
    """Stored checkpoint tables or rows do not match what this version reads or writes."""


class UnsupportedSnapshotFormatError(IncompatibleCheckpointError):
    """A checkpoint or savepoint was written in a snapshot format this version cannot restore.

    A newer format than this code writes, or an older one without a migration
    step (see :mod:`checkpointing.format_versions`). The message names both
    versions and the release to restore it with.
    """


class StateTypeError(FlinklikeError, TypeError):
    """A value written to state does not match the ``Types.*`` type its descriptor declares.

    Raised by the state handle (in the operator that wrote the value, or in a
    State Processor bootstrap function); the message names the operator, the
    state, the key, the declared type, the value and what the type accepts.
    Never restarted: the same record would write the same value again.
    """


class IncompatibleStateTypeError(StateTypeError):
    """A restored state was written with a declared type that its descriptor's type cannot read.

    Raised when the state is registered after a restore; the message names the
    state, the old and the new type and the migration route (the State Processor
    API). The only change that restores is a named row gaining fields at its end.
    """


class StateProcessorError(FlinklikeError, ValueError):
    """The State Processor API (:mod:`flinklike_spark.state_processor`) was given data or
    arguments it cannot turn into state: names the bad value and what would be valid."""


class StateNotFoundError(StateProcessorError, LookupError):
    """A savepoint holds no such operator uid or state name (names the ones it holds)."""


class StateLossError(StateProcessorError):
    """A savepoint derived with :meth:`~flinklike_spark.state_processor.SavepointWriter.with_operator`
    would lose a keyed state the source holds for the operator: the transformation does
    not write it, or writes it as another kind (value, list, map, reducing, aggregating).

    Raised by ``write()`` before anything is written. The message names the operator,
    the states held and written with their kinds, and the ``drop_state`` call that drops
    them explicitly. ``operator_uid`` is the operator; ``held`` and ``written`` map state
    names to kind names.
    """

    def __init__(
        self,
        message: str,
        *,
        operator_uid: str = "",
        held: dict[str, str] | None = None,
        written: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.operator_uid = operator_uid
        self.held = dict(held or {})
        self.written = dict(written or {})

    def __reduce__(self):
        return (_rebuild_state_loss_error, (str(self), self.operator_uid, self.held, self.written))


def _rebuild_state_loss_error(message, operator_uid, held, written):
    return StateLossError(message, operator_uid=operator_uid, held=held, written=written)


class CommittedSinkOutputError(IncompatibleCheckpointError):
    """A sink already committed output of a checkpoint newer than the one to restore.

    Restoring would write that output a second time (the new run places its
    barriers elsewhere, so it cannot skip exactly what was committed). Raised
    before any task runs; ``execution.state-recovery.accept-duplicate-sink-output``
    accepts the duplicates instead.
    """


class CorruptCheckpointError(CheckpointStorageError):
    """A completed checkpoint references a file that is missing or damaged.

    ``job_id`` and ``checkpoint_id`` name the checkpoint, ``path`` the bad file.
    """

    def __init__(
        self,
        message: str,
        *,
        url: str = "",
        job_id: str = "",
        checkpoint_id: int | None = None,
        path: str = "",
    ) -> None:
        super().__init__(message, url=url)
        self.job_id = job_id
        self.checkpoint_id = checkpoint_id
        self.path = path

    def __reduce__(self):
        return (
            _rebuild_corrupt_checkpoint_error,
            (str(self), self.url, self.job_id, self.checkpoint_id, self.path),
        )


def _rebuild_corrupt_checkpoint_error(message, url, job_id, checkpoint_id, path):
    return CorruptCheckpointError(message, url=url, job_id=job_id, checkpoint_id=checkpoint_id, path=path)


class PartitionNotFoundError(NetworkError, LookupError):
    """A result partition was not registered with the partition manager before the timeout."""


class EventDecodingError(NetworkError, ValueError):
    """Bytes received on the data plane are not a valid encoded runtime event.

    Raised for an unknown tag, an unsupported encoding version, or truncated or
    trailing bytes; the message names the offending value and the valid ones.
    """


class SinkCommitError(FlinklikeError, OSError):
    """A two-phase-commit sink could not commit prepared output; the message names the target and the cause."""


class SinkFencedError(SinkCommitError):
    """A newer job of the same restore lineage took over this sink's output; this job must not commit.

    Two jobs resumed from one checkpoint lineage share transactional ids; if
    both committed, each would skip what the other committed although their
    inputs were cut at other places (rows lost or duplicated). As Flink's
    transactional sinks fence an older producer, the newer job wins: the older
    one fails with this error at its next commit, and is not restarted.
    """


class InputFilesNotFoundError(FlinklikeError, FileNotFoundError):
    """A source path or glob matched no file; the message names the path."""


class MalformedRecordError(FlinklikeError, ValueError):
    """An input record could not be decoded (e.g. a line that is not a JSON object).

    ``path`` names the file and ``line_number`` (1-based) the offending line.
    """

    def __init__(self, message: str, *, path: str = "", line_number: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.line_number = line_number

    def __reduce__(self):
        return (_rebuild_malformed_record_error, (str(self), self.path, self.line_number))


def _rebuild_malformed_record_error(message, path, line_number):
    return MalformedRecordError(message, path=path, line_number=line_number)


class CheckpointDeclineReason(Enum):
    """Why a task declined (aborted) a checkpoint; mirrors Flink's ``CHECKPOINT_DECLINED_*`` reasons."""

    SUBSUMED = "subsumed"
    """A barrier of a newer checkpoint arrived before this one completed."""
    ON_CANCELLATION_BARRIER = "on_cancellation_barrier"
    """An upstream task cancelled the checkpoint (``CancelCheckpointMarker``)."""
    INPUT_END_OF_STREAM = "input_end_of_stream"
    """An input ended before the checkpoint could complete."""
    TASK_NOT_READY = "task_not_ready"
    """The task was not running (yet) when the checkpoint reached it."""
    TASK_CLOSING = "task_closing"
    """The task is shutting down."""
    IO_FAILURE = "io_failure"
    """Writing checkpoint data (operator or channel state) failed."""
    CHECKPOINT_ABORTED = "checkpoint_aborted"
    """The coordinator aborted the checkpoint (timeout, another task declined)."""


class CheckpointFailedError(FlinklikeError):
    """A checkpoint or savepoint did not complete (declined, expired, commit failed), or
    too many did: the job fails once ``execution.checkpointing.tolerable-failed-checkpoints``
    is exceeded. The message names the checkpoint and why."""


class CheckpointDeclinedError(FlinklikeError):
    """A task declined checkpoint ``checkpoint_id`` for ``reason``.

    Raised (or passed as the abort cause) by the barrier handler and the
    subtask checkpoint coordinator; the JobMaster counts it against the
    tolerable checkpoint failures.
    """

    def __init__(
        self,
        message: str,
        *,
        checkpoint_id: int | None = None,
        reason: CheckpointDeclineReason = CheckpointDeclineReason.IO_FAILURE,
    ) -> None:
        super().__init__(message)
        self.checkpoint_id = checkpoint_id
        self.reason = reason

    def __reduce__(self):
        return (_rebuild_checkpoint_declined_error, (str(self), self.checkpoint_id, self.reason))


def _rebuild_checkpoint_declined_error(message, checkpoint_id, reason):
    return CheckpointDeclinedError(message, checkpoint_id=checkpoint_id, reason=reason)


class RpcTimeoutError(BrokenChannelError, TimeoutError):
    """A control RPC got no answer within its timeout; the peer may be overloaded, hung or gone.

    A :class:`BrokenChannelError`, so callers that treat an unresponsive peer
    like a dead one (heartbeats) need no extra case.
    """


# -- failover: which failures must not be retried --------------------------------------------------

_NON_RECOVERABLE = "__flinklike_non_recoverable__"


class NonRecoverableError(FlinklikeError):
    """Raise this (or a subclass) from user code to fail the job at once, whatever the restart strategy.

    Flink's ``SuppressRestartsException`` / ``ThrowableType.NonRecoverableError``.
    For exception types of your own, use :func:`mark_non_recoverable`.
    """


setattr(NonRecoverableError, _NON_RECOVERABLE, True)
setattr(StateTypeError, _NON_RECOVERABLE, True)


def mark_non_recoverable(exception_type: type[BaseException]) -> type[BaseException]:
    """Class decorator: failures raising ``exception_type`` (or a subclass) are never restarted."""
    setattr(exception_type, _NON_RECOVERABLE, True)
    return exception_type


def is_non_recoverable(exc: BaseException) -> bool:
    """True if ``exc`` or any exception in its cause/context chain is of a type marked non-recoverable.

    An ``ImportError`` (a package or module missing where the task runs) is
    non-recoverable too: a restart runs the same code on the same machines.
    """
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if getattr(type(exc), _NON_RECOVERABLE, False) or isinstance(exc, ImportError):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def is_channel_error(cause: BaseException | None) -> bool:
    """True for a :class:`NetworkError`, also one raised in a task and carried as a :class:`RemoteTaskError`."""
    if isinstance(cause, NetworkError):
        return True
    if not isinstance(cause, RemoteTaskError):
        return False
    module, _, name = cause.exception_type.rpartition(".")
    error_type = globals().get(name) if module == __name__ else None
    return isinstance(error_type, type) and issubclass(error_type, NetworkError)


#: Object-store packages that fsspec asks for, and the project's extra that installs each.
_EXTRA_OF_PACKAGE = {"s3fs": "s3", "adlfs": "azure"}


def import_error_hint(exc: ImportError) -> str:
    """How to fix a missing module or package where a task ran (appended to the task failure's message)."""
    text = str(exc)
    for package, extra in _EXTRA_OF_PACKAGE.items():
        if package in text:
            return (
                f"install the object-store extra on every machine that runs TaskExecutors: "
                f'pip install "flinklike-spark[{extra}]"'
            )
    module = getattr(exc, "name", None)
    if module:
        return (
            f"module {module!r} cannot be imported where the task runs: install its package on every machine "
            f"that runs TaskExecutors, or ship your own module with the job (e.g. spark-submit --py-files); "
            f"restarting cannot fix this, so the job fails at once"
        )
    return "install the missing package on every machine that runs TaskExecutors; restarting cannot fix this"


class NonRecoverableTaskError(RemoteTaskError):
    """A :class:`RemoteTaskError` whose original exception was marked non-recoverable."""

    def __reduce__(self):
        return (
            _rebuild_non_recoverable_task_error,
            (self.args[0] if self.args else "", self.task_name, self.exception_type, self.remote_traceback),
        )


setattr(NonRecoverableTaskError, _NON_RECOVERABLE, True)


def _rebuild_non_recoverable_task_error(message, task_name, exception_type, remote_traceback):
    return NonRecoverableTaskError(
        message, task_name=task_name, exception_type=exception_type, remote_traceback=remote_traceback
    )


class NoResourceAvailableError(SlotAllocationError):
    """No slot became available within ``slot.request.timeout``; the job fails without restarting.

    Also: under the adaptive scheduler, the slots a job's lower bounds need did not come within
    ``jobmanager.adaptive-scheduler.resource-wait-timeout`` (the job is not started)."""


setattr(NoResourceAvailableError, _NON_RECOVERABLE, True)

# A record that does not fit its stream's schema, or a function returning the wrong
# type, is a bug in the program: a restart replays the same input into the same code
# and fails again, so with a restart strategy (the default under checkpointing) the
# job would restart forever instead of telling the user. These fail the job at once.
setattr(SchemaMismatchError, _NON_RECOVERABLE, True)
setattr(FunctionResultError, _NON_RECOVERABLE, True)
# A fenced job restarting would only be fenced again: a newer job owns the lineage's output.
setattr(SinkFencedError, _NON_RECOVERABLE, True)
