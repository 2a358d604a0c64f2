"""Spark SQL resolves incremental checkpoints' chains exactly as the engine's reader does."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from checkpointing import (
    CheckpointCommitter,
    CheckpointRecord,
    KeyedColumns,
    SnapshotWriter,
    decode_operator_state,
    list_completed_checkpoints,
    read_operator_state,
    retain,
)
from flinklike_spark.spark import keyed_state, operator_state_as_of, register_state_view

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(600)]

JOB = "incr-job"
UID = "count"
GROUPS = 8
KEYS = {s: [k for k in range(40) if (k % GROUPS) // 4 == s] for s in (0, 1)}


def _cols(entries: dict) -> KeyedColumns:
    keys = list(entries)
    return KeyedColumns(keys, [entries[k] for k in keys], [k % GROUPS for k in keys])


def _checkpoint(base, cid: int, *, full=None, puts=None, deletes=(), chain=None):
    handles = []
    for s in (0, 1):
        with SnapshotWriter(base, JOB, cid, UID, s) as w:
            if full is not None:
                w.add_keyed_state("count", _cols({k: v for k, v in full.items() if k in KEYS[s]}))
            if puts is not None:
                w.add_keyed_changes(
                    "count",
                    _cols({k: v for k, v in puts.items() if k in KEYS[s]}),
                    _cols(dict.fromkeys(k for k in deletes if k in KEYS[s])),
                )
            # two timers of one key: rows that must not be deduplicated
            w.add_keyed_state("timers", [(KEYS[s][0] % GROUPS, KEYS[s][0], cid), (KEYS[s][0] % GROUPS, KEYS[s][0], 99)],
                              kind="timer")  # fmt: skip
            w.add_operator_state("offsets", [(f"split-{s}", cid)], kind="source_split")
            handles.append(w.finish(chain=chain))
    CheckpointCommitter(base).commit(JOB, cid, handles, CheckpointRecord(trigger_time=datetime.now(UTC)))


@pytest.fixture(scope="module")
def chained(tmp_path_factory):
    base = str(tmp_path_factory.mktemp("incremental") / "checkpoints")
    _checkpoint(base, 1, full={k: k for k in range(40)})
    _checkpoint(base, 2, puts={0: 100, 5: 500}, deletes=[1, 9], chain=(1, 2))
    _checkpoint(base, 3, puts={1: 11, 5: 555}, deletes=[0], chain=(1, 2, 3))
    _checkpoint(base, 4, full={k: -k for k in range(0, 40, 2)})
    _checkpoint(base, 5, puts={2: 2}, deletes=[4], chain=(4, 5))
    result = retain(base, JOB, 3)  # keeps 3, 4, 5; 3 still needs 1 and 2
    assert result.retained == (3, 4, 5) and result.shared == (1, 2)
    return base


def _engine(base, cid: int) -> set[tuple]:
    return {
        (e.state_name, repr(e.key), repr(e.value))
        for e in decode_operator_state(read_operator_state(base, JOB, cid, UID))
    }


def test_the_state_view_gives_every_retained_checkpoints_full_state(spark, chained):
    register_state_view(spark, chained, "flinklike_state_test")
    for checkpoint in list_completed_checkpoints(chained, JOB):
        rows = spark.sql(
            "SELECT state_name, key_repr, value_repr FROM flinklike_state_test "
            f"WHERE job_id = '{JOB}' AND checkpoint_id = {checkpoint.checkpoint_id} AND operator_uid = '{UID}'"
        ).collect()
        got = [(r.state_name, r.key_repr, r.value_repr) for r in rows]
        assert len(got) == len(set(got))
        assert set(got) == _engine(chained, checkpoint.checkpoint_id), checkpoint.checkpoint_id
    # 3 resolves through the dropped checkpoints 1 and 2
    counts = {r.key_repr: r.value_repr for r in spark.sql(
        "SELECT key_repr, value_repr FROM flinklike_state_test WHERE checkpoint_id = 3 AND state_name = 'count'"
    ).collect()}  # fmt: skip
    assert counts["1"] == "11" and counts["5"] == "555" and "0" not in counts and "9" not in counts
    assert len(counts) == 38


def test_keyed_state_and_operator_state_as_of_resolve_chains(spark, chained):
    for cid in (3, 5):
        rows = keyed_state(spark, chained, UID, "count", checkpoint_id=cid, job_id=JOB).collect()
        assert {("count", r.key, r.value) for r in rows} == {t for t in _engine(chained, cid) if t[0] == "count"}
    then = operator_state_as_of(spark, chained, 4, job_id=JOB)
    ids = {r.checkpoint_id for r in then.select("checkpoint_id").distinct().collect()}
    assert ids == {3, 4}
    at_three = {(r.state_name, r.key_repr, r.value_repr) for r in then.where("checkpoint_id = 3").collect()}
    assert at_three == _engine(chained, 3)
    stored = operator_state_as_of(spark, chained, 3, job_id=JOB, resolve=False)
    assert {r.change for r in stored.select("change").distinct().collect()} == {None, "put", "delete"}


def test_operator_state_as_of_needs_no_old_log_versions(spark, tmp_path, monkeypatch):
    """The checkpoint tables' logs keep only recent versions (checkpointing.maintenance): once a retained
    checkpoint's version is cleaned from the log, Delta time travel to it fails, and operator_state_as_of,
    which reads the latest version, still gives that checkpoint's state."""
    from deltalake import DeltaTable
    from pyspark.errors import AnalysisException

    from checkpointing.layout import TABLE_PROPERTIES

    monkeypatch.setitem(TABLE_PROPERTIES, "delta.logRetentionDuration", "interval 0 seconds")
    base = str(tmp_path / "checkpoints")
    table = f"{base}/operator_state"
    cid = 0
    while True:
        cid += 1
        _checkpoint(base, cid, full={k: k * cid for k in range(40)})
        retain(base, JOB, 3)  # maintains the tables every time
        oldest = list_completed_checkpoints(base, JOB)[0]
        try:
            DeltaTable(table, version=oldest.operator_state_version)
        except Exception:  # noqa: BLE001 - deltalake: the version is no longer in the log
            break
        assert cid < 40, "the log was never cleaned past a retained checkpoint's version"
    with pytest.raises(AnalysisException, match="DELTA_VERSION_NOT_FOUND"):
        spark.read.format("delta").option("versionAsOf", oldest.operator_state_version).load(table).count()
    then = operator_state_as_of(spark, base, oldest.checkpoint_id, job_id=JOB)
    assert {r.checkpoint_id for r in then.select("checkpoint_id").distinct().collect()} == {oldest.checkpoint_id}
    rows = {(r.state_name, r.key_repr, r.value_repr) for r in then.collect()}
    assert rows == _engine(base, oldest.checkpoint_id)
    stored = operator_state_as_of(spark, base, oldest.checkpoint_id, job_id=JOB, resolve=False)
    assert stored.count() == read_operator_state(base, JOB, oldest.checkpoint_id, UID).num_rows
