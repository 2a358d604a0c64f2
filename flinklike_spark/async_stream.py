"""Asynchronous I/O: ``AsyncDataStream.ordered_wait`` / ``unordered_wait`` with an ``AsyncFunction``.

As in PyFlink, ``async_invoke(value)`` is a coroutine returning a list of
output rows; up to ``capacity`` of them run at once on an asyncio event loop
beside the task; one that takes longer than ``timeout`` is cancelled and
``timeout(value)`` gives its output instead (by default it fails the job).
``ordered_wait`` emits results in input order, ``unordered_wait`` as they
complete (a watermark still waits for every request before it, so event time
stays correct). Requests in flight are part of the checkpoint: after a
restore they are sent again, so each input row's results are emitted once.
"""

from __future__ import annotations

import abc
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from flinklike_spark.errors import ConfigurationError
from flinklike_spark.functions import Function

if TYPE_CHECKING:  # pragma: no cover
    from flinklike_spark.datastream.data_stream import DataStream

__all__ = ["AsyncDataStream", "AsyncFunction"]


class AsyncFunction(Function):
    """``async def async_invoke(self, value) -> list`` of output rows; ``timeout(value)`` on a timeout."""

    @abc.abstractmethod
    async def async_invoke(self, value: Any) -> list[Any]: ...

    def timeout(self, value: Any) -> list[Any]:
        raise TimeoutError(f"async_invoke timed out for {value!r}")


def _timeout_ms(timeout: Any) -> int:
    from flinklike_spark.window import Time

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
    def _wait(stream: DataStream, function: AsyncFunction, timeout: Any, capacity: int, output_type, ordered: bool):
        from flinklike_spark._runtime.streaming.async_operator import AsyncOperatorDescriptor

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
        return stream.transform("async_wait", name, descriptor, output_type)

    @staticmethod
    def ordered_wait(data_stream: DataStream, async_function: AsyncFunction, timeout: Any, capacity: int = 100,
                     output_type: pa.Schema | None = None) -> DataStream:  # fmt: skip
        """Results in the order of the input rows."""
        return AsyncDataStream._wait(data_stream, async_function, timeout, capacity, output_type, True)

    @staticmethod
    def unordered_wait(data_stream: DataStream, async_function: AsyncFunction, timeout: Any, capacity: int = 100,
                       output_type: pa.Schema | None = None) -> DataStream:  # fmt: skip
        """Results as soon as they complete (watermarks still wait for the requests before them)."""
        return AsyncDataStream._wait(data_stream, async_function, timeout, capacity, output_type, False)

    @staticmethod
    def _wait_with_retry(stream: DataStream, function: AsyncFunction, timeout: Any, strategy: Any, capacity: int,
                         output_type, ordered: bool) -> DataStream:  # fmt: skip
        from flinklike_spark.async_retry import RetryingAsyncFunction

        retrying = RetryingAsyncFunction(function, strategy)
        return AsyncDataStream._wait(stream, retrying, timeout, capacity, output_type, ordered)

    @staticmethod
    def ordered_wait_with_retry(data_stream: DataStream, async_function: AsyncFunction, timeout: Any,
                                async_retry_strategy: Any, capacity: int = 100,
                                output_type: pa.Schema | None = None) -> DataStream:  # fmt: skip
        """``ordered_wait`` with ``async_retry_strategy``'s retries (the timeout covers all attempts)."""
        return AsyncDataStream._wait_with_retry(data_stream, async_function, timeout, async_retry_strategy,
                                                capacity, output_type, True)  # fmt: skip

    @staticmethod
    def unordered_wait_with_retry(data_stream: DataStream, async_function: AsyncFunction, timeout: Any,
                                  async_retry_strategy: Any, capacity: int = 100,
                                  output_type: pa.Schema | None = None) -> DataStream:  # fmt: skip
        """``unordered_wait`` with ``async_retry_strategy``'s retries (the timeout covers all attempts)."""
        return AsyncDataStream._wait_with_retry(data_stream, async_function, timeout, async_retry_strategy,
                                                capacity, output_type, False)  # fmt: skip
