from datetime import timedelta

import pytest

from flinklike_spark import CheckpointingMode, Configuration, ConfigurationError


def test_defaults_follow_flink():
    config = Configuration()
    assert config.pipeline.parallelism == 1
    assert config.pipeline.max_parallelism == 128
    assert config.pipeline.buffer_timeout == timedelta(milliseconds=100)
    assert config.cluster.slots_per_task_manager == 1
    assert config.network.segment_size == 32 * 1024
    assert config.network.buffers_per_channel == 2
    assert config.network.floating_buffers_per_gate == 8
    assert config.network.max_buffers_per_channel == 10
    assert config.checkpointing.mode is CheckpointingMode.EXACTLY_ONCE
    assert config.checkpointing.unaligned is False
    assert config.checkpointing.timeout == timedelta(minutes=10)


def test_string_values_are_parsed_like_spark_options():
    config = Configuration(
        {
            "parallelism.default": "4",
            "execution.checkpointing.interval": "1 s",
            "execution.checkpointing.unaligned.enabled": "TRUE",
            "execution.checkpointing.mode": "at-least-once",
            "taskmanager.memory.segment-size": "64kb",
        }
    )
    assert config.pipeline.parallelism == 4
    assert config.checkpointing.interval == timedelta(seconds=1)
    assert config.checkpointing.unaligned is True
    assert config.checkpointing.mode is CheckpointingMode.AT_LEAST_ONCE
    assert config.network.segment_size == 64 * 1024


def test_unknown_key_names_the_key_and_suggests_valid_ones():
    with pytest.raises(ConfigurationError) as info:
        Configuration({"parallelism.defualt": 2})
    message = str(info.value)
    assert "'parallelism.defualt'" in message
    assert "did you mean 'parallelism.default'" in message


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("parallelism.default", "two", "expected an integer"),
        ("parallelism.default", 0, "below the minimum"),
        ("execution.checkpointing.mode", "twice", "exactly-once, at-least-once"),
        ("execution.buffer-timeout.interval", "soon", "cannot parse 'soon' as a duration"),
        ("execution.checkpointing.unaligned.enabled", "maybe", "expected true or false"),
        ("flinklike.local.taskmanager-mode", "cloud", "process, thread"),
    ],
)
def test_bad_values_name_value_and_valid_choices(key, value, expected):
    with pytest.raises(ConfigurationError, match=expected):
        Configuration({key: value})


def test_cross_key_validation():
    with pytest.raises(ConfigurationError, match="heartbeat.timeout"):
        Configuration({"heartbeat.interval": "10 s", "heartbeat.timeout": "5 s"})


def test_configuration_is_immutable_and_with_values_copies():
    base = Configuration({"parallelism.default": 2})
    changed = base.with_values({"parallelism.default": 3})
    assert base.pipeline.parallelism == 2
    assert changed.pipeline.parallelism == 3
    with pytest.raises(TypeError):
        base["parallelism.default"] = 5  # type: ignore[index]
