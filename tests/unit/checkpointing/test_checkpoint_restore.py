"""Restore reads: channel state round trip, corruption detection and fallback."""

from __future__ import annotations

import logging
import os

import pytest

from checkpointing import (
    CheckpointCommitter,
    SnapshotWriter,
    decode_operator_state,
    find_restorable_checkpoint,
    latest_completed,
    read_channel_state,
    read_operator_state,
    verify_checkpoint,
)
from flinklike_spark.errors import CheckpointNotFoundError, CorruptCheckpointError
from tests.support.checkpoint_tables import JOB, UID, batch, complete, record


def _state_file(handles, table="operator_state", subtask=1):
    handle = next(h for h in handles if h.subtask == subtask)
    return next(f for f in handle.files if f.table == table)


def test_channel_state_round_trip_preserves_batches_and_order(base):
    expected = {}
    with SnapshotWriter(base, JOB, 1, UID, 0) as w:
        # Added out of order; restore must order by (gate, channel, sequence).
        for gate, channel, seq in [(1, 0, 1), (0, 2, 0), (1, 0, 0), (0, 0, 1), (0, 0, 0)]:
            b = batch(1000 * gate + 100 * channel + 10 * seq, seq + 1)
            w.add_channel_state("input", gate, channel, seq, b)
            expected[(gate, channel, seq)] = b
        w.add_channel_state("output", 0, 0, 0, batch(7, 3))
        handle = w.finish()
    CheckpointCommitter(base).commit(JOB, 1, [handle], record())
    restored = read_channel_state(base, JOB, 1, UID, 0, "input")
    assert [(b.gate, b.channel, b.sequence) for b in restored] == sorted(expected)
    for buffer in restored:
        assert buffer.batch.equals(expected[(buffer.gate, buffer.channel, buffer.sequence)])
    output = read_channel_state(base, JOB, 1, UID, 0, "output")
    assert len(output) == 1 and output[0].batch.equals(batch(7, 3))
    assert read_channel_state(base, JOB, 1, UID, 1, "input") == []


def test_decode_operator_state(base):
    complete(base, 1)
    entries = list(decode_operator_state(read_operator_state(base, JOB, 1, UID, key_groups=range(0, 2))))
    assert entries == [
        ("count", "value", 0, "k0", 0),
        ("seen", "list", 0, "k0", [0, 1]),
        ("count", "value", 1, "k1", 10),
        ("seen", "list", 1, "k1", [1, 1]),
    ]


@pytest.mark.parametrize("damage", ["truncate", "overwrite_footer", "delete"])
def test_damaged_file_falls_back_to_previous_checkpoint(base, caplog, damage):
    complete(base, 1)
    newest = complete(base, 2, value_offset=1)
    victim = _state_file(newest)
    path = os.path.join(base, "operator_state", victim.path)
    if damage == "truncate":
        with open(path, "r+b") as f:
            f.truncate(victim.size // 2)
    elif damage == "overwrite_footer":
        with open(path, "r+b") as f:
            f.seek(victim.size - 16)
            f.write(b"\x00" * 16)  # same size, broken footer and magic
    else:
        os.remove(path)
    assert latest_completed(base, JOB).checkpoint_id == 2  # listing does not validate
    with pytest.raises(CorruptCheckpointError) as info:
        verify_checkpoint(base, JOB, 2)
    assert info.value.checkpoint_id == 2 and info.value.path == path
    assert "checkpoint 2" in str(info.value) and victim.path in str(info.value)
    if damage != "overwrite_footer":  # same-size damage is found by verify, not by stat
        with pytest.raises(CorruptCheckpointError, match=victim.path):
            read_operator_state(base, JOB, 2, UID)
    with caplog.at_level(logging.WARNING, logger="checkpointing"):
        chosen = find_restorable_checkpoint(base, JOB)
    assert chosen.checkpoint_id == 1
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "checkpoint 2" in warnings[0].getMessage() and victim.path in warnings[0].getMessage()
    restored = read_operator_state(base, JOB, chosen.checkpoint_id, UID, key_groups=range(4, 5), state_name="count")
    assert [e.value for e in decode_operator_state(restored)] == [40]


def test_no_restorable_checkpoint_left(base, caplog):
    with pytest.raises(CheckpointNotFoundError, match="none completed"):
        find_restorable_checkpoint(base, JOB)
    handles = complete(base, 1)
    os.remove(os.path.join(base, "channel_state", _state_file(handles, "channel_state", 0).path))
    with caplog.at_level(logging.WARNING, logger="checkpointing"):
        with pytest.raises(CheckpointNotFoundError, match=r"corrupt: \[1\]"):
            find_restorable_checkpoint(base, JOB)
    assert any("checkpoint 1" in r.getMessage() for r in caplog.records)


def test_full_verify_reads_every_page(base):
    handles = complete(base, 1)
    victim = _state_file(handles, "channel_state", 0)
    path = os.path.join(base, "channel_state", victim.path)
    with open(path, "r+b") as f:
        f.seek(4)
        f.write(b"\xff" * 64)  # inside the first data page; footer intact
    verify_checkpoint(base, JOB, 1)  # cheap check: footer is fine
    with pytest.raises(CorruptCheckpointError, match=victim.path):
        verify_checkpoint(base, JOB, 1, full=True)


def test_other_jobs_do_not_interfere(base):
    complete(base, 1)
    complete(base, 7, job="job-2")
    assert latest_completed(base, JOB).checkpoint_id == 1
    assert latest_completed(base, "job-2").checkpoint_id == 7
    assert read_operator_state(base, "job-2", 7, UID).num_rows == 18
    with pytest.raises(CheckpointNotFoundError):
        read_operator_state(base, JOB, 7, UID)


def test_no_restorable_checkpoint_below_a_bound_names_the_completed_ones(base):
    complete(base, 3)
    complete(base, 4)
    with pytest.raises(CheckpointNotFoundError) as missing:
        find_restorable_checkpoint(base, JOB, max_checkpoint_id=1)
    assert "completed: [3, 4]; 0 of them at or below checkpoint 1" in str(missing.value)
    assert "(0 completed)" not in str(missing.value)
