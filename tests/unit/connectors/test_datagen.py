"""SequenceSource through the FLIP-27 call order: create_splits -> create_reader -> add_splits -> open -> poll."""

from __future__ import annotations

import collections
import pickle

import pytest

from connectors import SequenceSource, SequenceSplit
from flinklike_spark.connector_api import Boundedness, SourceReaderContext
from flinklike_spark.errors import ConfigurationError
from tests.support.clocks import ManualClock


def start_reader(source, splits, *, subtask, parallelism):
    reader = source.create_reader(SourceReaderContext(subtask_index=subtask, parallelism=parallelism))
    reader.add_splits(splits)
    reader.open()
    return reader


def readers_for(source, parallelism):
    splits = source.create_splits(parallelism)
    return [
        start_reader(
            source,
            [s for i, s in enumerate(splits) if i % parallelism == subtask],
            subtask=subtask,
            parallelism=parallelism,
        )
        for subtask in range(parallelism)
    ]


def drain(reader, max_rows=1000, limit=100_000):
    """Rows until end_of_input (as (key, seq) pairs)."""
    rows = []
    for _ in range(limit):
        result = reader.poll_next(max_rows)
        if result.end_of_input:
            assert result.batch is None
            return rows
        assert result.batch is not None and result.batch.num_rows > 0
        assert result.batch.num_rows <= max_rows
        rows.extend(zip(result.batch.column("key").to_pylist(), result.batch.column("seq").to_pylist(), strict=True))
    raise AssertionError("reader did not reach end_of_input")


def assert_seq_increasing_per_key(rows):
    last = {}
    for key, seq in rows:
        assert seq == last.get(key, -1) + 1, f"key {key}: seq {seq} after {last.get(key)}"
        last[key] = seq


@pytest.mark.parametrize("parallelism", [1, 2, 3, 7, 12])
def test_every_key_seq_exactly_once_and_ordered_per_reader(parallelism):
    num_keys, per_key = 10, 57
    source = SequenceSource(num_keys=num_keys, records_per_key=per_key, batch_size=64)
    splits = source.create_splits(parallelism)
    assert len(splits) == parallelism
    all_rows = []
    for subtask, reader in enumerate(readers_for(source, parallelism)):
        rows = drain(reader, max_rows=100)
        reader.close()
        assert {key % parallelism for key, _ in rows} <= {subtask}
        assert_seq_increasing_per_key(rows)
        all_rows.extend(rows)
    counts = collections.Counter(all_rows)
    assert set(counts) == {(k, s) for k in range(num_keys) for s in range(per_key)}
    assert max(counts.values()) == 1


def test_schema_and_batch_size_cap():
    source = SequenceSource(num_keys=3, records_per_key=100, batch_size=16)
    assert source.output_schema().names == ["key", "seq"]
    assert str(source.output_schema().field("key").type) == "int64"
    (reader,) = readers_for(source, 1)
    result = reader.poll_next(1000)
    assert result.batch.num_rows == 16
    assert result.batch.schema == source.output_schema()
    # s-major: first all keys' seq 0, then seq 1, ...
    assert result.batch.column("key").to_pylist()[:6] == [0, 1, 2, 0, 1, 2]
    assert result.batch.column("seq").to_pylist()[:6] == [0, 0, 0, 1, 1, 1]
    assert reader.poll_next(5).batch.num_rows == 5


def test_string_keys():
    source = SequenceSource(num_keys=4, records_per_key=3, key_type="str")
    assert str(source.output_schema().field("key").type) == "string"
    rows = [r for reader in readers_for(source, 2) for r in drain(reader)]
    assert sorted(rows) == sorted((f"k{k}", s) for k in range(4) for s in range(3))


@pytest.mark.parametrize("stop_after", [0, 1, 5, 10])
def test_restore_from_snapshot_continues_exactly(stop_after):
    source = SequenceSource(num_keys=5, records_per_key=40, batch_size=7)
    parallelism = 2
    combined = []
    for subtask, reader in enumerate(readers_for(source, parallelism)):
        before = []
        for _ in range(stop_after):
            batch = reader.poll_next(7).batch
            before.extend(zip(batch.column("key").to_pylist(), batch.column("seq").to_pylist(), strict=True))
        state = reader.snapshot_state(checkpoint_id=1)
        assert all(isinstance(s, SequenceSplit) for s in state)
        # the failed reader read further after the checkpoint; those rows must be replayed
        assert reader.poll_next(7).batch.num_rows == 7
        reader.close()
        restored = start_reader(source, pickle.loads(pickle.dumps(state)), subtask=subtask, parallelism=parallelism)
        after = drain(restored)
        # per key, the restored reader continues right after the last seq returned before the snapshot
        assert_seq_increasing_per_key(before + after)
        combined.extend(before + after)
    assert len(combined) == 5 * 40
    assert set(combined) == {(k, s) for k in range(5) for s in range(40)}


