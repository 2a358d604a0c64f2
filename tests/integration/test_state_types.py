"""Declared state types against real jobs: a wrong-typed write fails in its operator, a named row
type may gain fields at its end across a savepoint, any other type change is refused at restore.

What PyFlink 2.3 does was checked on PyFlink itself, by encoding values with the coder its
keyed state uses (``pyflink.fn_execution.coders.from_type_info(t).get_impl().encode(v)``):
``Types.LONG()`` refuses ``"5"`` (TypeError) and ``2**63`` (OverflowError) and takes ``True``
(read back as 1) and ``5.0`` (read back as 5, so it truncates floats); ``Types.DOUBLE()`` takes
``1`` and ``True``; ``Types.STRING()`` refuses ``1``, ``b"a"`` and None; ``Types.BOOLEAN()``
takes ``1``, ``2`` and ``1.0`` as their truth value; ``Types.ROW_NAMED(['a', 'b'], ...)`` refuses
a tuple, a list, a dict, ``Row(a=1)`` and ``Row(a="1", b="x")``, takes ``Row(a=None, b=None)``
and drops the extra field of ``Row(1, "x", 3)``; ``Types.LIST(Types.LONG())`` refuses a tuple
and ``[1, "x"]`` and takes ``[1, None]``; ``Types.MAP(STRING, LONG)`` refuses ``{1: 1}`` and
``{"a": "x"}`` and takes ``{"a": None}``; ``PICKLED_BYTE_ARRAY`` takes anything. The checks here
refuse what PyFlink refuses, and also its lossy conversions (a float into LONG, an int into
BOOLEAN, an extra row field), since the value would be stored as given.
"""

from __future__ import annotations

import time

import pytest

