"""PartitionRequestServer: the producer side of remote input channels.

Serves the subpartitions of one process's result partitions to consumers in
other processes, one Arrow Flight ``DoExchange`` stream per consumer, sending
data only against the consumer's credit (Flink's ``PartitionRequestQueue``).
The protocol is described in
:mod:`flinklike_spark._runtime.network.remote_input_channel`, the bytes in
:mod:`flinklike_spark._runtime.network.wire_format`.
"""

from __future__ import annotations

import logging
import threading
import time

import pyarrow as pa
import pyarrow.flight as flight

from flinklike_spark._runtime.network import wire_format as wire
from flinklike_spark._runtime.network.events import BufferOrEvent, EndOfPartition
from flinklike_spark._runtime.network.partition_manager import ResultPartitionManager
from flinklike_spark._runtime.network.result_partition import SubpartitionReader
from flinklike_spark.errors import (
    BrokenChannelError,
    ClosedChannelError,
    NetworkError,
    PartitionNotFoundError,
    ProducerFailedError,
)

__all__ = ["PartitionRequestServer"]

_log = logging.getLogger(__name__)

_MAX_COALESCED = 16  # data buffers per BUFFERS message: one Flight write and one wake-up instead of 16
_MAX_PARTITION_WAIT = 3600.0
_DRAIN_TIMEOUT = 10.0  # how long a finishing server call waits for the consumer to half-close


class PartitionRequestServer:
    """Serves subpartition streams of one process's partitions; plugged into a FlightNode.

    A :class:`~flinklike_spark._runtime.rpc.FlightNode` given it as its
    ``data_server`` calls :meth:`serve` for every ``DoExchange``
    (after authentication), on Flight's threads, one call per consumer.

    Thread rules: :meth:`serve` runs concurrently for many streams; each
    stream additionally uses one helper thread that reads the consumer's
    credit and itself sends what new credit allows (both threads send, one
    at a time, in subpartition order). :meth:`close` (node shutdown) may be
    called from any thread and makes every running :meth:`serve` return
    promptly.
    """

    def __init__(self, partition_manager: ResultPartitionManager) -> None:
        self._partition_manager = partition_manager
        self._lock = threading.Lock()
        self._streams: set[_SubpartitionStream] = set()
        self._closed = False

    def serve(self, context, descriptor: flight.FlightDescriptor, reader, writer) -> None:
        """Stream one subpartition to the consumer until ``EndOfPartition``, an error, or close."""
        stream = _SubpartitionStream(self._partition_manager, context, reader, writer)
        with self._lock:
            if self._closed:
                writer.write_metadata(pa.py_buffer(wire.header(wire.CLOSING) + b"data server is shut down"))
                return
            self._streams.add(stream)
        try:
            stream.run(descriptor)
        finally:
            with self._lock:
                self._streams.discard(stream)

    def close(self) -> None:
        """Stop every stream (consumers see a broken channel); idempotent."""
        with self._lock:
            self._closed = True
            streams = list(self._streams)
        for stream in streams:
            stream.stop()


