"""The State Processor API without Spark or a cluster: pyarrow tables in, savepoints out, and back.

What a job restores is checked in tests/integration/test_state_processor.py; here the
column shapes of every state kind, the runtime's stored form (what a restore hands the
backend), time-to-live stamps, timers and broadcast state, and the errors.
"""

from __future__ import annotations

import pickle
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest

from checkpointing import (
    CheckpointCommitter,
    CheckpointRecord,
    OperatorStateSnapshot,
    SnapshotWriter,
    decode_operator_state,
    list_completed_checkpoints,
    read_operator_state,
    write_state_snapshots,
)
from checkpointing.schemas import StateKind
from flinklike_spark._runtime.state.key_groups import key_group_for
from flinklike_spark.datastream.state import (
    ListStateDescriptor,
    MapStateDescriptor,
    StateTtlConfig,
    TtlValue,
    ValueStateDescriptor,
)
from flinklike_spark.errors import StateLossError, StateNotFoundError, StateProcessorError
from flinklike_spark.state_processor import (
    KeyedStateBootstrapFunction,
    OperatorIdentifier,
    OperatorTransformation,
    SavepointReader,
    SavepointWriter,
)
from flinklike_spark.state_processor.state_values import decode_values, encode_values

NOW = 1_700_000_000_000


def _ttl(descriptor):
    descriptor.enable_time_to_live(StateTtlConfig.new_builder(timedelta(minutes=5)).build())
    return descriptor


def _stored(path: str, uid: str) -> dict[tuple[str, object], object]:
    """(state name, key) -> the value a restore hands the backend."""
    base, job, chk = path.rsplit("/", 2)
    table = read_operator_state(base, job, int(chk.removeprefix("chk-")), uid)
    return {(e.state_name, e.key): e.value for e in decode_operator_state(table)}


def test_every_kind_is_stored_as_the_runtime_stores_it_and_reads_back_as_written(tmp_path):
    data = pa.table({
        "key": ["a", "b", "c"],
        "count": [1, None, 3],
        "history": [[1, 2], [], [5]],
        "prefs": pa.array([[("x", 1)], [("y", 2), ("z", 3)], None], pa.map_(pa.string(), pa.int64())),
        "seen": ["s1", "s2", "s3"],
        "seen_ttl_timestamp": pa.array([NOW, NOW + 1, NOW + 2], pa.timestamp("ms", tz="UTC")),
    })  # fmt: skip
    transformation = (
        OperatorTransformation.bootstrap_with(data)
        .key_by("key")
        .states(
            "count", ListStateDescriptor("history"), MapStateDescriptor("prefs"), _ttl(ValueStateDescriptor("seen"))
        )
    )
    path = SavepointWriter.new_savepoint(max_parallelism=16).with_operator("op", transformation).write(str(tmp_path))

    stored = _stored(path, "op")
    assert stored == {
        ("count", "a"): 1, ("count", "c"): 3,
        ("history", "a"): [1, 2], ("history", "c"): [5],
        ("prefs", "a"): {"x": 1}, ("prefs", "b"): {"y": 2, "z": 3},
        ("seen", "a"): TtlValue("s1", NOW), ("seen", "b"): TtlValue("s2", NOW + 1), ("seen", "c"): TtlValue("s3", NOW + 2),
    }  # fmt: skip
    reader = SavepointReader.read(path)
    assert reader.max_parallelism == {"op": 16} and reader.checkpoint.kind == "savepoint"
    back = {r["key"]: r for r in reader.read_keyed_state(OperatorIdentifier.for_uid("op")).to_pylist()}
    assert back["a"]["count"] == 1 and back["b"]["count"] is None
    assert back["b"]["history"] is None and back["a"]["history"] == [1, 2]
    assert back["b"]["prefs"] == [("y", 2), ("z", 3)] and back["c"]["prefs"] is None
    assert back["c"]["seen_ttl_timestamp"] == datetime.fromtimestamp((NOW + 2) / 1000, UTC)
    assert reader.read_keyed_state("op").schema.field("seen_ttl_timestamp").type == pa.timestamp("ms", tz="UTC")
    assert {k: r["key_group"] for k, r in back.items()} == {k: key_group_for(k, 16) for k in "abc"}


