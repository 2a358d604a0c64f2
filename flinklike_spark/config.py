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
import difflib
import re
from collections.abc import Callable, Iterator, Mapping
from datetime import timedelta
from enum import Enum
from typing import Any, Generic, TypeVar

from flinklike_spark.errors import ConfigurationError

__all__ = [
    "CheckpointingMode",
    "CheckpointingOptions",
    "ClusterOptions",
    "ConfigOption",
    "Configuration",
    "NetworkOptions",
    "PipelineOptions",
    "TaskManagerMode",
    "fold_key_case",
    "parse_duration",
    "parse_memory_size",
]

T = TypeVar("T")


class CheckpointingMode(Enum):
    EXACTLY_ONCE = "exactly_once"
    AT_LEAST_ONCE = "at_least_once"


class TaskManagerMode(Enum):
    """Where the local MiniCluster runs its TaskExecutors."""

    PROCESS = "process"  # spawned child processes (the default: real parallelism)
    THREAD = "thread"  # inside the client process (debugging, memory:// file systems)


_DURATION_UNITS = {
    "ms": 1e-3, "milli": 1e-3, "millis": 1e-3, "millisecond": 1e-3, "milliseconds": 1e-3,
    "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
    "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0, "m": 60.0,
    "h": 3600.0, "hour": 3600.0, "hours": 3600.0,
    "d": 86400.0, "day": 86400.0, "days": 86400.0,
}  # fmt: skip
_MEMORY_UNITS = {"b": 1, "kb": 1 << 10, "k": 1 << 10, "mb": 1 << 20, "m": 1 << 20, "gb": 1 << 30, "g": 1 << 30}
_NUMBER_UNIT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_duration(value: object, *, key: str = "duration") -> timedelta:
    """Parse ``timedelta``, a number of milliseconds, or Flink's ``"100 ms"``/``"10s"``/``"1 min"``."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool):
        raise ConfigurationError(f"{key}: expected a duration, got {value!r}")
    if isinstance(value, (int, float)):
        return timedelta(milliseconds=value)
    match = _NUMBER_UNIT.match(str(value))
    if match:
        number, unit = match.groups()
        unit = unit.lower() or "ms"
        if unit in _DURATION_UNITS:
            return timedelta(seconds=float(number) * _DURATION_UNITS[unit])
    raise ConfigurationError(
        f"{key}: cannot parse {value!r} as a duration; use e.g. '100 ms', '10 s', '1 min' "
        f"(units: {', '.join(sorted(set(_DURATION_UNITS)))}) or a datetime.timedelta"
    )


def parse_memory_size(value: object, *, key: str = "memory size") -> int:
    """Parse bytes as an int or Flink's ``"32kb"``/``"64 mb"``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = _NUMBER_UNIT.match(str(value))
    if match:
        number, unit = match.groups()
        unit = unit.lower() or "b"
        if unit in _MEMORY_UNITS:
            return int(float(number) * _MEMORY_UNITS[unit])
    raise ConfigurationError(f"{key}: cannot parse {value!r} as a memory size; use e.g. '32kb', '64 mb'")


