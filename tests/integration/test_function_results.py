"""A function returning the wrong type fails the job naming the operator and what it
must return, instead of ``AttributeError: 'str' object has no attribute 'keys'``; plain
values on a stream without a declared type are pickled, as in PyFlink."""

from __future__ import annotations

import pytest

from connectors import CollectSink, SequenceSource
from flinklike_spark import KeyedProcessFunction, ProcessFunction, StreamExecutionEnvironment, Types
from flinklike_spark.errors import JobExecutionError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]


class ReturnsDict(ProcessFunction):
    def process_element(self, value, ctx):
        return {"key": value["key"]}  # should be `yield`


class KeyedReturnsDict(KeyedProcessFunction):
    def process_element(self, value, ctx):
        return {"key": value["key"]}


KEY_ROW = Types.ROW_NAMED(["key"], [Types.LONG()])


class YieldsInts(KeyedProcessFunction):
    def process_element(self, value, ctx):
        yield value["seq"]


class TimerReturnsDict(KeyedProcessFunction):
    def process_element(self, value, ctx):
        ctx.timer_service().register_event_time_timer(0)

    def on_timer(self, timestamp, ctx):
        return {"key": ctx.get_current_key()}


CASES = {
    "process_element returns a dict": (
        lambda s: s.process(ReturnsDict()).name("enrich"),
        "process_element() of operator 'enrich' (uid 'process-1') returned dict {'key': 0}; it must yield rows",
    ),
    "keyed process_element returns a dict": (
        lambda s: s.key_by("key").process(KeyedReturnsDict()).name("count"),
        "process_element() of operator 'count' (uid 'keyed-process-1') returned dict",
    ),
    "process_element yields ints": (
        lambda s: s.key_by("key").process(YieldsInts(), output_type=KEY_ROW).name("seqs"),
        "process_element() of operator 'seqs' (uid 'keyed-process-1') produced int 0 as a row",
    ),
    "on_timer returns a dict": (
        lambda s: s.key_by("key").process(TimerReturnsDict()).name("timers"),
        "on_timer() of operator 'timers' (uid 'keyed-process-1') returned dict",
    ),
    "map returns an int": (
        lambda s: s.map(lambda r: 5, output_type=KEY_ROW).name("to int"),
        "map() of operator 'to int' (uid 'map-1') returned int 5; it must return a row",
    ),
    "map returns None, then a chained map": (
        lambda s: s.map(lambda r: None, output_type=KEY_ROW).name("drop").map(lambda r: r["key"]),
        "map() of operator 'drop' (uid 'map-1') returned NoneType None; it must return a row; "
        "to drop rows use filter() or flat_map()",
    ),
    "flat_map returns a dict": (
        lambda s: s.flat_map(lambda r: r).name("explode"),
        "flat_map() of operator 'explode' (uid 'flat-map-1') returned dict",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_wrong_return_type_names_operator_and_contract(case):
    build, expected = CASES[case]
    env = StreamExecutionEnvironment.get_execution_environment({"flinklike.local.taskmanager-mode": "thread"})
    build(env.from_source(SequenceSource(num_keys=2, records_per_key=3), name="seq")).sink_to(CollectSink("out"))
    with pytest.raises(JobExecutionError) as info:
        env.execute(case)
    message = str(info.value)
    assert "FunctionResultError: " + expected in message, message
    assert "has no attribute 'keys'" not in message


@pytest.mark.parametrize("error", ["FunctionResultError", "SchemaMismatchError"])
def test_program_errors_fail_at_once_under_a_restart_strategy(tmp_path, error):
    """Under checkpointing the default restart strategy restarts failed tasks; a program error
    would fail again on the replayed input, so it fails the job without a restart."""
    env = StreamExecutionEnvironment.get_execution_environment(
        {
            "flinklike.local.taskmanager-mode": "thread",
            "execution.checkpointing.interval": "100ms",
            "execution.checkpointing.dir": str(tmp_path / "ck"),
        }
    )
    stream = env.from_source(SequenceSource(num_keys=2, records_per_key=3), name="seq")
    if error == "FunctionResultError":
        stream = stream.map(lambda r: 5, output_type=KEY_ROW)
    else:
        stream = stream.map(lambda r: {**r, "extra": 1} if r["seq"] == 2 else r)  # schema fixed by the first rows
    stream.sink_to(CollectSink("out"))
    client = env.execute_async(error)
    with pytest.raises(JobExecutionError, match=error):
        client.wait(30)
    assert client.num_restarts == 0


def test_a_value_that_does_not_fit_the_declared_type_fails_the_job_naming_it():
    """PyFlink program shape: a map declared to return (key LONG, price LONG) returns price=0.99."""
    from flinklike_spark import Row, Types

    env = StreamExecutionEnvironment.get_execution_environment(
        {"parallelism.default": 1, "flinklike.local.taskmanager-mode": "thread"}
    )
    row_type = Types.ROW_NAMED(["key", "price"], [Types.LONG(), Types.LONG()])
    env.from_collection([1, 2], type_info=Types.LONG()).map(
        lambda v: Row(key=v, price=0.99), output_type=row_type
    ).name("prices").sink_to(CollectSink("prices"))
    with pytest.raises(JobExecutionError, match=r"SchemaMismatchError: stream 'prices': field 'price' .* 0\.99"):
        env.execute("declared types")


class Point:
    def __init__(self, x: int) -> None:
        self.x = x


def test_plain_values_and_objects_without_a_declared_type_are_pickled_as_in_pyflink():
    env = StreamExecutionEnvironment.get_execution_environment({"flinklike.local.taskmanager-mode": "thread"})
    words = env.from_collection(["to be", "or not", "to be"])  # PyFlink: no type_info, pickled strings
    counted = (
        words.flat_map(lambda line: line.split())
        .map(lambda word: Point(len(word)))
        .map(lambda point: (point.x, 1), output_type=Types.TUPLE([Types.INT(), Types.INT()]))
        .key_by(lambda pair: pair[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
    )
    counted.map(lambda pair: None if pair[1] < 0 else pair[1]).sink_to(CollectSink("out"))
    rows = CollectSink.rows(env.execute("pickled"))
    assert sorted(rows) == [1, 1, 2, 3, 4, 5]  # rolling counts: five words of length 2, one of 3


def _forgot_return(row):
    {"key": row["key"], "seq": row["seq"]}  # noqa: B018 - the missing `return` under test


@pytest.mark.parametrize("use", ["key_by", "timestamp assigner"])
def test_a_map_that_returns_nothing_is_named_where_a_field_is_used_by_name(use):
    """A forgotten `return` makes a stream of None (plain values are allowed, as in PyFlink); the next
    field access by name names the operator and the missing return, not only the field ``f0``."""
    from flinklike_spark import WatermarkStrategy

    env = StreamExecutionEnvironment.get_execution_environment({"flinklike.local.taskmanager-mode": "thread"})
    mapped = env.from_source(SequenceSource(num_keys=2, records_per_key=3), name="seq").map(_forgot_return)
    if use == "key_by":
        out = mapped.name("enrich").key_by("key").reduce(lambda a, b: a)
        operator = "operator 'enrich' (uid 'map-1')"
    else:
        strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner("seq")
        out = mapped.name("enrich").assign_timestamps_and_watermarks(strategy)
        operator = "operator 'enrich'"
    out.sink_to(CollectSink("out"))
    with pytest.raises(JobExecutionError) as info:
        env.execute(use)
    message = str(info.value)
    assert f"{operator} emitted plain values (pickled Python objects, e.g. None)" in message, message
    assert "every record is None: its function returned nothing (a map function without `return`?)" in message
