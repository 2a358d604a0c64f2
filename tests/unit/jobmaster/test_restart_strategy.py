"""Restart backoff strategies against a manual clock (no test sleeps)."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from flinklike_spark import Configuration, ConfigurationError
from flinklike_spark._runtime.jobmaster.restart_strategy import (
    ExponentialDelayConfig,
    FailureRateConfig,
    FixedDelayConfig,
    NoRestartConfig,
    create_restart_strategy,
    restart_strategy_config,
)
from tests.support.clocks import ManualClock

ERROR = RuntimeError("boom")


def test_defaults_follow_flink_none_without_checkpointing_exponential_with():
    assert restart_strategy_config(Configuration()) == NoRestartConfig()
    with_checkpoints = Configuration({"execution.checkpointing.interval": "1 s", "execution.checkpointing.dir": "x"})
    assert restart_strategy_config(with_checkpoints) == ExponentialDelayConfig(
        initial_backoff=timedelta(seconds=1),
        max_backoff=timedelta(minutes=1),
        backoff_multiplier=1.5,
        reset_backoff_threshold=timedelta(hours=1),
        jitter_factor=0.1,
        attempts_before_reset_backoff=2**31 - 1,
    )
    assert restart_strategy_config(Configuration({"restart-strategy.type": "fixed-delay"})) == FixedDelayConfig(
        attempts=1, delay=timedelta(seconds=1)
    )
    assert restart_strategy_config(Configuration({"restart-strategy.type": "failure-rate"})) == FailureRateConfig(
        max_failures_per_interval=1, failure_rate_interval=timedelta(minutes=1), delay=timedelta(seconds=1)
    )
    # an explicit none wins over the checkpointing default; Flink's aliases are accepted
    for alias in ("none", "off", "disable"):
        assert (
            restart_strategy_config(with_checkpoints.with_values({"restart-strategy.type": alias})) == NoRestartConfig()
        )


def test_string_options_are_parsed():
    config = Configuration(
        {
            "restart-strategy.type": "exponential-delay",
            "restart-strategy.exponential-delay.initial-backoff": "10 ms",
            "restart-strategy.exponential-delay.max-backoff": "2 s",
            "restart-strategy.exponential-delay.backoff-multiplier": "2.0",
            "restart-strategy.exponential-delay.jitter-factor": "0",
            "restart-strategy.exponential-delay.attempts-before-reset-backoff": "3",
        }
    )
    parsed = restart_strategy_config(config)
    assert parsed.initial_backoff == timedelta(milliseconds=10) and parsed.backoff_multiplier == 2.0
    assert parsed.attempts_before_reset_backoff == 3


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"restart-strategy.type": "sometimes"}, "valid values: none, off, disable, fixed-delay"),
        ({"restart-strategy.type": "exponential-delay",
          "restart-strategy.exponential-delay.initial-backoff": "2 min"}, "must not exceed max-backoff"),
        ({"restart-strategy.type": "exponential-delay",
          "restart-strategy.exponential-delay.jitter-factor": "1.5"},
         "jitter-factor: '1.5' is out of range; valid: between 0.0 and 1.0"),
        ({"restart-strategy.type": "exponential-delay",
          "restart-strategy.exponential-delay.backoff-multiplier": "1"}, "backoff-multiplier must be > 1"),
        ({"restart-strategy.fixed-delay.attempts": "-1"}, "attempts: '-1' is out of range"),
        ({"jobmanager.execution.failover-strategy": "nearby"}, "valid values: region, full"),
    ],
)  # fmt: skip
def test_bad_values_name_the_key(values, message):
    with pytest.raises(ConfigurationError, match=message):
        restart_strategy_config(Configuration(values))


def test_none_never_restarts():
    strategy = create_restart_strategy(NoRestartConfig())
    strategy.notify_failure(ERROR)
    assert not strategy.can_restart()


def test_fixed_delay_allows_exactly_attempts_restarts_each_after_delay():
    strategy = create_restart_strategy(FixedDelayConfig(attempts=3, delay=timedelta(milliseconds=250)))
    for _ in range(3):
        assert strategy.notify_failure(ERROR)
        assert strategy.can_restart()
        assert strategy.backoff_time == timedelta(milliseconds=250)
    strategy.notify_failure(ERROR)
    assert not strategy.can_restart()


def test_fixed_delay_with_zero_attempts_never_restarts():
    strategy = create_restart_strategy(FixedDelayConfig(attempts=0, delay=timedelta(0)))
    strategy.notify_failure(ERROR)
    assert not strategy.can_restart()


def test_failure_rate_fails_only_when_more_than_max_failures_fall_within_the_interval():
    clock = ManualClock(1000.0)
    config = FailureRateConfig(max_failures_per_interval=2, failure_rate_interval=timedelta(seconds=10),
                               delay=timedelta(milliseconds=5))  # fmt: skip
    strategy = create_restart_strategy(config, clock=clock)
    strategy.notify_failure(ERROR)
    assert strategy.can_restart() and strategy.backoff_time == timedelta(milliseconds=5)
    clock.advance(4)
    strategy.notify_failure(ERROR)
    assert strategy.can_restart()
    clock.advance(7)  # the first failure left the window (11 s ago): still 2 within 10 s
    strategy.notify_failure(ERROR)
    assert strategy.can_restart()
    clock.advance(1)  # three failures at 4, 11, 12: those at 11 and 12 plus this one are within 10 s
    strategy.notify_failure(ERROR)
    assert not strategy.can_restart()


def test_failure_rate_with_one_failure_per_interval_restarts_once_per_interval():
    clock = ManualClock(1000.0)
    strategy = create_restart_strategy(FailureRateConfig(), clock=clock)
    strategy.notify_failure(ERROR)
    assert strategy.can_restart()
    clock.advance(61)
    strategy.notify_failure(ERROR)
    assert strategy.can_restart()
    clock.advance(30)
    strategy.notify_failure(ERROR)
    assert not strategy.can_restart()


def _exponential(clock, **overrides):
    values = dict(initial_backoff=timedelta(seconds=1), max_backoff=timedelta(seconds=10), backoff_multiplier=2.0,
                  reset_backoff_threshold=timedelta(seconds=100), jitter_factor=0.0)  # fmt: skip
    values.update(overrides)
    return create_restart_strategy(ExponentialDelayConfig(**values), clock=clock, rng=random.Random(7))


def test_exponential_delay_doubles_up_to_the_maximum():
    clock = ManualClock(1000.0)
    strategy = _exponential(clock)
    delays = []
    for _ in range(6):
        assert strategy.notify_failure(ERROR)
        assert strategy.can_restart()
        delays.append(strategy.backoff_time.total_seconds())
        clock.advance(delays[-1] + 0.001)  # the restart happened; the next failure comes right after
    assert delays == [1, 2, 4, 8, 10, 10]


def test_exponential_delay_merges_failures_while_a_restart_is_pending():
    clock = ManualClock(1000.0)
    strategy = _exponential(clock)
    assert strategy.notify_failure(ERROR)
    clock.advance(0.5)
    assert not strategy.notify_failure(ERROR)  # the same attempt: its backoff keeps counting down
    assert strategy.backoff_time == timedelta(seconds=0.5)
    clock.advance(0.6)
    assert strategy.notify_failure(ERROR)
    assert strategy.backoff_time == timedelta(seconds=2)


def test_exponential_delay_resets_after_the_threshold_without_failures():
    clock = ManualClock(1000.0)
    strategy = _exponential(clock)
    for _ in range(3):
        strategy.notify_failure(ERROR)
        clock.advance(strategy.backoff_time.total_seconds() + 0.001)
    clock.advance(99)  # less than the threshold after the last restart: keeps growing
    strategy.notify_failure(ERROR)
    assert strategy.backoff_time == timedelta(seconds=8)
    clock.advance(8 + 100)
    strategy.notify_failure(ERROR)
    assert strategy.backoff_time == timedelta(seconds=1)


def test_exponential_delay_attempts_before_reset_limit_restarts():
    clock = ManualClock(1000.0)
    strategy = _exponential(clock, attempts_before_reset_backoff=2)
    for _ in range(2):
        strategy.notify_failure(ERROR)
        assert strategy.can_restart()
        clock.advance(strategy.backoff_time.total_seconds() + 0.001)
    strategy.notify_failure(ERROR)
    assert not strategy.can_restart()


def test_exponential_delay_after_a_reset_counts_attempts_again():
    clock = ManualClock(1000.0)
    strategy = _exponential(clock, attempts_before_reset_backoff=1)
    strategy.notify_failure(ERROR)
    assert strategy.can_restart()
    clock.advance(1 + 100)
    strategy.notify_failure(ERROR)
    assert strategy.can_restart()


def test_exponential_delay_jitter_stays_within_its_bounds_and_varies():
    seen = set()
    for seed in range(200):
        clock = ManualClock(1000.0)
        strategy = create_restart_strategy(
            ExponentialDelayConfig(
                initial_backoff=timedelta(seconds=1),
                max_backoff=timedelta(seconds=100),
                backoff_multiplier=2.0,
                jitter_factor=0.25,
            ),  # fmt: skip
            clock=clock,
            rng=random.Random(seed),
        )
        strategy.notify_failure(ERROR)
        clock.advance(strategy.backoff_time.total_seconds() + 0.001)
        strategy.notify_failure(ERROR)
        delay = strategy.backoff_time.total_seconds()
        assert 1.5 <= delay <= 2.5  # 2 s +- 25%
        seen.add(round(delay, 3))
    assert len(seen) > 50


def test_exponential_delay_jitter_never_goes_below_initial_or_above_max():
    clock = ManualClock(1000.0)
    strategy = create_restart_strategy(
        ExponentialDelayConfig(
            initial_backoff=timedelta(seconds=1),
            max_backoff=timedelta(seconds=1.2),
            backoff_multiplier=2.0,
            jitter_factor=1.0,
        ),  # fmt: skip
        clock=clock,
        rng=random.Random(3),
    )
    for _ in range(50):
        strategy.notify_failure(ERROR)
        assert 1.0 <= strategy.backoff_time.total_seconds() <= 1.2
        clock.advance(strategy.backoff_time.total_seconds() + 0.001)
