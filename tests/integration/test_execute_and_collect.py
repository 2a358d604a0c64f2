"""``execute_and_collect`` streams results of unbounded jobs and cancels the job when done (issue 13 item 5),
with PyFlink's semantics: an iterator without ``limit``, a list of at most ``limit`` records with it."""

from __future__ import annotations

import collections

import pytest

from connectors import SequenceSource
from flinklike_spark import KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor
from flinklike_spark.errors import JobExecutionError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def env(**config):
    return StreamExecutionEnvironment.get_execution_environment(
        {"parallelism.default": 2, "local.number-taskmanager": 2, **config}
    )


def unbounded(e, rate=2_000):
    return e.from_source(SequenceSource(num_keys=4, records_per_key=None, rows_per_second=rate), name="forever")


class RunningCount(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        yield {"key": value["key"], "seq": value["seq"], "n": n}


def assert_per_key_prefix(records):
    """Per key: seq 0, 1, 2, ... with none lost, duplicated or out of order, and n = seq + 1."""
    by_key = collections.defaultdict(list)
    for r in records:
        by_key[r["key"]].append(r)
    for key, rows in by_key.items():
        assert [r["seq"] for r in rows] == list(range(len(rows))), key
        assert [r["n"] for r in rows] == [r["seq"] + 1 for r in rows], key


def test_limit_returns_a_list_and_cancels_the_unbounded_job():
    e = env()
    records = unbounded(e).key_by("key").process(RunningCount()).execute_and_collect("limited", limit=200)
    assert isinstance(records, list) and len(records) == 200
    assert_per_key_prefix(records)


def test_the_iterator_yields_while_the_job_runs_and_close_cancels_it():
    e = env()
    iterator = unbounded(e).key_by("key").process(RunningCount()).execute_and_collect("iterated")
    with iterator as results:
        first = [next(results) for _ in range(100)]
    assert_per_key_prefix(first)
    assert list(iterator) == []  # closed: nothing more, and no error


class FailOnceAt(RunningCount):
    """Fails the first attempt at ``seq == at``; the restarted job resumes from the last checkpoint."""

    def __init__(self, at):
        self.at = at

    def open(self, runtime_context):
        super().open(runtime_context)
        self.attempt = runtime_context.attempt_number

    def process_element(self, value, ctx):
        if self.attempt == 0 and value["seq"] == self.at:
            raise RuntimeError("injected failure")
        yield from super().process_element(value, ctx)


@pytest.mark.parametrize("mode", ["aligned", "unaligned"])
def test_with_checkpointing_results_are_exactly_once_across_a_restart(tmp_path, mode):
    e = env(**{
        "execution.checkpointing.interval": "200 ms",
        "execution.checkpointing.dir": tmp_path.as_uri(),
        "execution.checkpointing.unaligned.enabled": mode == "unaligned",
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.delay": "100 ms",
    })  # fmt: skip
    with unbounded(e).key_by("key").process(FailOnceAt(400)).execute_and_collect("checkpointed") as results:
        first = [next(results) for _ in range(4 * 600)]  # past the failure at seq 400 of every key
    assert_per_key_prefix(first)


def test_a_bounded_job_ends_the_iteration_and_a_failed_one_raises():
    e = env()
    bounded = e.from_source(SequenceSource(num_keys=3, records_per_key=50), name="bounded")
    records = list(bounded.key_by("key").process(RunningCount()).execute_and_collect("bounded"))
    assert len(records) == 150
    assert_per_key_prefix(records)

    def boom(row):
        if row["seq"] == 20:
            raise ValueError("boom at 20")
        return row

    e = env()
    failing = e.from_source(SequenceSource(num_keys=3, records_per_key=50), name="bounded").map(boom)
    with pytest.raises(JobExecutionError, match="boom at 20"):
        list(failing.execute_and_collect("failing"))
