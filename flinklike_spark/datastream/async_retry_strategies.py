"""Retries of asynchronous I/O (PyFlink's ``pyflink.datastream.async_retry_strategies``).

A strategy says whether attempt ``n`` may be followed by another (``can_retry(n)``,
attempts counted from 1, as in Flink) and after how long; its predicate says which
results (``result_predicate(result)``) or exceptions (``exception_predicate(error)``)
call for one. :class:`~flinklike_spark.datastream.async_stream.RetryingAsyncFunction`
applies a strategy around an ``AsyncFunction``.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any

from flinklike_spark.errors import ConfigurationError

__all__ = [
    "NO_RETRY_STRATEGY",
    "AsyncRetryPredicate",
    "AsyncRetryStrategy",
    "ExponentialBackoffDelayRetryStrategy",
    "FixedDelayRetryStrategy",
]

ResultPredicate = Callable[[list], bool]
ExceptionPredicate = Callable[[Exception], bool]


class AsyncRetryPredicate(abc.ABC):
    """Which results or exceptions of ``async_invoke`` trigger another attempt (None: never)."""

    @abc.abstractmethod
    def result_predicate(self) -> ResultPredicate | None: ...

    @abc.abstractmethod
    def exception_predicate(self) -> ExceptionPredicate | None: ...


class _Predicates(AsyncRetryPredicate):
    def __init__(self, result: ResultPredicate | None, exception: ExceptionPredicate | None) -> None:
        self._result, self._exception = result, exception

    def result_predicate(self) -> ResultPredicate | None:
        return self._result

    def exception_predicate(self) -> ExceptionPredicate | None:
        return self._exception


class AsyncRetryStrategy(abc.ABC):
    """When and how often a request is attempted again (PyFlink's ``AsyncRetryStrategy``)."""

    @abc.abstractmethod
    def can_retry(self, current_attempts: int) -> bool:
        """Whether attempt ``current_attempts`` (1 for the first) may be followed by another."""

    @abc.abstractmethod
    def get_backoff_time_millis(self, current_attempts: int) -> int:
        """The delay before the attempt after ``current_attempts``."""

    @abc.abstractmethod
    def get_retry_predicate(self) -> AsyncRetryPredicate: ...

    @staticmethod
    def no_restart() -> AsyncRetryStrategy:
        return NO_RETRY_STRATEGY

    @staticmethod
    def fixed_delay(max_attempts: int, backoff_time_millis: int, result_predicate: ResultPredicate | None,
                    exception_predicate: ExceptionPredicate | None) -> FixedDelayRetryStrategy:  # fmt: skip
        return FixedDelayRetryStrategy(max_attempts, backoff_time_millis, result_predicate, exception_predicate)

    @staticmethod
    def exponential_backoff(max_attempts: int, initial_delay: int, max_retry_delay: int, multiplier: float,
                            result_predicate: ResultPredicate | None,
                            exception_predicate: ExceptionPredicate | None) -> ExponentialBackoffDelayRetryStrategy:  # fmt: skip
        return ExponentialBackoffDelayRetryStrategy(
            max_attempts, initial_delay, max_retry_delay, multiplier, result_predicate, exception_predicate
        )


def _non_negative_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(f"{name} must be an int >= 0, got {value!r}")
    return value


class FixedDelayRetryStrategy(AsyncRetryStrategy):
    """Up to ``max_attempts`` retries, ``backoff_time_millis`` apart."""

    def __init__(self, max_attempts: int, backoff_time_millis: int, result_predicate: ResultPredicate | None,
                 exception_predicate: ExceptionPredicate | None) -> None:  # fmt: skip
        self.max_attempts = _non_negative_int("max_attempts", max_attempts)
        self.backoff_time_millis = _non_negative_int("backoff_time_millis", backoff_time_millis)
        self._predicate = _Predicates(result_predicate, exception_predicate)

    def can_retry(self, current_attempts: int) -> bool:
        return current_attempts <= self.max_attempts

    def get_backoff_time_millis(self, current_attempts: int) -> int:
        return self.backoff_time_millis

    def get_retry_predicate(self) -> AsyncRetryPredicate:
        return self._predicate


class ExponentialBackoffDelayRetryStrategy(AsyncRetryStrategy):
    """Up to ``max_attempts`` retries; delays start at ``initial_delay`` ms and grow by ``multiplier``
    up to ``max_retry_delay`` ms."""

    def __init__(self, max_attempts: int, initial_delay: int, max_retry_delay: int, multiplier: float,
                 result_predicate: ResultPredicate | None, exception_predicate: ExceptionPredicate | None) -> None:  # fmt: skip
        self.max_attempts = _non_negative_int("max_attempts", max_attempts)
        self.initial_delay = _non_negative_int("initial_delay", initial_delay)
        self.max_retry_delay = _non_negative_int("max_retry_delay", max_retry_delay)
        if isinstance(multiplier, bool) or not isinstance(multiplier, int | float) or multiplier < 1:
            raise ConfigurationError(f"multiplier must be a number >= 1, got {multiplier!r}")
        self.multiplier = float(multiplier)
        self._predicate = _Predicates(result_predicate, exception_predicate)

    def can_retry(self, current_attempts: int) -> bool:
        return current_attempts <= self.max_attempts

    def get_backoff_time_millis(self, current_attempts: int) -> int:
        delay = self.initial_delay * self.multiplier ** (current_attempts - 1)
        return int(min(delay, self.max_retry_delay))

    def get_retry_predicate(self) -> AsyncRetryPredicate:
        return self._predicate


class _NoRetry(AsyncRetryStrategy):
    def can_retry(self, current_attempts: int) -> bool:
        return False

    def get_backoff_time_millis(self, current_attempts: int) -> int:
        return -1

    def get_retry_predicate(self) -> AsyncRetryPredicate:
        return _Predicates(None, None)


NO_RETRY_STRATEGY: AsyncRetryStrategy = _NoRetry()
