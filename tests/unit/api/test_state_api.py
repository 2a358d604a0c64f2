"""Keyed state API (PyFlink's names and argument order), state TTL with a manual clock, and the
backend seam: snapshots through the real SnapshotWriter and restores through the real reader."""

from __future__ import annotations

import dataclasses
import os
from datetime import UTC, datetime, timedelta

import pytest

from checkpointing import (
    CheckpointCommitter,
    CheckpointRecord,
    SnapshotWriter,
    StateKind,
    read_operator_state,
    write_state_snapshots,
)
from checkpointing.writer import KeyedColumns
from flinklike_spark import Configuration, KeyedProcessFunction, Time
from flinklike_spark._runtime.operators.operator_registry import create_operator
from flinklike_spark._runtime.operators.operator_spec import OperatorSpec
from flinklike_spark._runtime.operators.stream_operator import OperatorContext, Output
from flinklike_spark._runtime.state.key_groups import key_group_for
from flinklike_spark._runtime.state.keyed_state import HeapKeyedStateBackend, detach_values, key_groups_of
from flinklike_spark._runtime.state.state_backends import create_keyed_state_backend
from flinklike_spark._runtime.taskexecutor.restore import _entries
from flinklike_spark.config import StateBackendType
from flinklike_spark.datastream.functions import AggregateFunction, ReduceFunction
from flinklike_spark.datastream.state import (
    AggregatingState,
    AggregatingStateDescriptor,
    AppendingState,
    ListState,
    ListStateDescriptor,
    MapStateDescriptor,
    MergingState,
    ReducingStateDescriptor,
    StateTtlConfig,
    TtlValue,
    ValueStateDescriptor,
)
from flinklike_spark.errors import ConfigurationError
from tests.support.clocks import ManualClock

TTL = StateTtlConfig.UpdateType
VISIBILITY = StateTtlConfig.StateVisibility


#: The manual clock's start (ms): well after 0, so that an expiry computed as now - ttl stays positive.
START_MS = 1_000_000


class Average(AggregateFunction):
    def create_accumulator(self):
        return (0, 0)

    def add(self, value, accumulator):
        return accumulator[0] + value, accumulator[1] + 1

    def get_result(self, accumulator):
        return accumulator[0] / accumulator[1]

    def merge(self, acc_a, acc_b):
        return acc_a[0] + acc_b[0], acc_a[1] + acc_b[1]


class Add(ReduceFunction):
    def reduce(self, value1, value2):
        return value1 + value2


def ttl_config(seconds=10, *, update=TTL.OnCreateAndWrite, visibility=VISIBILITY.NeverReturnExpired, **cleanup):
    builder = StateTtlConfig.new_builder(Time.seconds(seconds)).set_update_type(update).set_state_visibility(visibility)
    if cleanup.get("full_snapshot"):
        builder.cleanup_full_snapshot()
    if "incremental" in cleanup:
        builder.cleanup_incrementally(*cleanup["incremental"])
    if cleanup.get("no_background"):
        builder.disable_cleanup_in_background()
    return builder.build()


def with_ttl(descriptor, config):
    descriptor.enable_time_to_live(config)
    return descriptor


@pytest.fixture
def backend(make_backend):
    """A backend of each ``state.backend.type`` (see tests/unit/conftest.py); the clock defaults to a manual one."""
    return lambda clock=None: make_backend(clock or ManualClock(START_MS))


# -- descriptors ------------------------------------------------------------------------------


