"""Channel selectors: which consumer subtask(s) each row of a batch goes to."""

from __future__ import annotations

import decimal

import numpy as np
import pyarrow as pa
import pytest

from flinklike_spark._runtime.graph.job_graph import PartitionerKind, PartitionerSpec
from flinklike_spark._runtime.network.partitioner import create_channel_selector
from flinklike_spark._runtime.operators.rows import RowsConverter
from flinklike_spark._runtime.state.key_groups import (
    DEFAULT_MAX_PARALLELISM,
    assign_key_groups,
    key_group_for,
    operator_index_for_key_group,
)
from flinklike_spark.common.types import RECORD_KIND_KEY
from flinklike_spark.errors import SchemaMismatchError


def _hash_spec(**kwargs) -> PartitionerSpec:
    return PartitionerSpec(kind=PartitionerKind.HASH, **kwargs)


def _check_hash_split(batch, pieces, num_channels, key_of_row, max_parallelism=128):
    covered = []
    channel_of_key = {}
    for channel, piece in pieces:
        assert 0 <= channel < num_channels
        assert piece.num_rows > 0
        assert piece.schema == batch.schema
        rows = piece.to_pylist()
        positions = [row["pos"] for row in rows]
        assert positions == sorted(positions)  # relative order kept
        for row in rows:
            key = key_of_row(row)
            assert channel_of_key.setdefault(key, channel) == channel
            key_group = key_group_for(key, max_parallelism)
            assert channel == operator_index_for_key_group(max_parallelism, num_channels, key_group)
        covered.extend(positions)
    assert sorted(covered) == list(range(batch.num_rows))
    assert len(pieces) == len({c for c, _ in pieces})


def test_hash_by_key_field_groups_equal_keys_keeps_order_covers_rows():
    rng = np.random.default_rng(0)
    keys = rng.integers(0, 50, 2000)
    batch = pa.record_batch({"k": keys, "pos": np.arange(2000)})
    selector = create_channel_selector(_hash_spec(key_field="k"), 5, subtask_index=1)
    assert not selector.is_broadcast
    pieces = selector.split(batch)
    assert len(pieces) == 5
    _check_hash_split(batch, pieces, 5, lambda row: row["k"])


@pytest.mark.parametrize(
    ("num_channels", "max_parallelism"), [(2, 128), (4, 128), (5, 128), (2, 100), (7, 100), (3, 3)]
)
def test_hash_split_routes_by_key_group_for_any_channel_count_and_max_parallelism(num_channels, max_parallelism):
    # Covers both grouping strategies (per-channel scans up to 4 channels, a sort above)
    # and both key-group computations (a mask for powers of two, a modulo otherwise).
    rng = np.random.default_rng(num_channels * max_parallelism)
    keys = rng.integers(-(2**40), 2**40, 3000)
    batch = pa.record_batch({"k": keys, "pos": np.arange(3000)})
    spec = _hash_spec(key_field="k", max_parallelism=max_parallelism)
    pieces = create_channel_selector(spec, num_channels, subtask_index=0).split(batch)
    assert len(pieces) == num_channels
    _check_hash_split(batch, pieces, num_channels, lambda row: row["k"], max_parallelism)


def test_hash_by_string_key_field_and_single_key_batch():
    batch = pa.record_batch({"k": [f"u{i % 9}" for i in range(300)], "pos": list(range(300))})
    selector = create_channel_selector(_hash_spec(key_field="k"), 4, subtask_index=0)
    _check_hash_split(batch, selector.split(batch), 4, lambda row: row["k"])
    one_key = pa.record_batch({"k": ["same"] * 10, "pos": list(range(10))})
    pieces = selector.split(one_key)
    assert len(pieces) == 1 and pieces[0][1].num_rows == 10


def test_hash_by_key_selector_agrees_with_key_field():
    batch = pa.record_batch({"k": list(range(500)), "pos": list(range(500))})
    by_field = create_channel_selector(_hash_spec(key_field="k"), 3, subtask_index=0).split(batch)
    selector = create_channel_selector(_hash_spec(key_selector=lambda row: row["k"]), 3, subtask_index=0)
    by_selector = selector.split(batch)
    assert [(c, p.to_pylist()) for c, p in by_field] == [(c, p.to_pylist()) for c, p in by_selector]
    composite = create_channel_selector(_hash_spec(key_selector=lambda r: (r["k"] % 7, "x")), 3, subtask_index=0)
    _check_hash_split(batch, composite.split(batch), 3, lambda row: (row["k"] % 7, "x"))


def test_hash_missing_key_field_names_field_and_batch_fields():
    selector = create_channel_selector(_hash_spec(key_field="user"), 2, subtask_index=0)
    batch = pa.record_batch({"id": [1], "value": [2]})
    with pytest.raises(SchemaMismatchError, match=r"'user'.*\['id', 'value'\]"):
        selector.split(batch)


