"""The enums and small typed values behind Flink's configuration keys, and the parsers of their values.

Split from :mod:`flinklike_spark.config` (which re-exports every public name):
the modes and types a key selects (``execution.target``, ``state.backend.type``,
``restart-strategy.type``, ...), RocksDB's options, and the parsers the option
table uses for them.
"""

from __future__ import annotations

import dataclasses
from enum import Enum

from flinklike_spark.config_parsers import choice_parser, enum_parser
from flinklike_spark.errors import ConfigurationError

__all__ = [
    "AVAILABLE_STATE_BACKENDS",
    "DEFAULT_ROCKSDB_MEMORY_PER_SLOT",
    "PROMETHEUS_REPORTER_FACTORY",
    "CheckpointStorageType",
    "CheckpointingMode",
    "ExecutionTarget",
    "FailoverStrategyType",
    "RestartStrategyType",
    "RocksDBOptions",
    "SchedulerMode",
    "SchedulerType",
    "StateBackendType",
    "TaskManagerMode",
    "TaskManagerStartMethod",
    "parse_failover_strategy",
    "parse_reporter_factory",
    "parse_restart_strategy",
    "parse_runtime_mode",
    "parse_state_backend",
]


class CheckpointingMode(Enum):
    EXACTLY_ONCE = "exactly_once"
    AT_LEAST_ONCE = "at_least_once"


class CheckpointStorageType(Enum):
    """Where checkpoints are kept (Flink's ``execution.checkpointing.storage``)."""

    JOBMANAGER = "jobmanager"  # storage that lives as long as the job (failover only; no resume, no savepoints)
    FILESYSTEM = "filesystem"  # execution.checkpointing.dir: outlives the job (resume, savepoints)


class ExecutionTarget(Enum):
    """Where ``execute()`` runs a job (Flink's ``execution.target``)."""

    LOCAL = "local"  # an embedded cluster in this process and its children (the default)
    SPARK = "spark"  # JobMaster in this Spark driver, TaskExecutors on the session's Spark executors


class StateBackendType(Enum):
    """Where keyed state lives (Flink's ``state.backend.type``)."""

    HASHMAP = "hashmap"  # Python dicts on the TaskExecutor's heap (the default)
    # an embedded RocksDB per keyed operator subtask, behind a bounded hot-key cache (extra [rocksdb])
    ROCKSDB = "rocksdb"


#: Backend types this build can run; the parser rejects the others by name.
AVAILABLE_STATE_BACKENDS = frozenset({StateBackendType.HASHMAP, StateBackendType.ROCKSDB})

#: Memory budget of one slot's RocksDB backend when ``state.backend.rocksdb.memory.fixed-per-slot`` is
#: unset: there is no managed-memory pool here (``taskmanager.memory.managed.*``), so this stands in
#: for the slot's share of it.
DEFAULT_ROCKSDB_MEMORY_PER_SLOT = 128 << 20


@dataclasses.dataclass(frozen=True, kw_only=True)
class RocksDBOptions:
    """Settings of the RocksDB state backend (Flink's ``state.backend.rocksdb.*`` keys).

    Attributes:
        local_dir: parent directory of the per-slot RocksDB instances; None: the
            system temp directory (Flink: the TaskManager's ``io.tmp.dirs``).
        memory_per_slot: bytes one backend may use for its hot-key cache plus
            RocksDB's block cache and write buffers.
        managed: when False, RocksDB's native memory is not capped (RocksDB's
            defaults); only the hot-key cache follows ``memory_per_slot``.
        write_buffer_ratio: share of RocksDB's part of the budget for write buffers.
    """

    local_dir: str | None = None
    memory_per_slot: int = DEFAULT_ROCKSDB_MEMORY_PER_SLOT
    managed: bool = True
    write_buffer_ratio: float = 0.5

    def __post_init__(self) -> None:
        if self.memory_per_slot < 1 << 20:
            raise ConfigurationError(
                f"state.backend.rocksdb.memory.fixed-per-slot: {self.memory_per_slot} bytes is too small; valid: >= 1 mb"
            )
        if not 0.0 < self.write_buffer_ratio < 1.0:
            raise ConfigurationError(
                f"state.backend.rocksdb.memory.write-buffer-ratio: {self.write_buffer_ratio!r}; valid: (0, 1)"
            )