def test_descriptors_take_pyflinks_positional_arguments_and_keep_the_keyword_forms():
    m = MapStateDescriptor("m", "STRING", "LONG")
    assert (m.name, m.key_type_info, m.value_type_info) == ("m", "STRING", "LONG")
    assert MapStateDescriptor("rules").key_type_info is None  # broadcast descriptors without types
    r = ReducingStateDescriptor("r", lambda a, b: a + b, "LONG")
    assert r.type_info == "LONG" and r.reduce_function(1, 2) == 3
    assert ReducingStateDescriptor("r", reduce_function=max).reduce_function(1, 2) == 2
    add = Add()
    assert ReducingStateDescriptor("r", add).get_reduce_function() is add
    assert ReducingStateDescriptor("r", add).reduce_function(3, 4) == 7
    agg = Average()
    a = AggregatingStateDescriptor("avg", agg, "TUPLE")
    assert (a.get_agg_function(), a.type_info, a.get_name()) == (agg, "TUPLE", "avg")
    assert ValueStateDescriptor("v", "LONG").type_info == "LONG"
    assert ListStateDescriptor("l", "LONG").type_info == "LONG"


def test_bad_descriptor_arguments_name_the_value():
    with pytest.raises(ConfigurationError, match="needs an AggregateFunction.*got 42"):
        AggregatingStateDescriptor("avg", 42, None)
    with pytest.raises(ConfigurationError, match="ReduceFunction or a callable.*'nope'"):
        ReducingStateDescriptor("r", "nope")
    with pytest.raises(ConfigurationError, match="non-empty string name"):
        ValueStateDescriptor("")
    with pytest.raises(ConfigurationError, match="needs a StateTtlConfig"):
        ValueStateDescriptor("v").enable_time_to_live(timedelta(seconds=1))


# -- handles ----------------------------------------------------------------------------------


def test_map_state_full_api(backend):
    b = backend()
    state = b.get_state(MapStateDescriptor("m", None, None), MapStateDescriptor)
    b.current_key = "user"
    assert state.is_empty() and "x" not in state and state["x"] is None and list(state) == []
    state["x"] = 1
    state.put("y", 2)
    state.put_all({"z": 3})
    assert "x" in state and state.contains("y") and not state.contains("w")
    assert state["x"] == 1 and state.get("z") == 3
    assert sorted(state.keys()) == ["x", "y", "z"]
    assert sorted(state.values()) == [1, 2, 3]
    assert sorted(state.items()) == [("x", 1), ("y", 2), ("z", 3)]
    for key in state:  # iteration is over a copy: removing while iterating is fine
        if key != "y":
            del state[key]
    assert dict(state.items()) == {"y": 2} and not state.is_empty()
    b.current_key = "other"
    assert state.is_empty()
    b.current_key = "user"
    state.remove("y")
    assert state.is_empty() and b.num_keys() == 0


def test_aggregating_state_and_pyflink_base_classes(backend):
    b = backend()
    avg = b.get_state(AggregatingStateDescriptor("avg", Average(), None), AggregatingStateDescriptor)
    assert isinstance(avg, AggregatingState) and isinstance(avg, MergingState) and isinstance(avg, AppendingState)
    b.current_key = "a"
    assert avg.get() is None
    for value in (1, 2, 6):
        avg.add(value)
    b.current_key = "b"
    avg.add(10)
    assert avg.get() == 10
    b.current_key = "a"
    assert avg.get() == 3
    avg.clear()
    assert avg.get() is None
    items = b.get_state(ListStateDescriptor("l"), ListStateDescriptor)
    assert isinstance(items, ListState) and isinstance(items, MergingState)
    items.add(1)
    items.add_all([2, 3])
    assert items.get() == [1, 2, 3] and list(items) == [1, 2, 3]
    items.update([4])
    assert items.get() == [4]
    items.update([])
    assert items.get() == []


