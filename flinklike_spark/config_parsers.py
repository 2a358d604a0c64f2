"""Parsing and formatting of configuration values: durations, memory sizes, numbers, choices, ports, locations.

Every parser takes the raw value (a Python object or a string, as from a
dict, a ``config.yaml`` or a Spark option) and the key it belongs to, and
returns the typed value or raises :class:`~flinklike_spark.errors.ConfigurationError`
naming the key, the value and what would be valid. Ranges are not checked
here: :class:`flinklike_spark.config.ConfigOption` checks them.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from datetime import timedelta
from enum import Enum

from flinklike_spark.errors import ConfigurationError

__all__ = [
    "INT_MAX",
    "MAX_DURATION",
    "MIN_CHECKPOINT_TIME",
    "UPPER_BOUND_MAX_PARALLELISM",
    "choice_parser",
    "enum_parser",
    "format_bound",
    "format_bytes",
    "format_duration",
    "parse_bool",
    "parse_duration",
    "parse_float",
    "parse_int",
    "parse_memory_size",
    "parse_optional_location",
    "parse_optional_str",
    "parse_pattern_value",
    "parse_port_range",
    "parse_signed_duration",
]

_DURATION_UNITS = {
    "ms": 1e-3, "milli": 1e-3, "millis": 1e-3, "millisecond": 1e-3, "milliseconds": 1e-3,
    "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
    "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0, "m": 60.0,
    "h": 3600.0, "hour": 3600.0, "hours": 3600.0,
    "d": 86400.0, "day": 86400.0, "days": 86400.0,
}  # fmt: skip
_MEMORY_UNITS = {"b": 1, "kb": 1 << 10, "k": 1 << 10, "mb": 1 << 20, "m": 1 << 20, "gb": 1 << 30, "g": 1 << 30}
_NUMBER_UNIT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")

MAX_DURATION = timedelta(days=365)
"""Upper bound of every duration option: longer waits are mistakes, and far longer ones
(or ``inf``) overflow the timed waits of threads and the OS."""

MIN_CHECKPOINT_TIME = timedelta(milliseconds=10)
"""Flink's ``MINIMAL_CHECKPOINT_TIME``: the smallest checkpoint interval and timeout."""

INT_MAX = 2**31 - 1  # Flink's Integer.MAX_VALUE: the bound of its int options
UPPER_BOUND_MAX_PARALLELISM = 1 << 15  # Flink's KeyGroupRangeAssignment.UPPER_BOUND_MAX_PARALLELISM


def parse_duration(value: object, *, key: str = "duration") -> timedelta:
    """Parse ``timedelta``, a number of milliseconds, or Flink's ``"100 ms"``/``"10s"``/``"1 min"``.

    Raises:
        ConfigurationError: not a duration, not finite (NaN, inf), or beyond what
            ``timedelta`` holds. The sign is not checked here (options check ranges).
    """
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool):
        raise ConfigurationError(f"{key}: expected a duration, got {value!r}")
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise ConfigurationError(
                f"{key}: {value!r} is not a duration; use a finite number of milliseconds, "
                f"a string like '100 ms', '10 s', '1 min', or a datetime.timedelta"
            )
        try:
            return timedelta(milliseconds=value)
        except OverflowError:
            raise ConfigurationError(f"{key}: {value!r} ms is too long for a duration") from None
    match = _NUMBER_UNIT.match(str(value))
    if match:
        number, unit = match.groups()
        unit = unit.lower() or "ms"
        if unit in _DURATION_UNITS:
            try:
                return timedelta(seconds=float(number) * _DURATION_UNITS[unit])
            except OverflowError:
                raise ConfigurationError(f"{key}: {value!r} is too long for a duration") from None
    raise ConfigurationError(
        f"{key}: cannot parse {value!r} as a duration; use e.g. '100 ms', '10 s', '1 min' "
        f"(units: {', '.join(sorted(set(_DURATION_UNITS)))}) or a datetime.timedelta"
    )


def parse_signed_duration(value: object, *, key: str = "duration") -> timedelta:
    """:func:`parse_duration` that also reads a leading minus in strings (``"-1 ms"``, ``"-1"``), as Flink's
    keys whose negative value means "for ever" need."""
    if isinstance(value, str) and value.strip().startswith("-"):
        return -parse_duration(value.strip()[1:], key=key)
    return parse_duration(value, key=key)


