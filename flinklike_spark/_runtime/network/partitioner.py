"""Channel selection: which consumer subtask(s) each row of a batch goes to.

Keyed streams are partitioned by key group (see
:mod:`flinklike_spark._runtime.state.key_groups`): a row goes to the subtask
owning its key's group, which is where the key's state is.

Thread rules: selectors are used by one producer thread; REBALANCE keeps a
round-robin cursor and is not thread-safe.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from flinklike_spark._runtime.graph.job_graph import PartitionerKind, PartitionerSpec
from flinklike_spark._runtime.record_timestamps import strip_timestamps
from flinklike_spark._runtime.state.key_groups import check_max_parallelism, stable_hash, stable_hash_scalar
from flinklike_spark.common.types import pickled_field_values, plain_values_cause, records_of
from flinklike_spark.errors import SchemaMismatchError

__all__ = ["ChannelSelector", "create_channel_selector"]

_FEW_CHANNELS = 4  # up to this many channels, rows are grouped by per-channel scans, not a sort


# -- channel selectors ------------------------------------------------------------------------


class ChannelSelector(abc.ABC):
    """Splits a batch into per-channel pieces.

    ``split`` returns ``(channel, piece)`` pairs with only non-empty pieces,
    in ascending channel order; within a channel rows keep their relative
    order. ``is_broadcast`` is True when every row goes to every channel.
    """

    is_broadcast: bool = False

    def __init__(self, num_channels: int) -> None:
        if num_channels < 1:
            raise ValueError(f"num_channels must be >= 1, got {num_channels}")
        self.num_channels = num_channels

    @abc.abstractmethod
    def split(self, batch: pa.RecordBatch) -> list[tuple[int, pa.RecordBatch]]:
        """The non-empty ``(channel, piece)`` pairs of ``batch``."""


class _ForwardSelector(ChannelSelector):
    def split(self, batch: pa.RecordBatch) -> list[tuple[int, pa.RecordBatch]]:
        return [(0, batch)] if batch.num_rows else []


class _BroadcastSelector(ChannelSelector):
    is_broadcast = True

    def split(self, batch: pa.RecordBatch) -> list[tuple[int, pa.RecordBatch]]:
        if not batch.num_rows:
            return []
        return [(channel, batch) for channel in range(self.num_channels)]


class _RebalanceSelector(ChannelSelector):
    def __init__(self, num_channels: int, subtask_index: int) -> None:
        super().__init__(num_channels)
        # Flink starts at a random channel so producers do not all hit channel 0;
        # the subtask index spreads them just as well and is reproducible.
        self._next = subtask_index % num_channels

    def split(self, batch: pa.RecordBatch) -> list[tuple[int, pa.RecordBatch]]:
        if not batch.num_rows:
            return []
        channel = self._next
        self._next = (channel + 1) % self.num_channels
        return [(channel, batch)]


def _group_by_channel(
    batch: pa.RecordBatch, channels: np.ndarray, num_channels: int
) -> list[tuple[int, pa.RecordBatch]]:
    first = channels[0]
    if (channels == first).all():
        return [(int(first), batch)]
    if num_channels <= _FEW_CHANNELS:
        # A few channels: one scan per channel beats a sort (and keeps row order).
        groups = [(channel, np.flatnonzero(channels == channel)) for channel in range(num_channels)]
        groups = [(channel, rows) for channel, rows in groups if len(rows)]
        order = np.concatenate([rows for _, rows in groups])
        counts = [(channel, len(rows)) for channel, rows in groups]
    else:
        # A stable sort keeps row order within a channel; uint16 uses numpy's radix sort.
        small = channels.astype(np.uint16 if num_channels <= 65535 else np.int64, copy=False)
        order = np.argsort(small, kind="stable")
        per_channel = np.bincount(small, minlength=num_channels)
        counts = [(channel, int(per_channel[channel])) for channel in np.flatnonzero(per_channel).tolist()]
    # The indices are a permutation of range(num_rows): no bounds check needed.
    permuted = pc.take(batch, pa.array(order), boundscheck=False)
    pieces = []
    offset = 0
    for channel, count in counts:
        pieces.append((channel, permuted.slice(offset, count)))
        offset += count
    return pieces


class _KeyFieldHashSelector(ChannelSelector):
    def __init__(self, num_channels: int, key_field: str, max_parallelism: int, producer: str | None = None) -> None:
        super().__init__(num_channels)
        self.producer = producer
        check_max_parallelism(max_parallelism)
        if num_channels > max_parallelism:
            raise ValueError(f"num_channels {num_channels} exceeds max_parallelism {max_parallelism}")
        self.key_field = key_field
        self.max_parallelism = max_parallelism
        # channel of each key group, so a row costs one lookup
        groups = np.arange(max_parallelism, dtype=np.int64)
        self._channel_of_group = (groups * num_channels // max_parallelism).astype(np.uint16)
        # hash % max_parallelism as a mask when it is a power of two (the default 128): cheaper
        self._group_mask = np.uint32(max_parallelism - 1) if max_parallelism & (max_parallelism - 1) == 0 else None

    def split(self, batch: pa.RecordBatch) -> list[tuple[int, pa.RecordBatch]]:
        if not batch.num_rows:
            return []
        index = batch.schema.get_field_index(self.key_field)
        if index < 0:
            # Pickled records (an undeclared stream of named Rows) are keyed by their field, as the
            # keyed operator reads it (``record[field]``), hashed as a key selector's key is.
            keys = pickled_field_values(strip_timestamps(batch), self.key_field)
            if keys is not None:
                return [(0, batch)] if self.num_channels == 1 else _split_by_keys(
                    batch, keys, self.max_parallelism, self.num_channels)  # fmt: skip
        if index < 0:
            missing = (
                f"hash partitioning key field {self.key_field!r} is not in the batch; fields are {batch.schema.names}"
            )
            cause = plain_values_cause(strip_timestamps(batch), self.key_field, self.producer)
            if cause is not None:
                missing = f"key_by({self.key_field!r}): {cause} ({missing})"
            raise SchemaMismatchError(missing)
        if self.num_channels == 1:
            return [(0, batch)]
        hashes = stable_hash(batch.column(index), batch.schema.field(index))
        if self._group_mask is not None:
            key_groups = hashes & self._group_mask
        else:
            key_groups = hashes % np.uint32(self.max_parallelism)
        channels = self._channel_of_group.take(key_groups)
        return _group_by_channel(batch, channels, self.num_channels)


class _KeySelectorHashSelector(ChannelSelector):
    def __init__(self, num_channels: int, key_selector: Callable[[dict], Any], max_parallelism: int) -> None:
        super().__init__(num_channels)
        check_max_parallelism(max_parallelism)
        if num_channels > max_parallelism:
            raise ValueError(f"num_channels {num_channels} exceeds max_parallelism {max_parallelism}")
        self.key_selector = key_selector
        self.max_parallelism = max_parallelism

    def split(self, batch: pa.RecordBatch) -> list[tuple[int, pa.RecordBatch]]:
        if not batch.num_rows:
            return []
        if self.num_channels == 1:
            return [(0, batch)]
        selector = self.key_selector
        keys = (selector(row) for row in records_of(strip_timestamps(batch)))
        return _split_by_keys(batch, keys, self.max_parallelism, self.num_channels)


def _split_by_keys(batch: pa.RecordBatch, keys: Iterable[Any], maxp: int, n: int) -> list[tuple[int, pa.RecordBatch]]:
    """``batch`` split by the channel of each row's key (one key per row, Python values)."""
    channels = np.fromiter((stable_hash_scalar(key) % maxp * n // maxp for key in keys), dtype=np.int64,
                           count=batch.num_rows)  # fmt: skip
    return _group_by_channel(batch, channels, n)


def create_channel_selector(
    spec: PartitionerSpec, num_channels: int, *, subtask_index: int, producer: str | None = None
) -> ChannelSelector:
    """Build the selector for ``spec`` writing to ``num_channels`` subpartitions.

    FORWARD always selects channel 0 (its partition has one subpartition: the
    consumer with the same index). REBALANCE sends whole batches round-robin,
    starting at ``subtask_index % num_channels``. HASH needs
    ``num_channels <= spec.max_parallelism``. ``producer`` (the operator writing,
    as error messages name it) is named when a key field is missing.

    Raises:
        ValueError: invalid ``num_channels`` or an unknown kind.
    """
    kind = spec.kind
    if kind is PartitionerKind.FORWARD:
        return _ForwardSelector(num_channels)
    if kind is PartitionerKind.BROADCAST:
        return _BroadcastSelector(num_channels)
    if kind is PartitionerKind.REBALANCE:
        return _RebalanceSelector(num_channels, subtask_index)
    if kind is PartitionerKind.HASH:
        if spec.key_field is not None:
            return _KeyFieldHashSelector(num_channels, spec.key_field, spec.max_parallelism, producer)
        if spec.key_selector is None:
            raise ValueError("a HASH partitioner needs key_field or key_selector")
        return _KeySelectorHashSelector(num_channels, spec.key_selector, spec.max_parallelism)
    raise ValueError(f"unknown partitioner kind {kind!r}; valid: {[k.name for k in PartitionerKind]}")
