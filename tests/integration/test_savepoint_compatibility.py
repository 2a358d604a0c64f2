"""Savepoints written by every snapshot format version restore with the current code.

``tests/resources/savepoints/<format version>/<backend>/`` holds the savepoints
:mod:`tests.support.savepoint_fixtures` wrote with the code of that version.
Each is read back with the State Processor API (every state as it was at the
savepoint) and restored by a job that goes on to the end of its input (timers,
an open window and broadcast state carried through). The format's contract is
in :mod:`checkpointing.format_versions`: a changed format without a new version,
a migration and new fixtures fails here.
"""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable, write_deltalake

from checkpointing.format_versions import MIGRATIONS, schema_fingerprint
from checkpointing.reader import decode_operator_state, read_operator_state
from checkpointing.schemas import FORMAT_VERSION
from connectors import CollectSink
from flinklike_spark.errors import UnsupportedSnapshotFormatError
from flinklike_spark.state_processor import SavepointReader
from tests.support import savepoint_fixtures as fixtures

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[1] / "resources" / "savepoints"
VERSIONS = sorted(int(p.name) for p in ROOT.iterdir() if p.is_dir() and p.name.isdigit())
SAVEPOINTS = [(v, b) for v in VERSIONS for b in fixtures.BACKENDS]
HOW_TO_CHANGE = (
    "a change of the snapshot format needs a new FORMAT_VERSION, a migration from the old one, the new "
    "fingerprint in tests/resources/savepoints/formats.json and the new version's savepoints "
    "(see checkpointing/format_versions.py)"
)


def test_the_tables_match_the_fingerprint_recorded_for_this_format_version():
    recorded = json.loads((ROOT / "formats.json").read_text())
    assert recorded.get(str(FORMAT_VERSION)) == schema_fingerprint(), HOW_TO_CHANGE


def test_every_version_has_its_savepoints_and_every_older_one_a_migration():
    assert VERSIONS == list(range(1, FORMAT_VERSION + 1)), HOW_TO_CHANGE
    for version in VERSIONS:
        for backend in (*fixtures.BACKENDS, "kafka"):
            assert (ROOT / str(version) / backend / "checkpoints" / "_delta_log").is_dir(), (version, backend)
    assert sorted(MIGRATIONS) == list(range(1, FORMAT_VERSION)), HOW_TO_CHANGE


def copy_of(version: int, backend: str, tmp_path: Path) -> Path:
    """A copy: a restore writes its own checkpoints next to the savepoint's."""
    return Path(shutil.copytree(ROOT / str(version) / backend, tmp_path / f"v{version}-{backend}"))


def state_at_the_savepoint() -> dict[str, list[dict]]:
    per_user = defaultdict(list)
    for row in fixtures.events(fixtures.FIRST_RUN_ROWS):
        per_user[row["user"]].append(row)
    return per_user


@pytest.mark.parametrize(("version", "backend"), SAVEPOINTS)
def test_the_state_processor_api_reads_every_state_of_the_savepoint(version, backend, tmp_path):
    reader = SavepointReader.read(copy_of(version, backend, tmp_path))
    per_user = state_at_the_savepoint()

    keyed = reader.read_keyed_state("keyed-state").to_pylist()
    assert sorted(row["key"] for row in keyed) == sorted(per_user)
    for row in keyed:
        vs = [r["v"] for r in per_user[row["key"]]]
        assert row["count"] == len(vs)
        assert row["values"] == vs
        assert dict(row["by_parity"]) == {("even" if vs[0] % 2 == 0 else "odd"): vs[-1]}
        assert row["total"] == sum(vs)
        assert tuple(row["mean"]) == (sum(vs), len(vs))  # the accumulator
        assert row["last_seen"] == per_user[row["key"]][-1]["ts"]
        assert row["last_seen_ttl_timestamp"] is not None

    timers = reader.read_timers("keyed-state").to_pylist()
    assert sorted((t["key"], t["timestamp"], t["time_domain"]) for t in timers) == [
        (user, fixtures.END_TIMER, "event_time") for user in sorted(per_user)
    ]

    window_state = reader.read_keyed_state("windows")
    assert window_state.num_rows == len(per_user)  # the open window [10 s, 20 s) of each user

    rules = reader.read_broadcast_state("broadcast", "rules").to_pylist()
    assert {r["key"]: r["value"] for r in rules} == {r["rule"]: r["factor"] for r in fixtures.rules(3)}
    seen = reader.read_keyed_state("broadcast", "seen").to_pylist()
    assert {r["key"]: r["seen"] for r in seen} == {u: len(rows) for u, rows in per_user.items()}

    for uid, rows in (("events", fixtures.FIRST_RUN_ROWS), ("rules", 3)):
        splits = reader.read_operator_state(uid)
        assert splits.num_rows == 1
        assert f"next_row={rows}" in splits["value_repr"][0].as_py(), splits.to_pylist()