def test_get_aggregating_state_from_a_keyed_process_functions_runtime_context(state_backend_type, rocksdb_options):
    class RunningAverage(KeyedProcessFunction):
        def open(self, runtime_context):
            self.avg = runtime_context.get_aggregating_state(AggregatingStateDescriptor("avg", Average(), None))

        def process_element(self, value, ctx):
            self.avg.add(value["x"])
            yield {"k": value["k"], "avg": self.avg.get()}

    class Rows(Output):
        def __init__(self):
            self.rows = []

        def emit_rows(self, rows, timestamps=None):
            self.rows.extend(rows)

        def emit_batch(self, batch):
            self.rows.extend(batch.to_pylist())

        def emit_watermark(self, timestamp):
            pass

    op = create_operator(
        OperatorSpec(uid="p", name="p", kind="keyed_process", function=RunningAverage(), key_field="k")
    )
    out = Rows()
    op.setup(OperatorContext(task_name="t", subtask_index=0, parallelism=1, max_parallelism=128, attempt_number=0,
                             state_backend_type=state_backend_type, rocksdb=rocksdb_options), out)  # fmt: skip
    op.initialize_state(None)
    op.open()
    op.process_rows([{"k": "a", "x": 1}, {"k": "b", "x": 5}, {"k": "a", "x": 3}])
    assert out.rows == [{"k": "a", "avg": 1}, {"k": "b", "avg": 5}, {"k": "a", "avg": 2}]
    assert [(s.name, s.kind) for s in op.snapshot_state(1).keyed] == [("avg", StateKind.AGGREGATING)]
    op.close()


# -- TTL --------------------------------------------------------------------------------------


def test_ttl_builder_defaults_and_options():
    config = StateTtlConfig.new_builder(Time.seconds(5)).build()
    assert config.get_update_type() is TTL.OnCreateAndWrite
    assert config.get_state_visibility() is VISIBILITY.NeverReturnExpired
    assert config.get_ttl_time_characteristic() is StateTtlConfig.TtlTimeCharacteristic.ProcessingTime
    assert config.ttl_ms == 5000 and config.is_enabled()
    strategies = config.get_cleanup_strategies()
    assert strategies.is_cleanup_in_background() and not strategies.in_full_snapshot()
    assert strategies.get_incremental_cleanup_strategy() == (5, False)  # Flink's heap default
    config = (
        StateTtlConfig.new_builder(timedelta(minutes=1))
        .cleanup_full_snapshot()
        .cleanup_in_rocksdb_compact_filter(1000, Time.days(1))
        .disable_cleanup_in_background()
        .build()
    )
    strategies = config.get_cleanup_strategies()
    assert config.ttl_ms == 60_000 and strategies.in_full_snapshot()
    assert strategies.get_incremental_cleanup_strategy() is None
    assert strategies.get_rocksdb_compact_filter_cleanup_strategy() == (1000, timedelta(days=1))
    with pytest.raises(ConfigurationError, match="TTL must be positive"):
        StateTtlConfig.new_builder(Time.seconds(0))
    with pytest.raises(ConfigurationError, match="must be a Time"):
        StateTtlConfig.new_builder(10)
    with pytest.raises(ConfigurationError, match="UpdateType"):
        StateTtlConfig.new_builder(Time.seconds(1)).set_update_type("OnReadAndWrite").build()
    with pytest.raises(ConfigurationError, match="cleanup_size must be an int >= 0"):
        StateTtlConfig.new_builder(Time.seconds(1)).cleanup_incrementally(-1, False)


def test_value_expires_on_read_never_return_expired(backend):
    clock = ManualClock(START_MS)
    b = backend(clock)
    value = b.get_state(with_ttl(ValueStateDescriptor("v"), ttl_config(10)), ValueStateDescriptor)
    b.current_key = "a"
    value.update(41)
    clock.advance(9_999)
    assert value.value() == 41  # OnCreateAndWrite: this read does not extend the TTL
    clock.advance(1)  # last write + ttl <= now: expired
    assert value.value() is None
    assert b.num_keys() == 0  # the read removed it


def test_return_expired_if_not_cleaned_up_returns_it_once(backend):
    clock = ManualClock(START_MS)
    b = backend(clock)
    config = ttl_config(10, visibility=VISIBILITY.ReturnExpiredIfNotCleanedUp, no_background=True)
    value = b.get_state(with_ttl(ValueStateDescriptor("v"), config), ValueStateDescriptor)
    b.current_key = "a"
    value.update(7)
    clock.advance(60_000)
    assert value.value() == 7
    assert value.value() is None


