"""The heap backend's change tracking and the choice between full and incremental snapshots."""

from __future__ import annotations

from datetime import timedelta

import pytest

from flinklike_spark._runtime.state.incremental_snapshot import (
    MAX_UNCONFIRMED,
    IncrementalConfig,
    IncrementalKeyedSnapshots,
)
from flinklike_spark._runtime.state.key_groups import key_group_for
from flinklike_spark._runtime.state.keyed_state import HeapKeyedStateBackend, current_entries
from flinklike_spark.datastream.state import (
    ListState,
    ListStateDescriptor,
    MapState,
    MapStateDescriptor,
    StateTtlConfig,
    ValueState,
    ValueStateDescriptor,
)
from tests.support.clocks import ManualClock


def _backend(track=True) -> HeapKeyedStateBackend:
    return HeapKeyedStateBackend(max_parallelism=128, clock_ms=lambda: 0, track_changes=track)


def _changes(backend) -> dict:
    out = {}
    for change in backend.snapshot_changes():
        assert list(change.deletes.values) == [None] * len(change.deletes)
        upserts = change.upserts
        out[change.name] = (change.kind, dict(zip(upserts.keys, upserts.values)), sorted(change.deletes.keys))
    return out


def _set(backend, key, handle_write):
    backend.current_key = key
    handle_write()


def test_every_write_is_tracked_and_snapshots_reset_the_tracking():
    b = _backend()
    count: ValueState = b.get_state(ValueStateDescriptor("count"), ValueStateDescriptor)
    items: ListState = b.get_state(ListStateDescriptor("items"), ListStateDescriptor)
    attrs: MapState = b.get_state(MapStateDescriptor("attrs"), MapStateDescriptor)
    for k in range(5):
        _set(b, k, lambda k=k: count.update(k))
    assert _changes(b) == {"count": ("value", {k: k for k in range(5)}, [])}
    assert _changes(b) == {}  # reset: nothing changed since
    _set(b, 1, lambda: count.update(10))
    _set(b, 2, count.clear)
    _set(b, 3, lambda: count.update(None))
    _set(b, 9, lambda: items.add("a"))
    _set(b, 9, lambda: attrs.put("x", 1))
    _set(b, 8, lambda: attrs.put("y", 2))
    _set(b, 8, lambda: attrs.remove("y"))
    got = _changes(b)
    assert got["count"] == ("value", {1: 10}, [2, 3])
    assert got["items"] == ("list", {9: ["a"]}, [])
    assert got["attrs"] == ("map", {9: {"x": 1}}, [8])
    _set(b, 4, lambda: count.update(40))
    b.snapshot_entries()  # a full snapshot resets the tracking too
    assert _changes(b) == {}


def test_changed_mutable_values_are_copied_for_the_snapshot():
    b = _backend()
    items: ListState = b.get_state(ListStateDescriptor("items"), ListStateDescriptor)
    _set(b, 1, lambda: items.add("a"))
    (change,) = b.snapshot_changes()
    _set(b, 1, lambda: items.add("b"))
    assert change.upserts.values == [["a"]]


def test_a_backend_without_tracking_records_nothing_and_refuses_changes():
    b = _backend(track=False)
    count = b.get_state(ValueStateDescriptor("count"), ValueStateDescriptor)
    _set(b, 1, lambda: count.update(1))
    assert not b.tracks_changes
    with pytest.raises(NotImplementedError):
        b.snapshot_changes()


def test_state_with_ttl_turns_tracking_off():
    b = _backend()
    b.get_state(ValueStateDescriptor("count"), ValueStateDescriptor)
    assert b.tracks_changes
    descriptor = ValueStateDescriptor("expiring")
    descriptor.enable_time_to_live(StateTtlConfig.new_builder(timedelta(seconds=5)).build())
    b.get_state(descriptor, ValueStateDescriptor)
    assert not b.tracks_changes


def _strategy(max_chain=3, interval=timedelta(minutes=10)):
    b = _backend()
    count = b.get_state(ValueStateDescriptor("count"), ValueStateDescriptor)
    clock = ManualClock(0.0)
    s = IncrementalKeyedSnapshots(
        b, IncrementalConfig(materialize_interval=interval, max_chain_length=max_chain), clock=clock
    )
    return b, count, s, clock


def _kind(result) -> str:
    return "full" if result.chain is None else f"chain{result.chain}"


