"""Results streamed to the client while the job runs: ``DataStream.execute_and_collect``.

PyFlink's ``execute_and_collect()`` returns an iterator over the stream's
records as they arrive, also for an unbounded job; closing it (or
``execute_and_collect(limit=n)`` having collected ``n`` records) cancels the
job. The sink's tasks share no disk with the client (they may run on Spark
executors): each batch they publish travels to the client process over the
engine's authenticated RPC, the channel a task reports its state on
(:class:`~flinklike_spark.connector_api.ClientResultChannel`, implemented in
:mod:`flinklike_spark._runtime.collect_results`). A batch is identified as
``<subtask>-<attempt>-<sequence>``; the client keeps the first delivery of
each id, and yields each subtask's records in the order it received them.

With checkpointing enabled the sink is two-phase (Flink's collect sink
delivers checkpointed results only): a writer keeps its batches, encoded, as
the committables of the next checkpoint (so they are part of the checkpoint
and survive the loss of the TaskExecutor), and they are delivered when that
checkpoint completes (or by the JobMaster when the job finishes). A restored
job re-commits the restored checkpoint's committables, which the client
recognizes by id, so it shows no record twice. Without checkpointing a batch
is delivered as soon as it arrives (at least once across restarts).

Memory: delivered records wait in the client process until the iterator
takes them (as they waited in files before); a sink does not slow down for a
slow reader.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from flinklike_spark._runtime.collect_results import CollectResultBuffer, encode_batch
from flinklike_spark.connector_api import (
    ClientResultChannel,
    Committer,
    CommitterContext,
    PrecommittingSinkWriter,
    Sink,
    SinkWriter,
    SinkWriterContext,
    TwoPhaseCommittingSink,
)
from flinklike_spark.errors import ConfigurationError, JobCancelledError, JobExecutionError, JobNotRunningError

__all__ = ["CheckpointedCollectSink", "CollectIterator", "StreamingCollectSink", "collect_sink_for", "new_collect_id"]

_POLL_SECONDS = 0.05


def new_collect_id() -> str:
    """A fresh id naming one ``execute_and_collect`` call's results."""
    return uuid.uuid4().hex


def _require_channel(channel: ClientResultChannel | None, where: str) -> ClientResultChannel:
    if channel is None:
        raise ConfigurationError(
            f"the collect sink's {where} has no result channel to the job's client: it runs only in a job "
            "started by DataStream.execute_and_collect on a flinklike cluster (local or spark)"
        )
    return channel


class _Writer(SinkWriter):
    """Delivers every batch to the client at once, under id ``<subtask>-<attempt>-<sequence>``."""

    def __init__(self, collect_id: str, context: SinkWriterContext) -> None:
        self._collect_id = collect_id
        self._channel = context.result_channel
        self._prefix = f"{context.subtask_index:05d}-{context.attempt_number:05d}-"
        self._sequence = 0

    def _next_id(self) -> str:
        self._sequence += 1
        return f"{self._prefix}{self._sequence:09d}"

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows:
            channel = _require_channel(self._channel, "writer")
            channel.deliver(self._collect_id, self._next_id(), encode_batch(batch))  # False: nobody reads


class StreamingCollectSink(Sink):
    """Delivers each batch at once (at-least-once: for jobs without checkpointing)."""

    def __init__(self, collect_id: str) -> None:
        self.collect_id = collect_id

    def create_writer(self, context: SinkWriterContext) -> SinkWriter:
        return _Writer(self.collect_id, context)


class _StagingWriter(_Writer, PrecommittingSinkWriter):
    """Keeps ``(batch id, encoded batch)`` pairs until the next checkpoint takes them as committables."""

    def __init__(self, collect_id: str, context: SinkWriterContext) -> None:
        super().__init__(collect_id, context)
        self._staged: list[tuple[str, bytes]] = []

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows:
            self._staged.append((self._next_id(), encode_batch(batch)))

    def prepare_commit(self, checkpoint_id: int) -> list[Any]:
        staged, self._staged = self._staged, []
        return staged


class _Deliverer(Committer):
    """Delivers committed batches to the client; a batch delivered before is ignored there (idempotent)."""

    def __init__(self, collect_id: str, channel: ClientResultChannel) -> None:
        self._collect_id = collect_id
        self._channel = channel

    def commit(self, committables: list[Any]) -> None:
        for batch_id, payload in committables:
            if not self._channel.deliver(self._collect_id, batch_id, payload):
                return  # the iterator was closed: nobody reads the rest either


class CheckpointedCollectSink(StreamingCollectSink, TwoPhaseCommittingSink):
    """Delivers a batch when the checkpoint after it completes (exactly once across restores)."""

    def create_writer(self, context: SinkWriterContext) -> PrecommittingSinkWriter:
        return _StagingWriter(self.collect_id, context)

    def create_committer(self) -> Committer:
        return self.create_committer_with(CommitterContext())

    def create_committer_with(self, context: CommitterContext) -> Committer:
        return _Deliverer(self.collect_id, _require_channel(context.result_channel, "committer"))


def collect_sink_for(collect_id: str, *, checkpointing: bool) -> Sink:
    """The collect sink for a job with or without checkpointing."""
    return CheckpointedCollectSink(collect_id) if checkpointing else StreamingCollectSink(collect_id)


class CollectIterator:
    """PyFlink's ``CloseableIterator`` over a running job's collected records.

    Iterating yields records as the job delivers them and ends when the job
    has finished and every delivered record was yielded; a failed job raises
    its ``JobExecutionError``. ``close()`` (also on leaving a ``with`` block)
    cancels a job that is still running and drops undelivered results. It is
    idempotent. ``as_result`` (if given) maps each record to what is yielded.
    """

    def __init__(self, client: Any, collect_id: str, as_result: Callable[[Any], Any] | None = None) -> None:
        self._client = client
        self._as_result = as_result
        self._results: CollectResultBuffer = client.collect_results.buffer(collect_id)
        self._buffer: list[Any] = []
        self._position = 0
        self._closed = False

    def __iter__(self) -> CollectIterator:
        return self

    def _read_new(self, timeout: float) -> bool:
        """Move records delivered since the last call into the buffer; whether there were any."""
        records = self._results.take(timeout)
        if records:
            self._buffer = self._buffer[self._position :] + records
            self._position = 0
        return bool(records)

    def __next__(self) -> Any:
        while True:
            if self._position < len(self._buffer):
                record = self._buffer[self._position]
                self._position += 1
                return record if self._as_result is None else self._as_result(record)
            if self._closed:
                raise StopIteration
            if self._read_new(0):
                continue
            if self._client.done():
                # The job ended: everything it delivered arrived before its result; read it, then stop.
                if self._read_new(0):
                    continue
                self._close(by_user=False)  # raises the job's failure, if it failed
                raise StopIteration
            if not self._read_new(_POLL_SECONDS):
                time.sleep(0)  # let the job's threads run

    def close(self) -> None:
        """Cancel the job if it still runs, wait for it to end, drop undelivered results."""
        self._close(by_user=True)

    def _close(self, *, by_user: bool) -> None:
        if self._closed:
            return
        self._closed = True
        if by_user:  # PyFlink: a closed iterator yields nothing more
            self._buffer, self._position = [], 0
        self._results.close()  # deliveries from now on answer False: a blocked committer goes on
        if not self._client.done():
            try:
                self._client.cancel()
            except JobNotRunningError:
                pass  # it ended meanwhile
        try:
            self._client.wait()
        except JobCancelledError:
            pass  # what close() asked for
        except JobExecutionError:
            if not by_user:
                raise

    def __enter__(self) -> CollectIterator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
