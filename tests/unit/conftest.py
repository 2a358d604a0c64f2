"""Fixtures shared by the unit tests: keyed state backends of every ``state.backend.type``.

Tests that take ``make_backend`` (or ``state_backend_type``) run once per backend, so
the same keyed-state suite covers the heap and the RocksDB backend.
"""

from __future__ import annotations

import pytest

from flinklike_spark._runtime.state.keyed_state import HeapKeyedStateBackend
from flinklike_spark.config import RocksDBOptions, StateBackendType

#: A small RocksDB budget (1 mb: ~2,000 cached entries), so that tests with a few thousand keys evict.
ROCKSDB_TEST_MEMORY = 1 << 20


@pytest.fixture(params=[StateBackendType.HASHMAP, StateBackendType.ROCKSDB], ids=lambda t: t.value)
def state_backend_type(request) -> StateBackendType:
    if request.param is StateBackendType.ROCKSDB:
        pytest.importorskip("rocksdict", reason="the rocksdb backend needs the [rocksdb] extra")
    return request.param


@pytest.fixture
def rocksdb_options(tmp_path) -> RocksDBOptions:
    return RocksDBOptions(local_dir=str(tmp_path / "rocksdb"), memory_per_slot=ROCKSDB_TEST_MEMORY)


@pytest.fixture
def make_backend(state_backend_type, rocksdb_options):
    """``make_backend(clock=None, *, max_parallelism=128)``: a new backend of the parametrized type
    (closed at teardown)."""
    created = []

    def make(clock=None, *, max_parallelism: int = 128):
        if state_backend_type is StateBackendType.HASHMAP:
            backend = HeapKeyedStateBackend(max_parallelism=max_parallelism, clock_ms=clock)
        else:
            from flinklike_spark._runtime.state.rocksdb_state import RocksDBKeyedStateBackend

            backend = RocksDBKeyedStateBackend(max_parallelism=max_parallelism, options=rocksdb_options,
                                               clock_ms=clock)  # fmt: skip
        created.append(backend)
        return backend

    yield make
    for backend in created:
        backend.close()
