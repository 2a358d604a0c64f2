"""The output side of a task: a ResultPartition with one queue per consumer subtask.

A :class:`ResultPartition` holds ``num_subpartitions`` FIFO queues of
:class:`~flinklike_spark._runtime.network.events.BufferOrEvent` (Flink's
``PipelinedSubpartition``). The producing task appends buffers and events; one
:class:`SubpartitionReader` per subpartition (a local input channel, or the
data server feeding a remote channel) pops them.

Backpressure is cooperative and never blocks inside this module:
:meth:`ResultPartition.emit` always succeeds (a producer may *overdraft* past
the capacity while it finishes one input batch), and the producer checks
:meth:`ResultPartition.is_available` before taking more input. When consumers
drain a full subpartition below its capacity the *availability listener* fires,
so the producer's mailbox can wake up instead of polling.

Priority events (unaligned barriers, announcements) go to the head of a queue,
after earlier priority events and before all queued data
(``PipelinedSubpartition.processPriorityBuffer``): the data they overtake is
returned to the caller, which writes it as output channel state; those buffers
are still delivered to the consumer after the event.

Thread rules: every method is thread-safe (one lock per partition). Listeners
are always invoked *without* the lock held, on whichever thread caused the
transition (producer, consumer, or the thread calling :meth:`release`); they
must be cheap and must not block (e.g. ``mailbox.wake`` or ``Event.set``).
"""

from __future__ import annotations

import dataclasses
import threading
from collections import deque
from collections.abc import Callable

import pyarrow as pa

from flinklike_spark._runtime.network.events import BufferOrEvent, EndOfPartition, RuntimeEvent
from flinklike_spark.errors import ClosedChannelError, NetworkError, ProducerFailedError

__all__ = ["ResultPartition", "SubpartitionReader", "released_partition_error"]

Listener = Callable[[], None]


def released_partition_error(partition_id: str, cause: BaseException | None) -> ProducerFailedError:
    """What a consumer of the released partition ``partition_id`` raises (chained to ``cause``).

    A :class:`ProducerFailedError`, so the consumer ends CANCELED and only the
    producer's failure (or the cancellation) is reported.
    """
    if cause is None:
        error = ProducerFailedError(f"partition {partition_id!r} was released: its producer was cancelled or ended")
    else:
        error = ProducerFailedError(f"partition {partition_id!r} was released by its producer: {cause!r}")
    error.__cause__ = cause
    return error


class _Subpartition:
    """Queue state of one subpartition; guarded by the owning partition's lock."""

    __slots__ = (
        "data_buffers",
        "finished",
        "num_bytes",
        "num_priority",
        "queue",
        "reader",
        "reader_released",
        "sequence_number",
    )

    def __init__(self) -> None:
        # Entries are (element, nbytes); nbytes is 0 for events.
        self.queue: deque[tuple[BufferOrEvent, int]] = deque()
        self.num_priority = 0  # priority events at the head of ``queue``
        self.data_buffers = 0
        self.num_bytes = 0
        self.sequence_number = 0
        self.finished = False  # EndOfPartition was enqueued
        self.reader: SubpartitionReader | None = None
        self.reader_released = False  # the consumer went away: drop further output

    def next_sequence_number(self) -> int:
        number = self.sequence_number
        self.sequence_number += 1
        return number


