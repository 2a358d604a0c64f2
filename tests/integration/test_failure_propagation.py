"""How failures reach the client: promptly, with the root cause, and nothing written afterwards.

Real multi-process local clusters. Timings are asserted loosely: "the job
fails within 20 s" (cluster start included) separates a prompt failure from
one that waits for ``taskmanager.network.request-backoff.max`` (30 s) or on a
frozen process; it is not a speed assertion.
"""

from __future__ import annotations

import logging
import time

import pytest

from connectors import CollectSink, DeltaSink, SequenceSource
from flinklike_spark import JobExecutionError, RemoteTaskError, StreamExecutionEnvironment

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

PROMPT = 20.0  # seconds; far below the 30 s request backoff plus cluster start


def _fail_on_first_record(row):
    raise ValueError(f"user function rejects {row}")


def _early_failing_job(kind: str, tmp_path) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment(
        {"parallelism.default": 2, "local.number-taskmanager": 2}
    )
    source = env.from_source(SequenceSource(num_keys=10, records_per_key=100_000), name="seq")
    if kind == "map":
        source.map(_fail_on_first_record).key_by("key").map(lambda r: r).sink_to(CollectSink("never"))
    elif kind == "key_by":
        source.key_by(lambda r: r["missing"]).map(lambda r: r).sink_to(CollectSink("never"))
    else:
        source.key_by("key").map(lambda r: r).sink_to(DeltaSink("nosuchfs://bucket/table"))
    return env


# The user's exception as the client sees it (RemoteTaskError message "<Type>: <message>").
EXPECTED = {
    "map": "ValueError: user function rejects",
    "key_by": "KeyError: 'missing'",
    "delta_unknown_scheme": "ValueError: Protocol not known: nosuchfs",
}


@pytest.mark.parametrize("run", [1, 2, 3])
@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_an_early_task_failure_fails_the_job_promptly_with_the_users_exception(kind, run, tmp_path, caplog):
    # Before the fix: 4 runs in 5 waited ~31 s (a consumer in the partition lookup until
    # request-backoff.max, not woken by its cancellation), and the cause was often the
    # consumer's "BrokenChannelError: partition ... was released by its producer".
    env = _early_failing_job(kind, tmp_path)
    with caplog.at_level(logging.INFO, logger="flinklike_spark._runtime.jobmaster.scheduler"):
        started = time.monotonic()
        client = env.execute_async(f"early failure {kind}")
        with pytest.raises(JobExecutionError) as info:
            client.wait(120)
        elapsed = time.monotonic() - started
    assert elapsed < PROMPT, f"the failure took {elapsed:.1f} s to reach the client"
    cause = info.value.__cause__
    assert isinstance(cause, RemoteTaskError)
    assert str(cause).startswith(EXPECTED[kind]), str(cause)
    assert EXPECTED[kind] in str(info.value)
    # Only root causes are task failures: consumers of the failed producer end CANCELED.
    failed = [r.getMessage() for r in caplog.records if r.getMessage().startswith("execution ")]
    assert failed and all(EXPECTED[kind] in m for m in failed), failed
