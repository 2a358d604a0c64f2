"""PyFlink's ``pyflink.common.time``: ``Duration`` (a ``datetime.timedelta`` with Flink's factories) and ``Time``.

``WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_seconds(5))`` and
``with_idleness(Duration.of_minutes(1))`` run unchanged; every API here that
takes a ``timedelta`` takes a ``Duration``.
"""

from __future__ import annotations

from datetime import timedelta

from flinklike_spark.errors import ConfigurationError

__all__ = ["Duration", "Time"]


class Duration(timedelta):
    """A timedelta built with PyFlink's ``Duration.of_*`` factories."""

    @staticmethod
    def of_nanos(nanos: int) -> Duration:
        return Duration(microseconds=nanos / 1000)

    @staticmethod
    def of_millis(millis: int) -> Duration:
        return Duration(milliseconds=millis)

    @staticmethod
    def of_seconds(seconds: int) -> Duration:
        return Duration(seconds=seconds)

    @staticmethod
    def of_minutes(minutes: int) -> Duration:
        return Duration(minutes=minutes)

    @staticmethod
    def of_hours(hours: int) -> Duration:
        return Duration(hours=hours)

    @staticmethod
    def of_days(days: int) -> Duration:
        return Duration(days=days)

    def to_milliseconds(self) -> int:
        return self // timedelta(milliseconds=1)


class Time:
    """A duration for window sizes (PyFlink's ``pyflink.common.Time``), in milliseconds."""

    __slots__ = ("_ms",)

    def __init__(self, milliseconds: int) -> None:
        if not isinstance(milliseconds, int) or isinstance(milliseconds, bool):
            raise ConfigurationError(f"Time needs an int number of milliseconds, got {milliseconds!r}")
        self._ms = milliseconds

    @staticmethod
    def milliseconds(milliseconds: int) -> Time:
        return Time(milliseconds)

    @staticmethod
    def seconds(seconds: int) -> Time:
        return Time(seconds * 1000)

    @staticmethod
    def minutes(minutes: int) -> Time:
        return Time(minutes * 60_000)

    @staticmethod
    def hours(hours: int) -> Time:
        return Time(hours * 3_600_000)

    @staticmethod
    def days(days: int) -> Time:
        return Time(days * 86_400_000)

    def to_milliseconds(self) -> int:
        return self._ms

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Time) and other._ms == self._ms

    def __hash__(self) -> int:
        return hash(self._ms)

    def __repr__(self) -> str:
        return f"Time.milliseconds({self._ms})"