class ResultPartition:
    """Bounded (by convention), never-blocking output queues of one producing subtask.

    Args:
        partition_id: unique id, e.g. ``"<job>/<vertex>/<subtask>/<attempt>"``.
        num_subpartitions: number of consumer queues (``>= 1``).
        buffers_per_subpartition: capacity in *data buffers* per subpartition;
            events never count against it.
        availability_listener: see :meth:`set_availability_listener`.

    Contract:
        * Call order for a producer: any number of ``emit``/``emit_event``/
          ``broadcast_event``/``add_priority_event``, then ``finish()`` once.
          Emitting after ``finish()`` raises :class:`ClosedChannelError`.
        * After :meth:`release`, producer calls raise :class:`ClosedChannelError`
          (chained to the release cause) and readers raise as documented on
          :meth:`SubpartitionReader.poll`.
        * Output to a subpartition whose reader was released
          (:meth:`SubpartitionReader.release_reader`) is silently dropped, so a
          cancelled consumer never keeps its producer back-pressured.
    """

    def __init__(
        self,
        partition_id: str,
        num_subpartitions: int,
        *,
        buffers_per_subpartition: int = 10,
        availability_listener: Listener | None = None,
    ) -> None:
        if num_subpartitions < 1:
            raise ValueError(f"num_subpartitions must be >= 1, got {num_subpartitions}")
        if buffers_per_subpartition < 1:
            raise ValueError(f"buffers_per_subpartition must be >= 1, got {buffers_per_subpartition}")
        self.partition_id = partition_id
        self.num_subpartitions = num_subpartitions
        self.buffers_per_subpartition = buffers_per_subpartition
        self._lock = threading.Lock()
        self._subpartitions = [_Subpartition() for _ in range(num_subpartitions)]
        self._num_full = 0  # subpartitions holding >= capacity data buffers
        self._availability_listener = availability_listener
        self._finished = False
        self._released = False
        self._release_cause: BaseException | None = None

    def __repr__(self) -> str:
        return (
            f"ResultPartition({self.partition_id!r}, subpartitions={self.num_subpartitions}, "
            f"queued_buffers={self.queued_buffers()})"
        )

    # -- producer side ---------------------------------------------------------

    def emit(self, subpartition: int, batch: pa.RecordBatch) -> None:
        """Append a data buffer to ``subpartition``. Never blocks, even above capacity.

        Raises:
            IndexError: ``subpartition`` is out of range.
            ClosedChannelError: the partition is finished or released.
        """
        nbytes = batch.nbytes
        with self._lock:
            sub = self._writable(subpartition)
            if sub.reader_released:
                return
            was_empty = not sub.queue
            element = BufferOrEvent(buffer=batch, sequence_number=sub.next_sequence_number())
            sub.queue.append((element, nbytes))
            sub.data_buffers += 1
            sub.num_bytes += nbytes
            if sub.data_buffers == self.buffers_per_subpartition:
                self._num_full += 1
            listener = sub.reader.data_listener if was_empty and sub.reader is not None else None
        if listener is not None:
            listener()

    def emit_event(self, subpartition: int, event: RuntimeEvent) -> int:
        """Append ``event`` to ``subpartition`` behind queued data (in order); return its sequence number.

        Emitting :class:`EndOfPartition` this way ends only that subpartition;
        prefer :meth:`finish`.

        Raises:
            IndexError: ``subpartition`` is out of range.
            ClosedChannelError: the subpartition is finished or the partition released.
        """
        with self._lock:
            sub = self._writable(subpartition)
            listener = self._append_event(sub, event)
            sequence_number = sub.sequence_number - 1
        if listener is not None:
            listener()
        return sequence_number

    def convert_to_priority_event(self, subpartition: int, sequence_number: int) -> list[pa.RecordBatch] | None:
        """Move the queued event with ``sequence_number`` ahead of queued data (aligned-with-timeout switch).

        Returns:
            The data buffers it jumped, in queue order (the consumer records them
            as input channel state: they precede the barrier but were not
            consumed), or None if no such event is queued (already consumed).
        """
        with self._lock:
            sub = self._subpartitions[subpartition]
            for index in range(sub.num_priority, len(sub.queue)):
                element, nbytes = sub.queue[index]
                if element.sequence_number == sequence_number and element.buffer is None:
                    jumped = [e.buffer for e, _ in list(sub.queue)[sub.num_priority : index] if e.buffer is not None]
                    del sub.queue[index]
                    sub.queue.insert(sub.num_priority, (dataclasses.replace(element, is_priority=True), nbytes))
                    sub.num_priority += 1
                    listener = sub.reader.data_listener if sub.reader is not None else None
                    break
            else:
                return None
        if listener is not None:
            listener()
        return jumped

    def broadcast_event(self, event: RuntimeEvent) -> None:
        """Append ``event`` to every subpartition, behind queued data.

        Raises:
            ClosedChannelError: the partition is finished or released.
        """
        with self._lock:
            subs = [self._writable(index) for index in range(self.num_subpartitions)]
            listeners = [self._append_event(sub, event) for sub in subs]
        for listener in listeners:
            if listener is not None:
                listener()

    def add_priority_event(self, subpartition: int, event: RuntimeEvent) -> list[pa.RecordBatch]:
        """Put ``event`` at the head of ``subpartition``, overtaking queued data.

        The event goes after earlier, not yet consumed priority events and
        before every queued data buffer and ordinary event. The reader's data
        listener is always notified.

        Returns:
            The data buffers the event overtook, in queue order. They stay
            queued and are delivered after the event; the caller persists them
            as output channel state. Empty if the consumer already went away.

        Raises:
            IndexError: ``subpartition`` is out of range.
            ClosedChannelError: the subpartition is finished or the partition released.
        """
        with self._lock:
            sub = self._writable(subpartition)
            if sub.reader_released:
                return []
            element = BufferOrEvent(event=event, is_priority=True, sequence_number=sub.next_sequence_number())
            overtaken = [
                entry.buffer
                for index, (entry, _) in enumerate(sub.queue)
                if index >= sub.num_priority and entry.buffer is not None
            ]
            sub.queue.insert(sub.num_priority, (element, 0))
            sub.num_priority += 1
            listener = sub.reader.data_listener if sub.reader is not None else None
        if listener is not None:
            listener()
        return overtaken

    def finish(self) -> None:
        """Enqueue :class:`EndOfPartition` on every subpartition; idempotent.

        Raises:
            ClosedChannelError: the partition was released.
        """
        with self._lock:
            if self._released:
                self._writable(0)
            if self._finished:
                return
            listeners = [self._append_event(sub, EndOfPartition()) for sub in self._subpartitions if not sub.finished]
            self._finished = True
        for listener in listeners:
            if listener is not None:
                listener()

    def release(self, cause: BaseException | None = None) -> None:
        """Drop all queued data and fail readers; idempotent (the first cause wins).

        Readers' data listeners and the availability listener are notified so
        that blocked consumers and producers wake up and observe the release:
        :meth:`SubpartitionReader.poll` then raises :class:`ProducerFailedError`
        (chained to ``cause``, which is None when the producer was cancelled) unless the
        reader already consumed :class:`EndOfPartition`; producer calls raise
        :class:`ClosedChannelError`.
        """
        with self._lock:
            if self._released:
                return
            self._released = True
            self._release_cause = cause
            listeners: list[Listener] = []
            for sub in self._subpartitions:
                sub.queue.clear()
                sub.num_priority = sub.data_buffers = sub.num_bytes = 0
                if sub.reader is not None:
                    listeners.append(sub.reader.data_listener)
            self._num_full = 0
            if self._availability_listener is not None:
                listeners.append(self._availability_listener)
        for listener in listeners:
            listener()

    # -- availability and metrics ------------------------------------------------

    def is_available(self) -> bool:
        """True when every subpartition holds fewer than ``buffers_per_subpartition`` data buffers.

        Also True once released, so a waiting producer proceeds and observes
        the release on its next emit.
        """
        return self._num_full == 0

    def set_availability_listener(self, listener: Listener | None) -> None:
        """Install the callback fired whenever the partition becomes available again.

        It fires on the thread that drained the last full subpartition below
        capacity (a consumer's poll, or a released reader) and on release.
        It does not fire for the initial, already-available state.
        """
        with self._lock:
            self._availability_listener = listener

    def queued_buffers(self) -> int:
        """Number of data buffers queued over all subpartitions."""
        with self._lock:
            return sum(sub.data_buffers for sub in self._subpartitions)

    def queued_bytes(self) -> int:
        """Arrow bytes (``RecordBatch.nbytes``) of the queued data buffers."""
        with self._lock:
            return sum(sub.num_bytes for sub in self._subpartitions)

    @property
    def is_finished(self) -> bool:
        """True once :meth:`finish` was called."""
        return self._finished

    @property
    def is_released(self) -> bool:
        """True once :meth:`release` was called."""
        return self._released

    # -- consumer side -------------------------------------------------------------

    def create_reader(self, subpartition: int, data_listener: Listener) -> SubpartitionReader:
        """Attach the single reader of ``subpartition``.

        ``data_listener`` is called (any thread, no lock held) when data or an
        event is added to the empty queue, when a priority event is added, on
        release, and once right here if the queue already holds elements, so
        that the consumer never misses a wake-up.

        Raises:
            IndexError: ``subpartition`` is out of range.
            NetworkError: the subpartition already has (or had) a reader; a
                pipelined subpartition is consumed once.
        """
        with self._lock:
            sub = self._subpartition(subpartition)
            if sub.reader is not None or sub.reader_released:
                raise NetworkError(
                    f"subpartition {subpartition} of partition {self.partition_id!r} already has a reader"
                )
            reader = SubpartitionReader(self, subpartition, data_listener)
            sub.reader = reader
            notify = bool(sub.queue) or self._released
        if notify:
            data_listener()
        return reader

    # -- internals (called with or for the lock) -----------------------------------

    def _subpartition(self, index: int) -> _Subpartition:
        if not 0 <= index < self.num_subpartitions:
            raise IndexError(
                f"subpartition {index} out of range for partition {self.partition_id!r} "
                f"with {self.num_subpartitions} subpartitions"
            )
        return self._subpartitions[index]

    def _writable(self, index: int) -> _Subpartition:
        sub = self._subpartition(index)
        if self._released:
            raise ClosedChannelError(
                f"partition {self.partition_id!r} was released"
                + (f": {self._release_cause!r}" if self._release_cause is not None else "")
            ) from self._release_cause
        if sub.finished:
            raise ClosedChannelError(f"subpartition {index} of partition {self.partition_id!r} is finished")
        return sub

    def _append_event(self, sub: _Subpartition, event: RuntimeEvent) -> Listener | None:
        if isinstance(event, EndOfPartition):
            sub.finished = True
        if sub.reader_released:
            return None
        was_empty = not sub.queue
        sub.queue.append((BufferOrEvent(event=event, sequence_number=sub.next_sequence_number()), 0))
        return sub.reader.data_listener if was_empty and sub.reader is not None else None

    def _poll(self, reader: SubpartitionReader) -> BufferOrEvent | None:
        listener: Listener | None = None
        with self._lock:
            sub = self._subpartitions[reader.subpartition]
            if reader._released:
                raise ClosedChannelError(
                    f"reader of subpartition {reader.subpartition} of {self.partition_id!r} was released"
                )
            if reader._finished:
                return None
            if self._released:
                raise released_partition_error(self.partition_id, self._release_cause)
            if not sub.queue:
                return None
            element, nbytes = sub.queue.popleft()
            if element.is_priority:
                sub.num_priority -= 1
            if element.buffer is not None:
                if sub.data_buffers == self.buffers_per_subpartition:
                    self._num_full -= 1
                    if self._num_full == 0:
                        listener = self._availability_listener
                sub.data_buffers -= 1
                sub.num_bytes -= nbytes
            elif isinstance(element.event, EndOfPartition):
                reader._finished = True
        if listener is not None:
            listener()
        return element

    def _peek(self, reader: SubpartitionReader) -> BufferOrEvent | None:
        with self._lock:
            sub = self._subpartitions[reader.subpartition]
            if reader._released or reader._finished or self._released or not sub.queue:
                return None
            return sub.queue[0][0]

    def _has_priority_event(self, reader: SubpartitionReader) -> bool:
        with self._lock:
            return self._subpartitions[reader.subpartition].num_priority > 0 and not self._released

    def _release_reader(self, reader: SubpartitionReader) -> None:
        listener: Listener | None = None
        with self._lock:
            if reader._released:
                return
            reader._released = True
            sub = self._subpartitions[reader.subpartition]
            sub.reader_released = True
            if sub.data_buffers >= self.buffers_per_subpartition:
                self._num_full -= 1
                if self._num_full == 0:
                    listener = self._availability_listener
            sub.queue.clear()
            sub.num_priority = sub.data_buffers = sub.num_bytes = 0
        if listener is not None:
            listener()


