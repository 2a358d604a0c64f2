"""The reader of one KafkaSource subtask: a librdkafka consumer with manually assigned partitions.

No consumer-group membership is used (``assign``, never ``subscribe``): the
engine decides which subtask reads which partition (``split_owner``), and the
positions live in checkpoints. Each ``poll_next`` returns the records of one
partition (so the source operator can keep per-partition watermarks), with
Kafka's record timestamps. Partition discovery runs on a daemon thread (metadata
requests may block); the task thread only picks up its results.

A consumer whose fetcher stalls is replaced. librdkafka's consumer with
assigned partitions sometimes stops fetching after its broker restarts, while
the broker has records for it (confluentinc/librdkafka#5153; a new consumer
reads on): when a split has fetched nothing for ``_STALL_TIMEOUT_S`` and the
broker's end offset of its partition is past both the split's position and the
consumer's (which moves past transaction markers), the reader closes the
consumer and assigns its splits to a new one at their positions. If the new one
fetches nothing either (a transaction that stays open holds a ``read_committed``
consumer before the end offset), the next replacement waits twice as long, up to
``_MAX_STALL_TIMEOUT_S``; a fetch resets the wait.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from collections.abc import Collection
from typing import Any, Protocol

import pyarrow as pa

from connectors.kafka.offsets import (
    EARLIEST_OFFSET,
    KafkaOffsetResetStrategy,
    KafkaTopicPartition,
    OffsetsInitializerKind,
)
from connectors.kafka.source_options import KafkaSourceOptions
from connectors.kafka.splits import NO_STOPPING_OFFSET, KafkaPartitionSplit, split_owner
from flinklike_spark.common.watermark_strategy import MIN_WATERMARK
from flinklike_spark.connector_api import ReadResult, SourceReader, SourceReaderContext
from flinklike_spark.errors import ConfigurationError, FlinklikeError, MalformedRecordError


class ReadableKafkaSource(Protocol):
    """What a reader uses of its :class:`~connectors.kafka.source.KafkaSource` (which creates it)."""

    options: KafkaSourceOptions

    def consumer_config(self, client_id: str = "") -> dict[str, Any]: ...

    def list_partitions(self, timeout: float = 30.0) -> list[KafkaTopicPartition]: ...


__all__ = ["KafkaSourceError", "KafkaSourceReader", "ReadableKafkaSource"]

_log = logging.getLogger(__name__)
#: After an empty fetch the task polls again in 5 ms, doubling while fetches stay empty, up to 20 ms: an
#: idle reader made 200 fetches a second at a fixed 5 ms, a record arriving after a pause waits 20 ms at most.
_EMPTY_POLL_WAIT_S = 0.005
_EMPTY_POLL_MAX_WAIT_S = 0.02
_MAX_MESSAGES_PER_FETCH = 10_000
#: How long closing waits for the consumer (the Java client's default close timeout is 30 s).
_CLOSE_TIMEOUT_SECONDS = 10.0
#: A split that fetched nothing for this long while its partition has records past its position has stalled.
_STALL_TIMEOUT_S = 20.0
_MAX_STALL_TIMEOUT_S = 600.0
#: How long asking the broker for a partition's end offset may take (the task thread waits for it).
_END_OFFSET_TIMEOUT_S = 2.0


class KafkaSourceError(FlinklikeError, RuntimeError):
    """The Kafka consumer reported an error that is not transient (the task fails and restarts)."""


class _Split:
    __slots__ = ("topic", "partition", "split_id", "next_offset", "stopping_offset")

    def __init__(self, split: KafkaPartitionSplit) -> None:
        self.topic = split.topic
        self.partition = split.partition
        self.split_id = split.split_id
        self.next_offset = split.next_offset
        self.stopping_offset = split.stopping_offset

    @property
    def finished(self) -> bool:
        return self.stopping_offset != NO_STOPPING_OFFSET and self.next_offset >= self.stopping_offset

    def snapshot(self) -> KafkaPartitionSplit:
        return KafkaPartitionSplit(
            split_id=self.split_id, topic=self.topic, partition=self.partition,
            next_offset=self.next_offset, stopping_offset=self.stopping_offset,
        )  # fmt: skip


class KafkaSourceReader(SourceReader):
    """Reads the partitions (splits) one subtask owns; see the module docstring."""

    def __init__(self, source: ReadableKafkaSource, context: SourceReaderContext) -> None:
        self._source = source
        self._context = context
        self._splits: dict[str, _Split] = {}
        # (split id, batch, timestamps, offset after the batch), consumed but not returned yet
        self._pending: collections.deque[tuple[str, pa.RecordBatch, pa.Array, int]] = collections.deque()
        self._pending_per_split: collections.Counter[str] = collections.Counter()
        self._offsets_to_commit: dict[int, list[tuple[str, int, int]]] = {}
        self._consumer = None
        self._discovered: queue.SimpleQueue[list[KafkaTopicPartition]] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._discovery_thread: threading.Thread | None = None
        self._active_ids: frozenset[str] = frozenset()
        self._paused: set[str] = set()  # watermark alignment: splits not read until resumed
        self._empty_wait = _EMPTY_POLL_WAIT_S
        self._last_fetch: dict[str, float] = {}  # split id -> when it last fetched (or was first checked)
        self._next_stall_check = 0.0
        self._stall_timeout = _STALL_TIMEOUT_S
        self._stalled: set[str] = set()  # the splits the last replacement of the consumer was for

    # -- lifecycle -------------------------------------------------------------------------------------

    def add_splits(self, splits: list[KafkaPartitionSplit]) -> None:
        for split in splits:
            self._splits[split.split_id] = _Split(split)
        self._refresh_active()

    def open(self) -> None:
        options = self._source.options
        self._consumer = self._new_consumer()
        self._assign([s for s in self._splits.values() if not s.finished])
        if options.discovery_interval is not None:
            self._discovery_thread = threading.Thread(
                target=self._discover_forever, args=(options.discovery_interval.total_seconds(),),
                name=f"kafka-partition-discovery-{self._context.subtask_index}", daemon=True,
            )  # fmt: skip
            self._discovery_thread.start()

    def _new_consumer(self):
        from confluent_kafka import Consumer, KafkaException

        options = self._source.options
        client_id = f"{options.client_id_prefix}-{self._context.subtask_index}" if options.client_id_prefix else ""
        config = self._source.consumer_config(client_id)
        config.setdefault("auto.offset.reset", _auto_offset_reset(options.starting_offsets))
        config["on_commit"] = _log_commit_result
        try:
            return Consumer(config)
        except KafkaException as e:
            raise ConfigurationError(f"KafkaSource: the consumer configuration was refused: {e}") from e

    def close(self) -> None:
        self._stop.set()
        if self._discovery_thread is not None:
            self._discovery_thread.join(timeout=5)
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            _close_bounded(consumer)

    # -- reading ---------------------------------------------------------------------------------------

    def current_split_ids(self) -> frozenset[str]:
        return self._active_ids

    def pause_or_resume_splits(self, to_pause: Collection[str], to_resume: Collection[str]) -> None:
        """Pause (resume) fetching the partitions; batches already fetched for a paused one wait with it."""
        from confluent_kafka import TopicPartition

        def partitions(split_ids: Collection[str]) -> list:
            splits = [self._splits.get(split_id) for split_id in split_ids]
            return [TopicPartition(s.topic, s.partition) for s in splits if s is not None and not s.finished]

        if to_pause and (paused := partitions(to_pause)):
            self._consumer.pause(paused)
        if to_resume and (resumed := partitions(to_resume)):
            self._consumer.resume(resumed)
        self._paused.difference_update(to_resume)
        self._paused.update(to_pause)

    def poll_next(self, max_rows: int) -> ReadResult:
        self._take_discovered()
        if (now := time.monotonic()) >= self._next_stall_check:
            self._next_stall_check = now + min(self._stall_timeout / 4, 5.0)
            self._replace_a_stalled_consumer(now)
        if not self._readable_pending():
            self._fetch(max_rows)
        if (index := self._readable_pending()) is not None:
            self._empty_wait = _EMPTY_POLL_WAIT_S
            split_id, batch, timestamps, next_offset = self._pending[index]
            del self._pending[index]
            self._pending_per_split[split_id] -= 1
            split = self._splits[split_id]
            split.next_offset = next_offset
            if split.finished:
                self._release(split)
            return ReadResult(batch=batch, split_id=split_id, timestamps=timestamps)
        if self._source.options.stopping_offsets is not None and self._discovery_thread is None:
            if all(split.finished for split in self._splits.values()):
                return ReadResult(end_of_input=True)
        wait, self._empty_wait = self._empty_wait, min(self._empty_wait * 2, _EMPTY_POLL_MAX_WAIT_S)
        return ReadResult(wait_seconds=wait)

    def _readable_pending(self) -> int | None:
        """The index of the first fetched batch of a split that is not paused, or None."""
        if not self._paused:
            return 0 if self._pending else None
        return next((i for i, pending in enumerate(self._pending) if pending[0] not in self._paused), None)

    def _fetch(self, max_rows: int) -> None:
        messages = self._consumer.consume(num_messages=min(max_rows, _MAX_MESSAGES_PER_FETCH), timeout=0)
        if not messages:
            self._advance_over_control_records()
            return
        by_partition: dict[tuple[str, int], list] = {}  # a partition's messages come in offset order
        for message in messages:
            error = message.error()
            if error is not None:
                self._on_error(error)
                continue
            key = (message.topic(), message.partition())
            group = by_partition.get(key)
            if group is None:
                by_partition[key] = group = []
            group.append(message)
        now = time.monotonic()
        for (topic, partition), group in by_partition.items():
            split_id = f"{topic}-{partition}"
            self._last_fetch[split_id] = now
            if split_id in self._stalled:  # the replacement read on
                self._stalled.clear()
                self._stall_timeout = _STALL_TIMEOUT_S
            split = self._splits.get(split_id)
            if split is None or split.finished:
                continue
            stop = split.stopping_offset
            if stop != NO_STOPPING_OFFSET and group[-1].offset() >= stop:
                group = [m for m in group if m.offset() < stop]
            if group:
                self._queue(split_id, group)

    def _queue(self, split_id: str, messages: list) -> None:
        values = [m.value() for m in messages]
        try:
            batch, kept = self._source.options.deserializer.deserialize(values)
        except MalformedRecordError as e:
            raise MalformedRecordError(
                f"KafkaSource: partition {split_id}, offsets {messages[0].offset()}..{messages[-1].offset()}: {e}",
                path=split_id,
            ) from e
        if kept is not None:
            messages = [messages[i] for i in kept]
        timestamps = pa.array(
            [ts if kind else MIN_WATERMARK for kind, ts in (m.timestamp() for m in messages)], type=pa.int64()
        )
        next_offset = messages[-1].offset() + 1 if messages else None
        if next_offset is None:  # every record was skipped: advance the position without rows
            return
        self._pending.append((split_id, batch, timestamps, next_offset))
        self._pending_per_split[split_id] += 1

    def _advance_over_control_records(self) -> None:
        """Move bounded splits past transaction markers and aborted records (which return no message).

        Safe only for splits without pending batches: the consumer's position
        then is just after what this reader returned (and skipped).
        """
        from confluent_kafka import TopicPartition

        waiting = [
            s for s in self._splits.values()
            if s.stopping_offset != NO_STOPPING_OFFSET and not s.finished and not self._pending_per_split[s.split_id]
        ]  # fmt: skip
        if not waiting:
            return
        positions = self._consumer.position([TopicPartition(s.topic, s.partition) for s in waiting])
        for split, position in zip(waiting, positions, strict=True):
            if position.offset > split.next_offset:
                split.next_offset = min(position.offset, split.stopping_offset)
                if split.finished:
                    self._release(split)

    def _on_error(self, error) -> None:
        from confluent_kafka import KafkaError

        if error.fatal():
            raise KafkaSourceError(f"KafkaSource: fatal consumer error: {error}")
        transient = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._PARTITION_EOF,
                     KafkaError._TIMED_OUT, KafkaError.NOT_LEADER_FOR_PARTITION,
                     KafkaError.LEADER_NOT_AVAILABLE}  # fmt: skip
        if error.code() in transient or error.retriable():
            _log.debug("KafkaSource: transient consumer error (retried by the client): %s", error)
            return
        raise KafkaSourceError(f"KafkaSource: consumer error: {error}")

    # -- splits ----------------------------------------------------------------------------------------

    def _replace_a_stalled_consumer(self, now: float) -> None:
        """Replace the consumer if a split fetched nothing for ``_STALL_TIMEOUT_S`` though its partition has
        records past its position (see the module docstring). Batches fetched and not returned yet would be
        fetched again by the new consumer: with any, the check waits until they are returned."""
        from confluent_kafka import KafkaException, TopicPartition

        if self._pending or self._consumer is None:
            return
        quiet = [
            s for s in self._splits.values()
            if not s.finished and s.next_offset >= 0 and s.split_id not in self._paused
            and now - self._last_fetch.setdefault(s.split_id, now) >= self._stall_timeout
        ]  # fmt: skip
        stalled = []
        for split in quiet:
            partition = TopicPartition(split.topic, split.partition)
            try:
                _, end = self._consumer.get_watermark_offsets(partition, timeout=_END_OFFSET_TIMEOUT_S, cached=False)
                position = self._consumer.position([partition])[0].offset
            except (KafkaException, RuntimeError):  # the broker is away: nothing a new consumer would read
                continue
            if split.stopping_offset != NO_STOPPING_OFFSET:
                end = min(end, split.stopping_offset)
            if end > max(split.next_offset, position):
                stalled.append((split.split_id, f"{split.split_id} (at {split.next_offset}, end {end})"))
            else:
                self._last_fetch[split.split_id] = now  # caught up: looked at again after another timeout
        if not stalled:
            return
        _log.warning(
            "KafkaSource subtask %d: nothing fetched for %.0f s from %s although the broker has records there "
            "(librdkafka's fetcher stalled, confluentinc/librdkafka#5153); replacing the consumer",
            self._context.subtask_index, self._stall_timeout, ", ".join(text for _, text in stalled),
        )  # fmt: skip
        self._stalled = {split_id for split_id, _ in stalled}
        self._stall_timeout = min(self._stall_timeout * 2, _MAX_STALL_TIMEOUT_S)
        consumer, self._consumer = self._consumer, self._new_consumer()
        _close_bounded(consumer)
        self._assign([s for s in self._splits.values() if not s.finished])
        if paused := [self._splits[i] for i in self._paused if i in self._splits and not self._splits[i].finished]:
            self._consumer.pause([TopicPartition(s.topic, s.partition) for s in paused])
        self._last_fetch.clear()

    def _assign(self, splits: list[_Split]) -> None:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        if splits:
            self._consumer.incremental_assign([
                TopicPartition(s.topic, s.partition, OFFSET_BEGINNING if s.next_offset == EARLIEST_OFFSET else s.next_offset)
                for s in splits
            ])  # fmt: skip

    def _release(self, split: _Split) -> None:
        from confluent_kafka import TopicPartition

        self._consumer.incremental_unassign([TopicPartition(split.topic, split.partition)])
        self._refresh_active()

    def _refresh_active(self) -> None:
        self._active_ids = frozenset(s.split_id for s in self._splits.values() if not s.finished)

    def _discover_forever(self, interval_s: float) -> None:
        wait = 0.0  # the first discovery right away: partitions added since the job's splits were listed
        while not self._stop.wait(wait):
            wait = interval_s
            try:
                self._discovered.put(self._source.list_partitions(timeout=min(30.0, max(interval_s, 5.0))))
            except Exception as e:  # noqa: BLE001 - a broker outage: try again at the next interval
                _log.warning("KafkaSource: partition discovery failed (retried in %.0f s): %s", interval_s, e)

    def _take_discovered(self) -> None:
        new: list[_Split] = []
        while True:
            try:
                partitions = self._discovered.get_nowait()
            except queue.Empty:
                break
            me, parallelism = self._context.subtask_index, self._context.parallelism
            for tp in partitions:
                if str(tp) not in self._splits and split_owner(tp.topic, tp.partition, parallelism) == me:
                    split = _Split(KafkaPartitionSplit(
                        split_id=str(tp), topic=tp.topic, partition=tp.partition, next_offset=EARLIEST_OFFSET
                    ))  # fmt: skip
                    self._splits[split.split_id] = split
                    new.append(split)
        if new:
            _log.info("KafkaSource subtask %d: new partitions %s (read from the earliest offset)",
                      self._context.subtask_index, [s.split_id for s in new])  # fmt: skip
            self._assign(new)
            self._refresh_active()

    def pending_records(self) -> int | None:
        """The lag of this reader's partitions: each one's high watermark (librdkafka's cached value, updated
        by every fetch) minus the next offset to return (rows fetched and not returned yet are lag too). None
        until a fetch told a high watermark."""
        from confluent_kafka import KafkaException, TopicPartition

        consumer = self._consumer
        if consumer is None:
            return None
        lag, known = 0, False
        for split in list(self._splits.values()):
            if split.finished or split.next_offset < 0:
                continue
            try:
                _, high = consumer.get_watermark_offsets(TopicPartition(split.topic, split.partition), cached=True)
            except (KafkaException, RuntimeError):  # closed meanwhile, or not fetched from yet
                continue
            if high >= 0:
                end = high if split.stopping_offset == NO_STOPPING_OFFSET else min(high, split.stopping_offset)
                lag, known = lag + max(0, end - split.next_offset), True
        return lag if known else None

    # -- checkpoints -----------------------------------------------------------------------------------

    def snapshot_state(self, checkpoint_id: int) -> list[KafkaPartitionSplit]:
        if self._source.options.commit_offsets_on_checkpoint:
            self._offsets_to_commit[checkpoint_id] = [
                (s.topic, s.partition, s.next_offset) for s in self._splits.values() if s.next_offset >= 0
            ]
        return [split.snapshot() for split in self._splits.values()]

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Commit the checkpoint's offsets to the consumer group (for monitoring; recovery uses the checkpoint)."""
        offsets = self._offsets_to_commit.pop(checkpoint_id, None)
        for older in [c for c in self._offsets_to_commit if c < checkpoint_id]:
            del self._offsets_to_commit[older]
        if not offsets or self._consumer is None:
            return
        from confluent_kafka import KafkaException, TopicPartition

        try:
            self._consumer.commit(offsets=[TopicPartition(t, p, o) for t, p, o in offsets], asynchronous=True)
        except KafkaException as e:  # Flink logs failed commits and carries on
            _log.warning("KafkaSource: committing the offsets of checkpoint %d failed: %s", checkpoint_id, e)


