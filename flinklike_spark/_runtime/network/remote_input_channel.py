"""Input channels between processes: credit-based flow control over Arrow Flight ``DoExchange``.

A :class:`RemoteInputChannel` (consumer side) opens one ``DoExchange`` stream
to the producer's :class:`~flinklike_spark._runtime.rpc.FlightNode`, whose
:class:`~flinklike_spark._runtime.network.partition_server.PartitionRequestServer` attaches a
:class:`~flinklike_spark._runtime.network.result_partition.SubpartitionReader`
and forwards the subpartition's buffers and events (Flink's
``PartitionRequestQueue`` / ``CreditBasedPartitionRequestClientHandler``).

Flow control (Flink's credit-based protocol):
    * The consumer announces its number of free receive slots as *credit*:
      ``initial_credit`` when it connects, then the non-priority elements its
      task polled, in batches: once half the initial credit is owed, or when
      its receive queue runs empty (so the producer is never left waiting on
      credit the consumer holds back). The process's :class:`CreditSender`
      thread writes them; the task thread only marks the channel due.
    * The server sends a non-priority element (data buffer or ordinary event)
      only while it holds credit, spending 1 per element (from the call's
      thread when data arrives, from the credit reader when credit arrives);
      elements are sent strictly in subpartition order, so an event queued
      behind a buffer waits with it. Priority events (unaligned barriers, announcements, which the
      producer put at the head of its queue) need no credit and go at once;
      the consumer puts them at the head of its receive queue, after earlier
      priority events.
    * Hence per channel at most ``initial_credit`` non-priority elements are
      in flight or queued at the consumer, whatever the producer's rate; the
      rest stays in the producer's subpartition, whose fill level
      back-pressures the producing task.

The wire format is in :mod:`flinklike_spark._runtime.network.wire_format`.

Failure semantics: a producer process that dies, a broken connection, or a
node shutdown make :meth:`RemoteInputChannel.poll` raise
:class:`~flinklike_spark.errors.BrokenChannelError` (immediately, ahead of
data still queued: the task fails anyway). A producer partition released with
a cause is reported the same way. There is no TCP keepalive: a host that
vanishes without closing its sockets is detected by the JobMaster's heartbeats,
which cancel the task and thereby :meth:`RemoteInputChannel.close` the channel.
"""

from __future__ import annotations

import logging
import queue
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.flight as flight

from flinklike_spark._runtime.network import wire_format as wire
from flinklike_spark._runtime.network.events import BufferOrEvent, EndOfPartition, decode_event
from flinklike_spark._runtime.network.input_gate import InputChannel
from flinklike_spark._runtime.rpc import auth_token, call_options, connect_options, translate_flight_error
from flinklike_spark.errors import (
    BrokenChannelError,
    ClosedChannelError,
    EventDecodingError,
    NetworkError,
    RpcAuthenticationError,
)

__all__ = ["CreditSender", "RemoteInputChannel"]

_log = logging.getLogger(__name__)


class CreditSender:
    """Writes credit announcements of remote input channels on one thread (Netty's event-loop role).

    A task thread that polled a channel only marks it due (:meth:`schedule`:
    a put on a C-level queue, which takes no Python lock and never waits);
    this thread then announces everything the channel owes by then, so
    announcements coalesce while it is busy. Task threads thus never make the
    Flight write, which releases the GIL and would leave a busy task waiting
    for it behind the process's other threads.

    Thread rules: :meth:`schedule` from any thread; the caller schedules a
    channel at most once until its ``send_owed_credit`` ran. The daemon
    thread starts with the sender (the shared one on first use) and lives as
    long as the process. A channel
    must tolerate ``send_owed_credit`` after it closed.
    """

    _shared: CreditSender | None = None
    _shared_lock = threading.Lock()

    def __init__(self, name: str = "credit-sender") -> None:
        self._due: queue.SimpleQueue[RemoteInputChannel] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @classmethod
    def shared(cls) -> CreditSender:
        """The process-wide sender."""
        with cls._shared_lock:
            if cls._shared is None:
                cls._shared = CreditSender()
            return cls._shared

    def schedule(self, channel: RemoteInputChannel) -> None:
        """Have ``channel.send_owed_credit()`` called soon on the sender thread."""
        self._due.put(channel)

    def _run(self) -> None:
        while True:
            channel = self._due.get()
            try:
                channel.send_owed_credit()
            except Exception:  # noqa: BLE001 - one channel's bug must not stop every channel's credit
                _log.exception("credit announcement of %r failed", channel)


