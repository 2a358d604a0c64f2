"""The input side of a task: input channels and the InputGate that merges them.

An :class:`InputGate` reads one logical input of a task (one JobEdge) from
``N`` :class:`InputChannel` objects, one per producing subtask. Channels are
*listener based*: a channel calls its data listener (from any thread) when it
goes from "nothing to read" to "something to read" (data, an event, a priority
event, or an error to report); the gate keeps a queue of such channels and
:meth:`InputGate.poll_next` only touches channels that may have data. Nothing
here polls in a loop or blocks: the task's mailbox waits on the gate's data
listener.

Selection order of :meth:`InputGate.poll_next`:
    1. Priority events (unaligned barriers, announcements) of any channel,
       even a blocked one, before anything else.
    2. Otherwise one element from the next channel with data, round-robin
       (a channel that delivered goes to the back of the queue), skipping
       blocked channels until they are resumed.

Blocking is the aligned-checkpoint mechanism: the barrier handler calls
:meth:`InputGate.block_channel` for a channel that delivered barrier *n* and
:meth:`InputGate.resume_all` when alignment completes.

Thread rules: ``start``, ``poll_next``, ``block_channel`` and ``resume_*``
are called by the owning task thread; data listeners fire on any thread and
only touch the gate's lock-protected queue. ``close`` may be called from any
thread: cancelling a task closes its gates, which interrupts a task thread
blocked in ``start`` (waiting for a partition or a connection); the task
thread then sees :class:`ClosedChannelError`.
"""

from __future__ import annotations

import abc
import threading
from collections import deque
from collections.abc import Callable, Sequence

import pyarrow as pa

from flinklike_spark._runtime.network.events import BufferOrEvent, EndOfPartition
from flinklike_spark._runtime.network.partition_manager import ResultPartitionManager
from flinklike_spark._runtime.network.result_partition import SubpartitionReader
from flinklike_spark.errors import ClosedChannelError

__all__ = ["InputChannel", "InputGate", "LocalInputChannel"]

Listener = Callable[[], None]


class InputChannel(abc.ABC):
    """One producer subpartition as seen by a consumer.

    Subclasses (:class:`LocalInputChannel`; ``RemoteInputChannel`` over Arrow
    Flight) implement the abstract methods under this contract:

    * ``start()`` is called once, by the task thread, before any ``poll``; it
      may block (e.g. waiting for the partition or a connection) and raises
      on failure.
    * ``poll()`` never blocks: it returns the next element or ``None``. Errors
      (producer failed, connection broken) are raised from ``poll``, after
      the data listener was called so the consumer notices them.
    * The data listener (installed with :meth:`set_data_listener` before
      ``start``) is called from any thread whenever the channel may have gone
      from empty to non-empty, a priority event arrived, or an error is
      pending. Spurious calls are allowed, missed ones are not: after the
      listener fires, ``poll`` must eventually return an element or raise.
    * ``resume_consumption()`` is called when the gate unblocks the channel
      after an aligned checkpoint (a remote channel re-announces credit).
    * ``close()`` is idempotent, releases resources, and may be called from
      any state (also without ``start``) and from any thread; it makes a
      ``start()`` blocked in another thread raise ``ClosedChannelError``
      promptly (cancellation must not wait for a timeout).

    Attributes:
        channel_index: position of this channel within its gate.
    """

    def __init__(self, channel_index: int) -> None:
        self.channel_index = channel_index
        self._data_listener: Listener | None = None

    def set_data_listener(self, listener: Listener | None) -> None:
        """Install the callback fired when data may be available (see class contract)."""
        self._data_listener = listener

    def notify_data_available(self) -> None:
        """Call the data listener, if any. For subclasses; safe from any thread."""
        listener = self._data_listener
        if listener is not None:
            listener()

    @abc.abstractmethod
    def start(self) -> None:
        """Connect to the producer; may block; called once before :meth:`poll`."""

    @abc.abstractmethod
    def poll(self) -> BufferOrEvent | None:
        """Return the next buffer or event, or ``None`` if none is available now. Never blocks."""

    def has_priority_event(self) -> bool:
        """True if the next element is a priority event. The default has none."""
        return False

    def resume_consumption(self) -> None:  # noqa: B027 - intentionally a no-op default
        """Re-enable delivery after the gate blocked the channel. Default: nothing to do."""

    @abc.abstractmethod
    def convert_to_priority_event(self, sequence_number: int) -> None:
        """Move the announced event ``sequence_number`` ahead of the data queued before it.

        Aligned-with-timeout switching to unaligned: the buffers the event
        jumps are kept for :meth:`take_jumped_buffers`. A no-op if the event
        was already consumed.
        """

    @abc.abstractmethod
    def take_jumped_buffers(self, sequence_number: int) -> list[pa.RecordBatch]:
        """The buffers priority event ``sequence_number`` jumped in this channel, forgotten once taken.

        They arrived before the event, so an unaligned checkpoint records them
        as input channel state. Empty when it jumped nothing here.
        """

    @abc.abstractmethod
    def close(self) -> None:
        """Release the channel; idempotent."""


