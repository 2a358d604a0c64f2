"""PyFlink's ``Duration`` (``pyflink.common.Duration``): a ``datetime.timedelta`` with Flink's factories.

``WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_seconds(5))`` and
``with_idleness(Duration.of_minutes(1))`` run unchanged; every API here that
takes a ``timedelta`` takes a ``Duration``.
"""

from __future__ import annotations

from datetime import timedelta

__all__ = ["Duration"]


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