class SubpartitionReader:
    """The single consumer view of one subpartition (Flink's ``ResultSubpartitionView``).

    Created by :meth:`ResultPartition.create_reader`. Thread rules: methods are
    thread-safe, but the reader is meant to be polled by one consumer thread.
    """

    def __init__(self, partition: ResultPartition, subpartition: int, data_listener: Listener) -> None:
        self.partition = partition
        self.subpartition = subpartition
        self.data_listener = data_listener
        self._finished = False
        self._released = False

    def __repr__(self) -> str:
        return f"SubpartitionReader({self.partition.partition_id!r}, {self.subpartition})"

    def poll(self) -> BufferOrEvent | None:
        """Pop the next element, or return ``None`` if the queue is empty. Never blocks.

        Popping a data buffer that takes the partition's last full
        subpartition below capacity fires the availability listener. After
        :class:`EndOfPartition` was returned, :attr:`is_finished` is True and
        ``poll`` returns ``None`` forever.

        Raises:
            ProducerFailedError: the partition was released (the producer
                failed or was cancelled); ``__cause__`` is the release cause.
            ClosedChannelError: this reader was released.
        """
        return self.partition._poll(self)

    def peek(self) -> BufferOrEvent | None:
        """The element :meth:`poll` would return next, without removing it (``None`` if none).

        Lets a credit-based sender check whether the next element needs credit.
        Errors are reported by :meth:`poll`, not here.
        """
        return self.partition._peek(self)

    def has_priority_event(self) -> bool:
        """True if a priority event is queued (it is then at the head)."""
        return self.partition._has_priority_event(self)

    @property
    def is_finished(self) -> bool:
        """True once :class:`EndOfPartition` was polled."""
        return self._finished

    def release_reader(self) -> None:
        """Detach the consumer: drop queued data and discard further output; idempotent.

        Fires the availability listener if this unblocks the producer.
        """
        self.partition._release_reader(self)