def test_on_read_and_write_extends_the_ttl_on_read(backend):
    clock = ManualClock(START_MS)
    b = backend(clock)
    value = b.get_state(with_ttl(ValueStateDescriptor("v"), ttl_config(10, update=TTL.OnReadAndWrite)),
                        ValueStateDescriptor)  # fmt: skip
    b.current_key = "a"
    value.update(1)
    for _ in range(5):
        clock.advance(9_000)
        assert value.value() == 1
    clock.advance(10_000)
    assert value.value() is None


def test_map_and_list_entries_expire_one_by_one(backend):
    clock = ManualClock(START_MS)
    b = backend(clock)
    mapping = b.get_state(with_ttl(MapStateDescriptor("m"), ttl_config(10)), MapStateDescriptor)
    items = b.get_state(with_ttl(ListStateDescriptor("l"), ttl_config(10)), ListStateDescriptor)
    b.current_key = "a"
    mapping["old"] = 1
    items.add("old")
    clock.advance(6_000)
    mapping["new"] = 2
    items.add("new")
    clock.advance(4_000)  # "old" entries expire now, "new" ones in 6 s
    assert "old" not in mapping and mapping["old"] is None
    assert dict(mapping.items()) == {"new": 2} and list(mapping) == ["new"]
    assert items.get() == ["new"]
    clock.advance(6_000)
    assert mapping.is_empty() and items.get() == []
    assert b.num_keys() == 0


def test_reducing_and_aggregating_state_restart_after_expiry(backend):
    clock = ManualClock(START_MS)
    b = backend(clock)
    total = b.get_state(with_ttl(ReducingStateDescriptor("r", lambda a, c: a + c), ttl_config(10)),
                        ReducingStateDescriptor)  # fmt: skip
    avg = b.get_state(with_ttl(AggregatingStateDescriptor("avg", Average()), ttl_config(10)),
                      AggregatingStateDescriptor)  # fmt: skip
    b.current_key = "a"
    total.add(5)
    avg.add(4)
    clock.advance(5_000)
    total.add(5)  # a write: the TTL restarts from here
    avg.add(8)
    assert (total.get(), avg.get()) == (10, 6)
    clock.advance(10_000)
    total.add(1)
    avg.add(1)
    assert (total.get(), avg.get()) == (1, 1)


def test_cleanup_full_snapshot_leaves_expired_entries_out_of_the_snapshot_only(backend):
    clock = ManualClock(START_MS)
    b = backend(clock)
    config = ttl_config(10, visibility=VISIBILITY.ReturnExpiredIfNotCleanedUp, full_snapshot=True, no_background=True)
    value = b.get_state(with_ttl(ValueStateDescriptor("v"), config), ValueStateDescriptor)
    mapping = b.get_state(with_ttl(MapStateDescriptor("m"), config), MapStateDescriptor)
    plain = b.get_state(with_ttl(ValueStateDescriptor("p"), ttl_config(10, no_background=True)), ValueStateDescriptor)
    for key in ("old", "new"):
        b.current_key = key
        value.update(key)
        mapping["x"] = key
        plain.update(key)
        clock.advance(6_000)
    # now "old" is 12 s old (expired), "new" 6 s old (alive)
    snapshot = {s.name: {key: v for _, key, v in s.entries} for s in b.snapshot_entries()}
    assert set(snapshot["v"]) == {"new"} and set(snapshot["m"]) == {"new"}
    assert set(snapshot["p"]) == {"old", "new"}  # no cleanup_full_snapshot: written as is, with timestamps
    assert snapshot["p"]["old"] == TtlValue("old", clock.now - 12_000)
    b.current_key = "old"
    assert value.value() == "old"  # working state still has it (ReturnExpiredIfNotCleanedUp)


