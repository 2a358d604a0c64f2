"""RemoteInputChannel over Arrow Flight: ordering, priority, credit, waiting, failures, SIGKILL."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time

import pyarrow as pa
import pytest

from flinklike_spark._runtime.network.events import (
    AlignmentType,
    BufferOrEvent,
    CheckpointBarrier,
    CheckpointOptions,
    EndOfPartition,
    Watermark,
)
from flinklike_spark._runtime.network.partition_manager import ResultPartitionManager
from flinklike_spark._runtime.network.partition_server import PartitionRequestServer
from flinklike_spark._runtime.network.ports import free_port
from flinklike_spark._runtime.network.remote_input_channel import RemoteInputChannel
from flinklike_spark._runtime.network.result_partition import ResultPartition
from flinklike_spark._runtime.rpc import FlightNode, generate_secret
from flinklike_spark.errors import (
    BrokenChannelError,
    ClosedChannelError,
    PartitionNotFoundError,
    RpcAuthenticationError,
)

pytestmark = pytest.mark.timeout(30)

UNALIGNED = CheckpointBarrier(7, 0, CheckpointOptions(alignment=AlignmentType.UNALIGNED))


def batch(i: int, rows: int = 3) -> pa.RecordBatch:
    return pa.record_batch({"i": pa.array([i] * rows, pa.int64()), "s": pa.array([str(i)] * rows)})


class Listener:
    """Data listener that a test thread can wait on."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1
        self.event.set()

    def wait(self, timeout: float) -> bool:
        fired = self.event.wait(timeout)
        self.event.clear()
        return fired


def poll_next(channel: RemoteInputChannel, listener: Listener, timeout: float = 10.0) -> BufferOrEvent:
    """Poll until an element arrives, waiting on the data listener (never busy-waits long)."""
    deadline = time.monotonic() + timeout
    while True:
        element = channel.poll()
        if element is not None:
            return element
        remaining = deadline - time.monotonic()
        assert remaining > 0, "no element within the timeout"
        listener.wait(min(remaining, 0.5))


def read_all(channel: RemoteInputChannel, listener: Listener, timeout: float = 20.0) -> list[BufferOrEvent]:
    elements = []
    while True:
        element = poll_next(channel, listener, timeout)
        elements.append(element)
        if not element.is_buffer and isinstance(element.event, EndOfPartition):
            return elements


def describe(element: BufferOrEvent):
    if element.is_buffer:
        return ("buffer", element.buffer.column("i")[0].as_py())
    return ("event", element.event)


