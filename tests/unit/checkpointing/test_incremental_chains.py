"""Incremental checkpoints in storage: change rows, chain resolution, shared-file retention, fallback."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from hypothesis import given, settings
from hypothesis import strategies as st

from checkpointing import (
    CheckpointCommitter,
    KeyedColumns,
    SnapshotWriter,
    decode_operator_state,
    find_restorable_checkpoint,
    list_completed_checkpoints,
    read_operator_state,
    retain,
    verify_checkpoint,
)
from checkpointing.chains import decode_chains
from checkpointing.inspect import operator_state as inspect_operator_state
from checkpointing.layout import scan_table
from checkpointing.reader import read_state_files
from flinklike_spark.errors import CorruptCheckpointError
from tests.support.checkpoint_tables import JOB, UID, record

GROUPS = 8  # subtask s of 2 owns key groups [4s, 4s + 4); key k lives in group k % 8


def _cols(entries: dict) -> KeyedColumns:
    keys = list(entries)
    return KeyedColumns(keys, [entries[k] for k in keys], [k % GROUPS for k in keys])


def _write(base, cid: int, subtask: int, *, full=None, puts=None, deletes=(), chain=None, timers=None):
    with SnapshotWriter(base, JOB, cid, UID, subtask) as w:
        if full is not None:
            w.add_keyed_state("count", _cols(full), kind="value")
        if puts is not None or deletes:
            w.add_keyed_changes("count", _cols(puts or {}), _cols(dict.fromkeys(deletes)), kind="value")
        if timers:
            w.add_keyed_state("timers", [(k % GROUPS, k, t) for k, t in timers.items()], kind="timer")
        w.add_operator_state("offsets", [(f"split-{subtask}", cid)], kind="source_split")
        return w.finish(chain=chain)


def _commit(base, cid: int, handles, kind="checkpoint"):
    CheckpointCommitter(base).commit(JOB, cid, handles, record(kind=kind))


def _state(base, cid: int, **kw) -> dict:
    table = read_operator_state(base, JOB, cid, UID, **kw)
    return {(e.state_name, e.key): e.value for e in decode_operator_state(table) if e.state_name == "count"}


def _model(*steps: dict) -> dict:
    state: dict = {}
    for step in steps:
        for k, v in step.items():
            if v is None:
                state.pop(k, None)
            else:
                state[k] = v
    return {("count", k): v for k, v in state.items()}


# Keys 0..15: subtask 0 holds keys whose group is 0..3, subtask 1 groups 4..7.
KEYS = {s: [k for k in range(16) if (k % GROUPS) // 4 == s] for s in (0, 1)}


def _base(base, cid=1):
    handles = [_write(base, cid, s, full={k: k * 10 for k in KEYS[s]}, timers={KEYS[s][0]: 5}) for s in (0, 1)]
    _commit(base, cid, handles)


def _delta(base, cid, chain, puts: dict, deletes=(), timers=None):
    handles = []
    for s in (0, 1):
        handles.append(
            _write(
                base, cid, s, chain=chain,
                puts={k: v for k, v in puts.items() if k in KEYS[s]},
                deletes=[k for k in deletes if k in KEYS[s]],
                timers=timers,
            )
        )  # fmt: skip
    _commit(base, cid, handles)


def test_a_chain_resolves_to_the_full_state_with_deletes_and_newest_values(base):
    _base(base)
    _delta(base, 2, (1, 2), {0: 1, 5: 2, 100 % 16: 3}, deletes=[3])
    _delta(base, 3, (1, 2, 3), {0: 7, 3: 33}, deletes=[5, 9])
    full = {k: k * 10 for k in range(16)}
    assert _state(base, 1) == _model(full)
    assert _state(base, 2) == _model(full, {0: 1, 5: 2, 4: 3, 3: None})
    assert _state(base, 3) == _model(full, {0: 1, 5: 2, 4: 3, 3: None}, {0: 7, 3: 33, 5: None, 9: None})
    # Restore of one new subtask's key groups (rescale) reads from both old subtasks' chains.
    assert _state(base, 3, key_groups=range(2, 6)) == {
        k: v for k, v in _state(base, 3).items() if 2 <= k[1] % GROUPS < 6
    }
    # Rows read like a full snapshot's: the resolved checkpoint's id, no deletes left.
    table = read_operator_state(base, JOB, 3, UID)
    assert set(table["checkpoint_id"].to_pylist()) == {3}
    assert "delete" not in table["change"].to_pylist()
    # Operator state comes from the checkpoint itself, not from the chain.
    offsets = [e.value for e in decode_operator_state(read_operator_state(base, JOB, 3, UID, keyed=False))]
    assert offsets == [3, 3]


def test_timers_come_from_the_last_checkpoint_of_a_chain_only(base):
    _base(base)  # timers {0: 5} and {4: 5}
    _delta(base, 2, (1, 2), {1: 11}, timers=None)  # every timer fired
    table = read_operator_state(base, JOB, 2, UID)
    assert "timer" not in table["state_kind"].to_pylist()


def test_the_checkpoint_row_records_the_chains(base):
    _base(base)
    _delta(base, 2, (1, 2), {0: 1})
    rows = {c.checkpoint_id: c for c in list_completed_checkpoints(base, JOB)}
    assert decode_chains(rows[1].properties) == {}
    assert decode_chains(rows[2].properties) == {(UID, 0): (1, 2), (UID, 1): (1, 2)}


def test_an_incremental_checkpoint_is_much_smaller_than_a_full_one(base):
    full = {k: k for k in range(20_000)}
    h = [_write(base, 1, 0, full=full)]
    _commit(base, 1, h)
    d = [_write(base, 2, 0, chain=(1, 2), puts={k: -k for k in range(0, 20_000, 100)})]
    _commit(base, 2, d)
    assert d[0].state_bytes * 20 < h[0].state_bytes
    assert d[0].operator_state_rows == 200 + 1


def test_commit_refuses_a_chain_on_a_checkpoint_that_never_completed(base):
    _base(base)
    # checkpoint 2 was aborted (never committed); 3 claims to build on it
    handles = [_write(base, 3, s, chain=(1, 2, 3), puts={KEYS[s][0]: 1}) for s in (0, 1)]
    with pytest.raises(CorruptCheckpointError, match=r"builds on checkpoints \[2\]"):
        _commit(base, 3, handles)
    assert [c.checkpoint_id for c in list_completed_checkpoints(base, JOB)] == [1]


def _files_of(base, cid: int) -> list[str]:
    root = os.path.join(base, "operator_state", f"job_id={JOB}", f"checkpoint_id={cid}")
    return sorted(os.listdir(root)) if os.path.isdir(root) else []


def test_retention_never_deletes_a_file_a_retained_checkpoint_references(base):
    """num-retained 1 along a chain, a new base, then the old chain goes."""
    _base(base, 1)
    _delta(base, 2, (1, 2), {0: 1})
    _delta(base, 3, (1, 2, 3), {1: 2}, deletes=[4])
    result = retain(base, JOB, 1)
    assert result.retained == (3,) and result.dropped == (1, 2)
    assert result.shared == (1, 2)
    # Every file the retained checkpoint's chain references still exists and reads.
    referenced = read_state_files(base, "operator_state", job_id=JOB, checkpoint_ids={1, 2, 3}, columns=["subtask"])
    assert referenced.num_rows > 0
    for cid in (1, 2, 3):
        assert _files_of(base, cid)
    verify_checkpoint(base, JOB, 3, full=True)
    assert _state(base, 3) == _model({k: k * 10 for k in range(16)}, {0: 1}, {1: 2, 4: None})
    # A commit building on a dropped checkpoint that the retained chain still shares is fine.
    _delta(base, 4, (1, 2, 3, 4), {2: 5})
    # A new base: the old chain is no longer referenced and goes.
    handles = [_write(base, 5, s, full={k: 0 for k in KEYS[s]}) for s in (0, 1)]
    _commit(base, 5, handles)
    result = retain(base, JOB, 1)
    assert result.retained == (5,) and result.shared == ()
    for cid in (1, 2, 3, 4):
        assert _files_of(base, cid) == []
    live = scan_table(DeltaTable(os.path.join(base, "operator_state")), columns=["checkpoint_id"])
    assert set(live["checkpoint_id"].to_pylist()) == {5}
    # ... and a late incremental checkpoint on the deleted chain is refused, not committed broken.
    late = [_write(base, 6, s, chain=(1, 2, 3, 4, 6), puts={KEYS[s][0]: 1}) for s in (0, 1)]
    with pytest.raises(CorruptCheckpointError):
        _commit(base, 6, late)


def test_retention_keeps_every_chain_of_several_retained_checkpoints(base):
    _base(base, 1)
    _delta(base, 2, (1, 2), {0: 1})
    handles = [_write(base, 3, s, full={k: 3 for k in KEYS[s]}) for s in (0, 1)]
    _commit(base, 3, handles)
    _delta(base, 4, (3, 4), {0: 4})
    result = retain(base, JOB, 3)  # keeps 2, 3, 4: 2 needs 1
    assert result.retained == (2, 3, 4) and result.shared == (1,)
    assert _files_of(base, 1)
    for cid in (2, 3, 4):
        verify_checkpoint(base, JOB, cid, full=True)
    assert _state(base, 2)[("count", 0)] == 1
    assert _state(base, 4)[("count", 0)] == 4


def test_a_corrupt_shared_base_falls_back_to_a_checkpoint_outside_its_chain(base):
    handles = [_write(base, 1, s, full={k: 1 for k in KEYS[s]}) for s in (0, 1)]
    _commit(base, 1, handles)
    handles = [_write(base, 2, s, full={k: 2 for k in KEYS[s]}) for s in (0, 1)]
    _commit(base, 2, handles)
    _delta(base, 3, (2, 3), {0: 3})
    # Damage a file of base 2, which checkpoint 3 shares.
    victim = os.path.join(base, "operator_state", f"job_id={JOB}", "checkpoint_id=2", _files_of(base, 2)[0])
    with open(victim, "r+b") as f:
        f.truncate(10)
    with pytest.raises(CorruptCheckpointError, match="checkpoint 2"):
        verify_checkpoint(base, JOB, 3)
    assert find_restorable_checkpoint(base, JOB).checkpoint_id == 1


def test_inspect_shows_the_resolved_state_or_the_stored_changes(base):
    _base(base)
    _delta(base, 2, (1, 2), {0: 1}, deletes=[3])
    resolved = inspect_operator_state(base, 2, job_id=JOB)
    assert "change" not in resolved.column_names
    keyed = resolved.filter(pa.compute.equal(resolved["state_name"], "count"))
    assert keyed.num_rows == 15
    stored = inspect_operator_state(base, 2, job_id=JOB, resolve=False)
    assert sorted(c for c in stored["change"].to_pylist() if c) == ["delete", "put"]


def test_tables_written_without_the_change_column_stay_readable(base):
    """A table from before incremental checkpoints: files and Delta schema lack ``change``."""
    from checkpointing.layout import CheckpointLayout
    from checkpointing.schemas import OPERATOR_STATE_SCHEMA

    layout = CheckpointLayout(base_url=base)
    old_schema = pa.schema([f for f in OPERATOR_STATE_SCHEMA if f.name != "change"])
    os.makedirs(os.path.join(base, "operator_state"))
    DeltaTable.create(os.path.join(base, "operator_state"), old_schema, partition_by=["job_id", "checkpoint_id"])
    h = _write(base, 1, 0, full={0: 1, 1: 2})
    # rewrite the file without the column, as the old version wrote it
    for f in h.files:
        path = layout.file_path(f.table, f.path)
        if f.table == "operator_state":
            pq.write_table(pq.read_table(path).drop_columns(["change"]), path)
    h = type(h)(**{**h.__dict__, "files": tuple(
        type(f)(**{**f.__dict__, "size": os.path.getsize(layout.file_path(f.table, f.path))}) for f in h.files
    )})  # fmt: skip
    _commit(base, 1, [h])
    assert _state(base, 1) == {("count", 0): 1, ("count", 1): 2}
    # The committer evolved the table: an incremental checkpoint on top of it works.
    _commit(base, 2, [_write(base, 2, 0, chain=(1, 2), puts={1: 5})])
    assert _state(base, 2) == {("count", 0): 1, ("count", 1): 5}


_CHAIN_PART_SCHEMA = pa.schema([
    ("state_name", pa.string()), ("state_kind", pa.string()), ("key_group", pa.int32()), ("key", pa.binary()),
    ("change", pa.string()), ("value", pa.binary()),
])  # fmt: skip


def _chain_part(rows: list[tuple[str, int, str | None, int]]) -> pa.Table:
    """A part's keyed rows: (state name, key, change, value); key group = key."""
    return pa.table({
        "state_name": [r[0] for r in rows], "state_kind": ["value"] * len(rows), "key_group": [r[1] for r in rows],
        "key": [str(r[1]).encode() for r in rows], "change": [r[2] for r in rows],
        "value": [str(r[3]).encode() for r in rows],
    }, schema=_CHAIN_PART_SCHEMA)  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(
    parts=st.lists(
        st.dictionaries(st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 12)),
                        st.tuples(st.sampled_from(["put", "delete", None]), st.integers(0, 99))),
        min_size=1, max_size=6,
    )
)  # fmt: skip
def test_chain_resolution_keeps_each_keys_newest_row_and_drops_deletes(parts):
    from checkpointing.chains import resolve_chain_rows

    tables = [_chain_part([(name, key, change, value) for (name, key), (change, value) in part.items()])
              for part in parts]  # fmt: skip
    expected: dict = {}
    for part in parts:  # oldest first: a newer row replaces, a delete removes
        for (name, key), (change, value) in part.items():
            if change == "delete":
                expected.pop((name, key), None)
            else:
                expected[(name, key)] = value
    resolved = resolve_chain_rows(list(enumerate(tables))).to_pylist()
    got = {(r["state_name"], int(r["key"])): int(r["value"]) for r in resolved}
    assert got == expected and len(resolved) == len(expected)
