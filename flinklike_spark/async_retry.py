"""Retries of asynchronous I/O: the retry names of :mod:`flinklike_spark.async_stream`, at their old path.

The strategies, predicates and :class:`RetryingAsyncFunction` live beside
``AsyncFunction`` and ``AsyncDataStream`` in one module, so that the stream
factory and the retries do not import each other.
"""

from __future__ import annotations

from flinklike_spark.async_stream import (
    NO_RETRY_STRATEGY,
    AsyncRetryPredicate,
    AsyncRetryStrategy,
    ExponentialBackoffDelayRetryStrategy,
    FixedDelayRetryStrategy,
    RetryingAsyncFunction,
)

__all__ = [
    "NO_RETRY_STRATEGY",
    "AsyncRetryPredicate",
    "AsyncRetryStrategy",
    "ExponentialBackoffDelayRetryStrategy",
    "FixedDelayRetryStrategy",
    "RetryingAsyncFunction",
]