def test_list_and_map_state_with_ttl_read_and_write_their_timestamps(tmp_path):
    tags, prefs = _ttl(ListStateDescriptor("tags")), _ttl(MapStateDescriptor("prefs"))
    at = [datetime.fromtimestamp((NOW + i) / 1000, UTC) for i in range(3)]
    data = pa.table({
        "key": [1], "tags": [["x", "y"]],
        "tags_ttl_timestamp": pa.array([[at[0], at[1]]], pa.list_(pa.timestamp("ms", tz="UTC"))),
        "prefs": pa.array([[("p", 1.5)]], pa.map_(pa.string(), pa.float64())),
        "prefs_ttl_timestamp": pa.array([[("p", at[2])]], pa.map_(pa.string(), pa.timestamp("ms", tz="UTC"))),
    })  # fmt: skip
    path = SavepointWriter.new_savepoint().with_operator(
        "op", OperatorTransformation.bootstrap_with(data).key_by("key").states(tags, prefs)
    ).write(str(tmp_path))  # fmt: skip
    assert _stored(path, "op") == {
        ("tags", 1): [TtlValue("x", NOW), TtlValue("y", NOW + 1)], ("prefs", 1): {"p": TtlValue(1.5, NOW + 2)},
    }  # fmt: skip
    back = SavepointReader.read(path).read_keyed_state("op")
    assert back.select(data.column_names).equals(data)


def test_ttl_values_round_trip_per_element_and_per_entry():
    stamps_at = datetime.fromtimestamp(NOW / 1000, UTC)
    lists = [[TtlValue(1, NOW), TtlValue(2, NOW + 5)]]
    values, stamps = decode_values(StateKind.LIST, lists, ttl=True)
    assert values == [[1, 2]] and stamps[0][0] == stamps_at
    assert encode_values(StateKind.LIST, values, stamps, ttl=True, now_ms=0, what="s") == lists
    maps = [{"k": TtlValue("v", NOW)}]
    values, stamps = decode_values(StateKind.MAP, maps, ttl=True)
    assert encode_values(StateKind.MAP, values, stamps, ttl=True, now_ms=0, what="s") == maps
    # without a timestamp column, entries are stamped with the time of writing
    assert encode_values(StateKind.VALUE, [7], None, ttl=True, now_ms=NOW, what="s") == [TtlValue(7, NOW)]
    with pytest.raises(StateProcessorError, match="s: list state needs a list per key, got 'abc'"):
        encode_values(StateKind.LIST, ["abc"], None, ttl=False, now_ms=0, what="s")
    with pytest.raises(StateProcessorError, match="2 list elements but 1 last access times"):
        encode_values(StateKind.LIST, [[1, 2]], [[stamps_at]], ttl=True, now_ms=0, what="s")


class Sessions(KeyedStateBootstrapFunction):
    def open(self, runtime_context):
        self.visits = runtime_context.get_list_state(ListStateDescriptor("visits"))

    def process_element(self, value, ctx):
        self.visits.add(value["page"])
        ctx.timer_service().register_event_time_timer(value["ts"] + 1000)
        ctx.timer_service().register_processing_time_timer(5)


def test_bootstrap_function_writes_state_and_timers_per_key(tmp_path):
    rows = [{"user": u, "page": p, "ts": t} for u, p, t in [(1, "a", 10), (2, "b", 20), (1, "c", 30)]]
    path = SavepointWriter.new_savepoint().with_operator(
        "sessions", OperatorTransformation.bootstrap_with(rows).key_by("user").transform(Sessions())
    ).write(str(tmp_path))  # fmt: skip
    reader = SavepointReader.read(path)
    assert {r["key"]: r["visits"] for r in reader.read_keyed_state("sessions").to_pylist()} == {1: ["a", "c"], 2: ["b"]}
    timers = {(t["key"], t["timestamp"], t["time_domain"]) for t in reader.read_timers("sessions").to_pylist()}
    assert timers == {
        (1, 1010, "event_time"), (1, 1030, "event_time"), (2, 1020, "event_time"),
        (1, 5, "processing_time"), (2, 5, "processing_time"),
    }  # fmt: skip


