"""Results streamed to the client while the job runs: ``DataStream.execute_and_collect``.

PyFlink's ``execute_and_collect()`` returns an iterator over the stream's
records as they arrive, also for an unbounded job; closing it (or
``execute_and_collect(limit=n)`` having collected ``n`` records) cancels the
job. Here the sink's writers publish each batch they receive as an Arrow IPC
file in a directory of the client's machine (the local cluster's
TaskExecutors share its file system), named
``<subtask>-<attempt>-<sequence>.arrow`` and made visible by an atomic
rename; the iterator reads new files in name order, so each subtask's
records come in the order it received them.

With checkpointing enabled the sink is two-phase (Flink's collect sink
delivers checkpointed results only): a writer stages its files and they are
published when the checkpoint that covers them completes (or when the job
finishes), so a job restored after a failure shows no record twice. Without
checkpointing a batch is published as soon as it arrives.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from typing import Any

import pyarrow as pa

from flinklike_spark.connector_api import (
    Committer,
    PrecommittingSinkWriter,
    Sink,
    SinkWriter,
    SinkWriterContext,
    TwoPhaseCommittingSink,
)
from flinklike_spark.errors import JobCancelledError, JobExecutionError, JobNotRunningError
from flinklike_spark.row import records_of

__all__ = ["CheckpointedCollectSink", "CollectIterator", "StreamingCollectSink", "collect_sink_for"]

_STAGING = "_staging"
_POLL_SECONDS = 0.05


def _write_ipc(path: str, batch: pa.RecordBatch) -> None:
    """Write ``batch`` to ``path`` atomically (a temporary name, then a rename)."""
    partial = f"{path}.{uuid.uuid4().hex[:8]}.partial"
    with pa.OSFile(partial, "wb") as sink, pa.ipc.new_file(sink, batch.schema) as writer:
        writer.write_batch(batch)
    os.replace(partial, path)


class _Writer(SinkWriter):
    """Writes every batch to ``<directory>/<subtask>-<attempt>-<sequence>.arrow``."""

    def __init__(self, directory: str, context: SinkWriterContext) -> None:
        self._directory = directory
        self._prefix = f"{context.subtask_index:05d}-{context.attempt_number:05d}-"
        self._sequence = 0

    def _next_path(self, directory: str) -> str:
        self._sequence += 1
        return os.path.join(directory, f"{self._prefix}{self._sequence:09d}.arrow")

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows:
            _write_ipc(self._next_path(self._directory), batch)


class StreamingCollectSink(Sink):
    """Publishes each batch at once (at-least-once: for jobs without checkpointing)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def create_writer(self, context: SinkWriterContext) -> SinkWriter:
        return _Writer(self.directory, context)


class _StagingWriter(_Writer, PrecommittingSinkWriter):
    def __init__(self, directory: str, context: SinkWriterContext) -> None:
        super().__init__(directory, context)
        self._staging = os.path.join(directory, _STAGING)
        self._staged: list[str] = []

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows:
            path = self._next_path(self._staging)
            _write_ipc(path, batch)
            self._staged.append(os.path.basename(path))

    def prepare_commit(self, checkpoint_id: int) -> list[Any]:
        staged, self._staged = self._staged, []
        return staged


class _Publisher(Committer):
    """Moves staged files into the visible directory; a file already moved is skipped (idempotent)."""

    def __init__(self, directory: str) -> None:
        self._directory = directory

    def commit(self, committables: list[Any]) -> None:
        for name in committables:
            staged = os.path.join(self._directory, _STAGING, name)
            if os.path.exists(staged):
                os.replace(staged, os.path.join(self._directory, name))


class CheckpointedCollectSink(StreamingCollectSink, TwoPhaseCommittingSink):
    """Publishes a batch when the checkpoint after it completes (exactly once across restores)."""

    def create_writer(self, context: SinkWriterContext) -> PrecommittingSinkWriter:
        os.makedirs(os.path.join(self.directory, _STAGING), exist_ok=True)
        return _StagingWriter(self.directory, context)

    def create_committer(self) -> Committer:
        return _Publisher(self.directory)


def collect_sink_for(directory: str, *, checkpointing: bool) -> Sink:
    """The collect sink for a job with or without checkpointing."""
    return CheckpointedCollectSink(directory) if checkpointing else StreamingCollectSink(directory)


class CollectIterator:
    """PyFlink's ``CloseableIterator`` over a running job's collected records.

    Iterating yields records as the job publishes them and ends when the job
    has finished and every published record was yielded; a failed job raises
    its ``JobExecutionError``. ``close()`` (also on leaving a ``with`` block)
    cancels a job that is still running and removes the result directory. It
    is idempotent.
    """

    def __init__(self, client: Any, directory: str) -> None:
        self._client = client
        self._directory = directory
        self._seen: set[str] = set()
        self._buffer: list[Any] = []
        self._position = 0
        self._closed = False

    @staticmethod
    def make_directory() -> str:
        return tempfile.mkdtemp(prefix="flinklike-collect-")

    def __iter__(self) -> CollectIterator:
        return self

    def _read_new(self) -> bool:
        """Read files published since the last call into the buffer; whether there were any."""
        try:
            names = sorted(
                name for name in os.listdir(self._directory) if name.endswith(".arrow") and name not in self._seen
            )
        except FileNotFoundError:
            return False
        records: list[Any] = []
        for name in names:
            with pa.memory_map(os.path.join(self._directory, name)) as source:
                reader = pa.ipc.open_file(source)
                for i in range(reader.num_record_batches):
                    records.extend(records_of(reader.get_batch(i)))
            self._seen.add(name)
        if records:
            self._buffer = self._buffer[self._position :] + records
            self._position = 0
        return bool(names)

    def __next__(self) -> Any:
        while True:
            if self._position < len(self._buffer):
                record = self._buffer[self._position]
                self._position += 1
                return record
            if self._closed:
                raise StopIteration
            if self._read_new():
                continue
            if self._client.done():
                # The job ended: whatever it published before is there now; read it, then stop.
                if self._read_new():
                    continue
                self._close(by_user=False)  # raises the job's failure, if it failed
                raise StopIteration
            time.sleep(_POLL_SECONDS)

    def close(self) -> None:
        """Cancel the job if it still runs, wait for it to end, remove the results."""
        self._close(by_user=True)

    def _close(self, *, by_user: bool) -> None:
        if self._closed:
            return
        self._closed = True
        self._closed_by_user = by_user
        if by_user:  # PyFlink: a closed iterator yields nothing more
            self._buffer, self._position = [], 0
        try:
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
                if not self._closed_by_user:
                    raise
        finally:
            shutil.rmtree(self._directory, ignore_errors=True)

    def __enter__(self) -> CollectIterator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
