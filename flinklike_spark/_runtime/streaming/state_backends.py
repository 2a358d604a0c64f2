"""The keyed state backend an operator gets: Flink's ``state.backend.type`` (``hashmap`` or ``rocksdb``)."""

from __future__ import annotations

from typing import Any

from flinklike_spark._runtime.streaming.keyed_state import HeapKeyedStateBackend, KeyedStateBackend
from flinklike_spark.config import StateBackendType
from flinklike_spark.errors import ConfigurationError

__all__ = ["create_keyed_state_backend"]


def create_keyed_state_backend(context: Any) -> KeyedStateBackend:
    """The keyed state backend ``state.backend.type`` selects, for an operator with ``context``.

    Raises:
        ConfigurationError: a backend type that is not available.
    """
    backend_type = getattr(context, "state_backend_type", StateBackendType.HASHMAP)
    if backend_type is StateBackendType.HASHMAP:
        return HeapKeyedStateBackend(
            max_parallelism=context.max_parallelism,
            clock_ms=context.clock_ms,
            track_changes=getattr(context, "incremental", None) is not None,
        )
    if backend_type is StateBackendType.ROCKSDB:
        from flinklike_spark._runtime.streaming.rocksdb_state import RocksDBKeyedStateBackend

        return RocksDBKeyedStateBackend(
            max_parallelism=context.max_parallelism,
            options=getattr(context, "rocksdb", None),
            clock_ms=context.clock_ms,
        )
    raise ConfigurationError(
        f"state.backend.type {backend_type.value!r} is not available; valid: "
        f"{[t.value for t in (StateBackendType.HASHMAP, StateBackendType.ROCKSDB)]}"
    )