def parse_state_backend(value: object, *, key: str) -> StateBackendType:
    backend = enum_parser(StateBackendType)(value, key=key)
    if backend not in AVAILABLE_STATE_BACKENDS:
        raise ConfigurationError(
            f"{key}: {backend.value!r} is not available yet (keyed state is kept on the heap only); "
            f"valid values: {', '.join(sorted(b.value for b in AVAILABLE_STATE_BACKENDS))}"
        )
    return backend


class RestartStrategyType(Enum):
    """Flink's ``restart-strategy.type`` (aliases ``off``/``disable``, ``fixeddelay``, ... accepted)."""

    NONE = "none"
    FIXED_DELAY = "fixed-delay"
    FAILURE_RATE = "failure-rate"
    EXPONENTIAL_DELAY = "exponential-delay"


class FailoverStrategyType(Enum):
    """Flink's ``jobmanager.execution.failover-strategy``."""

    REGION = "region"  # restart the failed task's pipelined region and the regions consuming from it
    FULL = "full"  # restart every task


class SchedulerType(Enum):
    """Flink's ``jobmanager.scheduler``."""

    DEFAULT = "default"  # the parallelism is fixed at submission
    ADAPTIVE = "adaptive"  # the parallelism follows the resource requirements (PUT /jobs/:jobid/resource-requirements)


class SchedulerMode(Enum):
    """Flink's ``scheduler-mode`` (unset: the scheduler's own behaviour)."""

    REACTIVE = "reactive"  # the adaptive scheduler, every vertex up to its max parallelism: a job uses every slot


class TaskManagerMode(Enum):
    """Where the local MiniCluster runs its TaskExecutors."""

    PROCESS = "process"  # spawned child processes (the default: real parallelism)
    THREAD = "thread"  # inside the client process (debugging, memory:// file systems)


class TaskManagerStartMethod(Enum):
    """How the local MiniCluster starts TaskExecutor processes (Python's multiprocessing start methods)."""

    FORKSERVER = "forkserver"  # forked from a helper that imported the TaskExecutor's modules once
    SPAWN = "spawn"  # a fresh interpreter per TaskExecutor


parse_failover_strategy = enum_parser(FailoverStrategyType)


def parse_runtime_mode(value: object, *, key: str) -> str:
    """Flink's ``execution.runtime-mode``: STREAMING, BATCH, or AUTOMATIC (which is STREAMING here)."""
    text = choice_parser("streaming", "batch", "automatic")(value, key=key)
    return "streaming" if text == "automatic" else text


_RESTART_STRATEGY_ALIASES = {
    "none": RestartStrategyType.NONE, "off": RestartStrategyType.NONE, "disable": RestartStrategyType.NONE,
    "fixed-delay": RestartStrategyType.FIXED_DELAY, "fixeddelay": RestartStrategyType.FIXED_DELAY,
    "failure-rate": RestartStrategyType.FAILURE_RATE, "failurerate": RestartStrategyType.FAILURE_RATE,
    "exponential-delay": RestartStrategyType.EXPONENTIAL_DELAY,
    "exponentialdelay": RestartStrategyType.EXPONENTIAL_DELAY,
}  # fmt: skip


def parse_restart_strategy(value: object, *, key: str) -> RestartStrategyType:
    if isinstance(value, RestartStrategyType):
        return value
    strategy = _RESTART_STRATEGY_ALIASES.get(str(value).strip().lower())
    if strategy is None:
        raise ConfigurationError(
            f"{key}: invalid value {value!r}; valid values: {', '.join(_RESTART_STRATEGY_ALIASES)}"
        )
    return strategy


PROMETHEUS_REPORTER_FACTORY = "org.apache.flink.metrics.prometheus.PrometheusReporterFactory"


def parse_reporter_factory(value: object, *, key: str) -> str | None:
    """The factory of a metric reporter; only Prometheus's exists here (through ``prometheus_client``)."""
    if value is None or value == "":
        return None
    if str(value).strip() != PROMETHEUS_REPORTER_FACTORY:
        raise ConfigurationError(
            f"{key}: unknown reporter factory {value!r}; valid values: {PROMETHEUS_REPORTER_FACTORY}"
        )
    return PROMETHEUS_REPORTER_FACTORY
