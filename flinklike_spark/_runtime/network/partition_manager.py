"""The registry of a TaskExecutor's result partitions (Flink's ``ResultPartitionManager``).

Producing tasks :meth:`~ResultPartitionManager.register` their partitions;
consumers (local input channels, and the data server on behalf of remote
channels) look them up with :meth:`~ResultPartitionManager.get`, which waits
because a consumer may be deployed before its producer registered.

Thread rules: all methods are thread-safe; ``get`` is the only blocking call
and waits on a condition variable (no polling), bounded by its timeout.
"""

from __future__ import annotations

import threading
import time

from flinklike_spark._runtime.network.result_partition import ResultPartition
from flinklike_spark.errors import PartitionNotFoundError

__all__ = ["ResultPartitionManager"]


class ResultPartitionManager:
    """Maps partition ids to the live :class:`ResultPartition` objects of this process."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._partitions: dict[str, ResultPartition] = {}

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

    def get(self, partition_id: str, *, timeout: float) -> ResultPartition:
        """Return the partition ``partition_id``, waiting up to ``timeout`` seconds for it.

        Raises:
            PartitionNotFoundError: not registered within ``timeout``; the
                message names the id and the registered ids.
        """
        deadline = time.monotonic() + max(timeout, 0.0)
        with self._condition:
            while partition_id not in self._partitions:
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

    def release(self, partition_id: str, cause: BaseException | None = None) -> None:
        """Unregister and release ``partition_id`` (see :meth:`ResultPartition.release`).

        Unknown ids are ignored, so release is idempotent.
        """
        with self._condition:
            partition = self._partitions.pop(partition_id, None)
        if partition is not None:
            partition.release(cause)

    def release_all(self, cause: BaseException | None = None) -> None:
        """Unregister and release every partition (TaskExecutor shutdown)."""
        with self._condition:
            partitions = list(self._partitions.values())
            self._partitions.clear()
        for partition in partitions:
            partition.release(cause)

    def partition_ids(self) -> list[str]:
        """Ids of the registered partitions, sorted (a snapshot)."""
        with self._condition:
            return sorted(self._partitions)

    def __contains__(self, partition_id: object) -> bool:
        with self._condition:
            return partition_id in self._partitions
