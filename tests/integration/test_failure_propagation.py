"""How failures reach the client: promptly, with the root cause, and nothing written afterwards.

Real multi-process local clusters. Timings are asserted loosely: "the job
fails within 20 s" (cluster start included) separates a prompt failure from
one that waits for ``taskmanager.network.request-backoff.max`` (30 s) or on a
frozen process; it is not a speed assertion.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time

import psutil
import pyarrow as pa
import pytest

from checkpointing import list_completed_checkpoints
from connectors import CollectSink, DeltaSink, SequenceSource
from flinklike_spark import Configuration, JobExecutionError, RemoteTaskError, StreamExecutionEnvironment
from flinklike_spark._runtime.graph.execution_state import JobStatus
from flinklike_spark._runtime.minicluster import MiniCluster
from flinklike_spark.connector_api import Boundedness, ReadResult, Source, SourceReader, SourceSplit
from flinklike_spark.errors import StorageUnavailableError, TaskExecutorLostError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

PROMPT = 20.0  # seconds; far below the 30 s request backoff plus cluster start


def _fail_on_first_record(row):
    raise ValueError(f"user function rejects {row}")


def _early_failing_job(kind: str, tmp_path) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment(
        {"parallelism.default": 2, "local.number-taskmanager": 2}
    )
    source = env.from_source(SequenceSource(num_keys=10, records_per_key=100_000), name="seq")
    if kind == "map":
        source.map(_fail_on_first_record).key_by("key").map(lambda r: r).sink_to(CollectSink("never"))
    else:
        source.key_by(lambda r: r["missing"]).map(lambda r: r).sink_to(CollectSink("never"))
    return env


def test_a_sink_path_of_an_unknown_scheme_fails_the_submission_naming_the_cause():
    """It once failed the first task (fast, with the user's exception); now the storage probe at submission
    refuses it before any task runs, naming the path and the cause (see tests/integration/test_storage_probe.py)."""
    env = StreamExecutionEnvironment.get_execution_environment({"parallelism.default": 2})
    env.from_source(SequenceSource(num_keys=10, records_per_key=10), name="seq").key_by("key").map(lambda r: r).sink_to(
        DeltaSink("nosuchfs://bucket/table")
    )
    started = time.monotonic()
    with pytest.raises(StorageUnavailableError) as info:
        env.execute_async("unknown scheme")
    assert "'nosuchfs://bucket/table'" in str(info.value)
    assert "Protocol not known: nosuchfs" in str(info.value)
    assert time.monotonic() - started < PROMPT


# The user's exception as the client sees it (RemoteTaskError message "<Type>: <message>").
EXPECTED = {
    "map": "ValueError: user function rejects",
    "key_by": "KeyError: 'missing'",
}


@pytest.mark.parametrize("run", [1, 2, 3])
@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_an_early_task_failure_fails_the_job_promptly_with_the_users_exception(kind, run, tmp_path, caplog):
    # Before the fix: 4 runs in 5 waited ~31 s (a consumer in the partition lookup until
    # request-backoff.max, not woken by its cancellation), and the cause was often the
    # consumer's "BrokenChannelError: partition ... was released by its producer".
    env = _early_failing_job(kind, tmp_path)
    with caplog.at_level(logging.INFO, logger="flinklike_spark._runtime.jobmaster.scheduler"):
        started = time.monotonic()
        client = env.execute_async(f"early failure {kind}")
        with pytest.raises(JobExecutionError) as info:
            client.wait(120)
        elapsed = time.monotonic() - started
    assert elapsed < PROMPT, f"the failure took {elapsed:.1f} s to reach the client"
    cause = info.value.__cause__
    assert isinstance(cause, RemoteTaskError)
    assert str(cause).startswith(EXPECTED[kind]), str(cause)
    assert EXPECTED[kind] in str(info.value)
    # Only root causes are task failures: consumers of the failed producer end CANCELED.
    failed = [r.getMessage() for r in caplog.records if r.getMessage().startswith("execution ")]
    assert failed and all(EXPECTED[kind] in m for m in failed), failed


def _unbounded_job_graph(config: Configuration, name: str):
    env = StreamExecutionEnvironment.get_execution_environment(config)
    (
        env.from_source(SequenceSource(num_keys=50, records_per_key=None), name="seq")
        .key_by("key")
        .map(lambda r: r)
        .sink_to(CollectSink("never"))
    )
    return env.get_job_graph(name)


def _wait_for_records(client, at_least: int = 2_000) -> None:
    deadline = time.monotonic() + 120
    while sum(m.get("records_in", 0) for m in client.task_metrics().values()) < at_least:
        assert time.monotonic() < deadline, "no records flowed"
        assert not client.done(), "the job ended before the fault was injected"
        time.sleep(0.05)


@contextlib.contextmanager
def _job_with_records_flowing(config: Configuration, name: str):
    """Yield ``(client, resource id, pid)`` of a running unbounded job and its first TaskExecutor."""
    cluster = MiniCluster(config)
    cluster.start()
    resource_id, pid = sorted(cluster.task_executor_pids.items())[0]
    # psutil refuses to signal a pid that another process took over since (pid_max is 32768 here, and the
    # test may already have killed this one): a bare os.kill could hit an unrelated process
    process = psutil.Process(pid)
    try:
        client = cluster.submit_job(_unbounded_job_graph(config, name), owns_cluster=True)
        _wait_for_records(client)
        yield client, resource_id, pid
    finally:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()  # never leave a frozen process behind
        cluster.close()


def _wait_for_status(client, status: JobStatus, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while client.get_job_status() is not status:
        assert time.monotonic() < deadline, f"the job is {client.get_job_status().name}, not {status.name}"
        time.sleep(0.02)


def test_a_frozen_task_executor_fails_the_job_and_wait_does_not_wait_for_it(caplog):
    # Before the fix: the job failed after the heartbeat timeout, but wait() raised ~10 s
    # later (closing the cluster waited for the frozen process), and meanwhile the healthy
    # TaskExecutor, already shut down, was reported lost by the heartbeat check too.
    config = Configuration(
        {
            "parallelism.default": 2,
            "local.number-taskmanager": 2,
            "heartbeat.interval": "500 ms",
            "heartbeat.timeout": "5 s",
        }
    )
    with _job_with_records_flowing(config, "frozen") as (client, frozen_id, frozen_pid):
        with caplog.at_level(logging.WARNING, logger="flinklike_spark._runtime"):
            os.kill(frozen_pid, signal.SIGSTOP)
            _wait_for_status(client, JobStatus.FAILED)
            started = time.monotonic()
            with pytest.raises(JobExecutionError) as info:
                client.wait(60)
            waited = time.monotonic() - started
        assert waited < 5.0, f"wait() took {waited:.1f} s after the job had failed"
        cause = info.value.__cause__
        assert isinstance(cause, TaskExecutorLostError) and frozen_id in str(cause), cause
        lost = [r.getMessage() for r in caplog.records if " lost: " in r.getMessage()]
        assert lost and all(frozen_id in m.partition(" lost: ")[0] for m in lost), lost
        with pytest.raises(ProcessLookupError):  # killed and reaped by the cluster, not left frozen
            os.kill(frozen_pid, 0)


@pytest.mark.parametrize("run", [1, 2, 3, 4])
def test_a_killed_task_executor_is_reported_as_the_root_cause(run):
    # Before the fix, about every second run reported a peer's "BrokenChannelError: stream of
    # '<partition>' ... failed" (the consumer noticed the death before the process monitor).
    config = Configuration({"parallelism.default": 2, "local.number-taskmanager": 2})
    with _job_with_records_flowing(config, "killed") as (client, killed_id, killed_pid):
        os.kill(killed_pid, signal.SIGKILL)
        with pytest.raises(JobExecutionError) as info:
            client.wait(60)
    cause = info.value.__cause__
    assert isinstance(cause, TaskExecutorLostError), str(cause).partition("\n")[0]
    assert f"TaskExecutor process {killed_pid} exited with code -9" in str(cause)
    assert killed_id in str(info.value)


class _LogWatch(logging.Handler):
    """Collects errors (and uncaught callback failures) logged anywhere in the process, and triggers."""

    def __init__(self) -> None:
        super().__init__(level=logging.INFO)
        self.errors: list[str] = []
        self.triggered = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR:
            self.errors.append(f"{record.name}: {record.getMessage()} {record.exc_info[1] if record.exc_info else ''}")
        elif record.getMessage().startswith("triggering checkpoint"):
            self.triggered += 1


def _files(directory) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in directory.rglob("*") if p.is_file()}


class EndsAfterItsFirstCheckpoint(Source):
    """Emits rows until shortly after it snapshots its first checkpoint, then ends.

    Long enough for the acknowledgements to reach the JobMaster, short enough
    for the job to end while that checkpoint's commit (a few Delta commits)
    runs: the shutdown race of a commit in flight, most of the time instead of
    now and then.
    """

    END_AFTER = 0.04  # seconds after the snapshot

    SCHEMA = pa.schema([("key", pa.int64()), ("seq", pa.int64())])

    def boundedness(self) -> Boundedness:
        return Boundedness.BOUNDED

    def output_schema(self) -> pa.Schema:
        return self.SCHEMA

    def create_splits(self, parallelism: int) -> list[SourceSplit]:
        return [SourceSplit(split_id=str(i)) for i in range(parallelism)]

    def create_reader(self, context) -> SourceReader:
        return _EndsAfterItsFirstCheckpointReader(context.subtask_index)


class _EndsAfterItsFirstCheckpointReader(SourceReader):
    def __init__(self, subtask: int) -> None:
        self._subtask = subtask
        self._splits: list[SourceSplit] = []
        self._seq = 0
        self._ends_at: float | None = None

    def add_splits(self, splits: list[SourceSplit]) -> None:
        self._splits = list(splits)

    def poll_next(self, max_rows: int) -> ReadResult:
        if self._ends_at is not None and time.monotonic() >= self._ends_at:
            return ReadResult(end_of_input=True)
        rows = min(max_rows, 20)
        seqs = list(range(self._seq, self._seq + rows))
        self._seq += rows
        batch = pa.record_batch({"key": [self._subtask] * rows, "seq": seqs}, schema=EndsAfterItsFirstCheckpoint.SCHEMA)
        return ReadResult(batch=batch)

    def snapshot_state(self, checkpoint_id: int) -> list[SourceSplit]:
        if self._ends_at is None:
            self._ends_at = time.monotonic() + EndsAfterItsFirstCheckpoint.END_AFTER
        return self._splits


@pytest.mark.parametrize("run", [1, 2, 3])
def test_nothing_is_written_and_nothing_raises_after_execute_returned(run, tmp_path):
    # Before the fix the coordinator's stop() failed the checkpoint whose commit was running:
    # the commit's callback then raised "InvalidStateError: FINISHED ... CheckpointFailedError"
    # on the main thread (or "main thread executor ... is shut down"), a durable checkpoint
    # was reported failed, and its commit could land after execute() returned.
    directory = tmp_path / "checkpoints"
    env = StreamExecutionEnvironment.get_execution_environment(
        {
            "parallelism.default": 2,
            "local.number-taskmanager": 2,
            "execution.checkpointing.interval": "100 ms",
            "execution.checkpointing.dir": directory.as_uri(),
        }
    )
    (
        env.from_source(EndsAfterItsFirstCheckpoint(), name="ends")
        .key_by("key")
        .map(lambda r: r)
        .uid("identity")
        .sink_to(CollectSink("out"))
    )
    watch = _LogWatch()
    root = logging.getLogger()
    root.addHandler(watch)
    level = root.level
    root.setLevel(logging.INFO)
    try:
        result = env.execute("checkpoint shutdown")
        written = _files(directory)
        time.sleep(1.5)
        assert _files(directory) == written, "checkpoint storage changed after execute() returned"
    finally:
        root.removeHandler(watch)
        root.setLevel(level)
    assert watch.errors == []
    assert watch.triggered, "the job triggered no checkpoint; the test would prove nothing"
    rows = CollectSink.rows(result)
    for key in (0, 1):  # per key: nothing lost, nothing duplicated, in order
        assert [r["seq"] for r in rows if r["key"] == key] == list(range(len([r for r in rows if r["key"] == key])))
    # Whatever was durable when execute() returned is all there is.
    assert all(c.checkpoint_id >= 1 for c in list_completed_checkpoints(directory.as_uri(), result.job_id))
