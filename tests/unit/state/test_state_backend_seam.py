"""The state backend seam: a third backend is one module, and snapshots cross into checkpointing/ typed.

:class:`NamespacedDictBackend` below is that module: a keyed state backend that
keeps every state in one dict keyed by ``(state name, key)`` (unlike the heap
backend's dict per state). It implements only the primitives (a table view,
snapshot, restore, key listing), registers itself by name, and then a keyed
operator whose context names it runs value, list, map, reducing, aggregating
and TTL state on it, through a checkpoint written with the real snapshot
writer into a real Delta table and read back by the real reader.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from checkpointing import (
    CheckpointCommitter,
    CheckpointRecord,
    KeyedColumns,
    KeyedStateChanges,
    KeyedStateSnapshot,
    OperatorStateSnapshot,
    SnapshotWriter,
    StateKind,
    iter_keyed_state,
    write_state_snapshots,
)
from flinklike_spark import KeyedProcessFunction, Time
from flinklike_spark._runtime.operators.operator_registry import create_operator
from flinklike_spark._runtime.operators.operator_spec import OperatorSpec
from flinklike_spark._runtime.operators.stream_operator import OperatorContext, RestoredState
from flinklike_spark._runtime.state.incremental_snapshot import IncrementalConfig
from flinklike_spark._runtime.state.key_groups import key_group_for
from flinklike_spark._runtime.state.keyed_state import key_groups_of
from flinklike_spark._runtime.state.state_backend_base import KeyedStateBackend, StateBackendContext
from flinklike_spark._runtime.state.state_backends import (
    create_keyed_state_backend,
    register_state_backend,
    registered_state_backends,
    unregister_state_backend,
)
from flinklike_spark._runtime.taskexecutor.restore import _entries
from flinklike_spark.config import StateBackendType
from flinklike_spark.datastream.functions import AggregateFunction
from flinklike_spark.datastream.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateTtlConfig,
    ValueStateDescriptor,
)
from flinklike_spark.errors import ConfigurationError
from tests.support.clocks import ManualClock
from tests.support.outputs import ListOutput

NAME = "namespaced-dict"
MAX_PARALLELISM = 128

# -- the third backend: everything it takes ---------------------------------------------------------


class _StateView(MutableMapping):
    """The entries of one state inside the backend's single dict."""

    def __init__(self, entries: dict, name: str) -> None:
        self._entries = entries
        self._name = name

    def __getitem__(self, key: Any) -> Any:
        return self._entries[(self._name, key)]

    def __setitem__(self, key: Any, value: Any) -> None:
        self._entries[(self._name, key)] = value

    def __delitem__(self, key: Any) -> None:
        del self._entries[(self._name, key)]

    def __iter__(self) -> Iterator[Any]:
        return iter([key for name, key in self._entries if name == self._name])

    def __len__(self) -> int:
        return sum(1 for name, _ in self._entries if name == self._name)


class NamespacedDictBackend(KeyedStateBackend):
    """All states in one dict keyed by ``(state name, key)``; full snapshots only."""

    def __init__(self, *, max_parallelism: int, clock_ms=None) -> None:
        super().__init__(max_parallelism=max_parallelism, clock_ms=clock_ms)
        self.entries: dict[tuple[str, Any], Any] = {}
        self.names: set[str] = set()

    def _table(self, name: str) -> _StateView:
        self.names.add(name)
        return _StateView(self.entries, name)

    def snapshot_entries(self) -> list[KeyedStateSnapshot]:
        by_name: dict[str, tuple[list, list]] = {}
        for (name, key), value in self.entries.items():
            keys, values = by_name.setdefault(name, ([], []))
            keys.append(key)
            values.append(value)
        return [
            KeyedStateSnapshot(
                name=name,
                kind=self._kind_of(name),
                entries=KeyedColumns(keys, values, key_groups_of(keys, self.max_parallelism)),
            )
            for name, (keys, values) in sorted(by_name.items())
        ]

    def restore_entry(self, state_name: str, key: Any, value: Any) -> None:
        self.names.add(state_name)
        self.entries[(state_name, key)] = value

    def keys_of(self, state_name: str) -> list[Any]:
        return [key for name, key in self.entries if name == state_name]

    def num_keys(self) -> int:
        return len({key for _, key in self.entries})

    def state_names(self) -> list[str]:
        return sorted(self.names)


# -- the job on it ----------------------------------------------------------------------------------


