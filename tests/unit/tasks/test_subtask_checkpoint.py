"""SubtaskCheckpointCoordinator: an aborted unaligned checkpoint frees its I/O thread at once.

The asynchronous part of an unaligned checkpoint waits on the I/O pool for
the task's channel state, which completes when the last barrier arrives. When
the checkpoint is aborted instead (subsumed by a newer barrier, declined, or
aborted by the coordinator) that wait must end too: the pool is shared by all
tasks of a TaskExecutor, and a writer left waiting out
``execution.checkpointing.timeout`` (10 minutes by default) holds a thread that
later checkpoints and savepoints queue behind. Found as a stop-with-savepoint
that did not complete within 60 s under load.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import queue
import time
from datetime import timedelta
from types import SimpleNamespace

import fsspec
import pytest

from checkpointing import KeyedStateSnapshot, StateKind
from checkpointing.schemas import CheckpointKind
from flinklike_spark._runtime.checkpoint_messages import CheckpointAck, CheckpointDecline
from flinklike_spark._runtime.io.barrier_handler import BarrierHandlerMode
from flinklike_spark._runtime.network.events import (
    AlignmentType,
    BufferOrEvent,
    CheckpointBarrier,
    CheckpointOptions,
)
from flinklike_spark._runtime.tasks.checkpoint_collaborators import SubtaskCheckpointSettings
from flinklike_spark._runtime.tasks.subtask_checkpoint import SubtaskCheckpointCoordinator

pytestmark = pytest.mark.timeout(60)

UNALIGNED = CheckpointOptions(alignment=AlignmentType.UNALIGNED)
SAVEPOINT = CheckpointOptions(checkpoint_type=CheckpointKind.SAVEPOINT, alignment=AlignmentType.FORCED_ALIGNED)


class TwoChannelGate:
    """An input gate of two channels that records what the barrier handler asks of it."""

    num_channels = 2

    def __init__(self) -> None:
        self.blocked: set[int] = set()

    def block_channel(self, index: int) -> None:
        self.blocked.add(index)

    def resume_channel(self, index: int) -> None:
        self.blocked.discard(index)

    def is_channel_finished(self, index: int) -> bool:
        return False


class QueueResponder:
    """A CheckpointResponder that queues every acknowledgement and decline, in order."""

    def __init__(self, reports: queue.Queue) -> None:
        self.acknowledge_checkpoint = reports.put
        self.decline_checkpoint = reports.put


@contextlib.contextmanager
def subtask_of_two_channels(tmp_path, *, channel_state_timeout: float):
    """A stateless two-channel subtask whose checkpoint I/O pool has one thread (a stuck writer blocks the next)."""
    reports: queue.Queue = queue.Queue()
    io = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    coordinator = SubtaskCheckpointCoordinator(
        SubtaskCheckpointSettings(
            task_name="counter (1/1)",
            job_id="job",
            execution_id="execution",
            subtask_index=0,
            channel_state_uid="counter",
            storage=str(tmp_path),
            mode=BarrierHandlerMode.ALTERNATING,
            channel_state_timeout=timedelta(seconds=channel_state_timeout),
        ),
        chain=SimpleNamespace(network_outputs=[], operators=[]),
        gates=[TwoChannelGate()],
        register_timer=lambda delay, fn: None,
        responder=QueueResponder(reports),
        executor=io,
    )
    try:
        yield coordinator, reports
    finally:
        coordinator.close()
        io.shutdown(wait=False, cancel_futures=True)


@pytest.fixture
def subtask(tmp_path):
    with subtask_of_two_channels(tmp_path, channel_state_timeout=600.0) as subtask:  # the default checkpoint timeout
        yield subtask


def _count(entries):
    return KeyedStateSnapshot(name="count", kind=StateKind.VALUE, entries=entries)


def barrier(checkpoint_id: int, options: CheckpointOptions) -> BufferOrEvent:
    return BufferOrEvent(event=CheckpointBarrier(checkpoint_id, int(time.time() * 1000), options))


def next_report(reports: queue.Queue, within: float = 10.0):
    try:
        return reports.get(timeout=within)
    except queue.Empty:
        raise AssertionError(f"no acknowledgement or decline within {within} s") from None


def test_savepoint_is_acknowledged_after_it_subsumed_an_unaligned_checkpoint(subtask):
    coordinator, reports = subtask
    coordinator.on_barrier(0, 0, barrier(1, UNALIGNED))  # unaligned: snapshot now, channel 1 recorded
    coordinator.on_barrier(0, 0, barrier(2, SAVEPOINT))  # channel 0 is ahead: checkpoint 1 is subsumed
    coordinator.on_barrier(0, 1, barrier(1, UNALIGNED))  # obsolete
    coordinator.on_barrier(0, 1, barrier(2, SAVEPOINT))  # savepoint aligned: snapshot
    first = next_report(reports)
    assert isinstance(first, CheckpointDecline) and first.checkpoint_id == 1
    assert first.reason.name == "SUBSUMED"
    second = next_report(reports)
    assert isinstance(second, CheckpointAck) and second.checkpoint_id == 2


def test_checkpoint_is_acknowledged_after_the_coordinator_aborted_an_unaligned_one(subtask):
    coordinator, reports = subtask
    coordinator.on_barrier(0, 0, barrier(1, UNALIGNED))
    coordinator.notify_checkpoint_aborted(1)  # e.g. another task declined it; its last barrier never comes
    coordinator.on_barrier(0, 0, barrier(2, UNALIGNED))
    coordinator.on_barrier(0, 1, barrier(2, UNALIGNED))
    report = next_report(reports)
    if isinstance(report, CheckpointDecline):  # the barrier handler still had 1 pending: subsumed by 2
        assert report.checkpoint_id == 1 and report.reason.name == "SUBSUMED", report
        report = next_report(reports)
    assert isinstance(report, CheckpointAck) and report.checkpoint_id == 2, report


def test_channel_state_wait_still_bounds_a_checkpoint_whose_barrier_never_comes(tmp_path):
    """Without an abort, the writer waits for the channel state up to its timeout, then declines."""
    with subtask_of_two_channels(tmp_path, channel_state_timeout=0.2) as (coordinator, reports):
        coordinator.on_barrier(0, 0, barrier(1, UNALIGNED))
        report = next_report(reports)
        assert isinstance(report, CheckpointDecline) and report.checkpoint_id == 1
        assert report.reason.name == "IO_FAILURE"


def _state_files(root) -> list:
    return sorted(p for p in root.rglob("*.parquet"))


def test_a_write_error_after_another_writer_finished_is_reported_and_leaves_no_file(tmp_path, monkeypatch):
    """Two operators of a chain: the first writer finishes, the second fails with the storage error.

    The checkpoint must fail with that OSError (not an IllegalStateTransition from
    discarding the finished writer), and the finished writer's file must be removed.
    """
    from checkpointing import SnapshotWriter
    from flinklike_spark._runtime.operators.stream_operator import OperatorSnapshot

    real_write_file = SnapshotWriter._write_file
    calls = []

    def failing_second_write(self, table, data):
        calls.append(self.operator_uid)
        if len(calls) == 2:
            raise OSError(30, "Read-only file system", str(tmp_path))
        return real_write_file(self, table, data)

    monkeypatch.setattr(SnapshotWriter, "_write_file", failing_second_write)
    storage = tmp_path / "checkpoints"
    with subtask_of_two_channels(storage, channel_state_timeout=5.0) as (coordinator, _reports):
        snapshots = [(uid, OperatorSnapshot(keyed=[_count([(0, "k", 1), (1, "j", 2)])])) for uid in ("first", "second")]
        with pytest.raises(OSError, match="Read-only file system"):
            coordinator._write(1, snapshots, None, lambda: False)
    assert calls == ["first", "second"]
    assert _state_files(storage) == []


def test_a_cleanup_error_does_not_replace_the_write_error(tmp_path, monkeypatch):
    """On a read-only file system removing the partial files fails too: the write error is still reported."""
    from checkpointing import SnapshotWriter
    from flinklike_spark._runtime.operators.stream_operator import OperatorSnapshot

    real_write_file = SnapshotWriter._write_file
    calls = []

    def failing_second_write(self, table, data):
        calls.append(self.operator_uid)
        if len(calls) == 2:
            raise OSError(30, "Read-only file system", "the write")
        return real_write_file(self, table, data)

    def failing_remove(self, path, *args, **kwargs):
        raise OSError(30, "Read-only file system", "the cleanup")

    monkeypatch.setattr(SnapshotWriter, "_write_file", failing_second_write)
    monkeypatch.setattr(type(fsspec.filesystem("file")), "rm_file", failing_remove)
    with subtask_of_two_channels(tmp_path / "checkpoints", channel_state_timeout=5.0) as (coordinator, _reports):
        snapshots = [(uid, OperatorSnapshot(keyed=[_count([(0, "k", 1)])])) for uid in ("a", "b", "c")]
        with pytest.raises(OSError, match="the write"):
            coordinator._write(1, snapshots, None, lambda: False)