from connectors import CollectSink, SequenceSource
from flinklike_spark import (
    KeyedProcessFunction,
    ListStateDescriptor,
    MapStateDescriptor,
    StreamExecutionEnvironment,
    ValueStateDescriptor,
)
from flinklike_spark.common import Row, Types
from flinklike_spark.datastream.functions import BroadcastProcessFunction
from flinklike_spark.errors import IncompatibleStateTypeError, StateTypeError
from flinklike_spark.state_processor import (
    KeyedStateBootstrapFunction,
    OperatorTransformation,
    SavepointReader,
    SavepointWriter,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

CONFIG = {"parallelism.default": 1, "local.number-taskmanager": 1}
OLD_ROW = Types.ROW_NAMED(["a", "b"], [Types.LONG(), Types.STRING()])
NEW_ROW = Types.ROW_NAMED(["a", "b", "c"], [Types.LONG(), Types.STRING(), Types.LONG()])


def _messages(exc: BaseException) -> str:
    """Every message of ``exc``'s cause chain (a task's failure reaches the client wrapped)."""
    texts = []
    while exc is not None:
        texts.append(str(exc))
        exc = exc.__cause__ or exc.__context__
    return "\n".join(texts)


class WritesWrongType(KeyedProcessFunction):
    """Writes the string ``"x<seq>"`` into a state declared with integer types."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def open(self, runtime_context):
        if self.kind == "value":
            self.state = runtime_context.get_state(ValueStateDescriptor("total", Types.LONG()))
        elif self.kind == "list":
            self.state = runtime_context.get_list_state(ListStateDescriptor("seen", Types.LONG()))
        else:
            self.state = runtime_context.get_map_state(MapStateDescriptor("by_seq", Types.LONG(), Types.LONG()))

    def process_element(self, value, ctx):
        written = value["seq"] if value["seq"] < 3 else f"x{value['seq']}"
        if self.kind == "value":
            self.state.update(written)
        elif self.kind == "list":
            self.state.add(written)
        else:
            self.state.put(value["seq"], written)
        yield value


@pytest.mark.parametrize(
    ("kind", "state", "declared", "what", "backend"),
    [
        ("value", "total", "Types.LONG()", "the value written is str 'x3'", "hashmap"),
        ("value", "total", "Types.LONG()", "the value written is str 'x3'", "rocksdb"),
        ("list", "seen", "Types.LONG()", "the element added is str 'x3'", "hashmap"),
        ("map", "by_seq", "Types.MAP(Types.LONG(), Types.LONG())", "the value of map key 3 is str 'x3'", "rocksdb"),
    ],
)
def test_a_wrong_typed_write_fails_the_job_naming_operator_state_key_type_and_value(
    kind, state, declared, what, backend
):
    if backend == "rocksdb":
        pytest.importorskip("rocksdict")
    env = StreamExecutionEnvironment.get_execution_environment(CONFIG | {"state.backend.type": backend})
    (
        env.from_collection([{"key": "k7", "seq": s} for s in range(5)]).uid("events")
        .key_by("key").process(WritesWrongType(kind)).name("totals").uid("totals-uid")
        .sink_to(CollectSink("out"))
    )  # fmt: skip
    with pytest.raises(Exception) as failure:  # noqa: PT011 - the job's failure wraps the task's
        env.execute("wrong type")
    text = _messages(failure.value)
    assert StateTypeError.__name__ in text
    assert "operator 'totals' (uid 'totals-uid')" in text
    assert f"state {state!r}" in text and f"declares {declared}" in text
    assert "for key 'k7'" in text and what in text
    assert "takes an int in [-2**63, 2**63 - 1]" in text


LIMITS = MapStateDescriptor("limits", Types.STRING(), Types.LONG())


class Limits(BroadcastProcessFunction):
    def process_element(self, value, ctx):
        yield {"x": value["x"], "limit": ctx.get_broadcast_state(LIMITS).get("max")}

    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(LIMITS).put("max", value["max"])


def test_broadcast_state_checks_its_declared_key_and_value_types():
    env = StreamExecutionEnvironment.get_execution_environment(CONFIG)
    numbers = env.from_collection([{"x": 1}])
    rules = env.from_collection([{"max": "ten"}])
    numbers.connect(rules.broadcast(LIMITS)).process(Limits()).name("limits").uid("limits").sink_to(CollectSink("l"))
    with pytest.raises(Exception) as failure:  # noqa: PT011 - the job's failure wraps the task's
        env.execute("broadcast")
    text = _messages(failure.value)
    assert "operator 'limits' (uid 'limits'): state 'limits'" in text
    assert "declares Types.MAP(Types.STRING(), Types.LONG()); the value of map key 'max' is str 'ten'" in text


class KeepsAnything(KeyedProcessFunction):
    """Undeclared state (no type, or PICKLED_BYTE_ARRAY) holds any picklable object."""

    def open(self, runtime_context):
        self.untyped = runtime_context.get_state(ValueStateDescriptor("untyped"))
        self.pickled = runtime_context.get_list_state(ListStateDescriptor("pickled", Types.PICKLED_BYTE_ARRAY()))

    def process_element(self, value, ctx):
        odd = [{"set": frozenset({value["seq"]})}, "text", 1.5, None, Row(1, "x", [2])][value["seq"] % 5]
        self.untyped.update(odd if odd is not None else "none")
        self.pickled.add(odd)
        yield {"key": value["key"], "count": len(self.pickled.get()), "last": repr(self.untyped.value())}


def test_undeclared_state_accepts_any_picklable_value():
    env = StreamExecutionEnvironment.get_execution_environment(CONFIG)
    events = [{"key": "k", "seq": s} for s in range(5)]
    env.from_collection(events).key_by("key").process(KeepsAnything()).sink_to(CollectSink("any"))
    rows = CollectSink.rows(env.execute("anything"))
    assert [r["count"] for r in rows] == [1, 2, 3, 4, 5]
    assert rows[-1]["last"] == repr(Row(1, "x", [2]))


class BootstrapRows(KeyedStateBootstrapFunction):
    def __init__(self, value_of=lambda row: Row(a=row["key"], b=f"b{row['key']}")) -> None:
        self.value_of = value_of

    def open(self, runtime_context):
        self.state = runtime_context.get_state(ValueStateDescriptor("rows", OLD_ROW))

    def process_element(self, value, ctx):
        self.state.update(self.value_of(value))


def test_a_bootstrap_writing_a_wrong_typed_value_fails_before_anything_is_written(tmp_path):
    target = tmp_path / "savepoints"
    data = [{"key": k} for k in range(10)]
    bad = BootstrapRows(lambda row: Row(a=row["key"], b=row["key"]) if row["key"] == 7 else Row(a=1, b="x"))
    writer = SavepointWriter.new_savepoint().with_operator(
        "rows", OperatorTransformation.bootstrap_with(data).key_by("key").transform(bad)
    )
    with pytest.raises(StateTypeError) as failure:
        writer.write(str(target))
    text = str(failure.value)
    assert "the bootstrap of operator uid 'rows'" in text and "state 'rows'" in text and "for key 7" in text
    assert "the value written.b is int 7, but Types.STRING() takes a str" in text
    assert not target.exists() or not any(target.rglob("*")), sorted(map(str, target.rglob("*")))

    columns = OperatorTransformation.bootstrap_with([{"key": 1, "n": "one"}]).key_by("key")
    with pytest.raises(StateTypeError, match=r"state 'n'.*for key 1, the value written is str 'one'"):
        SavepointWriter.new_savepoint().with_operator(
            "rows", columns.states(ValueStateDescriptor("n", Types.INT()))
        ).write(str(target))
    assert not target.exists() or not any(target.rglob("*"))


class ReadsRows(KeyedProcessFunction):
    def __init__(self, row_type) -> None:
        self.row_type = row_type

    def open(self, runtime_context):
        self.state = runtime_context.get_state(ValueStateDescriptor("rows", self.row_type))

    def process_element(self, value, ctx):
        row = self.state.value()
        yield {"key": value["key"], "row": repr(row)}
        if row is not None and len(row) == 3:
            self.state.update(Row(a=row.a, b=row.b, c=(row.c or 0) + 1))  # the new field is writable


@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_a_named_row_gaining_fields_at_its_end_restores_with_none_in_them(tmp_path, backend):
    if backend == "rocksdb":
        pytest.importorskip("rocksdict")
    data = [{"key": k} for k in range(20)]
    path = (
        SavepointWriter.new_savepoint()
        .with_operator("rows", OperatorTransformation.bootstrap_with(data).key_by("key").transform(BootstrapRows()))
        .write(str(tmp_path / "savepoints"))
    )
    assert SavepointReader.read(path).read_operator_state("rows").to_pylist()[0]["value_repr"] == repr(repr(OLD_ROW))

    env = StreamExecutionEnvironment.get_execution_environment(
        CONFIG | {"execution.state-recovery.path": path, "state.backend.type": backend}
    )
    events = [{"key": k} for k in range(20)] * 2
    env.from_collection(events).key_by("key").process(ReadsRows(NEW_ROW)).uid("rows").sink_to(CollectSink("rows"))
    rows = CollectSink.rows(env.execute("evolved"))
    first = {r["key"]: r["row"] for r in rows[:20]}
    assert first == {k: repr(Row(a=k, b=f"b{k}", c=None)) for k in range(20)}
    assert {r["row"] for r in rows[20:]} == {repr(Row(a=k, b=f"b{k}", c=1)) for k in range(20)}


class RowCount(KeyedProcessFunction):
    def open(self, runtime_context):
        self.state = runtime_context.get_state(ValueStateDescriptor("rows", OLD_ROW))

    def process_element(self, value, ctx):
        row = self.state.value()
        self.state.update(Row(a=(row.a if row else 0) + 1, b=str(value["seq"])))
        yield value


def test_a_retyped_row_field_is_refused_at_restore_naming_the_state_both_types_and_the_recipe(tmp_path):
    """The savepoint of a real job (stop with savepoint) records the declared type it was taken with;
    the job restored from it fails when the state is registered (in ``open``), before any record."""
    env = StreamExecutionEnvironment.get_execution_environment(
        CONFIG | {"execution.checkpointing.dir": str(tmp_path / "cp")}
    )
    (
        env.from_source(SequenceSource(num_keys=5, records_per_key=None, rows_per_second=2000), name="seq").uid("seq")
        .key_by("key").process(RowCount()).uid("rows")
        .sink_to(CollectSink("seq"))
    )  # fmt: skip
    client = env.execute_async("rows v1")
    deadline = time.monotonic() + 60
    while not any(client.task_metrics().values()):
        assert time.monotonic() < deadline, "tasks did not start"
        time.sleep(0.1)
    time.sleep(1.0)
    savepoint = client.stop_with_savepoint(timeout=120)
    with pytest.raises(Exception):  # noqa: B017, PT011 - stopped: wait() raises JobCancelledError
        client.wait(60)

    retyped = Types.ROW_NAMED(["a", "b"], [Types.LONG(), Types.LONG()])
    env = StreamExecutionEnvironment.get_execution_environment(
        CONFIG | {"execution.state-recovery.path": savepoint.path}
    )
    (
        env.from_source(SequenceSource(num_keys=5, records_per_key=None, rows_per_second=2000), name="seq").uid("seq")
        .key_by("key").process(ReadsRows(retyped)).uid("rows")
        .sink_to(CollectSink("r"))
    )  # fmt: skip
    with pytest.raises(Exception) as failure:  # noqa: PT011 - the job's failure wraps the task's
        env.execute("rows v2")
    text = _messages(failure.value)
    assert IncompatibleStateTypeError.__name__ in text and "state 'rows'" in text
    assert f"was written as {OLD_ROW!r} and is now declared as {retyped!r}" in text
    assert "docs/state-processor.md" in text and "SavepointWriter" in text