def test_broadcast_and_operator_state_are_read_and_copied(tmp_path):
    base = str(tmp_path / "cp")
    job = "0" * 32
    committer = CheckpointCommitter(base)
    handles = []
    for subtask in range(2):
        with SnapshotWriter(base, job, 4, "rules", subtask) as writer:
            write_state_snapshots(writer, [
                OperatorStateSnapshot(name="_broadcast/rules", kind=StateKind.OPERATOR, entries=[("r1", {"limit": 5})]),
                OperatorStateSnapshot(name="offsets", kind=StateKind.SOURCE_SPLIT, entries=[(f"split-{subtask}", 7)]),
            ])  # fmt: skip
            handles.append(writer.finish())
    committer.commit(job, 4, handles, CheckpointRecord(trigger_time=datetime.now(UTC), parallelism={"rules": 2}))
    reader = SavepointReader.read(base)
    assert reader.read_broadcast_state("rules", "rules").to_pylist() == [{"key": "r1", "value": {"limit": 5}}]
    with pytest.raises(StateNotFoundError, match="no broadcast state 'other'; its broadcast states: \\['rules'\\]"):
        reader.read_broadcast_state("rules", "other")
    assert reader.read_operator_state("rules", "offsets")["subtask"].to_pylist() == [0, 1]

    derived = SavepointWriter.from_existing_savepoint(base).write(str(tmp_path / "sp"))
    copy = SavepointReader.read(derived)
    assert copy.checkpoint.checkpoint_id == 4 and copy.checkpoint.parallelism == {"rules": 2}
    assert copy.checkpoint.lineage_id == job and copy.checkpoint.properties["derived_from"] == f"{base}/{job}/chk-4"
    assert sorted(copy.read_operator_state("rules")["value_repr"].to_pylist()) == [
        "7",
        "7",
        "{'limit': 5}",
        "{'limit': 5}",
    ]


def test_errors_name_the_bad_value_and_the_choices(tmp_path):
    path = SavepointWriter.new_savepoint().with_operator(
        "op", OperatorTransformation.bootstrap_with([{"key": 1, "n": 1}]).key_by("key").states("n")
    ).write(str(tmp_path))  # fmt: skip
    with pytest.raises(StateNotFoundError, match="no state of operator uid 'nope'; its operators: \\['op'\\]"):
        SavepointReader.read(path).read_timers("nope")
    with pytest.raises(StateNotFoundError, match="holds no state of operator uid 'nope'"):
        SavepointWriter.from_existing_savepoint(path).remove_operator("nope")
    with pytest.raises(StateProcessorError, match="with_operator: operator 'op' was given twice"):
        t = OperatorTransformation.bootstrap_with([{"key": 1}]).key_by("key").states("key")
        SavepointWriter.new_savepoint().with_operator("op", t).with_operator("op", t)
    with pytest.raises(StateProcessorError, match="cannot read state data from a int"):
        SavepointWriter.new_savepoint().with_operator(
            "op", OperatorTransformation.bootstrap_with(5).key_by("key").states("n")
        ).write(str(tmp_path))
    with pytest.raises(StateProcessorError, match="would hold no state"):
        SavepointWriter.from_existing_savepoint(path).remove_operator("op").write(str(tmp_path))
    with pytest.raises(StateProcessorError, match="an operator uid must be a non-empty string"):
        OperatorIdentifier.for_uid("")
    assert len(list_completed_checkpoints(str(tmp_path))) == 1, "a failed write committed something"


def test_a_derived_savepoint_keeps_each_operators_key_groups_unless_told(tmp_path):
    rows = [{"key": k, "n": k} for k in range(50)]
    first = SavepointWriter.new_savepoint(max_parallelism=64).with_operator(
        "a", OperatorTransformation.bootstrap_with(rows).key_by("key").states("n")
    ).write(str(tmp_path))  # fmt: skip
    second = SavepointWriter.from_existing_savepoint(first).with_operator(
        "b", OperatorTransformation.bootstrap_with(rows).key_by("key").states("n")
    ).write(str(tmp_path))  # fmt: skip
    reader = SavepointReader.read(second)
    assert reader.max_parallelism == {"a": 64, "b": 64}
    assert reader.read_keyed_state("a").equals(SavepointReader.read(first).read_keyed_state("a"))
    third = SavepointReader.read(
        SavepointWriter.from_existing_savepoint(second).with_max_parallelism(8).write(str(tmp_path))
    )
    assert third.max_parallelism == {"a": 8, "b": 8}
    assert {r["key"]: r["key_group"] for r in third.read_keyed_state("b").to_pylist()} == {
        k: key_group_for(k, 8) for k in range(50)
    }


