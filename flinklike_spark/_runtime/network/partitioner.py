"""Channel selection: which consumer subtask(s) each row of a batch goes to.

Keyed streams are partitioned exactly like Flink's
``KeyGroupRangeAssignment``: a key is hashed to one of ``max_parallelism``
*key groups*, and key group ``kg`` belongs to operator index
``kg * parallelism // max_parallelism``. Keyed state is stored by key group, so
a job restored with another parallelism redistributes state by these ranges.

Key hashing must be *stable*: identical in every process, run and platform,
because producers in different TaskExecutors must route a key to the same
consumer, and restored state must land where the key's records go. Python's
``hash()`` is salted per process for ``str``/``bytes`` and therefore never used.
The hash (:func:`stable_hash`, :func:`stable_hash_scalar`) is defined as:

* ``int`` and ``bool`` within the signed 64-bit range, and ``float`` values
  that are integral and in that range (so ``3 == 3.0 == True + 2`` hash alike,
  as Python equality demands): the murmur3 ``fmix64`` finalizer of the
  two's-complement 64-bit value, truncated to its low 32 bits.
* other ``float``: ``fmix64`` of the IEEE-754 bits XOR a salt (NaN canonical).
* everything else: the murmur3 ``fmix32`` finalizer of ``zlib.crc32`` over a
  type-tagged canonical encoding (``str`` as UTF-8, ``bytes``, ``None``,
  big ints as decimal text, ``tuple``/``list`` from element hashes,
  ``datetime``/``date``/``time``/``timedelta``/``Decimal`` from their ISO or
  canonical text, ``Enum`` from its class name and value). Unsupported types
  raise ``TypeError``.

Arrow arrays are hashed vectorized with numpy for integer, boolean and float
columns; string/binary/other columns are hashed per *distinct* value and
scattered back. Struct values hash as the tuple of their fields.

Thread rules: selectors are used by one producer thread; REBALANCE keeps a
round-robin cursor and is not thread-safe. The hash functions are pure.
"""

from __future__ import annotations

import abc
import datetime
import decimal
import enum
import math
import struct
import zlib
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from flinklike_spark._runtime.graph.job_graph import PartitionerKind, PartitionerSpec
from flinklike_spark._runtime.record_timestamps import strip_timestamps
from flinklike_spark.common.types import BIG_DEC_KEY, pickled_field_values, plain_values_cause, records_of
from flinklike_spark.errors import SchemaMismatchError

__all__ = [
    "DEFAULT_MAX_PARALLELISM",
    "ChannelSelector",
    "assign_key_groups",
    "create_channel_selector",
    "key_group_for",
    "key_group_range",
    "operator_index_for_key_group",
    "stable_hash",
    "stable_hash_scalar",
]

DEFAULT_MAX_PARALLELISM = 128
"""Flink's default number of key groups for parallelism <= 128."""

_MASK32 = 0xFFFFFFFF
_MASK64 = 0xFFFFFFFFFFFFFFFF
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_FLOAT_SALT = 0x9E3779B97F4A7C15
_C1_64, _C2_64 = 0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53
_C1_32, _C2_32 = 0x85EBCA6B, 0xC2B2AE35
_CANONICAL_NAN = struct.unpack("<Q", struct.pack("<d", math.nan))[0]
_FEW_CHANNELS = 4  # up to this many channels, rows are grouped by per-channel scans, not a sort

# -- scalar hashing --------------------------------------------------------------


def _fmix64(k: int) -> int:
    k &= _MASK64
    k ^= k >> 33
    k = (k * _C1_64) & _MASK64
    k ^= k >> 33
    k = (k * _C2_64) & _MASK64
    k ^= k >> 33
    return k


def _fmix32(h: int) -> int:
    h &= _MASK32
    h ^= h >> 16
    h = (h * _C1_32) & _MASK32
    h ^= h >> 13
    h = (h * _C2_32) & _MASK32
    h ^= h >> 16
    return h


def _tagged_hash(tag: bytes, payload: bytes) -> int:
    return _fmix32(zlib.crc32(payload, zlib.crc32(tag)))


def _float_bits_hash(value: float) -> int:
    bits = _CANONICAL_NAN if math.isnan(value) else struct.unpack("<Q", struct.pack("<d", value))[0]
    return _fmix64(bits ^ _FLOAT_SALT) & _MASK32