def test_incremental_cleanup_removes_expired_keys_nobody_reads(backend, state_backend_type):
    clock = ManualClock(START_MS)
    b = backend(clock)
    value = b.get_state(with_ttl(ValueStateDescriptor("v"), ttl_config(10, incremental=(3, False))),
                        ValueStateDescriptor)  # fmt: skip
    for key in range(10):
        b.current_key = key
        value.update(key)
    clock.advance(10_000)
    b.current_key = "reader"
    for _ in range(4):  # 3 keys checked per access: 12 >= 10 keys
        value.value()
    # Incremental cleanup is a heap-backend strategy; on RocksDB (as in Flink) it has no effect.
    assert b.num_keys() == (0 if state_backend_type is StateBackendType.HASHMAP else 10)


def test_cleanup_for_every_record_runs_when_the_key_changes_and_default_cleanup_can_be_disabled(
    backend, state_backend_type
):
    clock = ManualClock(START_MS)
    b = backend(clock)
    per_record = b.get_state(with_ttl(ValueStateDescriptor("v"), ttl_config(10, incremental=(5, True))),
                             ValueStateDescriptor)  # fmt: skip
    kept = b.get_state(with_ttl(ValueStateDescriptor("k"), ttl_config(10, no_background=True)), ValueStateDescriptor)
    for key in range(10):
        b.current_key = key
        per_record.update(key)
        kept.update(key)
    clock.advance(10_000)
    for key in range(2):  # two records, no state access: 2 x 5 keys checked
        b.current_key = 100 + key
    snapshot = {s.name: len(s.entries) for s in b.snapshot_entries()}
    if state_backend_type is StateBackendType.ROCKSDB:
        assert snapshot == {"v": 10, "k": 10}  # incremental cleanup: heap only, as in Flink
        return
    assert snapshot == {"k": 10}  # "v" is empty; "k" has no background cleanup
    other = backend(clock)  # a backend without per-record cleanup keeps a plain attribute
    assert type(other) is HeapKeyedStateBackend and type(b) is not HeapKeyedStateBackend


def _checkpoint_and_restore(base, source, *, backend, clock, descriptors):
    writer = SnapshotWriter(base, "job", 1, "op", 0)
    write_state_snapshots(writer, source.snapshot_entries())
    handle = writer.finish()
    CheckpointCommitter(base).commit("job", 1, [handle], CheckpointRecord(trigger_time=datetime.now(UTC)))
    restored = backend(clock)
    for entry in _entries(read_operator_state(base, "job", 1, "op", key_groups=range(128))):
        restored.restore_entry(entry.state_name, entry.key, entry.value)
    return restored, [restored.get_state(d, type(d)) for d in descriptors]


def test_restored_state_keeps_its_timestamps_and_expires_on_schedule(backend, tmp_path):
    clock = ManualClock(START_MS)
    b = backend(clock)
    descriptors = [
        with_ttl(ValueStateDescriptor("v"), ttl_config(10)),
        with_ttl(MapStateDescriptor("m"), ttl_config(10)),
        with_ttl(ListStateDescriptor("l"), ttl_config(10)),
    ]
    value, mapping, items = (b.get_state(d, type(d)) for d in descriptors)
    for key in ("early", "late"):
        b.current_key = key
        value.update(key)
        mapping["x"] = key
        items.add(key)
        clock.advance(5_000)
    restored, (value, mapping, items) = _checkpoint_and_restore(
        str(tmp_path), b, backend=backend, clock=clock, descriptors=descriptors
    )
    clock.advance(1)  # "early" written 10.001 s ago, "late" 5.001 s ago
    restored.current_key = "early"
    assert (value.value(), mapping["x"], items.get()) == (None, None, [])
    restored.current_key = "late"
    assert (value.value(), mapping["x"], items.get()) == ("late", "late", ["late"])
    clock.advance(5_000)
    assert (value.value(), mapping["x"], items.get()) == (None, None, [])


