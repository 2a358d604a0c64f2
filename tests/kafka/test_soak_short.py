"""The soak run of benchmarks/soak.py, shortened: 75 s with a SIGKILL every 20 s and a stop-with-savepoint/resume.

The full run (60 minutes, ``python benchmarks/soak.py``) is a benchmark; this
one checks that the soak's job and checks hold: both outputs (Delta and an
exactly-once Kafka sink) have every record once per key, in order in Kafka,
with the state chain unbroken, through every fault.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable

pytest.importorskip("confluent_kafka")
pytest.importorskip("rocksdict")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from soak import check_outputs, growth, run_soak  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]


def test_a_short_soak_is_exactly_once_through_kills_and_a_stop_with_savepoint(kafka_cache_dir, tmp_path):
    result = run_soak(
        minutes=1.25, kill_every=1 / 3, savepoint_every=0.6, sample_every=10, keys=50, rate=500, work=tmp_path,
        sink_log_retention="interval 20 seconds", log=lambda line: None,
    )  # fmt: skip
    configuration = DeltaTable(str(tmp_path / "delta")).metadata().configuration
    assert configuration["delta.logRetentionDuration"] == "interval 20 seconds", configuration
    assert result.kills >= 2 and result.savepoints >= 1, result
    assert len(result.samples) >= 5
    assert all(s.te_threads > 0 and s.jm_fds > 0 for s in result.samples)
    assert set(growth(result.samples, 1.25)) >= {"te_rss_mb", "te_threads", "te_fds", "checkpoint_ms"}


def test_the_soak_check_finds_a_duplicate_and_a_gap():
    rows = [{"key": 0, "seq": s, "count": s + 1} for s in range(3)]
    kafka = [(b"0", f"0,{s},{s + 1}".encode(), 0) for s in range(3)]
    check_outputs(rows, kafka, keys=1, per_key=3)
    with pytest.raises(AssertionError, match="key 0: 4 rows, 1 twice"):
        check_outputs([*rows, rows[1]], kafka, keys=1, per_key=3)
    with pytest.raises(AssertionError, match="Kafka: key 0: 2 records"):
        check_outputs(rows, [kafka[0], kafka[2]], keys=1, per_key=3)