def test_chains_grow_from_the_last_confirmed_checkpoint_up_to_the_max_length():
    b, count, s, _ = _strategy(max_chain=3)
    _set(b, 1, lambda: count.update(1))
    assert _kind(s.snapshot(1)) == "full"  # nothing confirmed yet
    s.notify_complete(1)
    _set(b, 2, lambda: count.update(2))
    snapshot = s.snapshot(2)
    assert snapshot.chain == (1, 2) and not snapshot.entries
    assert [(c.name, list(c.upserts.keys), list(c.deletes.keys)) for c in snapshot.changes] == [("count", [2], [])]
    s.notify_complete(2)
    assert _kind(s.snapshot(3)) == "chain(1, 2, 3)"
    s.notify_complete(3)
    assert _kind(s.snapshot(4)) == "full"  # a 4th link would exceed max_chain_length 3
    s.notify_complete(4)
    assert _kind(s.snapshot(5)) == "chain(4, 5)"


def test_changes_of_an_unconfirmed_checkpoint_are_carried_into_the_next():
    b, count, s, _ = _strategy(max_chain=10)
    s.snapshot(1)
    s.notify_complete(1)
    _set(b, 1, lambda: count.update(1))
    _set(b, 2, lambda: count.update(2))
    s.snapshot(2)  # never confirmed (say its notification is late)
    _set(b, 2, count.clear)
    _set(b, 3, lambda: count.update(3))
    snapshot = s.snapshot(3)
    assert snapshot.chain == (1, 3)
    (change,) = snapshot.changes
    upserts, deletes = change.upserts, change.deletes
    assert dict(zip(upserts.keys, upserts.values)) == {1: 1, 3: 3}
    assert list(deletes.keys) == [2]
    assert list(deletes.key_groups) == [key_group_for(2, 128)]


def test_savepoints_aborts_time_and_lost_notifications_force_a_full_snapshot():
    b, count, s, clock = _strategy(max_chain=100, interval=timedelta(seconds=60))
    s.snapshot(1)
    s.notify_complete(1)
    s.prepare_savepoint()
    assert _kind(s.snapshot(2)) == "full"
    s.notify_complete(2)  # a completed savepoint is no base
    assert _kind(s.snapshot(3)) == "full"
    s.notify_complete(3)
    assert _kind(s.snapshot(4)) == "chain(3, 4)"
    s.notify_aborted(4)  # refused (perhaps its chain was gone): start over
    assert _kind(s.snapshot(5)) == "full"
    s.notify_complete(5)
    clock.now = 61
    assert _kind(s.snapshot(6)) == "full"  # periodic materialization
    s.notify_complete(6)
    kinds = [_kind(s.snapshot(7 + i)) for i in range(MAX_UNCONFIRMED + 1)]  # no notification arrives
    assert kinds[:MAX_UNCONFIRMED] == [f"chain(6, {7 + i})" for i in range(MAX_UNCONFIRMED)]
    assert kinds[-1] == "full"


def test_a_full_snapshot_still_unconfirmed_makes_the_next_full_too():
    b, count, s, _ = _strategy()
    s.snapshot(1)
    s.notify_complete(1)
    assert _kind(s.snapshot(2)) == "chain(1, 2)"
    s.notify_complete(2)
    assert _kind(s.snapshot(3)) == "chain(1, 2, 3)"
    s.notify_complete(3)
    assert _kind(s.snapshot(4)) == "full"  # max_chain 3 reached
    assert _kind(s.snapshot(5)) == "full"  # 4 unconfirmed: its changes were reset by the full snapshot
    s.notify_complete(5)
    assert _kind(s.snapshot(6)) == "chain(5, 6)"


def test_a_restored_chain_is_the_base_of_the_next_snapshot():
    """After a failover at the same parallelism the restored state is exactly the restored checkpoint's chain:
    the first snapshot carries only what changed since the restore, on top of that chain."""
    b, count, s, clock = _strategy(max_chain=4, interval=timedelta(seconds=60))
    for key in (1, 2):
        b.restore_entry("count", key, key * 10)  # what the restore wrote is not a change
    s.restored(7, (5, 6, 7))
    _set(b, 2, lambda: count.update(21))
    snapshot = s.snapshot(9)
    assert snapshot.chain == (5, 6, 7, 9) and not snapshot.entries
    assert [(c.name, list(c.upserts.keys)) for c in snapshot.changes] == [("count", [2])]
    s.notify_complete(9)
    assert _kind(s.snapshot(10)) == "full"  # a 5th link would exceed max_chain_length 4
    s.restored(12, (12,))  # a base restored from a full snapshot
    clock.now = 59
    assert _kind(s.snapshot(13)) == "chain(12, 13)"  # materialization counts from the restore


def test_current_entries_splits_keys_with_and_without_an_entry_keeping_their_order():
    table = {1: "a", 3: None, 4: [4]}
    assert current_entries(table, [1, 3, 4]) == ([1, 3, 4], ["a", None, [4]], [])  # None is a value
    assert current_entries(table, [5, 4, 2, 1]) == ([4, 1], [[4], "a"], [5, 2])
    assert current_entries(table, []) == ([], [], [])