def test_turning_ttl_on_or_off_for_checkpointed_state_is_refused(backend, tmp_path):
    clock = ManualClock(START_MS)
    b = backend(clock)
    b.get_state(ValueStateDescriptor("v"), ValueStateDescriptor)
    b.current_key = "a"
    b.get_state(ValueStateDescriptor("v"), ValueStateDescriptor).update(1)
    with pytest.raises(ConfigurationError, match="'v' was checkpointed without time-to-live"):
        _checkpoint_and_restore(str(tmp_path), b, backend=backend, clock=clock,
                                descriptors=[with_ttl(ValueStateDescriptor("v"), ttl_config(10))])  # fmt: skip


# -- snapshots and the backend seam -----------------------------------------------------------


def test_snapshot_shares_immutable_values_and_copies_mutable_ones(backend):
    shared = ("a", 1, (2.5, None))
    mutable = {"n": [1]}
    values = detach_values([1, "s", shared, mutable, TtlValue(3, 4), TtlValue([1], 4)])
    assert values[2] is shared and values[4] == TtlValue(3, 4)
    assert values[3] == mutable and values[3] is not mutable and values[3]["n"] is not mutable["n"]
    assert values[5] == TtlValue([1], 4) and values[5].value is not None
    b = backend()
    value = b.get_state(ValueStateDescriptor("v"), ValueStateDescriptor)
    b.current_key = "a"
    value.update({"count": 1})
    snapshot = b.snapshot_entries()
    value.value()["count"] = 2  # a function mutating its state object in place
    assert list(snapshot[0].entries) == [(key_group_for("a", 128), "a", {"count": 1})]


@pytest.mark.parametrize(
    "keys",
    [list(range(-500, 500)), [2**63 - 1, -(2**63), 2**64 + 5, 7], ["a", "b", "é"], [("a", 1), 3, None, 2.5, True]],
)
def test_key_groups_of_agree_with_the_partitioner(keys):
    assert key_groups_of(keys, 128).tolist() == [key_group_for(k, 128) for k in keys]


def test_column_wise_snapshot_files_hold_the_same_rows_as_the_row_form(tmp_path):
    keys = [3, "k", ("t", 1), 10**30, -1]
    values = [1, "x" * 500, {"m": [1]}, 2.5, ("a", None)]
    groups = [key_group_for(k, 128) for k in keys]
    tables = {}
    for form in ("rows", "columns"):
        base = str(tmp_path / form)
        writer = SnapshotWriter(base, "job", 1, "op", 0, max_rows_per_file=2)
        entries = list(zip(groups, keys, values)) if form == "rows" else KeyedColumns(keys, values, lambda: groups)
        writer.add_keyed_state("s", entries, kind="value")
        handle = writer.finish()
        assert handle.operator_state_rows == len(keys)
        CheckpointCommitter(base).commit("job", 1, [handle], CheckpointRecord(trigger_time=datetime.now(UTC)))
        table = read_operator_state(base, "job", 1, "op")
        tables[form] = sorted(
            zip(*(table.column(c).to_pylist() for c in ("key_group", "key_repr", "value_repr", "state_kind")))
        )
        assert sorted((e.key_group, repr(e.key), repr(e.value)) for e in _entries(table)) == sorted(
            (g, repr(k), repr(v)) for g, k, v in zip(groups, keys, values)
        )
    assert tables["rows"] == tables["columns"]
    assert any(r[2].endswith("...") and len(r[2]) == 200 for r in tables["columns"])  # value_repr truncated


