"""What is particular to the RocksDB backend: the key encoding, the bounded write-back cache
(checked against the heap backend as the model), lazy chunked snapshots of a RocksDB
snapshot, incremental change tracking, directories, and a missing ``rocksdict``."""

from __future__ import annotations

import datetime
import decimal
import os
import random
import sys
from datetime import UTC

import pytest

pytest.importorskip("rocksdict")

from checkpointing import (  # noqa: E402
    CheckpointCommitter,
    CheckpointRecord,
    SnapshotWriter,
    StateKind,
    read_operator_state,
    write_state_snapshots,
)
from checkpointing.writer import KeyedColumnChunks  # noqa: E402
from flinklike_spark._runtime.state import rocksdb_state  # noqa: E402
from flinklike_spark._runtime.state.key_groups import key_group_for  # noqa: E402
from flinklike_spark._runtime.state.keyed_state import HeapKeyedStateBackend  # noqa: E402
from flinklike_spark._runtime.state.rocksdb_state import RocksDBKeyedStateBackend  # noqa: E402
from flinklike_spark._runtime.state.state_keys import decode_key, encode_key  # noqa: E402
from flinklike_spark._runtime.taskexecutor.restore import _entries  # noqa: E402
from flinklike_spark.config import RocksDBOptions  # noqa: E402
from flinklike_spark.datastream.functions import AggregateFunction  # noqa: E402
from flinklike_spark.datastream.state import (  # noqa: E402
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from flinklike_spark.errors import ConfigurationError  # noqa: E402


@pytest.fixture
def rocks(tmp_path):
    backends = []

    def make(**kwargs):
        options = RocksDBOptions(local_dir=str(tmp_path), memory_per_slot=1 << 20)
        backend = RocksDBKeyedStateBackend(max_parallelism=128, options=options, **kwargs)
        backends.append(backend)
        return backend

    yield make
    for backend in backends:
        backend.close()


# -- keys ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [0, -1, 2**63 - 1, -(2**63), 2**80, -(2**70), "", "é\udc80", b"\x00b", 2.5, float("inf"), None,
     ("a", (1, None), b"x"), (), datetime.date(2024, 1, 2), datetime.timedelta(seconds=3),
     decimal.Decimal("1.5")],
)  # fmt: skip
def test_keys_round_trip(key):
    assert decode_key(encode_key(key)) == key


def test_keys_equal_in_a_dict_encode_equally_and_shared_objects_do_not_matter():
    assert encode_key(1) == encode_key(1.0) == encode_key(True) == encode_key(decimal.Decimal("1.00"))
    shared = "ab" * 10
    assert encode_key((shared, shared)) == encode_key(("ab" * 10, "".join(["ab"] * 10)))  # pickle would differ
    assert encode_key(("a", 1)) != encode_key(("a", "1")) != encode_key("a1")
    assert len({encode_key(k) for k in (0, "", b"", None, (), 0.5)}) == 6


def test_vectorized_int_keys_encode_like_single_keys(rocks):
    backend = rocks()
    backend.get_state(ValueStateDescriptor("v"), ValueStateDescriptor)
    table = backend._tables["v"]
    keys = [0, -1, 1, 255, 256, -(2**63), 2**63 - 1, *range(-50, 50)]
    assert table.rocks_keys(keys) == [table.rocks_key(k) for k in keys]
    assert table.rocks_keys([*keys, 2**64]) == [table.rocks_key(k) for k in [*keys, 2**64]]  # beyond int64


def test_unsupported_key_types_are_refused_by_name():
    with pytest.raises(TypeError, match="cannot hash key of type set"):
        encode_key({1})


# -- against the heap backend ------------------------------------------------------------------


def _states(backend):
    return (
        backend.get_state(ValueStateDescriptor("v"), ValueStateDescriptor),
        backend.get_state(ListStateDescriptor("l"), ListStateDescriptor),
        backend.get_state(MapStateDescriptor("m"), MapStateDescriptor),
        backend.get_state(ReducingStateDescriptor("r", lambda a, b: a + b), ReducingStateDescriptor),
        backend.get_state(AggregatingStateDescriptor("a", _Count()), AggregatingStateDescriptor),
    )


class _Count(AggregateFunction):
    def create_accumulator(self):
        return 0

    def add(self, value, accumulator):
        return accumulator + 1

    def get_result(self, accumulator):
        return accumulator

    def merge(self, a, b):
        return a + b


def _apply(states, op, i):
    value, items, mapping, total, count = states
    if op == 0:
        value.update({"i": i})
    elif op == 1:
        items.add(i)
    elif op == 2:
        mapping.put(i % 5, i)
    elif op == 3:
        total.add(i)
    elif op == 4:
        mapping.remove(i % 5)
    elif op == 5:
        count.add(i)
    elif op == 6:
        (value.clear, items.clear, mapping.clear)[i % 3]()
    else:
        return (value.value(), items.get(), sorted(mapping.items()), total.get(), count.get())
    return None


def _snapshot(backend):
    return {s.name: sorted(map(repr, s.entries)) for s in backend.snapshot_entries()}


@pytest.mark.parametrize("seed", [1, 2])
def test_random_operations_on_more_keys_than_the_cache_holds_match_the_heap_backend(rocks, seed):
    rng = random.Random(seed)
    heap, rocksdb = HeapKeyedStateBackend(max_parallelism=128), rocks()
    heap_states, rocks_states = _states(heap), _states(rocksdb)
    for i in range(30_000):
        key = rng.choice([rng.randrange(6_000), f"k{rng.randrange(50)}", (rng.randrange(3), "t")])
        op = rng.randrange(8)
        heap.current_key = rocksdb.current_key = key
        assert _apply(rocks_states, op, i) == _apply(heap_states, op, i), (i, key, op)
        if i % 10_000 == 9_999:
            assert _snapshot(rocksdb) == _snapshot(heap)
    assert 0 < rocksdb.cached_entries() < rocksdb.num_keys()  # it did evict
    assert rocksdb.cached_bytes() <= rocksdb.cache_budget()
    assert rocksdb.num_keys() == heap.num_keys()
    assert _snapshot(rocksdb) == _snapshot(heap)


