"""Async I/O retries as in PyFlink: ``AsyncDataStream.*_wait_with_retry`` with ``AsyncRetryStrategy``."""

from __future__ import annotations

import asyncio
import functools

import pytest

from connectors import CollectSink
from flinklike_spark import JobExecutionError, StreamExecutionEnvironment, Types
from flinklike_spark.datastream import AsyncDataStream, AsyncFunction, AsyncRetryStrategy
from flinklike_spark.datastream.async_retry_predicates import (
    empty_result_predicate,
    exception_type_predicate,
    has_exception_predicate,
)
from flinklike_spark.datastream.async_stream import RetryingAsyncFunction

pytestmark = pytest.mark.timeout(60)


class Flaky(AsyncFunction):
    """Fails (or answers nothing) on the first ``failures`` attempts of each value."""

    def __init__(self, failures: int, *, empty: bool = False) -> None:
        self.failures, self.empty = failures, empty
        self.attempts: dict = {}

    async def async_invoke(self, value):
        seen = self.attempts[value] = self.attempts.get(value, 0) + 1
        await asyncio.sleep(0)
        if seen <= self.failures:
            if self.empty:
                return []
            raise ConnectionError(f"attempt {seen} of {value}")
        return [(value, seen)]


def invoke(function, strategy, value):
    return asyncio.run(RetryingAsyncFunction(function, strategy).async_invoke(value))


def test_retries_follow_the_strategy_and_its_predicates():
    fixed = AsyncRetryStrategy.fixed_delay(3, 1, None, has_exception_predicate)
    assert invoke(Flaky(3), fixed, "a") == [("a", 4)]  # max_attempts counts retries: 1 + 3 attempts
    with pytest.raises(ConnectionError, match="attempt 4"):
        invoke(Flaky(4), fixed, "a")
    on_empty = AsyncRetryStrategy.fixed_delay(2, 1, empty_result_predicate, None)
    assert invoke(Flaky(2, empty=True), on_empty, "b") == [("b", 3)]
    assert invoke(Flaky(5, empty=True), on_empty, "b") == []  # retries exhausted: the last result
    only_value_errors = AsyncRetryStrategy.fixed_delay(
        3, 1, None, functools.partial(exception_type_predicate, expected_error_type=ValueError)
    )
    with pytest.raises(ConnectionError, match="attempt 1"):  # not a ValueError: no retry
        invoke(Flaky(1), only_value_errors, "c")
    with pytest.raises(ConnectionError, match="attempt 1"):
        invoke(Flaky(1), AsyncRetryStrategy.no_restart(), "d")


def test_exponential_backoff_grows_to_its_maximum():
    strategy = AsyncRetryStrategy.exponential_backoff(5, 10, 35, 2.0, None, has_exception_predicate)
    assert [strategy.get_backoff_time_millis(n) for n in range(1, 5)] == [10, 20, 35, 35]
    assert strategy.can_retry(5) and not strategy.can_retry(6)


@pytest.mark.slow
@pytest.mark.parametrize("ordered", [True, False])
def test_a_job_with_retries_emits_every_value_once(ordered):
    env = StreamExecutionEnvironment.get_execution_environment({"flinklike.local.taskmanager-mode": "thread"})
    values = env.from_collection(list(range(50)), type_info=Types.INT())
    wait = AsyncDataStream.ordered_wait_with_retry if ordered else AsyncDataStream.unordered_wait_with_retry
    strategy = AsyncRetryStrategy.fixed_delay(2, 5, None, has_exception_predicate)
    wait(values, Flaky(2), 10_000, strategy, output_type=Types.TUPLE([Types.INT(), Types.INT()])).sink_to(
        CollectSink("out")
    )
    rows = CollectSink.rows(env.execute("retries"))
    assert sorted(rows) == [(v, 3) for v in range(50)]
    if ordered:
        assert [v for v, _ in rows] == list(range(50))


@pytest.mark.slow
def test_exhausted_retries_fail_the_job_with_the_last_error():
    env = StreamExecutionEnvironment.get_execution_environment({"flinklike.local.taskmanager-mode": "thread"})
    values = env.from_collection([1, 2], type_info=Types.INT())
    strategy = AsyncRetryStrategy.fixed_delay(1, 1, None, has_exception_predicate)
    AsyncDataStream.unordered_wait_with_retry(values, Flaky(5), 10_000, strategy).sink_to(CollectSink("out"))
    with pytest.raises(JobExecutionError, match="attempt 2 of"):
        env.execute("exhausted")