class LocalInputChannel(InputChannel):
    """Reads a subpartition of a partition in this process, handing batches over in memory.

    Args:
        channel_index: position within the gate.
        partition_manager: where the producer registers its partition.
        partition_id: the producing partition.
        subpartition: the subpartition to read.
        partition_wait_timeout: seconds :meth:`start` waits for the partition
            to be registered before raising ``PartitionNotFoundError``.
    """

    def __init__(
        self,
        channel_index: int,
        partition_manager: ResultPartitionManager,
        partition_id: str,
        subpartition: int,
        *,
        partition_wait_timeout: float = 30.0,
    ) -> None:
        super().__init__(channel_index)
        self.partition_id = partition_id
        self.subpartition = subpartition
        self._partition_manager = partition_manager
        self._partition_wait_timeout = partition_wait_timeout
        self._reader: SubpartitionReader | None = None
        self._closed = False
        self._lock = threading.Lock()  # start() and close() may race (cancellation)
        self._jumped: dict[int, list] = {}

    def __repr__(self) -> str:
        return f"LocalInputChannel({self.channel_index}, {self.partition_id!r}, subpartition={self.subpartition})"

    def start(self) -> None:
        """Wait for the partition and attach a reader to the subpartition.

        Raises:
            PartitionNotFoundError: the partition did not appear in time.
            ProducerFailedError: the producer already released the partition.
            ClosedChannelError: the channel was closed (also while waiting).
        """
        if self._closed:
            raise ClosedChannelError(f"{self!r} is closed")
        if self._reader is not None:
            return
        partition = self._partition_manager.get(
            self.partition_id, timeout=self._partition_wait_timeout, cancelled=lambda: self._closed
        )
        with self._lock:
            if self._closed:
                raise ClosedChannelError(f"{self!r} was closed while starting")
            self._reader = partition.create_reader(self.subpartition, self.notify_data_available)

    def poll(self) -> BufferOrEvent | None:
        """Pop the next element of the subpartition (see :meth:`SubpartitionReader.poll`)."""
        if self._closed:
            raise ClosedChannelError(f"{self!r} is closed")
        reader = self._reader
        if reader is None:
            return None
        return reader.poll()

    def has_priority_event(self) -> bool:
        reader = self._reader
        return reader is not None and not self._closed and reader.has_priority_event()

    def convert_to_priority_event(self, sequence_number: int) -> None:
        """Move the announced event ahead of queued data in the producer's subpartition.

        The data buffers it jumped are kept for :meth:`take_jumped_buffers`. A
        no-op if the event was already consumed.
        """
        reader = self._reader
        if reader is None or self._closed:
            return
        jumped = reader.partition.convert_to_priority_event(self.subpartition, sequence_number)
        if jumped is not None:
            self._jumped[sequence_number] = jumped

    def take_jumped_buffers(self, sequence_number: int) -> list[pa.RecordBatch]:
        """The buffers a *converted* priority event jumped (see :meth:`convert_to_priority_event`).

        A priority event the producer inserted jumps nothing here: the producer
        records what it overtook as its output channel state. Forgets the entry.
        """
        return self._jumped.pop(sequence_number, [])

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            reader = self._reader
        if reader is not None:
            reader.release_reader()
        else:
            self._partition_manager.wake_waiters()  # a start() may be waiting for the partition


