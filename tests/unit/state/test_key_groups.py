"""The stable key hash and key-group math (Flink's KeyGroupRangeAssignment)."""

from __future__ import annotations

import datetime
import decimal
import json
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from flinklike_spark._runtime.state.key_groups import (
    DEFAULT_MAX_PARALLELISM,
    assign_key_groups,
    key_group_for,
    key_group_range,
    operator_index_for_key_group,
    stable_hash,
    stable_hash_scalar,
)

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
