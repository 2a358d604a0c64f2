"""Restart backoff strategies: whether a failed job may restart, and after how long.

Flink's ``RestartBackoffTimeStrategy`` family, configured by the same keys
(``restart-strategy.type`` and ``restart-strategy.<type>.*``) with the same
defaults and semantics (Flink 1.19+):

* ``none`` (also ``off``, ``disable``): never restart.
* ``fixed-delay``: up to ``attempts`` restarts (default 1), each after ``delay`` (1 s).
* ``failure-rate``: restart after ``delay`` (1 s) unless more than
  ``max-failures-per-interval`` (1) failures happened within
  ``failure-rate-interval`` (1 min).
* ``exponential-delay``: delay ``initial-backoff`` (1 s) times
  ``backoff-multiplier`` (1.5) per attempt, at most ``max-backoff`` (1 min),
  plus or minus ``jitter-factor`` (0.1) of it; failures that arrive while a
  restart is still pending are merged into that attempt; once no failure
  happened for ``reset-backoff-threshold`` (1 h) after the last restart, the
  delay and the attempt count start over; the job fails once more than
  ``attempts-before-reset-backoff`` (unbounded) attempts were made since.

Without ``restart-strategy.type``, a job with checkpointing (an interval is
set) uses ``exponential-delay`` and one without uses ``none``, as in Flink.

Call order (the :class:`~flinklike_spark._runtime.jobmaster.failover.ExecutionFailureHandler`
does this on the JobMaster's main thread): :meth:`notify_failure`, then
:meth:`can_restart`, then :attr:`backoff_time`. Time comes from an injectable
monotonic clock (seconds), so tests never sleep. Not thread-safe.
"""

from __future__ import annotations

import abc
import collections
import dataclasses
import random
import time
from collections.abc import Callable
from datetime import timedelta

from flinklike_spark.config import Configuration, RestartStrategyType
from flinklike_spark.errors import ConfigurationError

__all__ = [
    "ExponentialDelayConfig",
    "ExponentialDelayRestartBackoffTimeStrategy",
    "FailureRateConfig",
    "FailureRateRestartBackoffTimeStrategy",
    "FixedDelayConfig",
    "FixedDelayRestartBackoffTimeStrategy",
    "NoRestartBackoffTimeStrategy",
    "NoRestartConfig",
    "RestartBackoffTimeStrategy",
    "RestartStrategyConfig",
    "create_restart_strategy",
    "restart_strategy_config",
]

Clock = Callable[[], float]