def _parse_int(value: object, *, key: str) -> int:
    if isinstance(value, bool):
        raise ConfigurationError(f"{key}: expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except ValueError:
        raise ConfigurationError(f"{key}: expected an integer, got {value!r}") from None


def _parse_bool(value: object, *, key: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ConfigurationError(f"{key}: expected true or false, got {value!r}")


def _enum_parser(enum_type: type[Enum]) -> Callable[..., Enum]:
    def parse(value: object, *, key: str) -> Enum:
        if isinstance(value, enum_type):
            return value
        text = str(value).strip().lower().replace("-", "_")
        for member in enum_type:
            if member.value == text:
                return member
        valid = ", ".join(m.value.replace("_", "-") for m in enum_type)
        raise ConfigurationError(f"{key}: invalid value {value!r}; valid values: {valid}")

    return parse


def _choice_parser(*choices: str) -> Callable[..., str]:
    def parse(value: object, *, key: str) -> str:
        text = str(value).strip().lower()
        if text not in choices:
            raise ConfigurationError(f"{key}: invalid value {value!r}; valid values: {', '.join(choices)}")
        return text

    return parse


def _parse_str(value: object, *, key: str) -> str:
    return str(value)


def _parse_optional_str(value: object, *, key: str) -> str | None:
    return None if value is None or str(value) == "" else str(value)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConfigOption(Generic[T]):
    """One configuration key: its parser, default, bounds and description."""

    key: str
    default: T
    parse: Callable[..., T]
    description: str
    minimum: float | None = None

    def convert(self, value: object) -> T:
        parsed = self.parse(value, key=self.key)
        if self.minimum is not None:
            number = parsed.total_seconds() if isinstance(parsed, timedelta) else parsed
            if number < self.minimum:  # type: ignore[operator]
                raise ConfigurationError(f"{self.key}: {value!r} is below the minimum {self.minimum}")
        return parsed


def _opt(key: str, default: Any, parse: Callable[..., Any], description: str, minimum: float | None = None):
    return ConfigOption(key=key, default=default, parse=parse, description=description, minimum=minimum)


_duration = parse_duration
_memory = parse_memory_size

OPTIONS: dict[str, ConfigOption[Any]] = {
    o.key: o
    for o in (
        _opt("parallelism.default", 1, _parse_int, "Default parallelism of operators.", 1),
        _opt("pipeline.max-parallelism", 128, _parse_int, "Number of key groups of keyed state.", 1),
        _opt("pipeline.name", None, _parse_optional_str, "The job's name."),
        _opt("pipeline.auto-watermark-interval", timedelta(milliseconds=200), _duration,
             "How often sources emit watermarks.", 0),
        _opt("execution.buffer-timeout.interval", timedelta(milliseconds=100), _duration,
             "Longest time a partially filled output buffer waits before it is sent.", 0),
        _opt("execution.runtime-mode", "streaming", _choice_parser("streaming"),
             "Only STREAMING is supported; bounded sources finish the job."),
        _opt("taskmanager.numberOfTaskSlots", 1, _parse_int, "Slots per TaskExecutor.", 1),
        _opt("local.number-taskmanager", 1, _parse_int, "TaskExecutors of the local MiniCluster.", 1),
        _opt("flinklike.local.taskmanager-mode", TaskManagerMode.PROCESS, _enum_parser(TaskManagerMode),
             "Run local TaskExecutors as child processes or as threads of the client."),
        _opt("taskmanager.memory.segment-size", 32 * 1024, _memory, "Target bytes of one network buffer.", 1),
        _opt("taskmanager.network.memory.buffers-per-channel", 2, _parse_int,
             "Exclusive buffers (credit) per input channel.", 1),
        _opt("taskmanager.network.memory.floating-buffers-per-gate", 8, _parse_int,
             "Buffers an input gate adds to each remote channel's credit, beyond its exclusive buffers.", 1),
        _opt("taskmanager.network.memory.max-buffers-per-channel", 10, _parse_int,
             "Buffers a result subpartition may hold before the producing task is backpressured.", 1),
        _opt("taskmanager.network.request-backoff.max", timedelta(seconds=30), _duration,
             "How long a consumer waits for its producer's partition to appear.", 0),
        _opt("heartbeat.interval", timedelta(seconds=10), _duration, "TaskExecutor heartbeat interval.", 0),
        _opt("heartbeat.timeout", timedelta(seconds=50), _duration, "Heartbeat timeout of a TaskExecutor.", 0),
        _opt("slot.request.timeout", timedelta(minutes=5), _duration, "How long a slot request may wait.", 0),
        _opt("taskmanager.slot.timeout", timedelta(seconds=10), _duration,
             "Timeout of an allocated but inactive slot.", 0),
        _opt("restart-strategy.type", "none", _choice_parser("none", "disable", "off"),
             "Restart strategy; failover arrives with the failover coordinator."),
        _opt("execution.checkpointing.interval", None, lambda v, key: None if v is None else _duration(v, key=key),
             "Checkpoint interval; unset disables periodic checkpoints."),
        _opt("execution.checkpointing.mode", CheckpointingMode.EXACTLY_ONCE, _enum_parser(CheckpointingMode),
             "exactly-once or at-least-once."),
        _opt("execution.checkpointing.unaligned.enabled", False, _parse_bool, "Take unaligned checkpoints."),
        _opt("execution.checkpointing.aligned-checkpoint-timeout", timedelta(0), _duration,
             "With unaligned enabled: start aligned and switch after this timeout (0 = unaligned at once).", 0),
        _opt("execution.checkpointing.timeout", timedelta(minutes=10), _duration, "Checkpoint timeout.", 0),
        _opt("execution.checkpointing.max-concurrent-checkpoints", 1, _parse_int,
             "Checkpoints in progress at once.", 1),
        _opt("execution.checkpointing.min-pause", timedelta(0), _duration, "Pause between checkpoints.", 0),
        _opt("execution.checkpointing.tolerable-failed-checkpoints", 0, _parse_int,
             "Consecutive checkpoint failures tolerated before the job fails.", 0),
        _opt("execution.checkpointing.num-retained", 1, _parse_int, "Completed checkpoints kept.", 1),
        _opt("execution.checkpointing.dir", None, _parse_optional_str, "Checkpoint storage URL (fsspec)."),
        _opt("execution.state-recovery.path", None, _parse_optional_str, "Checkpoint or savepoint to start from."),
    )
}  # fmt: skip


_KEYS_BY_LOWER_CASE = {key.lower(): key for key in OPTIONS}


def fold_key_case(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with every key that matches a configuration key case-insensitively spelled as that key.

    Spark lower-cases data source option keys (``taskmanager.numberOfTaskSlots``
    arrives as ``taskmanager.numberoftaskslots``); this restores Flink's
    spelling. Other keys are returned unchanged, so :class:`Configuration`
    still rejects them by name.
    """
    return {_KEYS_BY_LOWER_CASE.get(key.lower(), key): value for key, value in values.items()}


@dataclasses.dataclass(frozen=True, kw_only=True)
class PipelineOptions:
    parallelism: int
    max_parallelism: int
    name: str | None
    auto_watermark_interval: timedelta
    buffer_timeout: timedelta


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClusterOptions:
    number_of_task_managers: int
    slots_per_task_manager: int
    task_manager_mode: TaskManagerMode
    heartbeat_interval: timedelta
    heartbeat_timeout: timedelta
    slot_request_timeout: timedelta
    slot_timeout: timedelta

    def __post_init__(self) -> None:
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


class Configuration(Mapping[str, Any]):
    """An immutable, validated set of configuration values keyed by Flink's keys.

    Args:
        values: key -> value (Python objects or strings). Every key is checked.

    Raises:
        ConfigurationError: an unknown key (the message suggests the closest
            valid ones) or a value that does not parse.
    """

    def __init__(self, values: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        merged = dict(values or {})
        merged.update(kwargs)
        parsed: dict[str, Any] = {}
        for key, value in merged.items():
            option = OPTIONS.get(key)
            if option is None:
                close = difflib.get_close_matches(key, OPTIONS, n=3, cutoff=0.5)
                hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
                raise ConfigurationError(
                    f"unknown configuration key {key!r}{hint} Valid keys: {', '.join(sorted(OPTIONS))}"
                )
            parsed[key] = option.convert(value)
        self._values = parsed
        self._views: dict[str, Any] = {}
        # Build the views now so that cross-key validation fails at construction.
        _ = (self.pipeline, self.cluster, self.network, self.checkpointing)

    @staticmethod
    def valid_keys() -> list[str]:
        return sorted(OPTIONS)

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        if key not in OPTIONS:
            raise ConfigurationError(f"unknown configuration key {key!r}")
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

    def __repr__(self) -> str:
        return f"Configuration({self._values!r})"

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
                number_of_task_managers=g("local.number-taskmanager"),
                slots_per_task_manager=g("taskmanager.numberOfTaskSlots"),
                task_manager_mode=g("flinklike.local.taskmanager-mode"),
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
            ),
        )