class InputGate:
    """Merges the channels of one task input; see the module docstring for ordering.

    Args:
        gate_index: position of this gate among the task's inputs.
        channels: the channels; ``channels[i].channel_index`` should be ``i``
            and is what :meth:`poll_next` reports.
    """

    def __init__(self, gate_index: int, channels: Sequence[InputChannel]) -> None:
        self.gate_index = gate_index
        self._channels = list(channels)
        n = len(self._channels)
        self._lock = threading.Lock()
        self._queue: deque[int] = deque()  # channels that may have data, round-robin order
        self._queued = [False] * n
        self._priority: deque[int] = deque()  # channels that signalled a priority event
        self._blocked = [False] * n
        self._blocked_with_data: set[int] = set()
        self._finished = [False] * n
        self._num_finished = 0
        self._data_listener: Listener | None = None
        self._started = False
        self._closed = False
        for index, channel in enumerate(self._channels):
            channel.set_data_listener(self._make_channel_listener(index))

    def __repr__(self) -> str:
        return f"InputGate({self.gate_index}, channels={len(self._channels)})"

    @property
    def num_channels(self) -> int:
        """Number of input channels."""
        return len(self._channels)

    @property
    def channels(self) -> list[InputChannel]:
        """The channels, in index order (a copy of the list)."""
        return list(self._channels)

    def set_data_listener(self, listener: Listener | None) -> None:
        """Install the callback fired (any thread) when any channel may have data.

        Fires immediately if data is already pending, so no wake-up is lost.
        """
        with self._lock:
            self._data_listener = listener
            pending = bool(self._queue or self._priority)
        if pending and listener is not None:
            listener()

    def start(self) -> None:
        """Start every channel (may block while partitions/connections come up); idempotent."""
        if self._closed:
            raise ClosedChannelError(f"{self!r} is closed")
        if self._started:
            return
        self._started = True
        for channel in self._channels:
            channel.start()

    def poll_next(self) -> tuple[int, BufferOrEvent] | None:
        """Return ``(channel_index, element)`` of the next element, or ``None``. Never blocks.

        :class:`EndOfPartition` is returned like any event (the caller counts
        them); afterwards that channel is finished and never polled again.

        Raises:
            ClosedChannelError: the gate was closed.
            Exception: whatever a channel's ``poll`` raised (e.g.
                ``BrokenChannelError`` when the producer failed).
        """
        # 1. Priority events, whatever the channel's blocked state.
        polled = self.poll_priority()
        if polled is not None:
            return polled
        # 2. Round-robin over channels with data.
        while True:
            with self._lock:
                if not self._queue:
                    return None
                index = self._queue.popleft()
                self._queued[index] = False
                if self._finished[index]:
                    continue
                if self._blocked[index]:
                    self._blocked_with_data.add(index)
                    continue
            element = self._poll_channel(index)
            if element is None:
                continue  # drained; its listener re-queues it when data arrives
            if not self._finished[index]:
                self._enqueue(index)  # more may follow: back of the round-robin queue
            return index, element

    def poll_priority(self) -> tuple[int, BufferOrEvent] | None:
        """Return ``(channel_index, event)`` of a pending priority event, or ``None``. Never blocks.

        Lets a task take an unaligned barrier while it is still working through
        an earlier buffer.

        Raises:
            ClosedChannelError: the gate was closed.
        """
        if self._closed:
            raise ClosedChannelError(f"{self!r} is closed")
        while True:
            with self._lock:
                if not self._priority:
                    return None
                index = self._priority.popleft()
            channel = self._channels[index]
            if self._finished[index] or not channel.has_priority_event():
                continue
            element = self._poll_channel(index)
            if element is not None:
                return index, element

    def block_channel(self, channel_index: int) -> None:
        """Stop delivering elements of ``channel_index`` (priority events still pass)."""
        self._check_index(channel_index)
        with self._lock:
            self._blocked[channel_index] = True

    def resume_channel(self, channel_index: int) -> None:
        """Deliver elements of ``channel_index`` again and call its ``resume_consumption``."""
        self._check_index(channel_index)
        with self._lock:
            was_blocked = self._blocked[channel_index]
            self._blocked[channel_index] = False
            if channel_index in self._blocked_with_data:
                self._blocked_with_data.discard(channel_index)
                if not self._queued[channel_index]:
                    self._queued[channel_index] = True
                    self._queue.append(channel_index)
        if was_blocked:
            self._channels[channel_index].resume_consumption()

    def resume_all(self) -> None:
        """Resume every blocked channel (end of an alignment)."""
        for index in range(len(self._channels)):
            if self._blocked[index]:
                self.resume_channel(index)

    def is_blocked(self, channel_index: int) -> bool:
        """True if ``channel_index`` is blocked."""
        self._check_index(channel_index)
        return self._blocked[channel_index]

    def is_channel_finished(self, channel_index: int) -> bool:
        """True once ``channel_index`` delivered :class:`EndOfPartition`."""
        return self._finished[channel_index]

    def is_finished(self) -> bool:
        """True once every channel delivered :class:`EndOfPartition` through :meth:`poll_next`."""
        return self._num_finished == len(self._channels)

    def close(self) -> None:
        """Close every channel; idempotent, any thread. Errors of individual channels are raised after all closed."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        first_error: BaseException | None = None
        for channel in self._channels:
            try:
                channel.close()
            except Exception as e:  # noqa: BLE001 - close the others first, then report
                first_error = first_error or e
        if first_error is not None:
            raise first_error

    # -- internals -----------------------------------------------------------------

    def _check_index(self, channel_index: int) -> None:
        if not 0 <= channel_index < len(self._channels):
            raise IndexError(f"channel {channel_index} out of range for {self!r}")

    def _make_channel_listener(self, index: int) -> Listener:
        def on_data() -> None:
            self._on_channel_data(index)

        return on_data

    def _on_channel_data(self, index: int) -> None:
        # Called from any thread. Checking has_priority_event here (not in
        # poll_next) keeps poll_next O(1) when there are many channels.
        channel = self._channels[index]
        priority = channel.has_priority_event()
        with self._lock:
            if priority:
                self._priority.append(index)
            if not self._queued[index]:
                self._queued[index] = True
                self._queue.append(index)
            listener = self._data_listener
        if listener is not None:
            listener()

    def _enqueue(self, index: int) -> None:
        with self._lock:
            if not self._queued[index]:
                self._queued[index] = True
                self._queue.append(index)

    def _poll_channel(self, index: int) -> BufferOrEvent | None:
        try:
            element = self._channels[index].poll()
        except BaseException:
            self._enqueue(index)  # keep reporting the failure on the next poll
            raise
        if element is not None and not element.is_buffer and isinstance(element.event, EndOfPartition):
            self._finished[index] = True
            self._num_finished += 1
        return element