def stable_hash_scalar(key: Any) -> int:
    """Stable 32-bit hash of one key; equals :func:`stable_hash` of an array holding it.

    Raises:
        TypeError: the key's type has no stable canonical encoding.
    """
    if key is None:
        return _NONE_HASH
    if isinstance(key, int):  # includes bool
        if _INT64_MIN <= key <= _INT64_MAX:
            return _fmix64(key) & _MASK32
        return _tagged_hash(b"I", str(int(key)).encode())
    if isinstance(key, float):
        if key.is_integer() and _INT64_MIN <= key <= _INT64_MAX:
            return _fmix64(int(key)) & _MASK32
        return _float_bits_hash(key)
    if isinstance(key, str):
        return _tagged_hash(b"s", key.encode("utf-8", "surrogatepass"))
    if isinstance(key, (bytes, bytearray, memoryview)):
        return _tagged_hash(b"b", bytes(key))
    if isinstance(key, (tuple, list)):
        parts = b"".join(struct.pack("<I", stable_hash_scalar(item)) for item in key)
        return _tagged_hash(b"t", struct.pack("<I", len(key)) + parts)
    if isinstance(key, enum.Enum):
        name = f"{type(key).__module__}.{type(key).__qualname__}"
        return _tagged_hash(b"e", name.encode() + b"\0" + struct.pack("<I", stable_hash_scalar(key.value)))
    if isinstance(key, datetime.datetime):  # before date: datetime subclasses date
        return _tagged_hash(b"D", key.isoformat().encode())
    if isinstance(key, datetime.date):
        return _tagged_hash(b"d", key.isoformat().encode())
    if isinstance(key, datetime.time):
        return _tagged_hash(b"T", key.isoformat().encode())
    if isinstance(key, datetime.timedelta):
        return _tagged_hash(b"l", str(key // datetime.timedelta(microseconds=1)).encode())
    if isinstance(key, decimal.Decimal):
        return _tagged_hash(b"m", str(key.normalize()).encode())
    raise TypeError(
        f"cannot hash key of type {type(key).__name__} stably across processes; supported: "
        "int, bool, float, str, bytes, None, tuple/list of these, Enum, date/time/datetime/timedelta, "
        "Decimal"
    )


_NONE_HASH = _tagged_hash(b"n", b"")

# -- vectorized hashing ---------------------------------------------------------------


def _fmix64_np(k: np.ndarray) -> np.ndarray:
    """fmix64 on a uint64 array (a fresh array; numpy's uint64 multiply wraps)."""
    k = k ^ (k >> np.uint64(33))
    k *= np.uint64(_C1_64)
    k ^= k >> np.uint64(33)
    k *= np.uint64(_C2_64)
    k ^= k >> np.uint64(33)
    return k


def _hash_int64(values: np.ndarray) -> np.ndarray:
    return _fmix64_np(values.astype(np.int64, copy=False).view(np.uint64)).astype(np.uint32)


def _hash_float64(values: np.ndarray) -> np.ndarray:
    out = np.empty(len(values), dtype=np.uint32)
    in_range = (values >= -(2.0**63)) & (values < 2.0**63)
    integral = in_range & (np.floor(values) == values)
    if integral.any():
        out[integral] = _hash_int64(values[integral].astype(np.int64))
    rest = ~integral
    if rest.any():
        others = values[rest]
        bits = others.view(np.uint64).copy()
        bits[np.isnan(others)] = np.uint64(_CANONICAL_NAN)
        out[rest] = _fmix64_np(bits ^ np.uint64(_FLOAT_SALT)).astype(np.uint32)
    return out


def _python_hashes(values: pa.Array, as_key: Callable[[Any], Any]) -> np.ndarray:
    return np.fromiter((stable_hash_scalar(as_key(v)) for v in values.to_pylist()), np.uint32, len(values))


def _hash_per_distinct(keys: pa.Array, as_key: Callable[[Any], Any] | None = None) -> np.ndarray:
    """Hash via Python scalars, once per distinct value (keys usually repeat)."""
    as_key = as_key or _as_key
    try:
        encoded = keys.dictionary_encode()
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        return _python_hashes(keys, as_key)
    return _scatter(encoded, _python_hashes(encoded.dictionary, as_key))


def _hash_dictionary(encoded: pa.DictionaryArray) -> np.ndarray:
    return _scatter(encoded, stable_hash(encoded.dictionary))


def _scatter(encoded: pa.DictionaryArray, dictionary_hashes: np.ndarray) -> np.ndarray:
    indices = encoded.indices
    index_values = indices.fill_null(0).to_numpy(zero_copy_only=False).astype(np.intp, copy=False)
    if len(dictionary_hashes) == 0:  # every value is null
        return np.full(len(encoded), _NONE_HASH, dtype=np.uint32)
    hashes = dictionary_hashes[index_values]
    if encoded.null_count:
        hashes[~encoded.is_valid().to_numpy(zero_copy_only=False)] = _NONE_HASH
    return hashes


def _as_key(value: Any) -> Any:
    # Struct values arrive as dicts: a struct key is the tuple of its fields.
    if isinstance(value, dict):
        return tuple(_as_key(v) for v in value.values())
    return value


def stable_hash(keys: pa.Array | pa.ChunkedArray, field: pa.Field | None = None) -> np.ndarray:
    """Stable 32-bit hashes of ``keys`` as a ``numpy.uint32`` array (same length).

    ``stable_hash(pa.array([k]))[0] == stable_hash_scalar(k)`` for every
    supported key; nulls hash like ``None``. Integer, boolean and float arrays
    are hashed fully vectorized. ``field`` is the keys' column's field when they
    come from a batch: a ``Types.BIG_DEC()`` column holds text, hashed as the
    ``Decimal`` that its records' key is (as :func:`stable_hash_scalar` hashes it).
    """
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks() if keys.num_chunks != 1 else keys.chunk(0)
    n = len(keys)
    if n == 0:
        return np.empty(0, dtype=np.uint32)
    if field is not None and field.metadata and BIG_DEC_KEY in field.metadata:
        return _hash_per_distinct(keys, lambda text: None if text is None else decimal.Decimal(text))
    typ = keys.type
    if pa.types.is_null(typ):
        return np.full(n, _NONE_HASH, dtype=np.uint32)
    if pa.types.is_dictionary(typ):
        return _hash_dictionary(keys)
    if pa.types.is_integer(typ) or pa.types.is_boolean(typ) or pa.types.is_floating(typ):
        if pa.types.is_uint64(typ) and (pc.max(keys).as_py() or 0) > _INT64_MAX:
            return _hash_per_distinct(keys)
        if pa.types.is_floating(typ):
            values = keys.cast(pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False)
            hashes = _hash_float64(values)
        else:
            if pa.types.is_boolean(typ):
                keys_int = keys.cast(pa.int8())
            else:
                keys_int = keys
            if keys_int.null_count:
                keys_int = keys_int.fill_null(0)
            hashes = _hash_int64(keys_int.to_numpy(zero_copy_only=False))
        if keys.null_count:
            hashes[~keys.is_valid().to_numpy(zero_copy_only=False)] = _NONE_HASH
        return hashes
    return _hash_per_distinct(keys)


# -- key groups ---------------------------------------------------------------------------


def _check_max_parallelism(max_parallelism: int) -> None:
    if not 1 <= max_parallelism <= 2**15:
        raise ValueError(f"max_parallelism must be in [1, 32768], got {max_parallelism}")


def assign_key_groups(
    keys: pa.Array | pa.ChunkedArray, max_parallelism: int, field: pa.Field | None = None
) -> np.ndarray:
    """Key group (``0 <= kg < max_parallelism``) of each key, as a numpy int array (``field``: see stable_hash)."""
    _check_max_parallelism(max_parallelism)
    hashes = stable_hash(keys, field)
    return (hashes % np.uint32(max_parallelism)).astype(np.int32)


def key_group_for(key: Any, max_parallelism: int) -> int:
    """Key group of one key; equals :func:`assign_key_groups` for the same key."""
    _check_max_parallelism(max_parallelism)
    return stable_hash_scalar(key) % max_parallelism


def operator_index_for_key_group(max_parallelism: int, parallelism: int, key_group: int) -> int:
    """The subtask owning ``key_group``: ``key_group * parallelism // max_parallelism`` (Flink)."""
    if not 1 <= parallelism <= max_parallelism:
        raise ValueError(f"parallelism must be in [1, max_parallelism={max_parallelism}], got {parallelism}")
    if not 0 <= key_group < max_parallelism:
        raise ValueError(f"key_group must be in [0, {max_parallelism}), got {key_group}")
    return key_group * parallelism // max_parallelism


def key_group_range(max_parallelism: int, parallelism: int, subtask_index: int) -> range:
    """The key groups owned by ``subtask_index`` (Flink's ``computeKeyGroupRangeForOperatorIndex``).

    The ranges of subtasks ``0..parallelism-1`` partition ``range(max_parallelism)``
    exactly and agree with :func:`operator_index_for_key_group`.
    """
    if not 1 <= parallelism <= max_parallelism:
        raise ValueError(f"parallelism must be in [1, max_parallelism={max_parallelism}], got {parallelism}")
    if not 0 <= subtask_index < parallelism:
        raise ValueError(f"subtask_index must be in [0, {parallelism}), got {subtask_index}")
    start = (subtask_index * max_parallelism + parallelism - 1) // parallelism
    end = ((subtask_index + 1) * max_parallelism - 1) // parallelism
    return range(start, end + 1)


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
        _check_max_parallelism(max_parallelism)
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
        _check_max_parallelism(max_parallelism)
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
