"""Results of ``execute_and_collect`` travelling to the client over the engine's authenticated RPC.

The collect sink's tasks (on any TaskExecutor, also one on a Spark executor
that shares no disk with the client) hand each published batch to a
:class:`~flinklike_spark.connector_api.ClientResultChannel`. On a
TaskExecutor that channel is :class:`JobResultChannel`: one
``DeliverCollectResult`` RPC to the cluster endpoint per batch, over the same
authenticated Flight client the task's state updates use. The endpoint hands
it to the job's :class:`CollectResults` (the JobMaster's), which is also the
channel of the JobMaster's own final commit; the client's iterator reads the
:class:`CollectResultBuffer` of its collect id.

Contract of a delivery: ``batch_id`` names one published batch
(``<subtask>-<attempt>-<sequence>``); a batch delivered twice (a committer
re-committing restored committables) is kept once. Batches of one subtask
arrive in the order that subtask published them, because its deliveries are
synchronous calls from one thread. A delivery for a collect id whose iterator
was closed answers ``False`` and is dropped.
"""

from __future__ import annotations

import collections
import threading
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from flinklike_spark.common.types import records_of

if TYPE_CHECKING:  # pragma: no cover
    from flinklike_spark._runtime.gateways import JobMasterGateway

__all__ = ["CollectResultBuffer", "CollectResults", "JobResultChannel", "decode_batch", "encode_batch"]


def encode_batch(batch: pa.RecordBatch) -> bytes:
    """One batch as Arrow IPC stream bytes (what a delivery carries)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def decode_batch(payload: bytes) -> list[Any]:
    """The records of a payload made by :func:`encode_batch`."""
    records: list[Any] = []
    for batch in pa.ipc.open_stream(pa.py_buffer(payload)):
        records.extend(records_of(batch))
    return records


class CollectResultBuffer:
    """The records delivered for one collect id, in delivery order; thread-safe.

    Deliveries come from RPC threads, ``take`` from the client's iterator.
    After ``close`` deliveries are refused and ``take`` returns nothing.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._records: collections.deque[Any] = collections.deque()
        self._seen: set[str] = set()
        self._closed = False

    def deliver(self, batch_id: str, payload: bytes) -> bool:
        """Append the payload's records unless ``batch_id`` came before; False once closed."""
        records = decode_batch(payload)
        with self._cond:
            if self._closed:
                return False
            if batch_id not in self._seen:
                self._seen.add(batch_id)
                self._records.extend(records)
                self._cond.notify_all()
            return True

    def take(self, timeout: float) -> list[Any]:
        """Every record delivered and not taken yet; waits up to ``timeout`` seconds for one."""
        with self._cond:
            if not self._records and not self._closed:
                self._cond.wait(timeout)
            taken = list(self._records)
            self._records.clear()
            return taken

    def close(self) -> None:
        """Refuse further deliveries and drop what was not taken. Idempotent."""
        with self._cond:
            self._closed = True
            self._records.clear()
            self._cond.notify_all()


class CollectResults:
    """One job's collect buffers, by collect id (created on first use by either side).

    It is the :class:`~flinklike_spark.connector_api.ClientResultChannel` of
    commits made in the JobMaster itself.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buffers: dict[str, CollectResultBuffer] = {}

    def buffer(self, collect_id: str) -> CollectResultBuffer:
        with self._lock:
            return self._buffers.setdefault(collect_id, CollectResultBuffer())

    def deliver(self, collect_id: str, batch_id: str, payload: bytes) -> bool:
        return self.buffer(collect_id).deliver(batch_id, payload)

    def close(self) -> None:
        """Close every buffer (the job's cluster is going away)."""
        with self._lock:
            buffers = list(self._buffers.values())
        for b in buffers:
            b.close()


class JobResultChannel:
    """A TaskExecutor's channel to the client of job ``job_id``: one RPC per delivery."""

    def __init__(self, jobmaster: JobMasterGateway, job_id: str) -> None:
        self._jobmaster = jobmaster
        self._job_id = job_id

    def deliver(self, collect_id: str, batch_id: str, payload: bytes) -> bool:
        return self._jobmaster.deliver_collect_result(self._job_id, collect_id, batch_id, payload)