def test_an_unaligned_checkpoint_with_in_flight_data_is_refused_as_a_source(tmp_path):
    base = str(tmp_path / "cp")
    job = "1" * 32
    with SnapshotWriter(base, job, 2, "op", 0) as writer:
        writer.add_keyed_state("n", [(0, "k", 1)])
        writer.add_channel_state("input", 0, 0, 0, pa.record_batch({"x": [1, 2]}))
        handle = writer.finish()
    CheckpointCommitter(base).commit(
        job, 2, [handle], CheckpointRecord(trigger_time=datetime.now(UTC), mode="unaligned")
    )
    assert SavepointReader.read(base).read_keyed_state("op").to_pylist() == [{"key": "k", "n": 1, "key_group": 0}]
    with pytest.raises(StateProcessorError, match="unaligned checkpoint holding \\d+ bytes of in-flight data"):
        SavepointWriter.from_existing_savepoint(base)


# -- replacing an operator keeps every held state unless one is dropped explicitly -----------------


def _counter_savepoint(tmp_path, **columns) -> str:
    """A savepoint of operator ``counter`` keyed by ``user``: value state ``count``, and the ``columns``
    given (list columns become list states)."""
    data = pa.table({"user": [1, 2], "count": [10, 20], **columns})
    descriptors = ["count"] + [
        ListStateDescriptor(name) if isinstance(v[0], list) else name for name, v in columns.items()
    ]
    return SavepointWriter.new_savepoint().with_operator(
        "counter", OperatorTransformation.bootstrap_with(data).key_by("user").states(*descriptors)
    ).write(str(tmp_path / "source"))  # fmt: skip


class Clicks(KeyedStateBootstrapFunction):
    """Counts rows per key in each state named: value state, or list state (one element per row) if in ``lists``."""

    def __init__(self, *names, lists=()):
        self.names = names
        self.lists = set(lists)

    def open(self, runtime_context):
        self.values = [runtime_context.get_state(ValueStateDescriptor(n)) for n in self.names if n not in self.lists]
        self.appended = [runtime_context.get_list_state(ListStateDescriptor(n)) for n in self.names if n in self.lists]

    def process_element(self, value, ctx):
        for state in self.values:
            state.update((state.value() or 0) + 1)
        for state in self.appended:
            state.add(1)


def test_replacing_an_operator_with_a_mistyped_state_name_is_refused_naming_both(tmp_path):
    source = _counter_savepoint(tmp_path)
    clicks = OperatorTransformation.bootstrap_with([{"user": 1, "clicks": 3}]).key_by("user").states("clicks")
    writer = SavepointWriter.from_existing_savepoint(source).with_operator(
        OperatorIdentifier.for_uid("counter"), clicks
    )
    with pytest.raises(StateLossError) as raised:
        writer.write(str(tmp_path / "out"))
    message = str(raised.value)
    assert "does not write 'count'" in message
    assert "holds 'count' (value); the transformation writes 'clicks' (value)" in message
    assert ".drop_state('counter', 'count')" in message and ".remove_operator('counter')" in message
    assert isinstance(raised.value, StateProcessorError)
    error = pickle.loads(pickle.dumps(raised.value))
    assert (error.operator_uid, error.held, error.written) == ("counter", {"count": "value"}, {"clicks": "value"})
    assert str(error) == message
    assert not list_completed_checkpoints(str(tmp_path / "out")), "a refused write committed a savepoint"
    assert SavepointReader.read(source).read_keyed_state("counter")["count"].to_pylist() == [10, 20]


def test_writing_a_held_state_as_another_kind_is_refused(tmp_path):
    source = _counter_savepoint(tmp_path)
    as_list = OperatorTransformation.bootstrap_with([{"user": 1, "count": [1]}]).key_by("user")
    refused = "writes 'count' as list state, held as value state.*drop_state\\('counter', 'count'\\)"
    with pytest.raises(StateLossError, match=refused):
        SavepointWriter.from_existing_savepoint(source).with_operator(
            "counter", as_list.states(ListStateDescriptor("count"))
        ).write(str(tmp_path / "out"))  # fmt: skip
    # the same from a bootstrap function: refused once it ran, before anything is written
    rows = OperatorTransformation.bootstrap_with([{"user": 1}, {"user": 3}]).key_by("user")
    with pytest.raises(StateLossError, match="writes 'count' as list state, held as value state"):
        SavepointWriter.from_existing_savepoint(source).with_operator(
            "counter", rows.transform(Clicks("count", lists={"count"}))
        ).write(str(tmp_path / "out"))  # fmt: skip
    # dropped explicitly, the held value state is replaced by the list state
    path = (
        SavepointWriter.from_existing_savepoint(source)
        .with_operator("counter", as_list.states(ListStateDescriptor("count")))
        .drop_state("counter", "count")
        .write(str(tmp_path / "out"))
    )
    assert SavepointReader.read(path).read_keyed_state("counter").to_pylist() == [
        {"key": 1, "count": [1], "key_group": key_group_for(1, 128)}
    ]
    assert len(list_completed_checkpoints(str(tmp_path / "out"))) == 1


