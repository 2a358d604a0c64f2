"""Key groups and the stable key hash they are computed from (Flink's ``KeyGroupRangeAssignment``).

A key is hashed to one of ``max_parallelism`` *key groups*, and key group
``kg`` belongs to operator index ``kg * parallelism // max_parallelism``.
Keyed state is stored by key group, so a job restored with another
parallelism redistributes state by these ranges; the keyed partitioner routes
records by the same function, so a key's records reach the subtask holding
its state.

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
scattered back. Struct values hash as the tuple of their fields. The
functions are pure.
"""

from __future__ import annotations

import datetime
import decimal
import enum
import math
import struct
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from flinklike_spark.common.types import BIG_DEC_KEY

__all__ = [
    "DEFAULT_MAX_PARALLELISM",
    "assign_key_groups",
    "check_max_parallelism",
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


def check_max_parallelism(max_parallelism: int) -> None:
    if not 1 <= max_parallelism <= 2**15:
        raise ValueError(f"max_parallelism must be in [1, 32768], got {max_parallelism}")


def assign_key_groups(
    keys: pa.Array | pa.ChunkedArray, max_parallelism: int, field: pa.Field | None = None
) -> np.ndarray:
    """Key group (``0 <= kg < max_parallelism``) of each key, as a numpy int array (``field``: see stable_hash)."""
    check_max_parallelism(max_parallelism)
    hashes = stable_hash(keys, field)
    return (hashes % np.uint32(max_parallelism)).astype(np.int32)


def key_group_for(key: Any, max_parallelism: int) -> int:
    """Key group of one key; equals :func:`assign_key_groups` for the same key."""
    check_max_parallelism(max_parallelism)
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