@pytest.mark.parametrize("version", VERSIONS)
def test_a_kafka_sources_splits_and_a_kafka_sinks_transactions_decode(version, tmp_path):
    """Their broker is gone with the run that wrote them: decoded here, as a restore decodes them first."""
    from connectors.kafka.commit_verification import KafkaCommittable
    from connectors.kafka.splits import KafkaPartitionSplit

    reader = SavepointReader.read(copy_of(version, "kafka", tmp_path))
    checkpoint = reader.checkpoint

    def entries(uid: str) -> list:
        rows = read_operator_state(reader.layout, checkpoint.job_id, checkpoint.checkpoint_id, uid, keyed=False)
        return list(decode_operator_state(rows))

    splits = [e.value for e in entries(fixtures.KAFKA_UIDS[0]) if isinstance(e.value, KafkaPartitionSplit)]
    assert sorted(s.partition for s in splits) == [0, 1], splits
    assert all(s.topic.startswith("in") and s.next_offset > 0 for s in splits), splits

    pending = [c for e in entries(fixtures.KAFKA_UIDS[1]) for c in e.value]
    assert pending and all(isinstance(c, KafkaCommittable) for c in pending), pending
    for committable in pending:  # pre-committed by the savepoint itself, while records flowed
        assert committable.transactional_id.startswith("fixture"), committable
        assert committable.checkpoint_id == checkpoint.checkpoint_id and committable.producer_id >= 0, committable


@pytest.mark.slow
@pytest.mark.parametrize(("version", "backend"), SAVEPOINTS)
def test_a_job_resumes_from_the_savepoint_and_ends_as_an_uninterrupted_one(version, backend, tmp_path):
    directory = copy_of(version, backend, tmp_path)
    config = fixtures.fixture_config(directory, backend) | {"execution.state-recovery.path": str(directory)}
    result = fixtures.build(config, restored=True).execute("resumed from a kept savepoint")
    want = fixtures.expected()
    for name in want:
        got = sorted(CollectSink.rows(result, name=name), key=lambda row: row["user"])
        assert [_plain(row) for row in got] == want[name], name


def _plain(row: dict) -> dict:
    """A collected row as the function emitted it: its dicts came back as structs with every key seen."""
    return {k: {f: x for f, x in v.items() if x is not None} if isinstance(v, dict) else v for k, v in row.items()}


def test_a_savepoint_of_a_newer_format_is_refused_naming_both_versions(tmp_path):
    directory = copy_of(FORMAT_VERSION, "hashmap", tmp_path)
    table = DeltaTable(str(directory / "checkpoints"))
    rows = table.to_pyarrow_table()
    newer = rows.set_column(
        rows.schema.get_field_index("format_version"),
        rows.schema.field("format_version"),
        pa.array([FORMAT_VERSION + 1] * rows.num_rows, pa.int32()),
    )
    write_deltalake(str(directory / "checkpoints"), newer, mode="overwrite")
    assert pc.all(pc.equal(DeltaTable(str(directory / "checkpoints")).to_pyarrow_table()["format_version"],
                           FORMAT_VERSION + 1)).as_py()  # fmt: skip
    match = rf"format version {FORMAT_VERSION + 1} \(by flinklike-spark .*\); this flinklike-spark .* up to {FORMAT_VERSION}"
    with pytest.raises(UnsupportedSnapshotFormatError, match=match):
        SavepointReader.read(directory)
    config = fixtures.fixture_config(directory, "hashmap") | {"execution.state-recovery.path": str(directory)}
    with pytest.raises(UnsupportedSnapshotFormatError, match=match):
        fixtures.build(config, restored=True).execute("refused")
