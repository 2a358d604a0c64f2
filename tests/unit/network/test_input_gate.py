"""InputGate over local channels: ordering, priority, blocking, finish, threads."""

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
from flinklike_spark._runtime.network.input_gate import InputChannel, InputGate, LocalInputChannel
from flinklike_spark._runtime.network.partition_manager import ResultPartitionManager
from flinklike_spark._runtime.network.result_partition import ResultPartition
from flinklike_spark.errors import BrokenChannelError, ClosedChannelError, PartitionNotFoundError

UNALIGNED = CheckpointBarrier(1, 0, CheckpointOptions(alignment=AlignmentType.UNALIGNED))


def batch(value: int) -> pa.RecordBatch:
    return pa.record_batch({"v": [value]})


def label(item) -> object:
    return item.buffer["v"][0].as_py() if item.is_buffer else item.event


def make_gate(num_producers: int, *, capacity: int = 8) -> tuple[InputGate, list[ResultPartition]]:
    """One consumer subtask (subpartition 0) reading ``num_producers`` partitions."""
    manager = ResultPartitionManager()
    partitions = [ResultPartition(f"p{i}", 1, buffers_per_subpartition=capacity) for i in range(num_producers)]
    for partition in partitions:
        manager.register(partition)
    channels = [LocalInputChannel(i, manager, f"p{i}", 0, partition_wait_timeout=5) for i in range(num_producers)]
    gate = InputGate(0, channels)
    gate.start()
    return gate, partitions


def drain(gate: InputGate) -> list[tuple[int, object]]:
    out = []
    while (polled := gate.poll_next()) is not None:
        out.append((polled[0], label(polled[1])))
    return out


def test_round_robin_over_channels_with_data():
    gate, partitions = make_gate(3)
    assert gate.num_channels == 3
    for value in (10, 11, 12):
        partitions[0].emit(0, batch(value))
    partitions[2].emit(0, batch(20))
    partitions[2].emit(0, batch(21))
    assert drain(gate) == [(0, 10), (2, 20), (0, 11), (2, 21), (0, 12)]
    assert gate.poll_next() is None


def test_priority_event_of_any_channel_first():
    gate, partitions = make_gate(2)
    partitions[0].emit(0, batch(1))
    partitions[1].emit(0, batch(2))
    partitions[1].emit(0, batch(3))
    overtaken = partitions[1].add_priority_event(0, UNALIGNED)
    assert [b["v"][0].as_py() for b in overtaken] == [2, 3]
    channel, item = gate.poll_next()
    assert (channel, item.event, item.is_priority) == (1, UNALIGNED, True)
    assert drain(gate) == [(0, 1), (1, 2), (1, 3)]


def test_blocked_channels_are_skipped_but_priority_passes():
    gate, partitions = make_gate(2)
    gate.block_channel(0)
    assert gate.is_blocked(0) and not gate.is_blocked(1)
    partitions[0].emit(0, batch(1))
    partitions[1].emit(0, batch(2))
    assert drain(gate) == [(1, 2)]
    partitions[0].add_priority_event(0, UNALIGNED)
    assert drain(gate) == [(0, UNALIGNED)]  # priority events bypass blocking
    gate.resume_channel(0)
    assert not gate.is_blocked(0)
    assert drain(gate) == [(0, 1)]
    gate.block_channel(0)
    gate.block_channel(1)
    partitions[0].emit(0, batch(3))
    partitions[1].emit(0, batch(4))
    assert gate.poll_next() is None
    gate.resume_all()
    assert sorted(drain(gate)) == [(0, 3), (1, 4)]


def test_finished_after_every_channel_delivered_end_of_partition():
    gate, partitions = make_gate(2)
    partitions[0].emit(0, batch(1))
    partitions[0].finish()
    partitions[1].broadcast_event(Watermark(5))
    assert drain(gate) == [(0, 1), (1, Watermark(5)), (0, EndOfPartition())]
    assert not gate.is_finished()
    partitions[1].finish()
    assert drain(gate) == [(1, EndOfPartition())]
    assert gate.is_finished()
    assert gate.poll_next() is None


def test_gate_data_listener_and_errors_propagate():
    gate, partitions = make_gate(2)
    woken = threading.Event()
    gate.set_data_listener(woken.set)
    assert not woken.is_set()
    partitions[1].emit(0, batch(1))
    assert woken.is_set()
    assert drain(gate) == [(1, 1)]
    woken.clear()
    cause = RuntimeError("upstream failed")
    partitions[0].release(cause)
    assert woken.is_set()
    with pytest.raises(BrokenChannelError) as info:
        gate.poll_next()
    assert info.value.__cause__ is cause
    with pytest.raises(BrokenChannelError):  # still reported, not swallowed
        gate.poll_next()
    gate.close()
    gate.close()
    with pytest.raises(ClosedChannelError):
        gate.poll_next()