class _SubpartitionStream:
    """One DoExchange call: sends a subpartition's elements against the consumer's credit."""

    def __init__(self, partition_manager: ResultPartitionManager, context, reader, writer) -> None:
        self._partition_manager = partition_manager
        self._context = context
        self._reader = reader
        self._writer = writer
        self._cond = threading.Condition()
        self._signalled = False  # data, credit or a state change since the last check
        self._credit = 0
        self._consumer_gone = False  # the consumer half-closed, cancelled or died
        self._stopping = False
        self._credit_thread: threading.Thread | None = None
        self._name = "?"
        self._send_lock = threading.Lock()  # taking an element and writing it are one step
        # Every write to the Flight writer, data or control (ERROR, CLOSING): two threads writing at
        # once abort the process inside Arrow (seen: CLOSING from the call's thread while the credit
        # reader sent data).
        self._write_lock = threading.Lock()
        self._subpartition_reader: SubpartitionReader | None = None  # set once attached
        self._finished = False  # EndOfPartition was sent (guarded by _send_lock)

    # listener and control (any thread)

    def _signal(self) -> None:
        with self._cond:
            self._signalled = True
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._signalled = True
            self._cond.notify()

    def _ended(self) -> bool:
        """Stopped, or the consumer is known to be gone (cheap: the send loop asks per message)."""
        return self._stopping or self._consumer_gone

    def _should_end(self) -> bool:
        """:meth:`_ended`, or gRPC cancelled the call.

        ``is_cancelled`` is a C++ call that holds the GIL while it takes gRPC's
        locks; asked per message it cost the keyed-count benchmark ~11% of its
        GIL time, so the send loop asks it only after a wait timed out (the
        credit reader notices a departed consumer first anyway).
        """
        return self._ended() or self._context.is_cancelled()

    # the call

    def run(self, descriptor: flight.FlightDescriptor) -> None:
        subpartition_reader: SubpartitionReader | None = None
        try:
            request = self._parse(descriptor)
            if request is None:
                return
            partition_id, subpartition, wait = request
            self._name = f"{partition_id!r}[{subpartition}]"
            self._credit_thread = threading.Thread(
                target=self._read_credit, name=f"flight-credit-{self._name}", daemon=True
            )
            self._credit_thread.start()
            partition = self._await_partition(partition_id, wait)
            if partition is None:
                return
            try:
                subpartition_reader = partition.create_reader(subpartition, self._signal)
            except (IndexError, NetworkError) as e:
                self._send_error(e)
                return
            self._send(pa.py_buffer(wire.header(wire.ATTACHED)))
            self._pump(subpartition_reader)
        except wire.FLIGHT_ERRORS as e:
            # The consumer went away while we wrote: nothing to tell it.
            _log.debug("stream %s ended by the consumer: %s", self._name, e)
        finally:
            if subpartition_reader is not None:
                # A consumer that left must not keep its producer back-pressured.
                subpartition_reader.release_reader()
            self._drain()

    def _parse(self, descriptor: flight.FlightDescriptor) -> tuple[str, int, float] | None:
        path = descriptor.path or []
        try:
            if len(path) != 4 or path[0] != wire.PROTOCOL:
                raise ValueError(f"expected path [{wire.PROTOCOL!r}, partition_id, subpartition, wait_ms]")
            partition_id = path[1].decode("utf-8")
            subpartition = int(path[2])
            wait = min(max(int(path[3]) / 1000.0, 0.0), _MAX_PARTITION_WAIT)
        except (ValueError, TypeError, UnicodeDecodeError) as e:
            self._send_error(BrokenChannelError(f"malformed subpartition request {path!r}: {e}"))
            return None
        return partition_id, subpartition, wait

    def _await_partition(self, partition_id: str, wait: float):
        deadline = time.monotonic() + wait
        while True:
            remaining = deadline - time.monotonic()
            try:
                return self._partition_manager.get(partition_id, timeout=max(0.0, min(remaining, wire.WAIT_SLICE)))
            except ProducerFailedError as e:  # released before the consumer asked: no need to wait
                self._send_error(e)
                return None
            except PartitionNotFoundError as e:
                if self._should_end():
                    self._send_closing_if_stopping()
                    return None
                if remaining <= wire.WAIT_SLICE:
                    known = e.args[0].partition("registered partitions: ")[2] or "[]"
                    self._send_error(
                        PartitionNotFoundError(
                            f"result partition {partition_id!r} was not registered at the producer within "
                            f"{wait:g} s; registered partitions: {known}"
                        )
                    )
                    return None

    def _pump(self, subpartition_reader: SubpartitionReader) -> None:
        """Send on data and state changes until EndOfPartition went out or the stream ends.

        Credit arriving while data waits is served by the credit reader itself
        (:meth:`_read_credit`), so a credit reaches the wire without waking
        this thread too: in a busy process every wake-up waits for the GIL.
        """
        with self._cond:
            self._subpartition_reader = subpartition_reader
        while True:
            with self._cond:
                if self._ended():
                    break
                self._signalled = False  # cleared before looking, so no wake-up is lost
            if self._send_available():
                return
            with self._cond:
                while not self._signalled and not self._ended():
                    if not self._cond.wait(wire.WAIT_SLICE) and self._context.is_cancelled():
                        self._consumer_gone = True
        self._send_closing_if_stopping()

    def _send_available(self) -> bool:
        """Send everything the credit covers, in subpartition order; True once EndOfPartition is sent.

        Called by the call's thread and by the credit reader; ``_send_lock``
        keeps taking an element and writing it one step, so order holds.
        """
        with self._send_lock:
            subpartition_reader = self._subpartition_reader
            while not self._finished:
                with self._cond:
                    if self._ended():
                        return False
                    credit = self._credit
                element = self._next_sendable(subpartition_reader, credit)
                if element is None:
                    return False
                if not wire.costs_credit(element):
                    self._send(wire.encode_element(element))
                    continue
                batch, overtaker = [element], None
                if element.is_buffer:
                    # Coalesce the data buffers the credit covers: the per-message cost
                    # (a Flight write, a receiver wake-up) dominates small buffers.
                    more, overtaker = self._more_buffers(subpartition_reader, element, min(credit, _MAX_COALESCED) - 1)
                    batch += more
                with self._cond:
                    self._credit -= len(batch)
                self._send(wire.encode_element(element) if len(batch) == 1 else wire.encode_buffers(batch))
                if overtaker is not None:  # a priority event: the consumer puts it ahead of these buffers
                    self._send(wire.encode_element(overtaker))
                if not element.is_buffer and isinstance(element.event, EndOfPartition):
                    self._finished = True
            return True

    @staticmethod
    def _more_buffers(
        reader: SubpartitionReader, first: BufferOrEvent, limit: int
    ) -> tuple[list[BufferOrEvent], BufferOrEvent | None]:
        """Up to ``limit`` further queued non-priority data buffers with ``first``'s schema.

        Also returns a priority event that got to the head between peek and
        poll (it was polled, so it must be sent; it needs no credit).
        """
        more: list[BufferOrEvent] = []
        schema = first.buffer.schema
        while len(more) < limit:
            head = reader.peek()
            if head is None or not head.is_buffer or head.is_priority or not head.buffer.schema.equals(schema):
                break
            element = reader.poll()
            if element is not head:
                return more, element
            more.append(element)
        return more, None

    def _next_sendable(self, subpartition_reader: SubpartitionReader, credit: int) -> BufferOrEvent | None:
        head = subpartition_reader.peek()
        if head is None:
            if subpartition_reader.partition.is_released:
                try:
                    subpartition_reader.poll()  # raises the release cause
                except (BrokenChannelError, ClosedChannelError) as e:
                    self._send_partition_error(e)
                    with self._cond:
                        self._consumer_gone = True  # nothing more to send; end the call
            return None
        if wire.costs_credit(head) and credit <= 0:
            return None
        # Only priority events can get ahead of ``head`` meanwhile, and they need no credit.
        try:
            return subpartition_reader.poll()
        except (BrokenChannelError, ClosedChannelError) as e:
            self._send_partition_error(e)
            with self._cond:
                self._consumer_gone = True
            return None

    def _read_credit(self) -> None:
        try:
            while True:
                chunk = self._reader.read_chunk()
                metadata = chunk.app_metadata
                if metadata is None or metadata.size != wire.CREDIT.size:
                    raise BrokenChannelError(f"malformed consumer message on stream {self._name}")
                kind, amount = wire.CREDIT.unpack(metadata)
                if kind != wire.MSG_CREDIT or amount < 0:
                    raise BrokenChannelError(f"unknown consumer message kind {kind} / amount {amount}")
                with self._cond:
                    self._credit += amount
                    attached = self._subpartition_reader is not None
                    if not attached:
                        self._signalled = True
                        self._cond.notify()
                if attached and self._send_available():
                    self._signal()  # EndOfPartition went out: the call can return
        except StopIteration:
            pass  # the consumer half-closed: it needs nothing more
        except (*wire.FLIGHT_ERRORS, NetworkError) as e:
            _log.debug("credit reader of stream %s ended: %s", self._name, e)
        finally:
            with self._cond:
                self._consumer_gone = True
                self._cond.notify()

    def _drain(self) -> None:
        # The Flight reader must not be in use when the call returns (pyarrow 26 aborts
        # the process: "pure virtual method called"), so wait until the consumer
        # half-closes (it does after EndOfPartition, ERROR or CLOSING) or the call is
        # cancelled or broken, which ends the credit reader's read. A consumer that is
        # alive but frozen keeps this call (and a node shutdown) waiting; it is warned about.
        thread = self._credit_thread
        if thread is None:
            return
        deadline = time.monotonic() + _DRAIN_TIMEOUT
        while thread.is_alive():
            thread.join(wire.WAIT_SLICE)
            if thread.is_alive() and time.monotonic() > deadline and not self._context.is_cancelled():
                _log.warning("consumer of stream %s did not close its side within %s s", self._name, _DRAIN_TIMEOUT)
                deadline = time.monotonic() + _DRAIN_TIMEOUT

    def _send(self, message: pa.Buffer) -> None:
        with self._write_lock:
            self._writer.write_metadata(message)

    def _send_error(self, error: BaseException) -> None:
        text = f"{type(error).__name__}\n{error}"
        try:
            self._send(pa.py_buffer(wire.header(wire.ERROR) + text.encode("utf-8", "replace")))
        except wire.FLIGHT_ERRORS:
            pass  # the consumer is gone: nobody to tell

    def _send_partition_error(self, error: NetworkError) -> None:
        kind = ProducerFailedError if isinstance(error, ProducerFailedError) else BrokenChannelError
        self._send_error(kind(f"producer partition {self._name} failed: {error}"))

    def _send_closing_if_stopping(self) -> None:
        if self._stopping:
            try:
                self._send(pa.py_buffer(wire.header(wire.CLOSING) + b"the producer's data server is shutting down"))
            except wire.FLIGHT_ERRORS:
                pass