@dataclass(slots=True)
class _Received:
    element: BufferOrEvent
    costs_credit: bool


class RemoteInputChannel(InputChannel):
    """Reads one subpartition of a partition in another process over Arrow Flight.

    Args:
        channel_index: position within the gate.
        address: the producer's :attr:`FlightNode.address`.
        secret: the per-cluster secret.
        partition_id: the producing partition.
        subpartition: the subpartition to read.
        initial_credit: receive slots of this channel (``>= 1``): at most this
            many non-priority elements are in flight or queued here.
        partition_wait_timeout: seconds :meth:`start` waits for the producer's
            node to come up *and* for the partition to be registered there.

    Contract (see :class:`InputChannel`): :meth:`start` once, on the task
    thread, blocking until the producer attached the subpartition; then
    :meth:`poll` (never blocks) from the task thread; :meth:`close` from any
    thread, idempotent. A background thread receives into the bounded queue
    and calls the data listener when the queue goes from empty to non-empty,
    when a priority event arrives, and when an error becomes pending.

    Raises (from :meth:`start`):
        PartitionNotFoundError: the partition was not registered in time.
        RpcAuthenticationError: the producer rejected the cluster secret.
        BrokenChannelError: the producer's node was not reachable in time.
        ClosedChannelError: the channel was closed.
    """

    def __init__(
        self,
        channel_index: int,
        address: str,
        secret: bytes,
        partition_id: str,
        subpartition: int,
        *,
        initial_credit: int = 2,
        partition_wait_timeout: float = 30.0,
    ) -> None:
        super().__init__(channel_index)
        if initial_credit < 1:
            raise ValueError(f"initial_credit must be >= 1, got {initial_credit}")
        if subpartition < 0:
            raise ValueError(f"subpartition must be >= 0, got {subpartition}")
        if partition_wait_timeout < 0:
            raise ValueError(f"partition_wait_timeout must be >= 0 seconds, got {partition_wait_timeout}")
        self.address = address
        self.partition_id = partition_id
        self.subpartition = subpartition
        self.initial_credit = initial_credit
        self._token = auth_token(secret)
        self._partition_wait_timeout = partition_wait_timeout
        self._cond = threading.Condition()
        self._queue: deque[_Received] = deque()
        self._num_priority = 0  # priority elements at the head of _queue
        self._num_credited = 0  # non-priority elements in _queue
        self._error: NetworkError | None = None
        self._attached = False
        self._started = False
        self._closed = False
        self._end_received = False  # EndOfPartition arrived: no more credit is announced
        self._jumped: dict[int, list[pa.RecordBatch]] = {}  # priority event seq -> data it jumped here
        self._owed_credit = 0  # polled non-priority elements not yet announced as credit
        self._credit_batch = max(1, initial_credit // 2)
        self._credit_scheduled = False  # the sender has this channel due: owed credit goes with it
        self._credit_sender = CreditSender.shared()  # writes this channel's credit announcements
        self._write_lock = threading.Lock()
        self._write_closed = False
        self._client: flight.FlightClient | None = None
        self._flight_writer = None
        self._flight_reader = None
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        return (
            f"RemoteInputChannel({self.channel_index}, {self.address}, {self.partition_id!r}, "
            f"subpartition={self.subpartition})"
        )

    # -- task thread ---------------------------------------------------------------

    def start(self) -> None:
        """Connect (retrying while the producer's node is not up) and attach the subpartition.

        Blocks up to about ``partition_wait_timeout`` seconds. Idempotent once it succeeded.

        Raises:
            See the class docstring.
        """
        with self._cond:
            if self._closed:
                raise ClosedChannelError(f"{self!r} is closed")
            if not self._started:
                self._started = True
                self._thread = threading.Thread(
                    target=self._receive, name=f"remote-channel-{self.partition_id}[{self.subpartition}]", daemon=True
                )
                self._thread.start()
            # The receiver enforces the timeout; the margin only guards against a hung peer.
            deadline = time.monotonic() + self._partition_wait_timeout + 30.0
            while not self._attached and self._error is None and not self._closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self._error = BrokenChannelError(
                        f"{self!r}: the producer did not answer within {self._partition_wait_timeout + 30.0:g} s"
                    )
                    break
                self._cond.wait(min(remaining, wire.WAIT_SLICE))
            if self._closed:
                raise ClosedChannelError(f"{self!r} was closed while starting")
            if self._error is not None and not self._attached:
                raise self._fresh_error()

    def poll(self) -> BufferOrEvent | None:
        """Pop the next element, or ``None``; returns the credit of non-priority elements (batched).

        Raises:
            ClosedChannelError: the channel was closed (by this side).
            BrokenChannelError: the producer died, the connection broke, the
                producer's node shut down, or the producer partition failed.
            PartitionNotFoundError, RpcAuthenticationError: as from :meth:`start`.
        """
        with self._cond:
            if self._closed:
                raise ClosedChannelError(f"{self!r} is closed")
            if self._error is not None:
                raise self._fresh_error()
            if not self._queue:
                return None
            item = self._queue.popleft()
            if item.element.is_priority:
                self._num_priority -= 1
            schedule = False
            if item.costs_credit:
                self._num_credited -= 1
                if not self._end_received:
                    self._owed_credit += 1
                    if not self._credit_scheduled and (self._owed_credit >= self._credit_batch or not self._queue):
                        schedule = self._credit_scheduled = True
        if schedule:
            # The write happens on the sender thread: a Flight write releases the GIL, and a
            # task thread that releases it waits for it behind every other thread of the process.
            self._credit_sender.schedule(self)
        return item.element

    def has_priority_event(self) -> bool:
        """True if the next element :meth:`poll` returns is a priority event."""
        with self._cond:
            return self._num_priority > 0 and self._error is None and not self._closed

    def convert_to_priority_event(self, sequence_number: int) -> None:
        """Move the queued element with producer ``sequence_number`` ahead of queued data.

        Used when an aligned-with-timeout checkpoint switches to unaligned and
        the announced barrier is already in this receive queue. A no-op if that
        element was consumed, is already a priority element, or has not arrived.
        The moved element still returns its credit when polled.
        """
        with self._cond:
            for index in range(self._num_priority, len(self._queue)):
                item = self._queue[index]
                if item.element.sequence_number == sequence_number:
                    self._remember_jumped(sequence_number, self._num_priority, until=index)
                    del self._queue[index]
                    item.element = replace(item.element, is_priority=True)
                    self._queue.insert(self._num_priority, item)
                    self._num_priority += 1
                    break
            else:
                return
        self.notify_data_available()

    def _remember_jumped(self, sequence_number: int, start: int, until: int | None = None) -> None:
        # Caller holds _cond. Only events are remembered (barriers); the map stays tiny.
        items = list(self._queue)[start:until]
        self._jumped[sequence_number] = [i.element.buffer for i in items if i.element.buffer is not None]

    def take_jumped_buffers(self, sequence_number: int) -> list[pa.RecordBatch]:
        """The data buffers the priority event ``sequence_number`` jumped in this receive queue.

        Those arrived before it on the wire (they precede it) but are delivered
        after it; an unaligned checkpoint records them as input channel state.
        Buffers that arrived after the event are not included. Forgets the entry.
        """
        with self._cond:
            return self._jumped.pop(sequence_number, [])

    def queued_buffers(self) -> list[pa.RecordBatch]:
        """The data buffers received but not yet polled, in producer order (a snapshot).

        They precede any priority event queued ahead of them, so an unaligned
        checkpoint records them as input channel state.
        """
        with self._cond:
            return [item.element.buffer for item in self._queue if item.element.buffer is not None]

    def resume_consumption(self) -> None:
        """Nothing to do: credit flows back as the task polls, so a blocked channel just pauses."""

    def close(self) -> None:
        """Cancel the stream and stop the receiver thread; idempotent, any thread, any state."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._queue.clear()
            self._num_priority = self._num_credited = 0
            self._cond.notify_all()
            reader = self._flight_reader
        if reader is not None:
            try:
                reader.cancel()
            except wire.FLIGHT_ERRORS:
                pass
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(5.0)
            if thread.is_alive():
                _log.warning("receiver thread of %r did not stop within 5 s", self)

    # -- receiver thread -------------------------------------------------------------

    def _receive(self) -> None:
        try:
            if self._connect():
                self._read_loop()
        except BaseException as e:  # noqa: BLE001 - errors cross to the task thread as values
            if not isinstance(e, NetworkError):
                e = BrokenChannelError(f"{self!r}: receiver failed: {e!r}")
            self._fail(e)
        finally:
            self._close_client()

    def _connect(self) -> bool:
        """Open the stream and wait for ATTACHED; retries while the peer is unreachable."""
        deadline = time.monotonic() + self._partition_wait_timeout
        backoff = 0.05
        descriptor = flight.FlightDescriptor.for_path(
            wire.PROTOCOL,
            self.partition_id.encode("utf-8"),
            str(self.subpartition).encode(),
            str(int(self._partition_wait_timeout * 1000)).encode(),
        )
        while True:
            with self._cond:
                if self._closed:
                    return False
            remaining = deadline - time.monotonic()
            try:
                client = flight.FlightClient(
                    self.address, generic_options=connect_options(max(0.1, min(remaining, 10.0)))
                )
                writer, reader = client.do_exchange(descriptor, call_options(self._token))
                with self._write_lock:
                    self._client, self._flight_writer, self._write_closed = client, writer, False
                with self._cond:
                    self._flight_reader = reader
                    closed = self._closed
                if closed:
                    return False
                self._write(wire.CREDIT.pack(wire.MSG_CREDIT, self.initial_credit))
                chunk = reader.read_chunk()
            except StopIteration:
                raise BrokenChannelError(f"{self!r}: the producer ended the stream before attaching") from None
            except wire.FLIGHT_ERRORS as e:
                with self._cond:
                    if self._closed:
                        return False
                error = translate_flight_error(e, self.address, f"subpartition request {self.partition_id!r}")
                if isinstance(error, RpcAuthenticationError):
                    raise error from e
                self._close_client()
                if time.monotonic() + backoff > deadline:
                    raise BrokenChannelError(
                        f"{self!r}: could not connect within {self._partition_wait_timeout:g} s: {error}"
                    ) from e
                with self._cond:
                    self._cond.wait_for(lambda: self._closed, backoff)
                backoff = min(backoff * 2, 1.0)
                continue
            kind = self._handle(chunk)
            if kind == wire.ATTACHED:
                with self._cond:
                    self._attached = True
                    self._cond.notify_all()
                return True
            if kind is None:  # ERROR or CLOSING already recorded
                return False
            raise BrokenChannelError(f"{self!r}: expected ATTACHED, got {wire.KIND_NAMES.get(kind, kind)}")

    def _read_loop(self) -> None:
        reader = self._flight_reader
        while True:
            try:
                chunk = reader.read_chunk()
            except StopIteration:
                with self._cond:
                    ended = self._end_received or self._closed
                if not ended:
                    raise BrokenChannelError(f"{self!r}: the producer ended the stream before EndOfPartition") from None
                return
            except wire.FLIGHT_ERRORS as e:
                with self._cond:
                    if self._closed:
                        return
                raise translate_flight_error(e, self.address, f"stream of {self.partition_id!r}") from e
            if self._handle(chunk) is None:
                return

    def _handle(self, chunk) -> int | None:
        """Process one server message; returns its kind, or None after ERROR/CLOSING (recorded)."""
        metadata = chunk.app_metadata
        if metadata is None or metadata.size < wire.HEADER.size:
            raise BrokenChannelError(f"{self!r}: malformed message from the producer")
        kind, flags, sequence_number = wire.HEADER.unpack_from(metadata)
        payload = metadata.slice(wire.HEADER.size)
        priority = bool(flags & wire.FLAG_PRIORITY)
        if kind == wire.BUFFER:
            batch = pa.ipc.open_stream(payload).read_next_batch()
            self._enqueue(BufferOrEvent(buffer=batch, is_priority=priority, sequence_number=sequence_number))
        elif kind == wire.BUFFERS:
            (count,) = wire.COUNT.unpack_from(payload)
            numbers = struct.unpack_from(f"<{count}q", payload, wire.COUNT.size)
            batches = pa.ipc.open_stream(payload.slice(wire.COUNT.size + 8 * count))
            for number in numbers:
                self._enqueue(BufferOrEvent(buffer=batches.read_next_batch(), sequence_number=number))
        elif kind == wire.EVENT:
            try:
                event = decode_event(payload.to_pybytes())
            except EventDecodingError as e:
                raise BrokenChannelError(f"{self!r}: undecodable event from the producer: {e}") from e
            element = BufferOrEvent(event=event, is_priority=priority, sequence_number=sequence_number)
            if isinstance(event, EndOfPartition):
                with self._cond:
                    self._end_received = True
                self._half_close()
            self._enqueue(element)
        elif kind == wire.ERROR:
            type_name, _, message = payload.to_pybytes().decode("utf-8", "replace").partition("\n")
            error_type = wire.WIRE_ERRORS.get(type_name, BrokenChannelError)
            self._half_close()
            self._fail(error_type(f"{self!r}: {message}"))
            return None
        elif kind == wire.CLOSING:
            self._half_close()
            reason = payload.to_pybytes().decode("utf-8", "replace")
            self._fail(BrokenChannelError(f"{self!r}: {reason}"))
            return None
        elif kind != wire.ATTACHED:
            raise BrokenChannelError(f"{self!r}: unknown message kind {kind} from the producer")
        return kind

    def _enqueue(self, element: BufferOrEvent) -> None:
        item = _Received(element, wire.costs_credit(element))
        with self._cond:
            if self._closed:
                return
            was_empty = not self._queue
            if element.is_priority:
                self._remember_jumped(element.sequence_number, self._num_priority)
                self._queue.insert(self._num_priority, item)
                self._num_priority += 1
            else:
                if self._num_credited >= self.initial_credit:
                    raise BrokenChannelError(
                        f"{self!r}: the producer sent more than the announced credit "
                        f"({self.initial_credit} receive slots)"
                    )
                self._queue.append(item)
                self._num_credited += 1
        if was_empty or element.is_priority:
            self.notify_data_available()

    def _fail(self, error: NetworkError) -> None:
        with self._cond:
            if self._closed or self._error is not None:
                return
            self._error = error
            self._cond.notify_all()
        self.notify_data_available()

    def _fresh_error(self) -> NetworkError:
        # A new instance per raise, so tracebacks do not pile up on one object.
        error = self._error
        fresh = type(error)(str(error))
        fresh.__cause__ = error.__cause__
        return fresh

    # -- writing (sender thread for credit, receiver thread for half-close) ---------------

    def _write(self, message: bytes) -> None:
        with self._write_lock:
            if self._write_closed or self._flight_writer is None:
                return
            self._flight_writer.write_metadata(pa.py_buffer(message))

    def send_owed_credit(self) -> None:
        """Announce the credit owed so far (called by the :class:`CreditSender` thread)."""
        with self._cond:
            amount, self._owed_credit = self._owed_credit, 0
            self._credit_scheduled = False
            if self._closed or self._end_received or not amount:
                return
        self._announce_credit(amount)

    def _announce_credit(self, amount: int) -> None:
        try:
            self._write(wire.CREDIT.pack(wire.MSG_CREDIT, amount))
        except wire.FLIGHT_ERRORS as e:
            with self._cond:
                closed = self._closed
            if not closed:
                self._fail(translate_flight_error(e, self.address, f"credit announcement for {self.partition_id!r}"))

    def _half_close(self) -> None:
        with self._write_lock:
            if self._write_closed or self._flight_writer is None:
                return
            self._write_closed = True
            try:
                self._flight_writer.done_writing()
            except wire.FLIGHT_ERRORS:
                pass  # the server is gone already

    def _close_client(self) -> None:
        with self._write_lock:
            self._write_closed = True
            client, self._client = self._client, None
            writer, self._flight_writer = self._flight_writer, None
            if writer is not None:
                # Finish the call before closing the client; otherwise the stream's
                # destructor finishes it later and logs the client's cancellation.
                try:
                    writer.close()
                except wire.FLIGHT_ERRORS:
                    pass
        with self._cond:
            self._flight_reader = None
        if client is not None:
            try:
                client.close()
            except wire.FLIGHT_ERRORS:
                pass
