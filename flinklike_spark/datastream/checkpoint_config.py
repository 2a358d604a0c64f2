"""PyFlink's ``RuntimeExecutionMode`` and ``CheckpointConfig``, as thin views over configuration keys.

``env.get_checkpoint_config().set_checkpoint_timeout(60_000)`` is the same as
``env.configure({"execution.checkpointing.timeout": 60_000})``: every setter
writes one Flink key (validated at once), every getter reads it back. Durations
are milliseconds (``int``, as in PyFlink) or ``datetime.timedelta``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from enum import Enum
from typing import Any, Protocol

from flinklike_spark.config import CheckpointingMode
from flinklike_spark.errors import ConfigurationError


class _Configurable(Protocol):
    """What a CheckpointConfig uses of its StreamExecutionEnvironment."""

    @property
    def config(self) -> Any: ...

    def configure(self, values: Mapping[str, Any]) -> Any: ...


__all__ = ["CheckpointConfig", "RuntimeExecutionMode"]


class RuntimeExecutionMode(Enum):
    """``execution.runtime-mode``. BATCH runs a job of bounded sources with Flink's batch results:
    no checkpoints, no watermark before the end of the input (so nothing is late), keyed rolling
    aggregations (``reduce``, ``sum``, ...) emit only their final value per key. AUTOMATIC means
    STREAMING here."""

    STREAMING = "streaming"
    BATCH = "batch"
    AUTOMATIC = "automatic"


def runtime_mode_value(mode: RuntimeExecutionMode) -> str:
    """The configuration value of ``execution.runtime-mode`` for ``mode``."""
    if not isinstance(mode, RuntimeExecutionMode):
        raise ConfigurationError(f"set_runtime_mode expects a RuntimeExecutionMode, got {mode!r}")
    return "streaming" if mode is RuntimeExecutionMode.AUTOMATIC else mode.value


def _millis(value: timedelta | None) -> int:
    return -1 if value is None else int(value.total_seconds() * 1000)


class CheckpointConfig:
    """Reads and writes the ``execution.checkpointing.*`` keys of one environment."""

    def __init__(self, env: _Configurable) -> None:
        self._env = env

    def _set(self, key: str, value: Any) -> CheckpointConfig:
        self._env.configure({key: value})
        return self

    def _get(self, key: str) -> Any:
        return self._env.config.get(key)

    def is_checkpointing_enabled(self) -> bool:
        return self._get("execution.checkpointing.interval") is not None

    def set_checkpoint_interval(self, checkpoint_interval: int | timedelta) -> CheckpointConfig:
        return self._set("execution.checkpointing.interval", checkpoint_interval)

    def get_checkpoint_interval(self) -> int:
        """Milliseconds, or -1 when checkpointing is disabled (as in PyFlink)."""
        return _millis(self._get("execution.checkpointing.interval"))

    def set_checkpointing_mode(self, checkpointing_mode: CheckpointingMode) -> CheckpointConfig:
        return self._set("execution.checkpointing.mode", checkpointing_mode)

    def get_checkpointing_mode(self) -> CheckpointingMode:
        """``execution.checkpointing.mode``; AT_LEAST_ONCE while checkpointing is disabled (as in Flink 2)."""
        if not self.is_checkpointing_enabled():
            return CheckpointingMode.AT_LEAST_ONCE
        return self._get("execution.checkpointing.mode")

    def set_checkpoint_timeout(self, checkpoint_timeout: int | timedelta) -> CheckpointConfig:
        return self._set("execution.checkpointing.timeout", checkpoint_timeout)

    def get_checkpoint_timeout(self) -> int:
        return _millis(self._get("execution.checkpointing.timeout"))

    def set_min_pause_between_checkpoints(self, min_pause_between_checkpoints: int | timedelta) -> CheckpointConfig:
        return self._set("execution.checkpointing.min-pause", min_pause_between_checkpoints)

    def get_min_pause_between_checkpoints(self) -> int:
        return _millis(self._get("execution.checkpointing.min-pause"))

    def set_max_concurrent_checkpoints(self, max_concurrent_checkpoints: int) -> CheckpointConfig:
        return self._set("execution.checkpointing.max-concurrent-checkpoints", max_concurrent_checkpoints)

    def get_max_concurrent_checkpoints(self) -> int:
        return self._get("execution.checkpointing.max-concurrent-checkpoints")

    def set_tolerable_checkpoint_failure_number(self, tolerable_checkpoint_failure_number: int) -> CheckpointConfig:
        return self._set("execution.checkpointing.tolerable-failed-checkpoints", tolerable_checkpoint_failure_number)

    def get_tolerable_checkpoint_failure_number(self) -> int:
        return self._get("execution.checkpointing.tolerable-failed-checkpoints")

    def enable_unaligned_checkpoints(self, enabled: bool = True) -> CheckpointConfig:
        return self._set("execution.checkpointing.unaligned.enabled", enabled)

    def disable_unaligned_checkpoints(self) -> CheckpointConfig:
        return self.enable_unaligned_checkpoints(False)

    def is_unaligned_checkpoints_enabled(self) -> bool:
        return self._get("execution.checkpointing.unaligned.enabled")

    def set_aligned_checkpoint_timeout(self, alignment_timeout: int | timedelta) -> CheckpointConfig:
        return self._set("execution.checkpointing.aligned-checkpoint-timeout", alignment_timeout)

    def get_aligned_checkpoint_timeout(self) -> timedelta:
        return self._get("execution.checkpointing.aligned-checkpoint-timeout")

    def set_checkpoint_storage_dir(self, checkpoint_path: str) -> CheckpointConfig:
        return self._set("execution.checkpointing.dir", checkpoint_path)

    def get_checkpoint_storage_dir(self) -> str | None:
        return self._get("execution.checkpointing.dir")