def test_state_backend_type_selects_the_backend(tmp_path):
    assert Configuration().get("state.backend.type").value == "hashmap"
    context = OperatorContext(task_name="t", subtask_index=0, parallelism=1, max_parallelism=64, attempt_number=0,
                              state_backend_type=Configuration({"state.backend.type": "hashmap"})
                              .get("state.backend.type"))  # fmt: skip
    created = create_keyed_state_backend(context)
    assert isinstance(created, HeapKeyedStateBackend) and created.max_parallelism == 64
    pytest.importorskip("rocksdict")
    from flinklike_spark._runtime.state.rocksdb_state import RocksDBKeyedStateBackend

    config = Configuration({"state.backend.type": "rocksdb", "state.backend.rocksdb.localdir": str(tmp_path),
                            "state.backend.rocksdb.memory.fixed-per-slot": "16 mb"})  # fmt: skip
    context = dataclasses.replace(context, state_backend_type=config.get("state.backend.type"), rocksdb=config.rocksdb)
    created = create_keyed_state_backend(context)
    try:
        assert isinstance(created, RocksDBKeyedStateBackend) and created.max_parallelism == 64
        assert created.options.memory_per_slot == 16 << 20
        assert created.directory.startswith(str(tmp_path)) and os.path.isdir(created.directory)
    finally:
        created.close()
    assert not os.path.exists(created.directory)  # close removes the instance directory
    with pytest.raises(ConfigurationError, match="fixed-per-slot: '1 kb' is out of range; valid: at least 1 mb"):
        Configuration({"state.backend.rocksdb.memory.fixed-per-slot": "1 kb"})
    with pytest.raises(ConfigurationError, match="invalid value 'memory'; valid values: hashmap, rocksdb"):
        Configuration({"state.backend.type": "memory"})


def test_window_state_supports_aggregating_and_map_state():
    from flinklike_spark._runtime.operators.window_panes import ScopedStateBackend

    scoped = ScopedStateBackend(max_parallelism=128, clock_ms=ManualClock(START_MS))
    descriptor = AggregatingStateDescriptor("avg", Average())
    avg = scoped.get_state(descriptor, AggregatingStateDescriptor)
    mapping = scoped.get_state(MapStateDescriptor("m"), MapStateDescriptor)
    for window, value in (("w1", 2), ("w2", 4)):
        scoped.current_key = ("key", window)
        avg.add(value)
        mapping[window] = value
    scoped.merge_namespaces(descriptor, [("key", "w1"), ("key", "w2")], ("key", "merged"))
    scoped.current_key = ("key", "merged")
    assert avg.get() == 3
    entries = {s.name: list(s.entries) for s in scoped.snapshot_entries()}
    group = key_group_for("key", 128)  # the record key's group, not the (key, window) tuple's
    assert entries["_window/scoped/avg"] == [(group, ("key", "merged"), (6, 2))]
    assert sorted(entries["_window/scoped/m"]) == [(group, ("key", "w1"), {"w1": 2}), (group, ("key", "w2"), {"w2": 4})]


def test_list_and_map_reads_extend_ttl_on_read_and_write_and_return_expired_once(backend):
    clock = ManualClock(START_MS)
    b = backend(clock)
    extend = ttl_config(10, update=TTL.OnReadAndWrite, no_background=True)
    items = b.get_state(with_ttl(ListStateDescriptor("l"), extend), ListStateDescriptor)
    mapping = b.get_state(with_ttl(MapStateDescriptor("m"), extend), MapStateDescriptor)
    b.current_key = "a"
    items.add_all([1, 2])
    mapping["x"] = 1
    for _ in range(3):
        clock.advance(9_000)
        assert items.get() == [1, 2] and mapping["x"] == 1
    once = ttl_config(10, visibility=VISIBILITY.ReturnExpiredIfNotCleanedUp, no_background=True)
    old = b.get_state(with_ttl(ListStateDescriptor("old"), once), ListStateDescriptor)
    old.add("stale")
    clock.advance(10_000)
    old.add("fresh")
    assert old.get() == ["stale", "fresh"]
    assert old.get() == ["fresh"]
