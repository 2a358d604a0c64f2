"""The registry of a TaskExecutor's result partitions (Flink's ``ResultPartitionManager``).

Producing tasks :meth:`~ResultPartitionManager.register` their partitions;
consumers (local input channels, and the data server on behalf of remote
channels) look them up with :meth:`~ResultPartitionManager.get`, which waits
because a consumer may be deployed before its producer registered.

A released partition leaves a tombstone (its id and release cause; the
newest :data:`_TOMBSTONES` are kept), so a consumer that asks for it after
its producer already failed or was cancelled learns so at once, instead of
waiting for a partition that will never be registered again. Partition ids
name the producer *attempt*, so an id is never registered twice.

Thread rules: all methods are thread-safe; ``get`` is the only blocking call
and waits on a condition variable (no polling), bounded by its timeout and
interrupted by :meth:`~ResultPartitionManager.wake_waiters` once its
``cancelled`` callback says so (a cancelled task must not wait).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable

from flinklike_spark._runtime.network.result_partition import ResultPartition, released_partition_error
from flinklike_spark.errors import ClosedChannelError, PartitionNotFoundError

_TOMBSTONES = 4096  # released partition ids remembered; far more than the partitions of live jobs

__all__ = ["ResultPartitionManager"]


class ResultPartitionManager:
    """Maps partition ids to the live :class:`ResultPartition` objects of this process."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._partitions: dict[str, ResultPartition] = {}
        self._released: collections.OrderedDict[str, BaseException | None] = collections.OrderedDict()

    def register(self, partition: ResultPartition) -> None:
        """Make ``partition`` visible to consumers and wake waiting :meth:`get` calls.

        Raises:
            ValueError: another partition with the same id is registered.
        """
        with self._condition:
            existing = self._partitions.get(partition.partition_id)
            if existing is partition:
                return
            if existing is not None:
                raise ValueError(f"a partition with id {partition.partition_id!r} is already registered")
            self._partitions[partition.partition_id] = partition
            self._condition.notify_all()

    def get(self, partition_id: str, *, timeout: float, cancelled: Callable[[], bool] | None = None) -> ResultPartition:
        """Return the partition ``partition_id``, waiting up to ``timeout`` seconds for it.

        Args:
            cancelled: checked whenever the wait wakes up; the caller's
                cancellation sets what it reads and then calls
                :meth:`wake_waiters`.

        Raises:
            PartitionNotFoundError: not registered within ``timeout``; the
                message names the id and the registered ids.
            ProducerFailedError: the partition was already released (its
                producer failed or was cancelled); chained to the release cause.
            ClosedChannelError: ``cancelled()`` became true while waiting.
        """
        deadline = time.monotonic() + max(timeout, 0.0)
        with self._condition:
            while partition_id not in self._partitions:
                if partition_id in self._released:
                    raise released_partition_error(partition_id, self._released[partition_id])
                if cancelled is not None and cancelled():
                    raise ClosedChannelError(f"the wait for result partition {partition_id!r} was cancelled")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    known = sorted(self._partitions)
                    shown = ", ".join(repr(k) for k in known[:20]) + (" ..." if len(known) > 20 else "")
                    raise PartitionNotFoundError(
                        f"result partition {partition_id!r} was not registered within {timeout:g} s; "
                        f"registered partitions: [{shown}]"
                    )
                self._condition.wait(remaining)
            return self._partitions[partition_id]

    def wake_waiters(self) -> None:
        """Wake every :meth:`get` call, so that they re-check their ``cancelled`` callback."""
        with self._condition:
            self._condition.notify_all()

    def _bury(self, partition_id: str, cause: BaseException | None) -> None:
        # Caller holds the condition.
        self._released[partition_id] = cause
        while len(self._released) > _TOMBSTONES:
            self._released.popitem(last=False)
        self._condition.notify_all()

    def release(self, partition_id: str, cause: BaseException | None = None) -> None:
        """Unregister and release ``partition_id`` (see :meth:`ResultPartition.release`).

        An id that was never registered is remembered as released as well (its
        producer failed before registering it). Idempotent.
        """
        with self._condition:
            partition = self._partitions.pop(partition_id, None)
            if partition_id not in self._released:
                # Also for a partition that was never registered (its producer failed
                # before): consumers waiting for it learn at once that it never comes.
                self._bury(partition_id, cause)
        if partition is not None:
            partition.release(cause)

    def release_all(self, cause: BaseException | None = None) -> None:
        """Unregister and release every partition (TaskExecutor shutdown)."""
        with self._condition:
            partitions = list(self._partitions.values())
            self._partitions.clear()
            for partition in partitions:
                self._bury(partition.partition_id, cause)
        for partition in partitions:
            partition.release(cause)

    def partition_ids(self) -> list[str]:
        """Ids of the registered partitions, sorted (a snapshot)."""
        with self._condition:
            return sorted(self._partitions)

    def __contains__(self, partition_id: object) -> bool:
        with self._condition:
            return partition_id in self._partitions