@dataclasses.dataclass(frozen=True, kw_only=True)
class NoRestartConfig:
    """``restart-strategy.type: none``."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class FixedDelayConfig:
    """``restart-strategy.type: fixed-delay``."""

    attempts: int = 1
    delay: timedelta = timedelta(seconds=1)

    def __post_init__(self) -> None:
        if self.attempts < 0:
            raise ConfigurationError(f"restart-strategy.fixed-delay.attempts must be >= 0, got {self.attempts}")
        if self.delay < timedelta(0):
            raise ConfigurationError(f"restart-strategy.fixed-delay.delay must be >= 0, got {self.delay}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class FailureRateConfig:
    """``restart-strategy.type: failure-rate``."""

    max_failures_per_interval: int = 1
    failure_rate_interval: timedelta = timedelta(minutes=1)
    delay: timedelta = timedelta(seconds=1)

    def __post_init__(self) -> None:
        if self.max_failures_per_interval < 1:
            raise ConfigurationError(
                "restart-strategy.failure-rate.max-failures-per-interval must be >= 1, "
                f"got {self.max_failures_per_interval}"
            )
        if self.failure_rate_interval <= timedelta(0):
            raise ConfigurationError(
                f"restart-strategy.failure-rate.failure-rate-interval must be > 0, got {self.failure_rate_interval}"
            )
        if self.delay < timedelta(0):
            raise ConfigurationError(f"restart-strategy.failure-rate.delay must be >= 0, got {self.delay}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExponentialDelayConfig:
    """``restart-strategy.type: exponential-delay``."""

    initial_backoff: timedelta = timedelta(seconds=1)
    max_backoff: timedelta = timedelta(minutes=1)
    backoff_multiplier: float = 1.5
    reset_backoff_threshold: timedelta = timedelta(hours=1)
    jitter_factor: float = 0.1
    attempts_before_reset_backoff: int = 2**31 - 1

    def __post_init__(self) -> None:
        prefix = "restart-strategy.exponential-delay."
        if self.initial_backoff <= timedelta(0) or self.max_backoff <= timedelta(0):
            raise ConfigurationError(
                f"{prefix}initial-backoff and max-backoff must be > 0, got {self.initial_backoff} and "
                f"{self.max_backoff}"
            )
        if self.initial_backoff > self.max_backoff:
            raise ConfigurationError(
                f"{prefix}initial-backoff ({self.initial_backoff}) must not exceed max-backoff ({self.max_backoff})"
            )
        if not self.backoff_multiplier > 1:
            raise ConfigurationError(f"{prefix}backoff-multiplier must be > 1, got {self.backoff_multiplier}")
        if self.reset_backoff_threshold <= timedelta(0):
            raise ConfigurationError(f"{prefix}reset-backoff-threshold must be > 0, got {self.reset_backoff_threshold}")
        if not 0 <= self.jitter_factor <= 1:
            raise ConfigurationError(f"{prefix}jitter-factor must be within 0..1, got {self.jitter_factor}")
        if self.attempts_before_reset_backoff < 1:
            raise ConfigurationError(
                f"{prefix}attempts-before-reset-backoff must be >= 1, got {self.attempts_before_reset_backoff}"
            )


RestartStrategyConfig = NoRestartConfig | FixedDelayConfig | FailureRateConfig | ExponentialDelayConfig


def restart_strategy_config(config: Configuration) -> RestartStrategyConfig:
    """The typed restart strategy of ``config`` (Flink's default when ``restart-strategy.type`` is unset).

    Raises:
        ConfigurationError: a value out of range, or a combination Flink rejects
            (initial backoff above the maximum, say); the message names the key.
    """
    kind = config.failover.restart_strategy
    g = config.get
    if kind is RestartStrategyType.FIXED_DELAY:
        return FixedDelayConfig(
            attempts=g("restart-strategy.fixed-delay.attempts"), delay=g("restart-strategy.fixed-delay.delay")
        )
    if kind is RestartStrategyType.FAILURE_RATE:
        return FailureRateConfig(
            max_failures_per_interval=g("restart-strategy.failure-rate.max-failures-per-interval"),
            failure_rate_interval=g("restart-strategy.failure-rate.failure-rate-interval"),
            delay=g("restart-strategy.failure-rate.delay"),
        )
    if kind is RestartStrategyType.EXPONENTIAL_DELAY:
        p = "restart-strategy.exponential-delay."
        return ExponentialDelayConfig(
            initial_backoff=g(p + "initial-backoff"),
            max_backoff=g(p + "max-backoff"),
            backoff_multiplier=g(p + "backoff-multiplier"),
            reset_backoff_threshold=g(p + "reset-backoff-threshold"),
            jitter_factor=g(p + "jitter-factor"),
            attempts_before_reset_backoff=g(p + "attempts-before-reset-backoff"),
        )
    return NoRestartConfig()


class RestartBackoffTimeStrategy(abc.ABC):
    """Decides whether to restart after a failure and how long to wait first."""

    @abc.abstractmethod
    def notify_failure(self, cause: BaseException) -> bool:
        """Record a failure; True if it starts a new restart attempt, False if merged into a pending one."""

    @abc.abstractmethod
    def can_restart(self) -> bool:
        """Whether the job may restart after the failures notified so far."""

    @property
    @abc.abstractmethod
    def backoff_time(self) -> timedelta:
        """How long to wait before restarting (valid after :meth:`notify_failure`)."""


class NoRestartBackoffTimeStrategy(RestartBackoffTimeStrategy):
    def notify_failure(self, cause: BaseException) -> bool:
        return True

    def can_restart(self) -> bool:
        return False

    @property
    def backoff_time(self) -> timedelta:
        return timedelta(0)

    def __repr__(self) -> str:
        return "NoRestartBackoffTimeStrategy"


class FixedDelayRestartBackoffTimeStrategy(RestartBackoffTimeStrategy):
    """At most ``attempts`` restarts, each after ``delay``."""

    def __init__(self, config: FixedDelayConfig) -> None:
        self._config = config
        self._attempt = 0

    def notify_failure(self, cause: BaseException) -> bool:
        self._attempt += 1
        return True

    def can_restart(self) -> bool:
        return self._attempt <= self._config.attempts

    @property
    def backoff_time(self) -> timedelta:
        return self._config.delay

    def __repr__(self) -> str:
        c = self._config
        return f"FixedDelayRestartBackoffTimeStrategy(attempts={c.attempts}, delay={c.delay}, failures={self._attempt})"


class FailureRateRestartBackoffTimeStrategy(RestartBackoffTimeStrategy):
    """Restart unless more than ``max_failures_per_interval`` failures fell within one interval."""

    def __init__(self, config: FailureRateConfig, *, clock: Clock = time.monotonic) -> None:
        self._config = config
        self._clock = clock
        # The newest max + 1 failure times: the job fails when all of them lie within one interval.
        self._failures: collections.deque[float] = collections.deque(maxlen=config.max_failures_per_interval + 1)

    def notify_failure(self, cause: BaseException) -> bool:
        self._failures.append(self._clock())
        return True

    def can_restart(self) -> bool:
        if len(self._failures) <= self._config.max_failures_per_interval:
            return True
        return self._clock() - self._failures[0] > self._config.failure_rate_interval.total_seconds()

    @property
    def backoff_time(self) -> timedelta:
        return self._config.delay

    def __repr__(self) -> str:
        c = self._config
        return (
            f"FailureRateRestartBackoffTimeStrategy(max-failures-per-interval={c.max_failures_per_interval}, "
            f"failure-rate-interval={c.failure_rate_interval}, delay={c.delay})"
        )


class ExponentialDelayRestartBackoffTimeStrategy(RestartBackoffTimeStrategy):
    """Exponentially growing delay with jitter, merging of concurrent failures, and reset.

    Args:
        config: the strategy's options.
        clock: monotonic seconds.
        rng: the source of jitter (seeded in tests).
    """

    def __init__(self, config: ExponentialDelayConfig, *, clock: Clock = time.monotonic,
                 rng: random.Random | None = None) -> None:  # fmt: skip
        self._config = config
        self._clock = clock
        self._rng = rng or random.Random()
        self._attempt = 0
        self._next_restart: float | None = None

    def notify_failure(self, cause: BaseException) -> bool:
        now = self._clock()
        if self._next_restart is not None and now <= self._next_restart:
            return False  # a restart is still pending: this failure is part of that attempt
        if (
            self._next_restart is not None
            and now - self._next_restart >= self._config.reset_backoff_threshold.total_seconds()
        ):
            self._attempt = 0
        self._next_restart = now + self._backoff_of_attempt(self._attempt)
        self._attempt += 1
        return True

    def _backoff_of_attempt(self, attempt: int) -> float:
        c = self._config
        initial, maximum = c.initial_backoff.total_seconds(), c.max_backoff.total_seconds()
        # Flink caps the exponent's result before adding jitter; min() keeps huge attempts finite.
        base = min(initial * c.backoff_multiplier ** min(attempt, 1024), maximum)
        offset = base * c.jitter_factor
        jitter = self._rng.uniform(-offset, offset) if offset else 0.0
        return max(initial, min(base + jitter, maximum))

    def can_restart(self) -> bool:
        return self._attempt <= self._config.attempts_before_reset_backoff

    @property
    def backoff_time(self) -> timedelta:
        if self._next_restart is None:
            raise RuntimeError("call notify_failure before asking for the backoff time")
        return timedelta(seconds=max(0.0, self._next_restart - self._clock()))

    def __repr__(self) -> str:
        c = self._config
        return (
            f"ExponentialDelayRestartBackoffTimeStrategy(initial-backoff={c.initial_backoff}, "
            f"max-backoff={c.max_backoff}, backoff-multiplier={c.backoff_multiplier}, "
            f"reset-backoff-threshold={c.reset_backoff_threshold}, jitter-factor={c.jitter_factor}, "
            f"attempts-before-reset-backoff={c.attempts_before_reset_backoff}, attempts={self._attempt})"
        )


def create_restart_strategy(
    config: RestartStrategyConfig, *, clock: Clock = time.monotonic, rng: random.Random | None = None
) -> RestartBackoffTimeStrategy:
    """A fresh strategy for one job."""
    if isinstance(config, FixedDelayConfig):
        return FixedDelayRestartBackoffTimeStrategy(config)
    if isinstance(config, FailureRateConfig):
        return FailureRateRestartBackoffTimeStrategy(config, clock=clock)
    if isinstance(config, ExponentialDelayConfig):
        return ExponentialDelayRestartBackoffTimeStrategy(config, clock=clock, rng=rng)
    if isinstance(config, NoRestartConfig):
        return NoRestartBackoffTimeStrategy()
    raise TypeError(f"not a restart strategy config: {config!r}")