def test_checkpoint_to_delta_and_restore_into_either_backend(rocks, tmp_path, monkeypatch):
    monkeypatch.setattr(rocksdb_state, "SNAPSHOT_CHUNK_ENTRIES", 700)  # several chunks per state
    source = rocks()
    value, items, *_ = _states(source)
    for key in range(5_000):
        source.current_key = key
        value.update(key * 2)
        if key % 3 == 0:
            items.add_all([key, str(key)])
    snapshot = source.snapshot_entries()
    chunks = {s.name: list(s.entries.chunks()) for s in snapshot}
    assert {name: len(c) for name, c in chunks.items()} == {"v": 8, "l": 3}
    groups = [g for chunk in chunks["v"] for g in chunk.key_groups.tolist()]
    assert groups == sorted(groups)  # RocksDB order is key-group order
    base = str(tmp_path / "cp")
    writer = SnapshotWriter(base, "job", 1, "op", 0)
    write_state_snapshots(writer, snapshot)
    CheckpointCommitter(base).commit("job", 1, [writer.finish()],
                                     CheckpointRecord(trigger_time=datetime.datetime.now(UTC)))  # fmt: skip
    for restored in (rocks(), HeapKeyedStateBackend(max_parallelism=128)):
        for entry in _entries(read_operator_state(base, "job", 1, "op", key_groups=range(128))):
            restored.restore_entry(entry.state_name, entry.key, entry.value)
        value, items, *_ = _states(restored)
        for key in (0, 1, 3, 4_998, 4_999):
            restored.current_key = key
            assert value.value() == key * 2
            assert items.get() == ([key, str(key)] if key % 3 == 0 else [])
        assert restored.num_keys() == 5_000


def test_a_snapshot_does_not_see_later_writes_is_read_lazily_and_then_removed(rocks):
    backend = rocks()
    value, items, *_ = _states(backend)
    backend.current_key = "a"
    value.update(1)
    items.add("x")
    snapshot = backend.snapshot_entries()
    assert all(isinstance(s.entries, KeyedColumnChunks) for s in snapshot)
    value.update(2)
    items.add("y")  # a list mutated in place by the handle
    backend.current_key = "b"
    value.update(3)
    backend.flush()
    group = key_group_for("a", 128)
    assert [(s.name, s.kind, list(s.entries)) for s in snapshot] == [
        ("v", StateKind.VALUE, [(group, "a", 1)]),
        ("l", StateKind.LIST, [(group, "a", ["x"])]),
    ]
    snapshots = backend.directory + ".snapshots"
    assert len(os.listdir(snapshots)) == 1  # the local checkpoint the chunks read
    del snapshot
    assert os.listdir(snapshots) == []  # removed once nothing can read it any more


def test_snapshot_changes_lists_upserts_and_deletes_since_the_previous_snapshot(rocks):
    backend = rocks()
    value, items, mapping, *_ = _states(backend)
    for key in range(3_000):  # more than the cache holds: changes survive eviction
        backend.current_key = key
        value.update(key)
    changes = backend.snapshot_changes()
    assert [(c.name, c.kind, len(c.upserts), list(c.deletes)) for c in changes] == [("v", StateKind.VALUE, 3_000, [])]
    assert sorted(zip(changes[0].upserts.keys, changes[0].upserts.values))[:2] == [(0, 0), (1, 1)]
    assert backend.snapshot_changes() == []
    backend.current_key = 7
    value.clear()
    mapping["x"] = 1
    backend.current_key = 8
    items.add("i")
    backend.current_key = 9
    value.update(90)
    mapping["y"] = 2
    mapping.remove("y")  # written and removed again: a delete (the checkpointed state may have it)
    changes = {c.name: (list(c.upserts), list(c.deletes)) for c in backend.snapshot_changes()}
    assert changes == {
        "v": ([(key_group_for(9, 128), 9, 90)], [(key_group_for(7, 128), 7, None)]),
        "l": ([(key_group_for(8, 128), 8, ["i"])], []),
        "m": ([(key_group_for(7, 128), 7, {"x": 1})], [(key_group_for(9, 128), 9, None)]),
    }
    backend.current_key = 1
    value.update(-1)
    backend.snapshot_entries()  # a full snapshot resets the tracking
    assert backend.snapshot_changes() == []


def test_close_removes_the_directory_and_stale_directories_of_dead_processes_go(rocks, tmp_path):
    parent = tmp_path / "flinklike-rocksdb"
    stale = parent / "999999999-deadbeef0000"  # no such pid
    stale.mkdir(parents=True)
    (stale / "CURRENT").write_text("x")
    backend = rocks()
    assert not stale.exists() and os.path.isdir(backend.directory)
    backend.close()
    backend.close()  # idempotent
    assert not os.path.exists(backend.directory)
    with pytest.raises(RuntimeError, match="is closed"):
        backend.get_state(ValueStateDescriptor("v"), ValueStateDescriptor)


def test_a_missing_rocksdict_is_a_configuration_error_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "rocksdict", None)
    with pytest.raises(ConfigurationError, match=r"pip install 'flinklike-spark\[rocksdb\]'"):
        RocksDBKeyedStateBackend(max_parallelism=128)
