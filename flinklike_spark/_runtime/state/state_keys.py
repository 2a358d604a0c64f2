"""Canonical bytes of keyed-state keys, for stores ordered by key bytes (the RocksDB backend).

The same key always gives the same bytes, whatever object identities it is made
of (pickle's memo makes ``pickle.dumps((s, s))`` differ from the pickle of two
equal strings), and keys that are equal as dict keys give equal bytes: ``1``,
``1.0``, ``True`` and ``Decimal("1")`` are one key, as in the heap backend's
dicts (they decode as the int). The encoding is type-tagged and length-prefixed,
recursive for tuples; int64 keys are one tag byte and 8 big-endian bytes biased
by 2^63, so their byte order is their numeric order.
"""

from __future__ import annotations

import datetime
import decimal
import enum
import pickle
import struct
from typing import Any

from flinklike_spark._runtime.state.key_groups import stable_hash_scalar

__all__ = ["INT_KEY_BIAS", "decode_key", "encode_key"]

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
#: Added to an int64 key (mod 2^64) in its encoding: byte order = numeric order.
INT_KEY_BIAS = 1 << 63
_BIAS = INT_KEY_BIAS


def _len4(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def _encode(key: Any, out: list[bytes]) -> None:
    kind = type(key)
    if kind is int or kind is bool:
        if _INT64_MIN <= key <= _INT64_MAX:
            out.append(b"I" + (int(key) + _BIAS).to_bytes(8, "big"))
        else:
            out.append(b"J" + _len4(str(int(key)).encode()))
    elif kind is str:
        out.append(b"S" + _len4(key.encode("utf-8", "surrogatepass")))
    elif key is None:
        out.append(b"N")
    elif kind is float:
        if key.is_integer() and _INT64_MIN <= key <= _INT64_MAX:
            _encode(int(key), out)
        else:
            out.append(b"F" + struct.pack(">d", key))
    elif isinstance(key, (bytes, bytearray)):
        out.append(b"B" + _len4(bytes(key)))
    elif isinstance(key, tuple) and not hasattr(kind, "_fields"):
        out.append(b"T" + struct.pack(">I", len(key)))
        for item in key:
            _encode(item, out)
    elif isinstance(key, decimal.Decimal) and key.is_finite() and key == key.to_integral_value():
        _encode(int(key), out)
    elif isinstance(key, (int, float, str)) and not isinstance(key, enum.Enum):
        # subclasses (numpy scalars are not, but e.g. str subclasses): their plain value
        base = int if isinstance(key, int) else float if isinstance(key, float) else str
        _encode(base(key), out)
    elif isinstance(
        key, (tuple, enum.Enum, datetime.date, datetime.time, datetime.timedelta, decimal.Decimal)
    ):  # NamedTuples, enums, dates, times, non-integral decimals: stdlib pickle of these is canonical
        out.append(b"P" + _len4(pickle.dumps(key, protocol=4)))
    else:
        stable_hash_scalar(key)  # raises the partitioner's TypeError naming the supported key types
        raise TypeError(f"key {key!r} of type {kind.__name__} cannot be used as a RocksDB state key")


def encode_key(key: Any) -> bytes:
    """Canonical bytes of a state key: equal keys (as dict keys) give equal bytes.

    Raises:
        TypeError: a key type without a canonical encoding (the types
            :func:`~flinklike_spark._runtime.state.key_groups.stable_hash_scalar` supports work).
    """
    if type(key) is int and _INT64_MIN <= key <= _INT64_MAX:
        return b"I" + (key + _BIAS).to_bytes(8, "big")
    out: list[bytes] = []
    _encode(key, out)
    return b"".join(out)


def _decode(data: bytes, pos: int) -> tuple[Any, int]:
    tag = data[pos]
    pos += 1
    if tag == 0x49:  # I
        return int.from_bytes(data[pos : pos + 8], "big") - _BIAS, pos + 8
    if tag == 0x4E:  # N
        return None, pos
    if tag == 0x54:  # T
        (count,) = struct.unpack_from(">I", data, pos)
        pos += 4
        items = []
        for _ in range(count):
            item, pos = _decode(data, pos)
            items.append(item)
        return tuple(items), pos
    if tag == 0x46:  # F
        return struct.unpack_from(">d", data, pos)[0], pos + 8
    (length,) = struct.unpack_from(">I", data, pos)
    pos += 4
    body = data[pos : pos + length]
    pos += length
    if tag == 0x53:  # S
        return body.decode("utf-8", "surrogatepass"), pos
    if tag == 0x42:  # B
        return bytes(body), pos
    if tag == 0x4A:  # J
        return int(body), pos
    if tag == 0x50:  # P
        return pickle.loads(body), pos
    raise ValueError(f"corrupt RocksDB state key: unknown tag {tag:#x} at byte {pos - 1} of {data!r}")


def decode_key(data: bytes) -> Any:
    """The key :func:`encode_key` encoded (ints for bools and integral floats)."""
    if data[0] == 0x49 and len(data) == 9:
        return int.from_bytes(data[1:], "big") - _BIAS
    key, _ = _decode(data, 0)
    return key