@pytest.mark.parametrize(
    ("values", "declared", "says"),
    [
        ([None, None], None, "every record is None: its function returned nothing (a map function without `return`?)"),
        ([5, None], None, "1 of its first 2 records are None"),
        ([3, 4], pa.schema([("f0", pa.int64())], metadata={RECORD_KIND_KEY: b"value"}), "values of a basic type"),
    ],
)
def test_hash_key_field_on_plain_values_names_the_producer_and_a_missing_return(values, declared, says):
    """A map without `return` makes a stream of None: the key field is missing because the producer
    emits plain values, and the error says so (the batch as the producer's network output makes it)."""
    batch = RowsConverter(declared, stream_name="enrich").to_batch(values)
    selector = create_channel_selector(
        _hash_spec(key_field="user"), 2, subtask_index=0, producer="operator 'enrich' (uid 'map-1')"
    )
    with pytest.raises(SchemaMismatchError) as info:
        selector.split(batch)
    message = str(info.value)
    assert message.startswith("key_by('user'): operator 'enrich' (uid 'map-1') emitted plain values"), message
    assert says in message and "fields are ['f0']" in message, message


def test_hash_key_field_on_rows_does_not_mention_plain_values():
    batch = RowsConverter(None, stream_name="enrich").to_batch([{"id": 1}])
    selector = create_channel_selector(_hash_spec(key_field="user"), 2, subtask_index=0, producer="operator 'x'")
    with pytest.raises(SchemaMismatchError) as info:
        selector.split(batch)
    assert "plain values" not in str(info.value)


def test_empty_batches_produce_no_pieces():
    empty = pa.record_batch({"k": pa.array([], pa.int64())})
    for spec in [
        _hash_spec(key_field="k"),
        PartitionerSpec(kind=PartitionerKind.FORWARD),
        PartitionerSpec(kind=PartitionerKind.REBALANCE),
        PartitionerSpec(kind=PartitionerKind.BROADCAST),
    ]:
        num_channels = 1 if spec.kind is PartitionerKind.FORWARD else 3
        assert create_channel_selector(spec, num_channels, subtask_index=0).split(empty) == []


def test_forward_rebalance_broadcast():
    batch = pa.record_batch({"x": [1, 2, 3]})
    forward = create_channel_selector(PartitionerSpec(kind=PartitionerKind.FORWARD), 1, subtask_index=4)
    assert [(c, p.equals(batch)) for c, p in forward.split(batch)] == [(0, True)]
    assert not forward.is_broadcast

    rebalance = create_channel_selector(PartitionerSpec(kind=PartitionerKind.REBALANCE), 3, subtask_index=4)
    channels = []
    for _ in range(6):
        ((channel, piece),) = rebalance.split(batch)
        assert piece.equals(batch)
        channels.append(channel)
    assert channels == [1, 2, 0, 1, 2, 0]  # starts at 4 % 3, whole batches round-robin
    other = create_channel_selector(PartitionerSpec(kind=PartitionerKind.REBALANCE), 3, subtask_index=0)
    assert other.split(batch)[0][0] == 0

    broadcast = create_channel_selector(PartitionerSpec(kind=PartitionerKind.BROADCAST), 4, subtask_index=0)
    assert broadcast.is_broadcast
    pieces = broadcast.split(batch)
    assert [c for c, _ in pieces] == [0, 1, 2, 3]
    assert all(p.equals(batch) for _, p in pieces)


def test_invalid_channel_counts_rejected():
    with pytest.raises(ValueError, match="num_channels"):
        create_channel_selector(PartitionerSpec(kind=PartitionerKind.BROADCAST), 0, subtask_index=0)
    with pytest.raises(ValueError, match="max_parallelism"):
        create_channel_selector(_hash_spec(key_field="k", max_parallelism=4), 5, subtask_index=0)


def test_hash_by_a_big_dec_key_field_routes_by_the_records_decimal_key():
    """A Types.BIG_DEC() column holds text; the keyed operator keys by the record's Decimal: both must agree."""
    from flinklike_spark._runtime.operators.rows import RowsConverter
    from flinklike_spark.common.typeinfo import Types, to_arrow_schema
    from flinklike_spark.common.types import records_of

    declared = to_arrow_schema(Types.ROW_NAMED(["k", "pos"], [Types.BIG_DEC(), Types.INT()]))
    values = [decimal.Decimal(f"{i % 40}.{'5' if i % 2 else '50'}") for i in range(400)]  # 1.5 and 1.50: one key
    batch = RowsConverter(declared, stream_name="s").to_batch([{"k": v, "pos": i} for i, v in enumerate(values)])
    pieces = create_channel_selector(_hash_spec(key_field="k"), 4, subtask_index=0).split(batch)
    for channel, piece in pieces:
        for record in records_of(piece):
            group = key_group_for(record["k"], DEFAULT_MAX_PARALLELISM)
            assert operator_index_for_key_group(DEFAULT_MAX_PARALLELISM, 4, group) == channel, record
    field = batch.schema.field("k")
    assert list(assign_key_groups(batch.column("k"), DEFAULT_MAX_PARALLELISM, field)) == [
        key_group_for(v, DEFAULT_MAX_PARALLELISM) for v in values
    ]
