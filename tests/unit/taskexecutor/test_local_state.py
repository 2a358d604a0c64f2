"""The TaskExecutor's local snapshot copies: only the copy of the checkpoint being restored is used."""

from __future__ import annotations

from checkpointing import KeyedColumns, KeyedStateSnapshot
from checkpointing.schemas import StateKind
from flinklike_spark._runtime.operators.stream_operator import OperatorSnapshot
from flinklike_spark._runtime.taskexecutor.local_state import TaskLocalStateStore


def _snapshot(count: int) -> OperatorSnapshot:
    keys = list(range(3))
    return OperatorSnapshot(keyed=[KeyedStateSnapshot(
        name="count", kind=StateKind.VALUE, entries=KeyedColumns(keys, [count] * 3, [5, 6, 7]),
    )])  # fmt: skip


def test_the_copy_of_exactly_the_restored_checkpoint_is_used_and_older_ones_are_dropped(tmp_path):
    store = TaskLocalStateStore(str(tmp_path))
    subtask = store.for_subtask("job", "count", 1)
    subtask.store(3, [("count", _snapshot(30))])
    subtask.store(4, [("count", _snapshot(40)), ("source", None)])
    assert subtask.load(5) is None  # no copy of checkpoint 5: Delta
    restored = subtask.load(3)  # not confirmed away yet: still the copy of 3, with 3's values
    assert [(e.key_group, e.key, e.value, e.subtask) for e in restored["count"]] == [
        (5, 0, 30, 1),
        (6, 1, 30, 1),
        (7, 2, 30, 1),
    ]
    subtask.confirm(4)
    assert subtask.load(3) is None  # older than the completed 4: deleted
    restored = subtask.load(4)
    assert {e.value for e in restored["count"]} == {40} and restored["source"] == ()
    assert (store.counters.local, store.counters.remote) == (2, 2)
    store.for_subtask("job", "count", 0).store(4, [("count", _snapshot(1))])
    assert store.for_subtask("job", "count", 0).load(4)["count"][0].subtask == 0  # per subtask
    store.release_job("job")
    assert subtask.load(4) is None
    store.close()
    assert list(tmp_path.iterdir()) == []


def test_a_failed_copy_leaves_no_file_under_its_checkpoint_id(tmp_path):
    store = TaskLocalStateStore(str(tmp_path))
    subtask = store.for_subtask("job", "count", 0)
    subtask.store(4, [("count", _snapshot(1))])
    unpicklable = OperatorSnapshot(keyed=[KeyedStateSnapshot(
        name="count", kind=StateKind.VALUE, entries=KeyedColumns([1], [lambda: 0], [0]),
    )])  # fmt: skip
    subtask.store(4, [("count", unpicklable)])  # e.g. a newer attempt reusing the id: never the old copy
    assert subtask.load(4) is None


def test_incremental_and_chunked_snapshots_are_not_copied(tmp_path):
    store = TaskLocalStateStore(str(tmp_path))
    subtask = store.for_subtask("job", "count", 0)
    subtask.store(2, [("count", OperatorSnapshot(chain=(1, 2))), ("source", None)])
    assert subtask.load(2) == {"source": ()}  # "count" is not covered: it reads Delta
