"""AsyncDataStream.unordered_wait_with_retry / ordered_wait_with_retry with AsyncRetryStrategy and
async_retry_predicates: a flaky lookup that raises once for multiples of 3 and answers empty twice for
values that are 1 mod 3; each result carries the attempt that produced it."""

import asyncio

from pyflink.common import Time, Types
from pyflink.datastream import AsyncDataStream, AsyncFunction, StreamExecutionEnvironment, async_retry_predicates
from pyflink.datastream.functions import AsyncRetryStrategy


class FlakyLookup(AsyncFunction):
    def open(self, runtime_context):
        self.attempts = {}

    async def async_invoke(self, value):
        attempt = self.attempts.get(value, 0) + 1
        self.attempts[value] = attempt
        await asyncio.sleep(0.001 * (value % 4))
        if value % 3 == 0 and attempt < 2:
            raise ValueError(f"lookup of {value} failed")
        if value % 3 == 1 and attempt < 3:
            return []
        if value == 8:
            return []  # never answers: dropped once the attempts are used up
        return [(value, attempt)]


def main():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    ds = env.from_collection(list(range(1, 10)), type_info=Types.INT())
    out = Types.TUPLE([Types.INT(), Types.INT()])

    fixed = AsyncRetryStrategy.fixed_delay(
        3, 10, async_retry_predicates.empty_result_predicate, async_retry_predicates.has_exception_predicate
    )
    unordered = AsyncDataStream.unordered_wait_with_retry(ds, FlakyLookup(), Time.seconds(10), fixed, output_type=out)

    backoff = AsyncRetryStrategy.exponential_backoff(
        4,
        5,
        40,
        2.0,
        async_retry_predicates.empty_result_predicate,
        lambda error: async_retry_predicates.exception_type_predicate(error, ValueError),
    )
    ordered = AsyncDataStream.ordered_wait_with_retry(
        ds, FlakyLookup(), Time.seconds(10), backoff, capacity=4, output_type=out
    )

    print("unordered (sorted):", sorted(unordered.execute_and_collect()))
    print("ordered:", list(ordered.execute_and_collect()))


if __name__ == "__main__":
    main()
