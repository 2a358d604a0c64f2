"""Configuration with Flink's keys, parsed once into typed, frozen objects.

A :class:`Configuration` is built from a mapping of Flink configuration keys
(``parallelism.default``, ``taskmanager.numberOfTaskSlots``, ...) to values
given as Python objects or as strings (Spark options arrive as strings). Every
key is validated when the configuration is built: an unknown key or a bad value
raises :class:`~flinklike_spark.errors.ConfigurationError` naming the key, the
value and what would be valid. Components never read raw keys; they read the
typed views (:attr:`Configuration.pipeline`, :attr:`Configuration.cluster`,
:attr:`Configuration.network`, :attr:`Configuration.checkpointing`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from datetime import timedelta
from typing import Any

from flinklike_spark.config_enums import (
    DEFAULT_ROCKSDB_MEMORY_PER_SLOT,
    PROMETHEUS_REPORTER_FACTORY,
    CheckpointingMode,
    CheckpointStorageType,
    ExecutionTarget,
    FailoverStrategyType,
    RestartStrategyType,
    RocksDBOptions,
    SchedulerMode,
    SchedulerType,
    StateBackendType,
    TaskManagerMode,
    TaskManagerStartMethod,
)
from flinklike_spark.config_options import (
    DEPRECATED_KEYS,
    OPTIONS,
    PATTERN_OPTIONS,
    ConfigOption,
    fold_key_case,
    format_value,
)
from flinklike_spark.config_options import current_key as _current_key
from flinklike_spark.config_options import is_pattern_key as _is_pattern_key
from flinklike_spark.config_options import parse_value as _parse
from flinklike_spark.config_options import unknown_key_error as _unknown_key
from flinklike_spark.config_parsers import parse_duration, parse_memory_size
from flinklike_spark.errors import ConfigurationError
from flinklike_spark.storage import StorageConfig, redact

_MISSING = object()

__all__ = [
    "DEPRECATED_KEYS",
    "OPTIONS",
    "PATTERN_OPTIONS",
    "PROMETHEUS_REPORTER_FACTORY",
    "AutoscalerOptions",
    "CheckpointStorageType",
    "CheckpointingMode",
    "CheckpointingOptions",
    "ClusterOptions",
    "ConfigOption",
    "Configuration",
    "ExecutionTarget",
    "FailoverOptions",
    "FailoverStrategyType",
    "NetworkOptions",
    "PipelineOptions",
    "RestOptions",
    "RestartStrategyType",
    "RocksDBOptions",
    "SchedulerMode",
    "SchedulerType",
    "StateBackendType",
    "TaskManagerMode",
    "TaskManagerStartMethod",
    "fold_key_case",
    "parse_duration",
    "parse_memory_size",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class FailoverOptions:
    restart_strategy: RestartStrategyType
    failover_strategy: FailoverStrategyType
    #: jobmanager.scheduler: whether a running job's parallelism can change (a rescale is a restart);
    #: ADAPTIVE whenever scheduler_mode is REACTIVE (Flink: reactive mode forces the adaptive scheduler)
    scheduler: SchedulerType
    #: scheduler-mode: REACTIVE, a job uses every slot of the cluster; None: unset
    scheduler_mode: SchedulerMode | None = None
    #: jobmanager.adaptive-scheduler.resource-wait-timeout: how long a job waits for the slots its lower
    #: bounds need; None: for ever (a negative value, and reactive mode's default)
    resource_wait_timeout: timedelta | None = timedelta(minutes=5)
    #: jobmanager.adaptive-scheduler.resource-stabilization-timeout: how long the slots stay unchanged
    #: before a job starts with fewer than its upper bounds, or (reactive) rescales
    resource_stabilization_timeout: timedelta = timedelta(seconds=10)

    def __post_init__(self) -> None:
        if self.scheduler_mode is SchedulerMode.REACTIVE and self.scheduler is not SchedulerType.ADAPTIVE:
            raise ConfigurationError(
                f"scheduler-mode: reactive needs jobmanager.scheduler: adaptive, got {self.scheduler.value}"
            )
        if self.resource_wait_timeout is not None and self.resource_wait_timeout < timedelta(0):
            raise ConfigurationError(
                f"resource_wait_timeout must be None (wait for ever) or not negative, got {self.resource_wait_timeout}"
            )

    @property
    def reactive(self) -> bool:
        return self.scheduler_mode is SchedulerMode.REACTIVE


@dataclasses.dataclass(frozen=True, kw_only=True)
class AutoscalerOptions:
    """The ``job.autoscaler.*`` keys (Flink Kubernetes operator's autoscaler, FLIP-271); docs/elastic.md."""

    enabled: bool
    scaling_enabled: bool
    interval: timedelta
    metrics_window: timedelta
    stabilization_interval: timedelta
    target_utilization: float
    utilization_boundary: float
    restart_time: timedelta
    catch_up_duration: timedelta
    scale_down_interval: timedelta
    scale_down_max_factor: float
    scale_up_max_factor: float
    vertex_min_parallelism: int
    vertex_max_parallelism: int

    def __post_init__(self) -> None:
        if self.vertex_min_parallelism > self.vertex_max_parallelism:
            raise ConfigurationError(
                f"job.autoscaler.vertex.min-parallelism ({self.vertex_min_parallelism}) must not exceed "
                f"job.autoscaler.vertex.max-parallelism ({self.vertex_max_parallelism})"
            )


@dataclasses.dataclass(frozen=True, kw_only=True)
class PipelineOptions:
    parallelism: int
    max_parallelism: int
    name: str | None
    auto_watermark_interval: timedelta
    buffer_timeout: timedelta


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClusterOptions:
    target: ExecutionTarget
    jobmanager_address: str | None
    task_manager_host: str | None
    number_of_task_managers: int
    #: slotmanager.redundant-taskmanager-num: spare TaskExecutors started beyond number_of_task_managers
    redundant_task_managers: int
    #: slotmanager.number-of-slots.max: a rescale may start TaskExecutors up to it (None: the size is fixed)
    max_slots: int | None
    slots_per_task_manager: int
    task_manager_mode: TaskManagerMode
    task_manager_start_method: TaskManagerStartMethod
    #: process.taskmanager.working-dir: parent of each local TaskExecutor's private working directory
    task_manager_working_dir: str | None
    heartbeat_interval: timedelta
    heartbeat_timeout: timedelta
    slot_request_timeout: timedelta
    slot_timeout: timedelta

    def __post_init__(self) -> None:
        if self.task_manager_working_dir is not None:
            if "://" in self.task_manager_working_dir:
                raise ConfigurationError(
                    f"process.taskmanager.working-dir must be a local directory, got the URL "
                    f"{self.task_manager_working_dir!r}"
                )
            if self.task_manager_mode is TaskManagerMode.THREAD:
                raise ConfigurationError(
                    "process.taskmanager.working-dir needs TaskExecutor processes "
                    "(flinklike.local.taskmanager-mode: process); threads share the client's working directory"
                )
        if self.heartbeat_timeout <= self.heartbeat_interval:
            raise ConfigurationError(
                f"heartbeat.timeout ({self.heartbeat_timeout}) must exceed heartbeat.interval "
                f"({self.heartbeat_interval})"
            )


@dataclasses.dataclass(frozen=True, kw_only=True)
class NetworkOptions:
    segment_size: int
    buffers_per_channel: int
    floating_buffers_per_gate: int
    max_buffers_per_channel: int
    partition_request_timeout: timedelta


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointingOptions:
    interval: timedelta | None
    mode: CheckpointingMode
    unaligned: bool
    aligned_checkpoint_timeout: timedelta
    timeout: timedelta
    max_concurrent: int
    min_pause: timedelta
    tolerable_failures: int
    num_retained: int
    directory: str | None
    recovery_path: str | None
    accept_duplicate_sink_output: bool = False
    storage: CheckpointStorageType | None = None
    #: execution.state-recovery.from-local (or the deprecated state.backend.local-recovery)
    local_recovery: bool = False
    checkpoints_after_tasks_finish: bool = True


@dataclasses.dataclass(frozen=True, kw_only=True)
class RestOptions:
    """The REST API, dashboard and metric reporting of a cluster endpoint.

    Attributes:
        port: ``rest.port`` (0: any free port).
        port_explicit: ``rest.port`` was configured; if not and the default
            port is taken, a free port is used instead.
        address: the host clients use (``rest.address``), or None (the bind address).
        bind_address: the interface the server binds (``rest.bind-address``, default loopback).
        cancel_enabled: ``web.cancel.enable``.
        refresh_interval: ``web.refresh-interval``.
        fetcher_update_interval: ``metrics.fetcher.update-interval``.
        prometheus_port_range: (low, high) of ``metrics.reporter.prom.port`` if
            the Prometheus reporter is configured, else None.
    """

    port: int
    port_explicit: bool
    address: str | None
    bind_address: str
    cancel_enabled: bool
    refresh_interval: timedelta
    fetcher_update_interval: timedelta
    prometheus_port_range: tuple[int, int] | None


class Configuration(Mapping[str, Any]):
    """A validated set of configuration values keyed by Flink's keys.

    Built from a mapping (or another ``Configuration``, as PyFlink's
    ``Configuration(other)``); every key and value is checked then. It is
    read-only as a mapping; PyFlink's setters (:meth:`set_string`,
    :meth:`set_integer`, :meth:`set_boolean`, :meth:`set_float`,
    :meth:`add_all`, :meth:`remove_config`) change it in place, checking the key
    and value at the call. Checks that span keys (for example
    ``heartbeat.timeout`` above ``heartbeat.interval``) run when a view is read
    and when an environment takes the configuration (it takes a copy: later
    changes do not reach it).

    Args:
        values: key -> value (Python objects or strings). A key of
            :data:`~flinklike_spark.config_options.DEPRECATED_KEYS` is read as
            its new key, with a warning; the new key wins if both are given.

    Raises:
        ConfigurationError: an unknown key (the message suggests the closest
            valid ones) or a value that does not parse.
    """

    def __init__(self, values: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        merged = dict(values or {})
        merged.update(kwargs)
        parsed: dict[str, Any] = {}
        for key, value in merged.items():
            new_key = _current_key(key)
            if new_key != key and new_key in merged:
                continue  # the new key is set too: it wins, as in Flink
            parsed[new_key] = _parse(new_key, value)
        self._values = parsed
        self._views: dict[str, Any] = {}
        # Build the views now so that cross-key validation fails at construction.
        self._build_views()

    def _build_views(self) -> None:
        _ = (self.pipeline, self.cluster, self.network, self.checkpointing, self.storage, self.rest, self.failover)

    @staticmethod
    def valid_keys() -> list[str]:
        return sorted(OPTIONS)

    @staticmethod
    def option(key: str) -> ConfigOption[Any]:
        """The :class:`ConfigOption` of ``key`` (its default, range and description).

        Raises:
            ConfigurationError: an unknown key.
        """
        if not isinstance(key, str) or key not in OPTIONS:
            raise _unknown_key(key)
        return OPTIONS[key]

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        """The value of ``key``: the one set, else the option's default (``default`` is not used for known keys)."""
        key = _current_key(key)
        if key not in OPTIONS:
            raise _unknown_key(key)
        return self._values.get(key, OPTIONS[key].default)

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def with_values(self, values: Mapping[str, Any] | None = None, **kwargs: Any) -> Configuration:
        """A new configuration with ``values`` added or replaced."""
        merged = dict(self._values)
        merged.update(values or {})
        merged.update(kwargs)
        return Configuration(merged)

    # PyFlink's Configuration API (pyflink.common.Configuration): setters change this object in place.

    def _set(self, key: str, value: Any) -> None:
        if not isinstance(key, str):
            raise _unknown_key(key)
        key = _current_key(key)
        self._values[key] = _parse(key, value)
        self._views.clear()

    def set_string(self, key: str, value: str) -> None:
        """Set ``key`` from its string form (``"500 ms"``, ``"true"``, ``"rocksdb"``), as Flink's config file writes it."""
        self._set(key, value)

    def set_integer(self, key: str, value: int) -> None:
        self._set(key, value)

    def set_boolean(self, key: str, value: bool) -> None:
        self._set(key, value)

    def set_float(self, key: str, value: float) -> None:
        self._set(key, float(value))

    def get_string(self, key: str, default_value: str | None = None) -> str | None:
        """The value set for ``key`` in its string form (durations as ``"500 ms"``), else ``default_value``."""
        value = self._get_set(key)
        return default_value if value is None else format_value(value)

    def get_integer(self, key: str, default_value: int | None = None) -> int | None:
        value = self._get_set(key)
        return default_value if value is None else int(value)

    def get_boolean(self, key: str, default_value: bool | None = None) -> bool | None:
        value = self._get_set(key)
        return default_value if value is None else bool(value)

    def get_float(self, key: str, default_value: float | None = None) -> float | None:
        value = self._get_set(key)
        return default_value if value is None else float(value)

    def _get_set(self, key: str) -> Any:
        key = _current_key(key)
        if key not in OPTIONS and not _is_pattern_key(key):
            raise _unknown_key(key)
        return self._values.get(key)

    def key_set(self) -> set[str]:
        """The keys that are set (defaults not included)."""
        return set(self._values)

    def contains_key(self, key: str) -> bool:
        return _current_key(key) in self._values

    def to_dict(self) -> dict[str, str]:
        """The keys that are set, with their values in string form (they parse back to the same configuration)."""
        return {key: format_value(value) for key, value in self._values.items()}

    def add_all_to_dict(self, target_dict: dict[str, Any]) -> None:
        target_dict.update(self.to_dict())

    def add_all(self, other: Mapping[str, Any], prefix: str | None = None) -> None:
        """Set every key of ``other`` here (its name prefixed with ``prefix``, if given)."""
        for key, value in other.items():
            self._set(f"{prefix or ''}{key}", value)

    def remove_config(self, key: str) -> bool:
        """Unset ``key``; True if it was set."""
        self._views.clear()
        return self._values.pop(_current_key(key), _MISSING) is not _MISSING

    def __repr__(self) -> str:
        # Secrets (s3.secret-key, account keys...) never reach logs or error messages through a repr.
        return f"Configuration({redact(self._values)!r})"

    def __reduce__(self):
        return (Configuration, (self._values,))

    def _view(self, name: str, build: Callable[[], Any]) -> Any:
        if name not in self._views:
            self._views[name] = build()
        return self._views[name]

    @property
    def pipeline(self) -> PipelineOptions:
        g = self.get
        return self._view(
            "pipeline",
            lambda: PipelineOptions(
                parallelism=g("parallelism.default"),
                max_parallelism=g("pipeline.max-parallelism"),
                name=g("pipeline.name"),
                auto_watermark_interval=g("pipeline.auto-watermark-interval"),
                buffer_timeout=g("execution.buffer-timeout.interval"),
            ),
        )

    @property
    def cluster(self) -> ClusterOptions:
        g = self.get
        return self._view(
            "cluster",
            lambda: ClusterOptions(
                target=g("execution.target"),
                jobmanager_address=g("jobmanager.rpc.address"),
                task_manager_host=g("taskmanager.host"),
                number_of_task_managers=g("local.number-taskmanager"),
                redundant_task_managers=g("slotmanager.redundant-taskmanager-num"),
                max_slots=g("slotmanager.number-of-slots.max"),
                slots_per_task_manager=g("taskmanager.numberOfTaskSlots"),
                task_manager_mode=g("flinklike.local.taskmanager-mode"),
                task_manager_start_method=g("flinklike.local.taskmanager-start-method"),
                task_manager_working_dir=g("process.taskmanager.working-dir"),
                heartbeat_interval=g("heartbeat.interval"),
                heartbeat_timeout=g("heartbeat.timeout"),
                slot_request_timeout=g("slot.request.timeout"),
                slot_timeout=g("taskmanager.slot.timeout"),
            ),
        )

    @property
    def network(self) -> NetworkOptions:
        g = self.get
        return self._view(
            "network",
            lambda: NetworkOptions(
                segment_size=g("taskmanager.memory.segment-size"),
                buffers_per_channel=g("taskmanager.network.memory.buffers-per-channel"),
                floating_buffers_per_gate=g("taskmanager.network.memory.floating-buffers-per-gate"),
                max_buffers_per_channel=g("taskmanager.network.memory.max-buffers-per-channel"),
                partition_request_timeout=g("taskmanager.network.request-backoff.max"),
            ),
        )

    @property
    def rest(self) -> RestOptions:
        g = self.get
        return self._view(
            "rest",
            lambda: RestOptions(
                port=g("rest.port"),
                port_explicit="rest.port" in self._values,
                address=g("rest.address"),
                bind_address=g("rest.bind-address") or "127.0.0.1",
                cancel_enabled=g("web.cancel.enable"),
                refresh_interval=g("web.refresh-interval"),
                fetcher_update_interval=g("metrics.fetcher.update-interval"),
                prometheus_port_range=(
                    g("metrics.reporter.prom.port") if g("metrics.reporter.prom.factory.class") else None
                ),
            ),
        )

    @property
    def storage(self) -> StorageConfig:
        """The object-store settings (``s3.*``, ``fs.azure.account.*``) of every storage URL of the job."""
        return self._view("storage", lambda: StorageConfig.from_configuration(self._values))

    @property
    def failover(self) -> FailoverOptions:
        """The restart and failover strategies and the scheduler (the strategies' own keys are read by
        ``restart_strategy.py``)."""
        g = self.get

        def build() -> FailoverOptions:
            restart = g("restart-strategy.type")
            if restart is None:  # Flink's default: exponential delay with checkpointing, else none
                checkpointing = g("execution.checkpointing.interval") is not None
                restart = RestartStrategyType.EXPONENTIAL_DELAY if checkpointing else RestartStrategyType.NONE
            mode = g("scheduler-mode")
            reactive = mode is SchedulerMode.REACTIVE
            wait_key = "jobmanager.adaptive-scheduler.resource-wait-timeout"
            # Flink: reactive mode forces the adaptive scheduler and waits for resources for ever unless told
            wait = g(wait_key) if wait_key in self._values or not reactive else timedelta(-1)
            return FailoverOptions(
                restart_strategy=restart,
                failover_strategy=g("jobmanager.execution.failover-strategy"),
                scheduler=SchedulerType.ADAPTIVE if reactive else g("jobmanager.scheduler"),
                scheduler_mode=mode,
                resource_wait_timeout=None if wait < timedelta(0) else wait,
                resource_stabilization_timeout=g("jobmanager.adaptive-scheduler.resource-stabilization-timeout"),
            )

        return self._view("failover", build)

    @property
    def autoscaler(self) -> AutoscalerOptions:
        g = self.get
        return self._view(
            "autoscaler",
            lambda: AutoscalerOptions(
                enabled=g("job.autoscaler.enabled"),
                scaling_enabled=g("job.autoscaler.scaling.enabled"),
                interval=g("autoscaler.standalone.control-loop.interval"),
                metrics_window=g("job.autoscaler.metrics.window"),
                stabilization_interval=g("job.autoscaler.stabilization.interval"),
                target_utilization=g("job.autoscaler.target.utilization"),
                utilization_boundary=g("job.autoscaler.target.utilization.boundary"),
                restart_time=g("job.autoscaler.restart.time"),
                catch_up_duration=g("job.autoscaler.catch-up.duration"),
                scale_down_interval=g("job.autoscaler.scale-down.interval"),
                scale_down_max_factor=g("job.autoscaler.scale-down.max-factor"),
                scale_up_max_factor=g("job.autoscaler.scale-up.max-factor"),
                vertex_min_parallelism=g("job.autoscaler.vertex.min-parallelism"),
                vertex_max_parallelism=g("job.autoscaler.vertex.max-parallelism"),
            ),
        )

    @property
    def rocksdb(self) -> RocksDBOptions:
        """The ``state.backend.rocksdb.*`` settings (used when ``state.backend.type`` is rocksdb)."""
        g = self.get
        fixed = g("state.backend.rocksdb.memory.fixed-per-slot")
        return self._view(
            "rocksdb",
            lambda: RocksDBOptions(
                local_dir=g("state.backend.rocksdb.localdir"),
                memory_per_slot=DEFAULT_ROCKSDB_MEMORY_PER_SLOT if fixed is None else fixed,
                managed=g("state.backend.rocksdb.memory.managed"),
                write_buffer_ratio=g("state.backend.rocksdb.memory.write-buffer-ratio"),
            ),
        )

    @property
    def checkpointing(self) -> CheckpointingOptions:
        g = self.get
        return self._view(
            "checkpointing",
            lambda: CheckpointingOptions(
                interval=g("execution.checkpointing.interval"),
                mode=g("execution.checkpointing.mode"),
                unaligned=g("execution.checkpointing.unaligned.enabled"),
                aligned_checkpoint_timeout=g("execution.checkpointing.aligned-checkpoint-timeout"),
                timeout=g("execution.checkpointing.timeout"),
                max_concurrent=g("execution.checkpointing.max-concurrent-checkpoints"),
                min_pause=g("execution.checkpointing.min-pause"),
                tolerable_failures=g("execution.checkpointing.tolerable-failed-checkpoints"),
                num_retained=g("execution.checkpointing.num-retained"),
                directory=g("execution.checkpointing.dir"),
                recovery_path=g("execution.state-recovery.path"),
                accept_duplicate_sink_output=g("execution.state-recovery.accept-duplicate-sink-output"),
                storage=g("execution.checkpointing.storage"),
                local_recovery=g("execution.state-recovery.from-local") or g("state.backend.local-recovery"),
                checkpoints_after_tasks_finish=g("execution.checkpointing.checkpoints-after-tasks-finish"),
            ),
        )
