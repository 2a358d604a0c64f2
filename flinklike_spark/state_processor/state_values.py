"""Stored keyed-state values <-> columns: the one translation the State Processor API makes.

A keyed state backend stores, per key, exactly these Python objects (and
checkpoints pickle them; see :mod:`flinklike_spark.datastream.state` and
:mod:`flinklike_spark._runtime.state.ttl_state`):

==================================  =============================  ==================================
kind                                stored value                   with time-to-live
==================================  =============================  ==================================
value, reducing, aggregating        the value (the accumulator)    ``TtlValue(value, last access ms)``
list                                a non-empty ``list``           a list of ``TtlValue``
map                                 a non-empty ``dict``           a dict of ``TtlValue``
==================================  =============================  ==================================

As columns, a state ``s`` is one column ``s`` (the value, the list, or the map)
and, for state with time-to-live, ``s_ttl_timestamp`` (the last access time as
a UTC timestamp; a list of them for list state, a map for map state).
:func:`decode_values` goes from stored values to column values and
:func:`encode_values` back, so a read followed by a write restores exactly
what was read. A key with no entry is a null (an empty list or map counts as none).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

import pyarrow as pa

from checkpointing.schemas import StateKind
from flinklike_spark.datastream.state import TtlValue
from flinklike_spark.errors import StateProcessorError

__all__ = [
    "KEYED_KINDS",
    "TTL_SUFFIX",
    "decode_values",
    "encode_values",
    "is_ttl_value",
    "to_arrow_array",
    "ttl_column",
]

#: Suffix of the column holding the last access time of a state with time-to-live.
TTL_SUFFIX: Final = "_ttl_timestamp"
#: The keyed state kinds a user function holds (timers are read separately).
KEYED_KINDS: Final = frozenset(
    {StateKind.VALUE, StateKind.LIST, StateKind.MAP, StateKind.REDUCING, StateKind.AGGREGATING}
)
_TIMESTAMP = pa.timestamp("ms", tz="UTC")


def ttl_column(state_name: str) -> str:
    """The name of the column with the last access times of ``state_name``."""
    return state_name + TTL_SUFFIX


def is_ttl_value(kind: StateKind, stored: Any) -> bool:
    """Whether a stored value is in time-to-live form (every element, for list and map state)."""
    if kind == StateKind.MAP:
        return bool(stored) and all(isinstance(e, TtlValue) for e in stored.values())
    if kind == StateKind.LIST:
        return bool(stored) and all(isinstance(e, TtlValue) for e in stored)
    return isinstance(stored, TtlValue)


def _ms_to_datetime(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def _to_ms(value: Any, what: str) -> int:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return int(round(value.timestamp() * 1000))
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise StateProcessorError(f"{what}: a last access time must be a datetime (or epoch ms), got {value!r}")


def decode_values(kind: StateKind, stored: Sequence[Any], ttl: bool) -> tuple[list[Any], list[Any] | None]:
    """``(values, last access times or None)`` of stored values of one state (see the module table)."""
    if not ttl:
        if kind == StateKind.MAP:
            return [None if v is None else list(v.items()) for v in stored], None
        return list(stored), None
    values: list[Any] = []
    stamps: list[Any] = []
    for v in stored:
        if v is None:
            values.append(None)
            stamps.append(None)
        elif kind == StateKind.LIST:
            values.append([e.value for e in v])
            stamps.append([_ms_to_datetime(e.timestamp) for e in v])
        elif kind == StateKind.MAP:
            values.append([(k, e.value) for k, e in v.items()])
            stamps.append([(k, _ms_to_datetime(e.timestamp)) for k, e in v.items()])
        else:
            values.append(v.value)
            stamps.append(_ms_to_datetime(v.timestamp))
    return values, stamps


def _as_dict(value: Any, what: str) -> dict:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, list) and all(isinstance(p, tuple) and len(p) == 2 for p in value):
        return dict(value)  # an Arrow map column reads as a list of (key, value) pairs
    raise StateProcessorError(f"{what}: map state needs a map (or dict) per key, got {value!r}")


def encode_values(
    kind: StateKind,
    values: Sequence[Any],
    stamps: Sequence[Any] | None,
    *,
    ttl: bool,
    now_ms: int,
    what: str,
) -> list[Any]:
    """Stored values (None: the key holds no entry) for column values of one state.

    Args:
        stamps: the last access times column (None: every entry gets ``now_ms``, as
            the runtime stamps a write). Ignored unless ``ttl``.
        what: names the state in errors.

    Raises:
        StateProcessorError: a value of the wrong shape for ``kind``.
    """
    out: list[Any] = []
    for i, value in enumerate(values):
        stamp = None if stamps is None else stamps[i]
        if value is None:
            out.append(None)
            continue
        if kind == StateKind.LIST:
            if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (list, tuple)):
                raise StateProcessorError(f"{what}: list state needs a list per key, got {value!r}")
            items = list(value)
            if not items:
                out.append(None)
                continue
            if ttl:
                times = [now_ms] * len(items) if stamp is None else [_to_ms(t, what) for t in stamp]
                if len(times) != len(items):
                    raise StateProcessorError(
                        f"{what}: {len(items)} list elements but {len(times)} last access times ({stamp!r})"
                    )
                items = [TtlValue(item, t) for item, t in zip(items, times)]
            out.append(items)
        elif kind == StateKind.MAP:
            entries = _as_dict(value, what)
            if not entries:
                out.append(None)
                continue
            if ttl:
                times = {} if stamp is None else _as_dict(stamp, what)
                entries = {k: TtlValue(v, _to_ms(times[k], what) if k in times else now_ms) for k, v in entries.items()}
            out.append(entries)
        else:
            out.append(TtlValue(value, now_ms if stamp is None else _to_ms(stamp, what)) if ttl else value)
    return out


def to_arrow_array(values: list[Any], *, map_column: bool = False) -> pa.Array:
    """``values`` as an Arrow array (types inferred); map columns from lists of ``(key, value)`` pairs.

    Raises:
        StateProcessorError: the values have no common Arrow type (mixed types, or objects
            Arrow cannot represent), naming the first value.
    """
    try:
        if not map_column:
            return pa.array(values)
        keys = pa.array([k for pairs in values if pairs for k, _ in pairs])
        items = pa.array([v for pairs in values if pairs for _, v in pairs])
        key_type = keys.type if keys.type != pa.null() else pa.string()
        return pa.array(values, type=pa.map_(key_type, items.type))
    except (pa.ArrowException, TypeError, ValueError) as exc:
        sample = next((v for v in values if v is not None), None)
        raise StateProcessorError(
            f"state values such as {sample!r} have no Arrow type ({exc}); values must be ints, floats, "
            f"strings, bytes, bools, datetimes, decimals, or lists / dicts / tuples of those, of one type per column"
        ) from exc