def test_snapshot_positions_after_last_returned_row():
    source = SequenceSource(num_keys=4, records_per_key=10)
    (reader,) = readers_for(source, 1)
    reader.poll_next(6)
    (split,) = reader.snapshot_state(1)
    assert split.next_row == 6
    drain(reader)
    (split,) = reader.snapshot_state(2)
    assert split.next_row == 40


def test_unbounded_keeps_producing():
    source = SequenceSource(num_keys=3, records_per_key=None, batch_size=1000)
    assert source.boundedness is Boundedness.CONTINUOUS_UNBOUNDED
    assert SequenceSource(num_keys=3, records_per_key=1).boundedness is Boundedness.BOUNDED
    (reader,) = readers_for(source, 1)
    rows = []
    for _ in range(200):
        result = reader.poll_next(1000)
        assert not result.end_of_input
        rows.extend(zip(result.batch.column("key").to_pylist(), result.batch.column("seq").to_pylist(), strict=True))
    assert len(rows) == 200_000
    assert_seq_increasing_per_key(rows)
    assert rows[-1] == (199_999 % 3, 199_999 // 3)


def test_more_subtasks_than_keys_gives_empty_readers():
    source = SequenceSource(num_keys=2, records_per_key=3)
    readers = readers_for(source, 4)
    assert [len(drain(r)) for r in readers] == [3, 3, 0, 0]


def test_throttle_returns_wait_seconds_and_holds_rate():
    clock = ManualClock(100.0)
    # 1000 rows/s over 2 readers: 500 rows/s each
    source = SequenceSource(num_keys=4, records_per_key=None, rows_per_second=1000, clock=clock)
    reader = readers_for(source, 2)[0]
    first = reader.poll_next(4096)
    assert first.batch is None and not first.end_of_input
    assert first.wait_seconds > 0
    emitted = 0
    for _ in range(10_000):
        result = reader.poll_next(4096)
        if result.batch is None:
            assert result.wait_seconds > 0
            clock.now += result.wait_seconds
        else:
            emitted += result.batch.num_rows
        if clock.now >= 110.0:
            break
    # 10 simulated seconds at 500 rows/s
    assert 4900 <= emitted <= 5000


def test_throttle_does_not_burst_after_long_pause():
    clock = ManualClock(100.0)
    source = SequenceSource(num_keys=1, records_per_key=None, rows_per_second=100, clock=clock)
    (reader,) = readers_for(source, 1)
    clock.now += 3600  # an hour of backpressure must not bank an hour of rows
    total = 0
    while (result := reader.poll_next(10_000)).batch is not None:
        total += result.batch.num_rows
    assert 0 < total <= 100


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_keys": 0, "records_per_key": 1}, "num_keys must be a positive int (>= 1), got 0"),
        ({"num_keys": -3, "records_per_key": 1}, "got -3"),
        ({"num_keys": 2, "records_per_key": 0}, "records_per_key must be a positive int (>= 1), got 0"),
        ({"num_keys": 2, "records_per_key": 1, "rows_per_second": 0}, "rows_per_second must be a finite number > 0"),
        ({"num_keys": 2, "records_per_key": 1, "rows_per_second": -5.0}, "got -5.0"),
        ({"num_keys": 2, "records_per_key": 1, "rows_per_second": float("inf")}, "got inf"),
        (
            {"num_keys": 2, "records_per_key": 1, "key_type": "uuid"},
            "key_type must be one of ['int', 'str'], got 'uuid'",
        ),
        ({"num_keys": 2, "records_per_key": 1, "batch_size": 0}, "batch_size must be a positive int"),
        ({"num_keys": 2.5, "records_per_key": 1}, "got 2.5"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ConfigurationError) as info:
        SequenceSource(**kwargs)
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)


def test_bad_parallelism():
    with pytest.raises(ConfigurationError, match="parallelism must be a positive int"):
        SequenceSource(num_keys=1, records_per_key=1).create_splits(0)
