"""Partitioners: stable hashing, Flink's key-group formulas, channel selectors."""

from __future__ import annotations

import datetime
import decimal
import json
import subprocess
import sys

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
    key_group_range,
    operator_index_for_key_group,
    stable_hash,
    stable_hash_scalar,
)
from flinklike_spark.common.types import RECORD_KIND_KEY
from flinklike_spark.errors import SchemaMismatchError

INT_KEYS = [0, 1, -1, 42, 2**40 + 7, -(2**63), 2**63 - 1]
STR_KEYS = ["", "a", "key-17", "ünïcödé", "x" * 300]
BYTES_KEYS = [b"", b"\x00\xff", b"abc"]

_HASH_SCRIPT = """
import json, pyarrow as pa
from flinklike_spark._runtime.state.key_groups import stable_hash, stable_hash_scalar
arrays = [pa.array({ints!r}, pa.int64()), pa.array({strs!r}), pa.array({bys!r}), pa.array([1.5, None, 2.0])]
print(json.dumps([stable_hash(a).tolist() for a in arrays] + [[stable_hash_scalar((1, "a", None))]]))
"""


def _local_hashes():
    arrays = [
        pa.array(INT_KEYS, pa.int64()),
        pa.array(STR_KEYS),
        pa.array(BYTES_KEYS),
        pa.array([1.5, None, 2.0]),
    ]
    return [stable_hash(a).tolist() for a in arrays] + [[stable_hash_scalar((1, "a", None))]]


def test_stable_hash_identical_in_another_process():
    script = _HASH_SCRIPT.format(ints=INT_KEYS, strs=STR_KEYS, bys=BYTES_KEYS)
    # A different PYTHONHASHSEED makes Python's own hash() differ; ours must not.
    results = []
    for seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
            env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"},
        )
        results.append(json.loads(out.stdout))
    assert results[0] == results[1] == _local_hashes()


@pytest.mark.parametrize(
    "values,arrow_type",
    [
        (INT_KEYS, pa.int64()),
        ([0, 5, -3], pa.int8()),
        ([0, 5, 2**32 - 1], pa.uint32()),
        ([0, 7, 2**64 - 1], pa.uint64()),
        ([True, False], pa.bool_()),
        ([0.0, -0.0, 3.0, 3.25, float("nan"), float("inf"), 2.0**63, -(2.0**63)], pa.float64()),
        ([1.5, 2.0], pa.float32()),
        (STR_KEYS, pa.string()),
        (STR_KEYS, pa.large_string()),
        (BYTES_KEYS, pa.binary()),
        ([datetime.date(2024, 2, 29), datetime.date(1970, 1, 1)], pa.date32()),
        ([datetime.datetime(2024, 1, 1, 12, 30)], pa.timestamp("us")),
        ([decimal.Decimal("1.50"), decimal.Decimal("-2")], pa.decimal128(10, 2)),
        ([[1, 2], [3]], pa.list_(pa.int64())),
    ],
)
def test_vectorized_equals_scalar(values, arrow_type):
    array = pa.array([*values, None], arrow_type)
    hashes = stable_hash(array)
    assert hashes.dtype == np.uint32
    expected = [stable_hash_scalar(v) for v in array.to_pylist()]
    assert hashes.tolist() == expected
    assert hashes[-1] == stable_hash_scalar(None)


def test_chunked_dictionary_and_struct_arrays_hash_like_plain_values():
    plain = pa.array(["a", "b", None, "a"])
    assert stable_hash(plain.dictionary_encode()).tolist() == stable_hash(plain).tolist()
    chunked = pa.chunked_array([plain[:2], plain[2:]])
    assert stable_hash(chunked).tolist() == stable_hash(plain).tolist()
    struct = pa.array([{"a": 1, "b": "x"}])
    assert stable_hash(struct)[0] == stable_hash_scalar((1, "x"))


def test_equal_python_values_hash_alike_and_unsupported_types_fail():
    assert stable_hash_scalar(3) == stable_hash_scalar(3.0) == stable_hash_scalar(True + 2)
    assert stable_hash_scalar("1") != stable_hash_scalar(1)
    assert stable_hash_scalar(b"a") != stable_hash_scalar("a")
    assert stable_hash_scalar((1, 2)) != stable_hash_scalar((2, 1))
    assert stable_hash_scalar(2**80) == stable_hash_scalar(2**80)
    with pytest.raises(TypeError, match="object"):
        stable_hash_scalar(object())


def test_hash_spreads_sequential_keys_over_key_groups():
    groups = assign_key_groups(pa.array(range(12_800)), DEFAULT_MAX_PARALLELISM)
    counts = np.bincount(groups, minlength=DEFAULT_MAX_PARALLELISM)
    assert counts.min() > 50 and counts.max() < 150  # ~100 per group
    strings = assign_key_groups(pa.array([f"user-{i}" for i in range(12_800)]), DEFAULT_MAX_PARALLELISM)
    counts = np.bincount(strings, minlength=DEFAULT_MAX_PARALLELISM)
    assert counts.min() > 50 and counts.max() < 150


def test_key_group_for_matches_assign_key_groups():
    keys = [*INT_KEYS, *STR_KEYS]
    for max_parallelism in (1, 7, 128, 32768):
        vector = [
            *assign_key_groups(pa.array(INT_KEYS), max_parallelism),
            *assign_key_groups(pa.array(STR_KEYS), max_parallelism),
        ]
        assert [int(v) for v in vector] == [key_group_for(k, max_parallelism) for k in keys]
        assert all(0 <= kg < max_parallelism for kg in vector)


def test_key_group_formulas_match_flink():
    # Flink KeyGroupRangeAssignment examples: maxParallelism 128, parallelism 3
    # -> ranges [0,42], [43,85], [86,127]; operator index = kg * p // maxp.
    assert key_group_range(128, 3, 0) == range(0, 43)
    assert key_group_range(128, 3, 1) == range(43, 86)
    assert key_group_range(128, 3, 2) == range(86, 128)
    assert operator_index_for_key_group(128, 3, 42) == 0
    assert operator_index_for_key_group(128, 3, 43) == 1
    assert operator_index_for_key_group(128, 3, 127) == 2
    assert operator_index_for_key_group(10, 4, 7) == 7 * 4 // 10
    for max_parallelism, parallelism in [(128, 1), (128, 3), (128, 128), (10, 4), (32768, 7), (5, 5)]:
        covered = []
        for subtask in range(parallelism):
            groups = key_group_range(max_parallelism, parallelism, subtask)
            assert len(groups) > 0
            assert all(operator_index_for_key_group(max_parallelism, parallelism, kg) == subtask for kg in groups)
            covered.extend(groups)
        assert covered == list(range(max_parallelism))
    with pytest.raises(ValueError, match="parallelism"):
        key_group_range(4, 5, 0)
    with pytest.raises(ValueError, match="key_group"):
        operator_index_for_key_group(128, 2, 128)


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