def test_a_bootstrap_function_must_register_every_held_state(tmp_path):
    source = _counter_savepoint(tmp_path, recent=[[1], [2, 3]])
    rows = OperatorTransformation.bootstrap_with([{"user": 1}, {"user": 3}]).key_by("user")
    with pytest.raises(StateLossError, match="does not write 'count', 'recent'.*writes 'clicks' \\(value\\)"):
        SavepointWriter.from_existing_savepoint(source).with_operator(
            "counter", rows.transform(Clicks("clicks"))
        ).write(str(tmp_path / "out"))

    # every held state registered (one never updated: written empty, as the function says) passes
    class CountOnly(KeyedStateBootstrapFunction):
        def open(self, runtime_context):
            self.count = runtime_context.get_state(ValueStateDescriptor("count"))
            runtime_context.get_list_state(ListStateDescriptor("recent"))

        def process_element(self, value, ctx):
            self.count.update((self.count.value() or 0) + 1)

    path = (
        SavepointWriter.from_existing_savepoint(source)
        .with_operator("counter", rows.transform(CountOnly()))
        .write(str(tmp_path / "out"))
    )
    assert SavepointReader.read(path).read_keyed_state("counter").column_names == ["key", "count", "key_group"]


def test_drop_state_leaves_the_named_states_out_and_keeps_the_others(tmp_path):
    source = _counter_savepoint(tmp_path, recent=[[1], [2, 3]], last=[7, 8])
    out = str(tmp_path / "out")
    # copied without a with_operator: the other states are kept as they were
    path = SavepointWriter.from_existing_savepoint(source).drop_state("counter", "recent").write(out)
    kept = SavepointReader.read(path).read_keyed_state("counter")
    assert kept.column_names == ["key", "count", "last", "key_group"]
    assert kept.equals(SavepointReader.read(source).read_keyed_state("counter", ["count", "last"]))
    # with a with_operator (given before or after drop_state), the dropped states need not be written
    count = OperatorTransformation.bootstrap_with([{"user": 1, "count": 5}]).key_by("user").states("count")
    path = (
        SavepointWriter.from_existing_savepoint(source)
        .with_operator("counter", count)
        .drop_state("counter", "recent")
        .drop_state("counter", "last")
        .write(out)
    )
    assert SavepointReader.read(path).read_keyed_state("counter").column_names == ["key", "count", "key_group"]
    with pytest.raises(StateLossError, match="does not write 'last'"):
        SavepointWriter.from_existing_savepoint(source).drop_state("counter", "recent").with_operator(
            "counter", count
        ).write(out)  # fmt: skip
    # remove_operator drops all of it: Flink's way of replacing an operator
    path = SavepointWriter.from_existing_savepoint(source).remove_operator("counter").with_operator(
        "counter", count
    ).write(out)  # fmt: skip
    assert SavepointReader.read(path).read_keyed_state("counter").column_names == ["key", "count", "key_group"]


def test_drop_state_names_what_the_source_holds(tmp_path):
    source = _counter_savepoint(tmp_path, recent=[[1], [2, 3]])
    writer = SavepointWriter.from_existing_savepoint(source)
    held = "its keyed states: 'count' \\(value\\), 'recent' \\(list\\)"
    with pytest.raises(StateNotFoundError, match=f"no keyed state \\['clicks'\\].*{held}"):
        writer.drop_state("counter", "count", "clicks")
    with pytest.raises(
        StateNotFoundError, match="holds no state of operator uid 'nope'; its operators: \\['counter'\\]"
    ):
        writer.drop_state("nope", "count")
    with pytest.raises(StateProcessorError, match="needs the names of the states to drop"):
        writer.drop_state("counter")
    with pytest.raises(StateNotFoundError, match="holds no state of operator uid 'counter'; its operators: \\[\\]"):
        SavepointWriter.new_savepoint().drop_state("counter", "count")
    # a failed drop_state dropped nothing: the writer still copies 'count'
    path = writer.write(str(tmp_path / "out"))
    assert SavepointReader.read(path).read_keyed_state("counter").column_names == [
        "key",
        "count",
        "recent",
        "key_group",
    ]
