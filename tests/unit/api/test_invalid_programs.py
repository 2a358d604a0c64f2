"""Programs that cannot run fail at execute(), naming the operator (issue 9 item 8)."""

from __future__ import annotations

import threading

import pytest

from connectors import CollectSink, SequenceSource
from flinklike_spark import MapFunction, StreamExecutionEnvironment
from flinklike_spark.errors import InvalidProgramError

pytestmark = pytest.mark.timeout(30)


class LockedMap(MapFunction):
    def __init__(self) -> None:
        self.lock = threading.Lock()  # cannot be pickled

    def map(self, value):
        return value


def program():
    env = StreamExecutionEnvironment.get_execution_environment({"flinklike.local.taskmanager-mode": "thread"})
    return env, env.from_source(SequenceSource(num_keys=2, records_per_key=3), name="seq")


def test_unpicklable_function_fails_execute_naming_the_operator():
    env, stream = program()
    stream.map(LockedMap()).name("locked map").uid("locked").sink_to(CollectSink("out"))
    # Translation (which execute() does before it starts a cluster) finds it ...
    with pytest.raises(InvalidProgramError, match="function of operator 'locked map'"):
        env.get_job_graph()
    # ... so execute() raises it itself, not a JobExecutionError from a deployed job.
    with pytest.raises(InvalidProgramError) as info:
        env.execute("locked")
    message = str(info.value)
    assert "function of operator 'locked map' (uid 'locked')" in message
    assert "LockedMap" in message and "cannot pickle '_thread.lock' object" in message


def test_unpicklable_key_selector_names_the_operator():
    env, stream = program()
    lock = threading.Lock()
    stream.key_by(lambda row: (lock, row["key"])[1]).map(lambda r: r).name("after key_by").sink_to(CollectSink("o"))
    with pytest.raises(InvalidProgramError, match="key selector of operator 'after key_by'"):
        env.get_job_graph()
