from datetime import timedelta

import pytest

from flinklike_spark import CheckpointingMode, Configuration, ConfigurationError


def test_defaults_follow_flink():
    config = Configuration()
    assert config.pipeline.parallelism == 1
    assert config.pipeline.max_parallelism == 128
    assert config.pipeline.buffer_timeout == timedelta(milliseconds=100)
    assert config.cluster.slots_per_task_manager == 1
    assert config.cluster.redundant_task_managers == 0  # slotmanager.redundant-taskmanager-num: no spares
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
        ("parallelism.default", 0, "0 is out of range; valid: between 1 and 32,768"),
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


# -- ranges: issue 9 item 6 ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        # A negative number of milliseconds ran the job without checkpoints.
        ("execution.checkpointing.interval", -200, "-200 is out of range; valid: between 10 ms and 365 days"),
        # 0 ran checkpoints back to back; Flink's minimum interval is 10 ms.
        ("execution.checkpointing.interval", 0, "0 is out of range; valid: between 10 ms"),
        ("execution.checkpointing.interval", "9 ms", "'9 ms' is out of range"),
        ("execution.checkpointing.interval", float("nan"), "nan is not a duration"),
        ("execution.checkpointing.interval", float("inf"), "inf is not a duration"),
        ("execution.checkpointing.interval", 1e30, "too long for a duration"),
        ("execution.checkpointing.interval", "-200 ms", "cannot parse '-200 ms' as a duration"),
        ("execution.checkpointing.timeout", "400 days", "'400 days' is out of range; valid: between 10 ms"),
        # 1.5 silently became 1 byte.
        ("taskmanager.memory.segment-size", 1.5, "1.5 is not a whole number of bytes"),
        ("taskmanager.memory.segment-size", "0.3kb", "not a whole number of bytes"),
        ("taskmanager.memory.segment-size", 1, "1 is out of range; valid: between 64 bytes and 64 mb"),
        ("local.number-taskmanager", 10000, "10000 is out of range; valid: between 1 and 128"),
        ("slotmanager.redundant-taskmanager-num", -1, "-1 is out of range; valid: between 0 and 128"),
        ("slotmanager.redundant-taskmanager-num", "one", "expected an integer, got 'one'"),
        ("heartbeat.interval", "0 s", "'0 s' is out of range; valid: between 1 ms and 365 days"),
        ("taskmanager.slot.timeout", 0, "0 is out of range"),
        ("execution.checkpointing.tolerable-failed-checkpoints", -1, "-1 is out of range; valid: between 0 and"),
    ],
)
def test_out_of_range_values_name_key_value_and_range(key, value, expected):
    with pytest.raises(ConfigurationError) as info:
        Configuration({key: value})
    assert str(info.value).startswith(f"{key}: "), str(info.value)
    assert expected in str(info.value)


@pytest.mark.parametrize("key", [5, None, ("parallelism", "default")])
def test_non_string_key_is_a_configuration_error(key):
    with pytest.raises(ConfigurationError, match="configuration keys must be strings"):
        Configuration({key: 1})


def test_unset_checkpoint_interval_disables_checkpointing():
    assert Configuration().checkpointing.interval is None
    assert Configuration({"execution.checkpointing.interval": None}).checkpointing.interval is None
    assert Configuration({"execution.checkpointing.interval": ""}).checkpointing.interval is None
    assert Configuration({"execution.checkpointing.interval": 10}).checkpointing.interval == timedelta(milliseconds=10)


def test_memory_sizes_are_whole_bytes():
    assert Configuration({"taskmanager.memory.segment-size": "1.5kb"}).network.segment_size == 1536
    assert Configuration({"taskmanager.memory.segment-size": 4096.0}).network.segment_size == 4096


def _is_number_option(key: str) -> bool:
    default = Configuration.option(key).default
    is_number = isinstance(default, int | timedelta) and not isinstance(default, bool)
    return is_number or key == "execution.checkpointing.interval"  # unset by default


NUMBER_KEYS = [key for key in Configuration.valid_keys() if _is_number_option(key)]


def test_every_number_option_has_a_range():
    assert "execution.checkpointing.interval" in NUMBER_KEYS and "local.number-taskmanager" in NUMBER_KEYS
    for key in NUMBER_KEYS:
        option = Configuration.option(key)
        assert option.minimum is not None and option.maximum is not None, key
        if option.default is not None:
            assert option.minimum <= option.default <= option.maximum, key


@pytest.mark.parametrize("key", NUMBER_KEYS)
def test_every_number_option_rejects_values_outside_its_range(key):
    option = Configuration.option(key)
    step = timedelta(microseconds=1) if isinstance(option.maximum, timedelta) else 1
    for bad in (option.minimum - step, option.maximum + step):
        with pytest.raises(ConfigurationError) as info:
            Configuration({key: bad})
        message = str(info.value)
        assert key in message and repr(bad) in message and option.valid_range() in message, message


def test_task_manager_working_dir_is_a_local_directory_for_task_executor_processes(tmp_path):
    from flinklike_spark._runtime.cluster.local_launchers import private_working_dir

    assert Configuration({}).cluster.task_manager_working_dir is None
    assert Configuration({"process.taskmanager.working-dir": tmp_path}).cluster.task_manager_working_dir == str(
        tmp_path
    )
    with pytest.raises(ConfigurationError, match="must be a local directory, got the URL 's3://b/tm'"):
        _ = Configuration({"process.taskmanager.working-dir": "s3://b/tm"}).cluster
    with pytest.raises(ConfigurationError, match="needs TaskExecutor processes"):
        _ = Configuration({"process.taskmanager.working-dir": str(tmp_path),
                           "flinklike.local.taskmanager-mode": "thread"}).cluster  # fmt: skip
    directory = private_working_dir(str(tmp_path), "taskmanager-0-abc")
    assert directory == str(tmp_path / "tm_taskmanager-0-abc") and (tmp_path / "tm_taskmanager-0-abc" / "tmp").is_dir()
    assert private_working_dir(None, "taskmanager-0-abc") is None


def test_spare_task_executors_parse_from_spark_option_strings():
    assert Configuration({"slotmanager.redundant-taskmanager-num": "2"}).cluster.redundant_task_managers == 2