def test_local_channel_waits_for_partition_or_times_out():
    manager = ResultPartitionManager()
    channel = LocalInputChannel(0, manager, "late", 0, partition_wait_timeout=5)
    gate = InputGate(0, [channel])
    starter = threading.Thread(target=gate.start)
    starter.start()
    partition = ResultPartition("late", 1)
    partition.emit(0, batch(7))  # queued before the reader attaches
    woken = threading.Event()
    gate.set_data_listener(woken.set)
    manager.register(partition)
    starter.join(5)
    assert not starter.is_alive()
    assert woken.wait(5)
    assert drain(gate) == [(0, 7)]
    missing = LocalInputChannel(0, manager, "never", 0, partition_wait_timeout=0.05)
    with pytest.raises(PartitionNotFoundError, match="'never'"):
        InputGate(1, [missing]).start()


class ScriptedChannel(InputChannel):
    """A minimal third-party channel: proves the ABC is implementable as documented."""

    def __init__(self, channel_index: int, items) -> None:
        super().__init__(channel_index)
        self.items = list(items)
        self.resumed = 0

    def start(self) -> None:
        self.notify_data_available()

    def poll(self):
        return self.items.pop(0) if self.items else None

    def resume_consumption(self) -> None:
        self.resumed += 1

    def convert_to_priority_event(self, sequence_number: int) -> None:
        pass  # this channel never queues data ahead of an announced event

    def take_jumped_buffers(self, sequence_number: int) -> list:
        return []

    def close(self) -> None:
        self.items.clear()


def test_custom_channel_subclass_and_resume_consumption():
    from flinklike_spark._runtime.network.events import BufferOrEvent

    channel = ScriptedChannel(0, [BufferOrEvent(buffer=batch(1)), BufferOrEvent(event=EndOfPartition())])
    gate = InputGate(0, [channel])
    gate.start()
    gate.block_channel(0)
    assert gate.poll_next() is None
    gate.resume_all()
    assert channel.resumed == 1
    assert drain(gate) == [(0, 1), (0, EndOfPartition())]
    assert gate.is_finished()


def test_producer_and_consumer_threads_move_100k_rows_with_bounded_queue():
    num_producers, rows_per_batch, batches_per_producer, capacity = 2, 500, 100, 4
    manager = ResultPartitionManager()
    partitions = [ResultPartition(f"p{i}", 1, buffers_per_subpartition=capacity) for i in range(num_producers)]
    errors: list[BaseException] = []
    max_queued = [0] * num_producers

    def produce(index: int) -> None:
        partition = partitions[index]
        available = threading.Event()
        partition.set_availability_listener(available.set)
        try:
            for b in range(batches_per_producer):
                while not partition.is_available():
                    available.clear()
                    if partition.is_available():  # re-check after clear: no lost wake-up
                        break
                    if not available.wait(10):
                        raise TimeoutError("producer was never woken")
                start = b * rows_per_batch
                values = pa.array(range(start, start + rows_per_batch), pa.int64())
                partition.emit(0, pa.record_batch({"v": values, "p": pa.array([index] * rows_per_batch)}))
                max_queued[index] = max(max_queued[index], partition.queued_buffers())
            partition.finish()
        except BaseException as e:  # noqa: BLE001 - reported to the test thread
            errors.append(e)

    for partition in partitions:
        manager.register(partition)
    gate = InputGate(0, [LocalInputChannel(i, manager, f"p{i}", 0) for i in range(num_producers)])
    has_data = threading.Event()
    gate.set_data_listener(has_data.set)
    gate.start()
    producers = [threading.Thread(target=produce, args=(i,)) for i in range(num_producers)]
    for thread in producers:
        thread.start()
    seen = [[] for _ in range(num_producers)]
    while not gate.is_finished():
        has_data.clear()
        polled = gate.poll_next()
        if polled is None:
            assert has_data.wait(10), "consumer was never woken"
            continue
        channel, item = polled
        if item.is_buffer:
            seen[channel].extend(item.buffer["v"].to_pylist())
            assert set(item.buffer["p"].to_pylist()) == {channel}
    for thread in producers:
        thread.join(10)
    assert errors == []
    expected = list(range(batches_per_producer * rows_per_batch))
    assert seen == [expected] * num_producers  # no loss, no duplicates, in order
    assert sum(len(s) for s in seen) == 100_000
    assert max(max_queued) <= capacity  # producers honoured the bound


def test_closing_a_gate_from_another_thread_interrupts_a_start_waiting_for_its_partition():
    # Cancelling a task closes its gates from the canceller's thread; a task thread
    # blocked in start() (partition not there yet) must wake up at once, not after
    # taskmanager.network.request-backoff.max.
    manager = ResultPartitionManager()
    channel = LocalInputChannel(0, manager, "never-comes", 0, partition_wait_timeout=30)
    gate = InputGate(0, [channel])
    errors: list[BaseException] = []

    def start() -> None:
        try:
            gate.start()
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    starter = threading.Thread(target=start)
    starter.start()
    time.sleep(0.2)
    assert starter.is_alive()
    gate.close()
    starter.join(5)
    assert not starter.is_alive(), "start() kept waiting after the gate was closed"
    assert [type(e) for e in errors] == [ClosedChannelError]
    # A partition registered after the close does not get a reader attached.
    partition = ResultPartition("never-comes", 1)
    manager.register(partition)
    partition.create_reader(0, lambda: None)  # still free: the closed channel left it alone