def wait_until(predicate, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


@pytest.fixture
def secret() -> bytes:
    return generate_secret()


@pytest.fixture
def manager() -> ResultPartitionManager:
    return ResultPartitionManager()


@pytest.fixture
def node(secret, manager):
    node = FlightNode(secret, data_server=PartitionRequestServer(manager))
    node.start()
    yield node
    node.shutdown()


@pytest.fixture
def open_channel(node, secret):
    channels: list[RemoteInputChannel] = []

    def make(partition_id: str, *, credit: int = 2, wait: float = 10.0, address: str | None = None, key=None):
        channel = RemoteInputChannel(
            0,
            address or node.address,
            secret if key is None else key,
            partition_id,
            0,
            initial_credit=credit,
            partition_wait_timeout=wait,
        )
        listener = Listener()
        channel.set_data_listener(listener)
        channels.append(channel)
        return channel, listener

    yield make
    for channel in channels:
        channel.close()


def test_reads_200_batches_and_events_in_order_under_backpressure(manager, open_channel):
    partition = ResultPartition("job/map/0/0", 1, buffers_per_subpartition=4)
    available = threading.Event()
    partition.set_availability_listener(available.set)
    manager.register(partition)
    expected = []

    def produce() -> None:
        for i in range(200):
            while not partition.is_available():
                available.wait(0.5)
                available.clear()
            partition.emit(0, batch(i))
            expected.append(("buffer", i))
            if i % 50 == 49:
                partition.emit_event(0, Watermark(i))
                expected.append(("event", Watermark(i)))
            if i == 120:
                barrier = CheckpointBarrier(3, 1234)
                partition.broadcast_event(barrier)
                expected.append(("event", barrier))
        partition.finish()
        expected.append(("event", EndOfPartition()))

    channel, listener = open_channel("job/map/0/0", credit=3)
    producer = threading.Thread(target=produce)
    producer.start()
    channel.start()
    elements = read_all(channel, listener)
    producer.join(5)

    assert [describe(e) for e in elements] == expected
    assert [e.sequence_number for e in elements] == list(range(len(expected)))
    assert all(not e.is_priority for e in elements)
    assert elements[0].buffer.equals(batch(0))
    assert channel.poll() is None  # after EndOfPartition: nothing, no error


def test_credit_limits_the_data_in_flight(manager, open_channel):
    partition = ResultPartition("p", 1, buffers_per_subpartition=100)
    for i in range(10):
        partition.emit(0, batch(i))
    manager.register(partition)
    channel, listener = open_channel("p", credit=2)
    channel.start()

    # The consumer does not poll: the server sends exactly its credit, then stops.
    wait_until(lambda: partition.queued_buffers() == 8)
    time.sleep(0.3)
    assert partition.queued_buffers() == 8
    assert len(channel.queued_buffers()) == 2

    assert describe(poll_next(channel, listener)) == ("buffer", 0)  # returns one credit
    wait_until(lambda: partition.queued_buffers() == 7)
    time.sleep(0.2)
    assert partition.queued_buffers() == 7
    assert [b.column("i")[0].as_py() for b in channel.queued_buffers()] == [1, 2]


def test_credit_is_written_by_the_sender_thread_not_by_the_polling_task(manager, open_channel):
    partition = ResultPartition("p", 1, buffers_per_subpartition=100)
    for i in range(30):
        partition.emit(0, batch(i))
    partition.finish()
    manager.register(partition)
    channel, listener = open_channel("p", credit=4)
    writers: list[str] = []
    write = channel._write

    def recording_write(message: bytes) -> None:
        writers.append(threading.current_thread().name)
        write(message)

    channel._write = recording_write
    channel.start()

    elements = read_all(channel, listener)
    assert [describe(e) for e in elements[:-1]] == [("buffer", i) for i in range(30)]
    # The initial credit goes out from the receiver thread; every announcement after it
    # from the process's credit sender: a Flight write on the task thread would release
    # the GIL there and leave the task waiting for it.
    assert writers[0].startswith("remote-channel-")
    assert len(writers) > 1 and set(writers[1:]) == {"credit-sender"}
    assert threading.current_thread().name not in writers


def test_credited_buffers_travel_coalesced_but_arrive_one_by_one_in_order(manager, open_channel):
    partition = ResultPartition("coalesce", 1, buffers_per_subpartition=100)
    wide = pa.record_batch({"other": pa.array([1.5])})
    for i in range(20):
        partition.emit(0, wide if i == 13 else batch(i))  # a schema change splits a message
    partition.finish()
    manager.register(partition)
    channel, listener = open_channel("coalesce", credit=8)
    channel.start()

    # Without polling the consumer receives exactly its credit, however it was packed.
    wait_until(lambda: partition.queued_buffers() == 12)
    time.sleep(0.3)
    assert len(channel.queued_buffers()) == 8
    # Half the credit polled: the credit goes back in one announcement and 4 more come.
    for i in range(4):
        assert describe(poll_next(channel, listener)) == ("buffer", i)
    wait_until(lambda: len(channel.queued_buffers()) == 8)  # sent (partition side) precedes received
    assert partition.queued_buffers() == 8

    rest = read_all(channel, listener)
    assert [e.sequence_number for e in rest] == list(range(4, 21))
    assert rest[9].buffer.equals(wide)
    assert [describe(e) for e in rest[:9] + rest[10:]] == [("buffer", i) for i in range(4, 20) if i != 13] + [
        ("event", EndOfPartition())
    ]


def test_priority_event_jumps_ahead_of_received_and_queued_data(manager, open_channel):
    partition = ResultPartition("p", 1, buffers_per_subpartition=100)
    for i in range(5):
        partition.emit(0, batch(i))
    manager.register(partition)
    channel, listener = open_channel("p", credit=2)
    channel.start()
    wait_until(lambda: len(channel.queued_buffers()) == 2)  # 0 and 1 arrived, 2..4 wait for credit
    listener.event.clear()

    overtaken = partition.add_priority_event(0, UNALIGNED)
    partition.finish()

    assert [b.column("i")[0].as_py() for b in overtaken] == [2, 3, 4]
    assert listener.wait(5.0)
    wait_until(channel.has_priority_event)
    # The consumer records what the barrier overtook on its side as input channel state.
    assert [b.column("i")[0].as_py() for b in channel.queued_buffers()] == [0, 1]
    first = channel.poll()
    assert first.is_priority and first.event == UNALIGNED
    assert not channel.has_priority_event()
    rest = [describe(e) for e in read_all(channel, listener)]
    assert rest == [("buffer", i) for i in range(5)] + [("event", EndOfPartition())]


def test_convert_to_priority_event_moves_a_received_barrier_ahead(manager, open_channel):
    partition = ResultPartition("p", 1)
    partition.emit(0, batch(0))
    partition.emit(0, batch(1))
    partition.emit_event(0, CheckpointBarrier(1, 0))  # sequence number 2
    manager.register(partition)
    channel, listener = open_channel("p", credit=3)
    channel.start()
    wait_until(lambda: partition.queued_buffers() == 0 and len(channel.queued_buffers()) == 2)
    time.sleep(0.1)  # the barrier follows the buffers on the same stream

    channel.convert_to_priority_event(2)
    channel.convert_to_priority_event(99)  # not there: no-op
    assert channel.has_priority_event()
    first = channel.poll()
    assert first.event == CheckpointBarrier(1, 0) and first.is_priority
    partition.finish()
    assert [describe(e) for e in read_all(channel, listener)] == [
        ("buffer", 0),
        ("buffer", 1),
        ("event", EndOfPartition()),
    ]


def test_consumer_may_connect_before_the_partition_is_registered(manager, open_channel):
    channel, listener = open_channel("late", credit=2, wait=10.0)
    started = threading.Event()
    errors: list[BaseException] = []

    def start() -> None:
        try:
            channel.start()
        except BaseException as e:  # noqa: BLE001 - asserted below
            errors.append(e)
        started.set()

    threading.Thread(target=start).start()
    time.sleep(0.6)
    assert not started.is_set()  # still waiting for the producer
    partition = ResultPartition("late", 1)
    manager.register(partition)
    assert started.wait(5.0) and errors == []
    partition.emit(0, batch(1))
    partition.finish()
    assert [describe(e) for e in read_all(channel, listener)] == [("buffer", 1), ("event", EndOfPartition())]


def test_partition_that_never_appears_raises_partition_not_found(open_channel):
    channel, _ = open_channel("missing", wait=0.8)
    started = time.monotonic()
    with pytest.raises(PartitionNotFoundError, match="missing"):
        channel.start()
    assert time.monotonic() - started < 5.0


def test_consumer_retries_until_the_producer_node_is_up(secret, open_channel):
    port = free_port()
    manager = ResultPartitionManager()
    partition = ResultPartition("p", 1)
    partition.emit(0, batch(5))
    partition.finish()
    manager.register(partition)
    channel, listener = open_channel("p", address=f"grpc+tcp://127.0.0.1:{port}", wait=10.0)
    node = FlightNode(secret, data_server=PartitionRequestServer(manager), port=port)
    timer = threading.Timer(0.7, node.start)
    timer.start()
    try:
        channel.start()
        assert [describe(e) for e in read_all(channel, listener)] == [("buffer", 5), ("event", EndOfPartition())]
    finally:
        timer.join()
        node.shutdown()


def test_wrong_secret_is_rejected(manager, open_channel):
    manager.register(ResultPartition("p", 1))
    channel, _ = open_channel("p", key=generate_secret())
    with pytest.raises(RpcAuthenticationError):
        channel.start()


def test_producer_failure_is_reported_as_broken_channel(manager, open_channel):
    partition = ResultPartition("p", 1)
    manager.register(partition)
    channel, listener = open_channel("p")
    channel.start()
    partition.emit(0, batch(0))
    assert describe(poll_next(channel, listener)) == ("buffer", 0)
    partition.release(RuntimeError("operator crashed"))
    with pytest.raises(BrokenChannelError, match="operator crashed"):
        poll_next(channel, listener)


def test_node_shutdown_breaks_open_streams(secret):
    manager = ResultPartitionManager()
    partition = ResultPartition("p", 1)
    manager.register(partition)
    node = FlightNode(secret, data_server=PartitionRequestServer(manager))
    node.start()
    channel = RemoteInputChannel(0, node.address, secret, "p", 0)
    listener = Listener()
    channel.set_data_listener(listener)
    try:
        channel.start()
        started = time.monotonic()
        node.shutdown()
        assert time.monotonic() - started < 5.0
        with pytest.raises(BrokenChannelError):
            poll_next(channel, listener)
    finally:
        channel.close()
        node.shutdown()


def test_close_cancels_the_stream_and_releases_the_producer(manager, open_channel):
    partition = ResultPartition("p", 1, buffers_per_subpartition=2)
    manager.register(partition)
    channel, listener = open_channel("p", credit=1)
    channel.start()
    for i in range(4):
        partition.emit(0, batch(i))
    assert not partition.is_available()
    wait_until(lambda: len(channel.queued_buffers()) == 1)
    channel.close()
    channel.close()  # idempotent
    with pytest.raises(ClosedChannelError):
        channel.poll()
    # The server noticed the cancellation and released its reader: the producer is not held back.
    wait_until(partition.is_available)
    partition.emit(0, batch(9))
    assert partition.queued_buffers() == 0


def test_close_before_start_and_start_after_close(open_channel):
    channel, _ = open_channel("never")
    channel.close()
    with pytest.raises(ClosedChannelError):
        channel.start()


def test_invalid_arguments_are_rejected(secret):
    with pytest.raises(ValueError, match="initial_credit"):
        RemoteInputChannel(0, "grpc+tcp://127.0.0.1:1", secret, "p", 0, initial_credit=0)


# -- cross-process: SIGKILL of the producer ---------------------------------------------


def _producer_process(secret: bytes, connection) -> None:
    """Child: a FlightNode serving an endless partition (back-pressured), until killed."""
    manager = ResultPartitionManager()
    partition = ResultPartition("remote/p", 1, buffers_per_subpartition=4)
    available = threading.Event()
    partition.set_availability_listener(available.set)
    manager.register(partition)
    node = FlightNode(secret, data_server=PartitionRequestServer(manager))
    node.start()
    connection.send(node.address)
    i = 0
    while True:
        while not partition.is_available():
            available.wait(0.5)
            available.clear()
        partition.emit(0, batch(i, rows=1000))
        i += 1


@pytest.mark.slow
def test_sigkill_of_the_producer_process_breaks_the_channel_quickly(secret):
    context = multiprocessing.get_context("spawn")
    parent_end, child_end = context.Pipe()
    child = context.Process(target=_producer_process, args=(secret, child_end), daemon=True)
    child.start()
    channel = None
    try:
        assert parent_end.poll(20), "the producer process did not start"
        address = parent_end.recv()
        channel = RemoteInputChannel(0, address, secret, "remote/p", 0, initial_credit=2)
        listener = Listener()
        channel.set_data_listener(listener)
        channel.start()
        for i in range(50):
            assert describe(poll_next(channel, listener)) == ("buffer", i)

        os.kill(child.pid, signal.SIGKILL)
        killed = time.monotonic()
        with pytest.raises(BrokenChannelError):
            while True:  # drains what already arrived, then must fail
                poll_next(channel, listener, timeout=5.0)
        assert time.monotonic() - killed < 5.0
    finally:
        if channel is not None:
            channel.close()
        if child.is_alive():
            child.kill()
        child.join(5)