class Mean(AggregateFunction):
    def create_accumulator(self):
        return (0, 0)

    def add(self, value, accumulator):
        return (accumulator[0] + value, accumulator[1] + 1)

    def get_result(self, accumulator):
        return accumulator[0] / accumulator[1]

    def merge(self, a, b):
        return (a[0] + b[0], a[1] + b[1])


class EveryState(KeyedProcessFunction):
    """Per key: a count, the values seen, the last value per tag, their sum and mean, and a 10 s TTL value."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))
        self.seen = runtime_context.get_list_state(ListStateDescriptor("seen"))
        self.by_tag = runtime_context.get_map_state(MapStateDescriptor("by_tag"))
        self.total = runtime_context.get_reducing_state(ReducingStateDescriptor("total", lambda a, b: a + b))
        self.mean = runtime_context.get_aggregating_state(AggregatingStateDescriptor("mean", Mean()))
        recent = ValueStateDescriptor("recent")
        recent.enable_time_to_live(StateTtlConfig.new_builder(Time.seconds(10)).build())
        self.recent = runtime_context.get_state(recent)

    def process_element(self, value, ctx):
        previous = self.recent.value()
        self.count.update((self.count.value() or 0) + 1)
        self.seen.add(value["x"])
        self.by_tag.put(value["tag"], value["x"])
        self.total.add(value["x"])
        self.mean.add(value["x"])
        self.recent.update(value["x"])
        yield {
            "k": value["k"], "count": self.count.value(), "seen": self.seen.get(), "tags": dict(self.by_tag.items()),
            "total": self.total.get(), "mean": self.mean.get(), "previous": previous,
        }  # fmt: skip


@pytest.fixture
def registered():
    register_state_backend(NAME, NamespacedDictBackend.from_context)
    yield NAME
    unregister_state_backend(NAME)


def _operator(clock, *, restored=None, incremental=None):
    op = create_operator(
        OperatorSpec(uid="every", name="every", kind="keyed_process", function=EveryState(), key_field="k")
    )
    out = ListOutput()
    context = OperatorContext(task_name="t", subtask_index=0, parallelism=1, max_parallelism=MAX_PARALLELISM,
                              attempt_number=0, clock_ms=clock, state_backend_type=NAME, incremental=incremental)  # fmt: skip
    op.setup(context, out)
    op.initialize_state(restored)
    op.open()
    return op, out


def _checkpoint(base: str, checkpoint_id: int, snapshot) -> None:
    writer = SnapshotWriter(base, "job", checkpoint_id, "every", 0)
    write_state_snapshots(writer, [*snapshot.keyed, *snapshot.keyed_changes, *snapshot.operator])
    handle = writer.finish(chain=snapshot.chain)
    record = CheckpointRecord(trigger_time=datetime.now(UTC), parallelism={"every": 1})
    CheckpointCommitter(base).commit("job", checkpoint_id, [handle], record)


def _restore(base: str, checkpoint_id: int) -> RestoredState:
    files = iter_keyed_state(base, "job", checkpoint_id, "every", key_groups=range(MAX_PARALLELISM))
    return RestoredState(checkpoint_id=checkpoint_id, keyed=tuple(e for table in files for e in _entries(table)))


@pytest.mark.timeout(60)
def test_a_backend_registered_by_one_module_runs_keyed_state_through_checkpoint_and_restore(registered, tmp_path):
    clock = ManualClock(1_000_000)
    op, out = _operator(clock)
    assert type(op.backend) is NamespacedDictBackend
    op.process_rows([{"k": "a", "x": 1, "tag": "p"}, {"k": "b", "x": 10, "tag": "q"}, {"k": "a", "x": 3, "tag": "p"}])
    assert out.rows[-1] == {"k": "a", "count": 2, "seen": [1, 3], "tags": {"p": 3}, "total": 4, "mean": 2.0,
                            "previous": 1}  # fmt: skip
    snapshot = op.snapshot_state(1)
    assert all(type(part) is KeyedStateSnapshot for part in snapshot.keyed)
    assert {part.name: part.kind for part in snapshot.keyed} == {
        "count": StateKind.VALUE, "seen": StateKind.LIST, "by_tag": StateKind.MAP, "total": StateKind.REDUCING,
        "mean": StateKind.AGGREGATING, "recent": StateKind.VALUE,
    }  # fmt: skip
    base = str(tmp_path / "checkpoints")
    _checkpoint(base, 1, snapshot)
    op.close()

    restored = _restore(base, 1)
    rows = {(e.state_name, e.key): (e.state_kind, e.key_group) for e in restored.keyed}
    assert rows[("mean", "a")] == ("aggregating", key_group_for("a", MAX_PARALLELISM))  # the row holds the text
    clock.advance(timedelta(seconds=11) // timedelta(milliseconds=1))  # "recent" expires; the rest does not
    op2, out2 = _operator(clock, restored=restored)
    op2.process_rows([{"k": "a", "x": 5, "tag": "r"}, {"k": "b", "x": 20, "tag": "q"}])
    assert out2.rows == [
        {"k": "a", "count": 3, "seen": [1, 3, 5], "tags": {"p": 3, "r": 5}, "total": 9, "mean": 3.0, "previous": None},
        {"k": "b", "count": 2, "seen": [10, 20], "tags": {"q": 20}, "total": 30, "mean": 15.0, "previous": None},
    ]
    assert op2.backend.num_keys() == 2 and "recent" in op2.backend.state_names()
    op2.close()


def test_a_backend_without_change_tracking_takes_full_snapshots_under_incremental_checkpoints(registered, tmp_path):
    op, _ = _operator(ManualClock(0), incremental=IncrementalConfig())
    base = str(tmp_path / "checkpoints")
    for checkpoint_id in (1, 2):
        op.process_rows([{"k": "a", "x": checkpoint_id, "tag": "p"}])
        snapshot = op.snapshot_state(checkpoint_id)
        assert snapshot.chain is None and snapshot.keyed_changes == [] and snapshot.keyed
        _checkpoint(base, checkpoint_id, snapshot)
        op.incremental.notify_complete(checkpoint_id)
    with pytest.raises(NotImplementedError, match="NamespacedDictBackend does not take incremental snapshots"):
        op.backend.snapshot_changes()
    op2, out2 = _operator(ManualClock(0), restored=_restore(base, 2))
    op2.process_rows([{"k": "a", "x": 3, "tag": "p"}])
    assert out2.rows[0]["seen"] == [1, 2, 3]


def test_the_registry_selects_by_name_and_refuses_unknown_duplicate_and_built_in_names(registered):
    assert registered_state_backends() == ("hashmap", NAME, "rocksdb")
    context = StateBackendContext(backend_type=NAME, max_parallelism=16)
    backend = create_keyed_state_backend(context)
    assert type(backend) is NamespacedDictBackend and backend.max_parallelism == 16
    with pytest.raises(ConfigurationError, match=r"state.backend.type 'memory' is not available; valid: hashmap, "
                                                 r"namespaced-dict, rocksdb"):  # fmt: skip
        create_keyed_state_backend(StateBackendContext(backend_type="memory", max_parallelism=16))
    with pytest.raises(ConfigurationError, match="'namespaced-dict' is already registered"):
        register_state_backend(NAME, NamespacedDictBackend.from_context)
    with pytest.raises(ConfigurationError, match="cannot unregister state backend 'hashmap'"):
        unregister_state_backend(StateBackendType.HASHMAP.value)
    with pytest.raises(ConfigurationError, match=r"max_parallelism must be an int in \[1, 32768\], got 0"):
        StateBackendContext(backend_type=NAME, max_parallelism=0)


def test_snapshot_parts_are_typed_and_the_writer_refuses_anything_else(tmp_path):
    columns = KeyedColumns(["k"], [1], [key_group_for("k", MAX_PARALLELISM)])
    with pytest.raises(TypeError, match="kind must be a StateKind, got 'value'"):
        KeyedStateSnapshot(name="count", kind="value", entries=columns)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="name must be a non-empty string"):
        OperatorStateSnapshot(name="", kind=StateKind.OPERATOR, entries=[])
    writer = SnapshotWriter(str(tmp_path / "checkpoints"), "job", 1, "op", 0)
    with pytest.raises(TypeError, match="a snapshot part is a KeyedStateSnapshot, KeyedStateChanges or Operator"):
        write_state_snapshots(writer, [("count", "value", [(0, "k", 1)])])  # type: ignore[list-item]
    empty = KeyedColumns([], [], [])
    write_state_snapshots(writer, [
        KeyedStateChanges(name="count", kind=StateKind.VALUE, upserts=columns, deletes=empty),
        OperatorStateSnapshot(name="splits", kind=StateKind.SOURCE_SPLIT, entries=[("s-0", 7)]),
    ])  # fmt: skip
    handle = writer.finish(chain=(1,))
    assert handle.state_bytes > 0
