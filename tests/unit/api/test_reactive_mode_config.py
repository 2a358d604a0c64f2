"""``scheduler-mode`` and the adaptive scheduler's resource timeouts: Flink's keys, defaults and checks."""

from datetime import timedelta

import pytest

from flinklike_spark import Configuration, ConfigurationError
from flinklike_spark.config import FailoverOptions, SchedulerMode, SchedulerType


def test_defaults_follow_flink():
    options = Configuration().failover
    assert options.scheduler is SchedulerType.DEFAULT and options.scheduler_mode is None and not options.reactive
    assert options.resource_wait_timeout == timedelta(minutes=5)
    assert options.resource_stabilization_timeout == timedelta(seconds=10)


def test_reactive_mode_forces_the_adaptive_scheduler_and_waits_for_ever_by_default():
    for scheduler in ("default", "adaptive", None):
        values = {"scheduler-mode": "REACTIVE"} | ({"jobmanager.scheduler": scheduler} if scheduler else {})
        options = Configuration(values).failover
        assert options.scheduler is SchedulerType.ADAPTIVE and options.scheduler_mode is SchedulerMode.REACTIVE
        assert options.reactive and options.resource_wait_timeout is None  # Flink: -1 under reactive mode


def test_a_resource_wait_timeout_that_is_set_wins_and_a_negative_one_waits_for_ever():
    config = Configuration(
        {"scheduler-mode": "reactive", "jobmanager.adaptive-scheduler.resource-wait-timeout": "1 min"}
    )
    assert config.failover.resource_wait_timeout == timedelta(minutes=1)
    for forever in (-1, "-1 s", timedelta(seconds=-3)):
        config = Configuration({"jobmanager.adaptive-scheduler.resource-wait-timeout": forever})
        assert config.failover.resource_wait_timeout is None
    config = Configuration({"jobmanager.adaptive-scheduler.resource-stabilization-timeout": "250 ms"})
    assert config.failover.resource_stabilization_timeout == timedelta(milliseconds=250)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("scheduler-mode", "elastic", "scheduler-mode: invalid value 'elastic'; valid values: reactive"),
        (
            "jobmanager.adaptive-scheduler.resource-stabilization-timeout",
            timedelta(seconds=-1),
            "out of range; valid: between 0 ms",
        ),
        ("jobmanager.adaptive-scheduler.resource-stabilization-timeout", "soon", "cannot parse 'soon' as a duration"),
        ("jobmanager.adaptive-scheduler.resource-wait-timeout", "400 days", "out of range; valid: between"),
    ],
)
def test_bad_values_are_refused_naming_the_key_and_what_is_valid(key, value, message):
    with pytest.raises(ConfigurationError, match=message) as info:
        Configuration({key: value})
    assert key in str(info.value)


def test_the_options_object_checks_what_spans_fields():
    with pytest.raises(ConfigurationError, match="scheduler-mode: reactive needs jobmanager.scheduler: adaptive"):
        FailoverOptions(restart_strategy=Configuration().failover.restart_strategy,
                        failover_strategy=Configuration().failover.failover_strategy,
                        scheduler=SchedulerType.DEFAULT, scheduler_mode=SchedulerMode.REACTIVE)  # fmt: skip
    with pytest.raises(ConfigurationError, match="None \\(wait for ever\\) or not negative"):
        FailoverOptions(restart_strategy=Configuration().failover.restart_strategy,
                        failover_strategy=Configuration().failover.failover_strategy,
                        scheduler=SchedulerType.ADAPTIVE, resource_wait_timeout=timedelta(seconds=-1))  # fmt: skip


def test_the_keys_round_trip_through_their_string_form():
    config = Configuration({"scheduler-mode": "reactive", "jobmanager.adaptive-scheduler.resource-wait-timeout": -1})
    assert Configuration(config.to_dict()).failover == config.failover