def parse_memory_size(value: object, *, key: str = "memory size") -> int:
    """Parse a whole number of bytes: an int or Flink's ``"32kb"``/``"64 mb"``.

    Raises:
        ConfigurationError: not a memory size, or not a whole number of bytes
            (``1.5``, ``"0.3kb"``). The sign is not checked here (options check ranges).
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float):
        if value.is_integer():
            return int(value)
        raise ConfigurationError(f"{key}: {value!r} is not a whole number of bytes; use e.g. 32768, '32kb', '64 mb'")
    match = _NUMBER_UNIT.match(str(value)) if not isinstance(value, bool) else None
    if match:
        number, unit = match.groups()
        unit = unit.lower() or "b"
        if unit in _MEMORY_UNITS:
            size = float(number) * _MEMORY_UNITS[unit]
            if size.is_integer():
                return int(size)
            raise ConfigurationError(
                f"{key}: {value!r} is not a whole number of bytes ({size:g}); use e.g. '32kb', '64 mb'"
            )
    raise ConfigurationError(
        f"{key}: cannot parse {value!r} as a memory size; use e.g. 32768, '32kb', '64 mb' "
        f"(units: {', '.join(sorted(_MEMORY_UNITS))})"
    )


def parse_int(value: object, *, key: str) -> int:
    if isinstance(value, bool):
        raise ConfigurationError(f"{key}: expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except ValueError:
        raise ConfigurationError(f"{key}: expected an integer, got {value!r}") from None


def parse_bool(value: object, *, key: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ConfigurationError(f"{key}: expected true or false, got {value!r}")


def enum_parser(enum_type: type[Enum]) -> Callable[..., Enum]:
    def parse(value: object, *, key: str) -> Enum:
        if isinstance(value, enum_type):
            return value
        text = str(value).strip().lower().replace("-", "_")
        for member in enum_type:
            if member.value == text:
                return member
        valid = ", ".join(m.value.replace("_", "-") for m in enum_type)
        raise ConfigurationError(f"{key}: invalid value {value!r}; valid values: {valid}")

    return parse


def choice_parser(*choices: str) -> Callable[..., str]:
    def parse(value: object, *, key: str) -> str:
        text = str(value).strip().lower()
        if text not in choices:
            raise ConfigurationError(f"{key}: invalid value {value!r}; valid values: {', '.join(choices)}")
        return text

    return parse


def parse_float(value: object, *, key: str) -> float:
    if isinstance(value, bool):
        raise ConfigurationError(f"{key}: expected a number, got {value!r}")
    try:
        return float(str(value).strip()) if not isinstance(value, (int, float)) else float(value)
    except ValueError:
        raise ConfigurationError(f"{key}: expected a number, got {value!r}") from None


def parse_port_range(value: object, *, key: str) -> tuple[int, int]:
    """Flink's port setting: one port (``9249``; 0 picks a free one) or a range (``9250-9260``)."""
    if isinstance(value, tuple) and len(value) == 2:
        low, high = value
    else:
        text = str(value).strip()
        match = re.fullmatch(r"(\d+)(?:\s*-\s*(\d+))?", text) if not isinstance(value, bool) else None
        if match is None:
            raise ConfigurationError(f"{key}: expected a port (e.g. 9249, 0 for any free port) or a range "
                                     f"(e.g. 9250-9260), got {value!r}")  # fmt: skip
        low = int(match.group(1))
        high = int(match.group(2)) if match.group(2) is not None else low
    if not (0 <= low <= high <= 65535):
        raise ConfigurationError(f"{key}: {value!r} is not a port range within 0..65535 (low <= high)")
    return (low, high)


def parse_optional_str(value: object, *, key: str) -> str | None:
    return None if value is None or str(value) == "" else str(value)


def parse_optional_location(value: object, *, key: str) -> str | None:
    """A path or URL (str or os.PathLike); a number or other object is refused, never turned into ``./42``."""
    if value is None:
        return None
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise ConfigurationError(
            f"{key}: expected a path or URL string (e.g. '/data/checkpoints', 'file:///data/checkpoints', "
            f"'s3://bucket/checkpoints'), got {type(value).__name__} {value!r}"
        )
    return value or None


def parse_pattern_value(key: str, value: object) -> str:
    if value is None or not isinstance(value, str) or not value:
        # The value may be a secret: the message names the key only.
        raise ConfigurationError(f"{key}: expected a non-empty string, got a {type(value).__name__}")
    return value


def format_duration(value: timedelta) -> str:
    seconds = value.total_seconds()
    for unit, size in (("days", 86400.0), ("h", 3600.0), ("min", 60.0), ("s", 1.0)):
        if seconds >= size and (seconds / size).is_integer():
            return f"{seconds / size:g} {unit}"
    return f"{seconds * 1000:g} ms"


def format_bytes(value: int) -> str:
    for unit, size in (("gb", 1 << 30), ("mb", 1 << 20), ("kb", 1 << 10)):
        if value >= size and value % size == 0:
            return f"{value // size} {unit}"
    return f"{value} bytes"


def format_bound(value: object) -> str:
    return format_duration(value) if isinstance(value, timedelta) else f"{value:,}"