def _auto_offset_reset(starting) -> str:
    """librdkafka's ``auto.offset.reset`` for a starting-offsets initializer (used when an offset is out of range)."""
    if starting.kind is OffsetsInitializerKind.LATEST:
        return "latest"
    if starting.kind in (OffsetsInitializerKind.COMMITTED, OffsetsInitializerKind.SPECIFIED):
        return {
            KafkaOffsetResetStrategy.EARLIEST: "earliest",
            KafkaOffsetResetStrategy.LATEST: "latest",
            KafkaOffsetResetStrategy.NONE: "error",
        }[starting.reset_strategy]
    return "earliest"


def _close_bounded(consumer) -> None:
    """Close ``consumer``, waiting at most ``_CLOSE_TIMEOUT_SECONDS``.

    librdkafka's close waits for the offset commits still queued, and a group
    coordinator that stays unreachable (a stopped or restarted broker) would hold
    a cancel for ever. Bounded like the Java client's close(), which Flink's reader
    calls: then the consumer is left to itself.
    """
    closing = threading.Thread(target=consumer.close, name="kafka-consumer-close", daemon=True)
    closing.start()
    closing.join(_CLOSE_TIMEOUT_SECONDS)
    if closing.is_alive():
        _log.warning(
            "KafkaSource: the consumer did not close within %.0f s (offset commits to an unreachable group "
            "coordinator?); left behind",
            _CLOSE_TIMEOUT_SECONDS,
        )


def _log_commit_result(error, partitions) -> None:
    if error is not None:
        _log.warning("KafkaSource: an offset commit failed: %s (%s)", error, partitions)
