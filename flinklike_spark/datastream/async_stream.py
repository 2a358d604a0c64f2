"""Asynchronous I/O: ``AsyncDataStream.ordered_wait`` / ``unordered_wait`` with an ``AsyncFunction``, and retries.

As in PyFlink, ``async_invoke(value)`` is a coroutine returning a list of
output rows; up to ``capacity`` of them run at once on an asyncio event loop
beside the task; one that takes longer than ``timeout`` is cancelled and
``timeout(value)`` gives its output instead (by default it fails the job).
``ordered_wait`` emits results in input order, ``unordered_wait`` as they
complete (a watermark still waits for every request before it, so event time
stays correct). Requests in flight are part of the checkpoint: after a
restore they are sent again, so each input row's results are emitted once.

Retries (PyFlink's ``AsyncRetryStrategy``, ``AsyncDataStream.*_wait_with_retry``):
a strategy says whether attempt ``n`` may be followed by another
(``can_retry(n)``, attempts counted from 1, as in Flink) and after how long;
its predicate says which results (``result_predicate(result)``) or exceptions
(``exception_predicate(error)``) call for one. When no retry is left, the last
result is emitted, or the last exception fails the request. The async
operator's ``timeout`` covers a request's attempts together, as in Flink.
The strategies are in :mod:`flinklike_spark.datastream.async_retry_strategies`, ``AsyncFunction`` in
:mod:`flinklike_spark.datastream.functions` (PyFlink's homes).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pyarrow as pa

from flinklike_spark._runtime.operators.operator_spec import OperatorKind
from flinklike_spark.datastream.async_retry_strategies import (
    NO_RETRY_STRATEGY,
    AsyncRetryPredicate,
    AsyncRetryStrategy,
    ExponentialBackoffDelayRetryStrategy,
    FixedDelayRetryStrategy,
)
from flinklike_spark.datastream.functions import AsyncFunction
from flinklike_spark.datastream.stream_protocols import StreamLike
from flinklike_spark.errors import ConfigurationError

__all__ = [
    "NO_RETRY_STRATEGY",
    "AsyncDataStream",
    "AsyncFunction",
    "AsyncRetryPredicate",
    "AsyncRetryStrategy",
    "ExponentialBackoffDelayRetryStrategy",
    "FixedDelayRetryStrategy",
    "RetryingAsyncFunction",
]


class RetryingAsyncFunction(AsyncFunction):
    """``function`` with ``strategy``'s retries around each ``async_invoke`` (what ``*_wait_with_retry`` runs)."""

    def __init__(self, function: AsyncFunction, strategy: AsyncRetryStrategy) -> None:
        if not isinstance(strategy, AsyncRetryStrategy):
            raise TypeError(f"expected an AsyncRetryStrategy, got {strategy!r}")
        self.function = function
        self.strategy = strategy

    def open(self, runtime_context: Any) -> None:
        if hasattr(self.function, "open"):
            self.function.open(runtime_context)

    def close(self) -> None:
        if hasattr(self.function, "close"):
            self.function.close()

    def timeout(self, value: Any) -> list[Any]:
        return self.function.timeout(value)

    async def async_invoke(self, value: Any) -> list[Any]:
        strategy = self.strategy
        predicate = strategy.get_retry_predicate()
        retry_result, retry_error = predicate.result_predicate(), predicate.exception_predicate()
        attempt = 1
        while True:
            try:
                result = await self.function.async_invoke(value)
            except Exception as error:  # noqa: BLE001 - the exception predicate decides
                if retry_error is None or not retry_error(error) or not strategy.can_retry(attempt):
                    raise
            else:
                if retry_result is None or not retry_result(result) or not strategy.can_retry(attempt):
                    return result
            await asyncio.sleep(max(strategy.get_backoff_time_millis(attempt), 0) / 1000)
            attempt += 1


# -- the stream factory -----------------------------------------------------------------------------


def _timeout_ms(timeout: Any) -> int:
    from flinklike_spark.datastream.window import Time

    if isinstance(timeout, Time):
        return timeout.to_milliseconds()
    if isinstance(timeout, timedelta):
        return int(timeout.total_seconds() * 1000)
    if isinstance(timeout, int) and not isinstance(timeout, bool):
        return timeout
    raise ConfigurationError(f"timeout must be a Time, a timedelta or an int of milliseconds, got {timeout!r}")


class AsyncDataStream:
    """Factory of asynchronous operators (PyFlink's ``AsyncDataStream``)."""

    @staticmethod
    def _wait(stream: StreamLike, function: AsyncFunction, timeout: Any, capacity: int, output_type, ordered: bool):
        from flinklike_spark._runtime.operators.async_operator import AsyncOperatorDescriptor

        if not isinstance(function, AsyncFunction):
            raise TypeError(f"expected an AsyncFunction, got {function!r}")
        if not isinstance(capacity, int) or capacity < 1:
            raise ConfigurationError(f"capacity must be a positive int, got {capacity!r}")
        timeout_ms = _timeout_ms(timeout)
        if timeout_ms <= 0:
            raise ConfigurationError(f"timeout must be positive, got {timeout_ms} ms")
        descriptor = AsyncOperatorDescriptor(
            function=function, timeout_ms=timeout_ms, capacity=capacity, ordered=ordered
        )
        name = "Async Wait (ordered)" if ordered else "Async Wait (unordered)"
        return stream.transform(OperatorKind.ASYNC_WAIT, name, descriptor, output_type)

    @staticmethod
    def ordered_wait(data_stream: StreamLike, async_function: AsyncFunction, timeout: Any, capacity: int = 100,
                     output_type: pa.Schema | None = None) -> StreamLike:  # fmt: skip
        """Results in the order of the input rows."""
        return AsyncDataStream._wait(data_stream, async_function, timeout, capacity, output_type, True)

    @staticmethod
    def unordered_wait(data_stream: StreamLike, async_function: AsyncFunction, timeout: Any, capacity: int = 100,
                       output_type: pa.Schema | None = None) -> StreamLike:  # fmt: skip
        """Results as soon as they complete (watermarks still wait for the requests before them)."""
        return AsyncDataStream._wait(data_stream, async_function, timeout, capacity, output_type, False)

    @staticmethod
    def _wait_with_retry(stream: StreamLike, function: AsyncFunction, timeout: Any, strategy: Any, capacity: int,
                         output_type, ordered: bool) -> StreamLike:  # fmt: skip
        retrying = RetryingAsyncFunction(function, strategy)
        return AsyncDataStream._wait(stream, retrying, timeout, capacity, output_type, ordered)

    @staticmethod
    def ordered_wait_with_retry(data_stream: StreamLike, async_function: AsyncFunction, timeout: Any,
                                async_retry_strategy: Any, capacity: int = 100,
                                output_type: pa.Schema | None = None) -> StreamLike:  # fmt: skip
        """``ordered_wait`` with ``async_retry_strategy``'s retries (the timeout covers all attempts)."""
        return AsyncDataStream._wait_with_retry(data_stream, async_function, timeout, async_retry_strategy,
                                                capacity, output_type, True)  # fmt: skip

    @staticmethod
    def unordered_wait_with_retry(data_stream: StreamLike, async_function: AsyncFunction, timeout: Any,
                                  async_retry_strategy: Any, capacity: int = 100,
                                  output_type: pa.Schema | None = None) -> StreamLike:  # fmt: skip
        """``unordered_wait`` with ``async_retry_strategy``'s retries (the timeout covers all attempts)."""
        return AsyncDataStream._wait_with_retry(data_stream, async_function, timeout, async_retry_strategy,
                                                capacity, output_type, False)  # fmt: skip
