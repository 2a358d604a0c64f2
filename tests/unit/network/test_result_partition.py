"""ResultPartition: capacity, overdraft, availability, priority events, finish/release."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest

from flinklike_spark._runtime.network.events import (
    AlignmentType,
    CheckpointBarrier,
    CheckpointOptions,
    EndOfPartition,
    Watermark,
)
from flinklike_spark._runtime.network.partition_manager import ResultPartitionManager
from flinklike_spark._runtime.network.result_partition import ResultPartition
from flinklike_spark.errors import (
    BrokenChannelError,
    CancelTaskError,
    ClosedChannelError,
    NetworkError,
    PartitionNotFoundError,
    ProducerFailedError,
)

UNALIGNED = CheckpointBarrier(1, 0, CheckpointOptions(alignment=AlignmentType.UNALIGNED))


def batch(i: int) -> pa.RecordBatch:
    return pa.record_batch({"i": [i]})


class Counter:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1


def drain(reader) -> list:
    out = []
    while (item := reader.poll()) is not None:
        out.append(item)
    return out


def test_fifo_with_events_and_sequence_numbers():
    partition = ResultPartition("p", 2)
    reader = partition.create_reader(1, Counter())
    partition.emit(1, batch(0))
    partition.emit_event(1, Watermark(5))
    partition.emit(1, batch(1))
    partition.emit(0, batch(9))
    items = drain(reader)
    assert [i.buffer["i"][0].as_py() if i.is_buffer else i.event for i in items] == [0, Watermark(5), 1]
    assert [i.sequence_number for i in items] == [0, 1, 2]
    assert partition.queued_buffers() == 1  # subpartition 0 untouched


def test_capacity_overdraft_and_availability_listener():
    available = Counter()
    partition = ResultPartition("p", 2, buffers_per_subpartition=2, availability_listener=available)
    reader = partition.create_reader(0, Counter())
    partition.emit(0, batch(0))
    assert partition.is_available()
    partition.emit(0, batch(1))
    assert not partition.is_available()
    for i in range(2, 5):  # overdraft: never blocks, never raises
        partition.emit(0, batch(i))
    partition.emit_event(0, Watermark(1))  # events do not count against capacity
    assert partition.queued_buffers() == 5
    assert partition.queued_bytes() == sum(batch(i).nbytes for i in range(5))
    for _ in range(3):
        reader.poll()
        assert not partition.is_available()
        assert available.calls == 0
    reader.poll()  # 2 -> 1 buffers: below capacity again
    assert partition.is_available()
    assert available.calls == 1
    drain(reader)
    assert available.calls == 1  # fires on the transition only
    assert partition.queued_buffers() == 0 and partition.queued_bytes() == 0


def test_availability_needs_every_subpartition_below_capacity():
    available = Counter()
    partition = ResultPartition("p", 2, buffers_per_subpartition=1)
    partition.set_availability_listener(available)
    r0, r1 = partition.create_reader(0, Counter()), partition.create_reader(1, Counter())
    partition.emit(0, batch(0))
    partition.emit(1, batch(1))
    r0.poll()
    assert not partition.is_available() and available.calls == 0
    r1.poll()
    assert partition.is_available() and available.calls == 1


def test_data_listener_fires_on_empty_to_non_empty_and_priority():
    listener = Counter()
    partition = ResultPartition("p", 1)
    partition.emit(0, batch(0))
    reader = partition.create_reader(0, listener)
    assert listener.calls == 1  # data was already queued when the reader attached
    partition.emit(0, batch(1))
    assert listener.calls == 1  # queue was not empty
    drain(reader)
    partition.emit_event(0, Watermark(3))
    assert listener.calls == 2
    partition.add_priority_event(0, UNALIGNED)
    assert listener.calls == 3  # priority always notifies


def test_priority_event_overtakes_exactly_the_queued_data_in_order():
    partition = ResultPartition("p", 2)
    reader = partition.create_reader(0, Counter())
    partition.emit(0, batch(0))
    reader.poll()  # consumed: not overtaken
    partition.emit(0, batch(1))
    partition.emit_event(0, Watermark(7))
    partition.emit(0, batch(2))
    partition.emit(1, batch(99))  # other subpartition: not overtaken
    first = partition.add_priority_event(0, UNALIGNED)
    assert [b["i"][0].as_py() for b in first] == [1, 2]
    assert reader.has_priority_event()
    second_barrier = CheckpointBarrier(2, 0, UNALIGNED.options)
    second = partition.add_priority_event(0, second_barrier)
    assert [b["i"][0].as_py() for b in second] == [1, 2]  # goes after the first priority event
    items = drain(reader)
    assert [i.is_priority for i in items] == [True, True, False, False, False]
    assert [i.event for i in items[:2]] == [UNALIGNED, second_barrier]
    assert [i.buffer["i"][0].as_py() if i.is_buffer else i.event for i in items[2:]] == [1, Watermark(7), 2]
    assert not reader.has_priority_event()


def test_finish_delivers_end_of_partition_and_rejects_more_output():
    partition = ResultPartition("p", 2)
    readers = [partition.create_reader(i, Counter()) for i in range(2)]
    partition.emit(0, batch(0))
    partition.finish()
    partition.finish()  # idempotent
    assert partition.is_finished
    with pytest.raises(ClosedChannelError, match="finished"):
        partition.emit(0, batch(1))
    with pytest.raises(ClosedChannelError):
        partition.broadcast_event(Watermark(1))
    items = drain(readers[0])
    assert items[-1].event == EndOfPartition() and items[0].is_buffer
    assert readers[0].is_finished
    assert not readers[1].is_finished
    assert readers[1].poll().event == EndOfPartition()
    assert readers[1].is_finished and readers[1].poll() is None


def test_release_with_cause_breaks_readers_and_wakes_listeners():
    data, available = Counter(), Counter()
    partition = ResultPartition("p", 1, buffers_per_subpartition=1, availability_listener=available)
    reader = partition.create_reader(0, data)
    partition.emit(0, batch(0))
    partition.emit(0, batch(1))
    cause = RuntimeError("producer crashed")
    partition.release(cause)
    assert data.calls == 2 and available.calls == 1
    assert partition.is_available() and partition.queued_buffers() == 0
    with pytest.raises(ProducerFailedError, match="producer crashed") as info:
        reader.poll()
    assert info.value.__cause__ is cause
    assert isinstance(info.value, BrokenChannelError) and isinstance(info.value, CancelTaskError)
    with pytest.raises(ClosedChannelError) as info:
        partition.emit(0, batch(2))
    assert info.value.__cause__ is cause


def test_release_without_cause_closes_but_finished_reader_stays_quiet():
    partition = ResultPartition("p", 2)
    done, pending = partition.create_reader(0, Counter()), partition.create_reader(1, Counter())
    partition.finish()
    assert done.poll().event == EndOfPartition()
    partition.release()
    assert done.poll() is None
    # The producer was cancelled: the consumer ends CANCELED too (not a failure of its own).
    with pytest.raises(ProducerFailedError, match="released: its producer was cancelled") as info:
        pending.poll()
    assert info.value.__cause__ is None


def test_released_reader_drops_output_and_unblocks_producer():
    available = Counter()
    partition = ResultPartition("p", 2, buffers_per_subpartition=1, availability_listener=available)
    reader = partition.create_reader(1, Counter())
    partition.emit(1, batch(0))
    assert not partition.is_available()
    reader.release_reader()
    assert partition.is_available() and available.calls == 1
    partition.emit(1, batch(1))  # dropped, not queued
    assert partition.queued_buffers() == 0
    assert partition.add_priority_event(1, UNALIGNED) == []
    with pytest.raises(ClosedChannelError):
        reader.poll()
    with pytest.raises(NetworkError, match="already has a reader"):
        partition.create_reader(1, Counter())


def test_invalid_subpartition_and_arguments():
    partition = ResultPartition("p", 2)
    with pytest.raises(IndexError, match="subpartition 2"):
        partition.emit(2, batch(0))
    with pytest.raises(ValueError):
        ResultPartition("p", 0)
    with pytest.raises(ValueError):
        ResultPartition("p", 1, buffers_per_subpartition=0)


def test_partition_manager_waits_for_registration_and_times_out():
    manager = ResultPartitionManager()
    partition = ResultPartition("job/a/0", 1)
    got = []
    waiter = threading.Thread(target=lambda: got.append(manager.get("job/a/0", timeout=10)))
    waiter.start()
    manager.register(partition)
    waiter.join(10)
    assert got == [partition]
    assert manager.partition_ids() == ["job/a/0"]
    with pytest.raises(PartitionNotFoundError, match=r"'job/b/0'.*'job/a/0'"):
        manager.get("job/b/0", timeout=0.05)
    with pytest.raises(ValueError, match="already registered"):
        manager.register(ResultPartition("job/a/0", 1))
    cause = RuntimeError("x")
    manager.release("job/a/0", cause)
    manager.release("job/a/0")  # idempotent
    assert partition.is_released and manager.partition_ids() == []
    other = ResultPartition("job/c/0", 1)
    manager.register(other)
    manager.release_all()
    assert other.is_released and manager.partition_ids() == []


def test_partition_manager_fails_a_lookup_of_a_released_partition_at_once():
    # A consumer asking for the partition of a producer that already failed must not
    # wait for taskmanager.network.request-backoff.max (30 s) for it to appear.
    manager = ResultPartitionManager()
    manager.register(ResultPartition("job/a/0", 1))
    cause = ValueError("user function raised")
    manager.release("job/a/0", cause)
    started = time.monotonic()
    with pytest.raises(ProducerFailedError, match="user function raised") as info:
        manager.get("job/a/0", timeout=30)
    assert time.monotonic() - started < 5
    assert info.value.__cause__ is cause
    # The producer failed before it registered its partition at all: the same.
    manager.release("job/never-registered/0", cause)
    with pytest.raises(ProducerFailedError):
        manager.get("job/never-registered/0", timeout=30)
    # Cancelled producers (no cause) too, also on TaskExecutor shutdown.
    manager.register(ResultPartition("job/b/0", 1))
    manager.release_all()
    with pytest.raises(ProducerFailedError, match="cancelled"):
        manager.get("job/b/0", timeout=30)


def test_partition_manager_wakes_a_waiting_lookup_when_the_partition_is_released():
    manager = ResultPartitionManager()
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            manager.get("job/a/0", timeout=30)
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.1)
    manager.release("job/a/0", RuntimeError("producer failed while starting"))
    waiter.join(5)
    assert not waiter.is_alive()
    assert [type(e) for e in errors] == [ProducerFailedError]


def test_partition_manager_lookup_is_interrupted_by_its_cancelled_callback():
    manager = ResultPartitionManager()
    cancelled = threading.Event()
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            manager.get("job/a/0", timeout=30, cancelled=cancelled.is_set)
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.1)
    cancelled.set()
    manager.wake_waiters()
    waiter.join(5)
    assert not waiter.is_alive(), "the lookup waited on after its cancellation"
    assert [type(e) for e in errors] == [ClosedChannelError]
