"""PyFlink's ``pyflink.datastream.async_retry_strategies`` (one implementation: :mod:`flinklike_spark.async_retry`)."""

from flinklike_spark.async_retry import NO_RETRY_STRATEGY, ExponentialBackoffDelayRetryStrategy, FixedDelayRetryStrategy

__all__ = ["NO_RETRY_STRATEGY", "ExponentialBackoffDelayRetryStrategy", "FixedDelayRetryStrategy"]
