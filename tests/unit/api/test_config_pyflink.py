"""PyFlink's Configuration calls (pyflink.common.Configuration) and Flink's deprecated keys."""

import logging
from datetime import timedelta

import pytest

from flinklike_spark import Configuration, ConfigurationError, StreamExecutionEnvironment
from flinklike_spark.common import Configuration as CommonConfiguration


def test_pyflink_setters_and_getters():
    # PyFlink's exact calls: each setter returns None and changes the object in place.
    config = Configuration()
    assert config.set_string("execution.checkpointing.interval", "500 ms") is None
    config.set_integer("parallelism.default", 3)
    config.set_boolean("execution.checkpointing.unaligned.enabled", True)
    config.set_float("state.backend.rocksdb.memory.write-buffer-ratio", 0.25)
    assert config.get_string("execution.checkpointing.interval", "") == "500 ms"
    assert config.get_integer("parallelism.default", 1) == 3
    assert config.get_boolean("execution.checkpointing.unaligned.enabled", False) is True
    assert config.get_float("state.backend.rocksdb.memory.write-buffer-ratio", 0.5) == 0.25
    assert config.get_string("pipeline.name", "fallback") == "fallback"  # not set: the caller's default
    assert config.contains_key("parallelism.default") and not config.contains_key("pipeline.name")
    assert config.key_set() == {
        "execution.checkpointing.interval",
        "parallelism.default",
        "execution.checkpointing.unaligned.enabled",
        "state.backend.rocksdb.memory.write-buffer-ratio",
    }
    # The typed views see the changes.
    assert config.checkpointing.interval == timedelta(milliseconds=500)
    assert config.pipeline.parallelism == 3
    # to_dict's strings parse back to the same configuration.
    assert Configuration(config.to_dict()) == config
    target = {"other": "x"}
    config.add_all_to_dict(target)
    assert target["parallelism.default"] == "3" and target["other"] == "x"
    assert config.remove_config("parallelism.default") is True
    assert config.remove_config("parallelism.default") is False
    assert config.pipeline.parallelism == 1


def test_pyflink_copy_and_add_all():
    base = CommonConfiguration()
    base.set_string("pipeline.name", "job")
    copy = CommonConfiguration(base)  # PyFlink's Configuration(other)
    copy.set_string("pipeline.name", "copy")
    assert base.get_string("pipeline.name", None) == "job"
    merged = Configuration()
    merged.add_all(copy)
    assert merged.get_string("pipeline.name", None) == "copy"


def test_setters_check_key_and_value_at_the_call():
    config = Configuration()
    with pytest.raises(ConfigurationError, match=r"'parallelism\.defualt'.*did you mean 'parallelism\.default'"):
        config.set_string("parallelism.defualt", "2")
    with pytest.raises(ConfigurationError, match="parallelism.default"):
        config.set_integer("parallelism.default", 0)
    assert config.key_set() == set()  # nothing half-set


def test_environment_takes_a_copy_of_a_pyflink_configuration():
    config = Configuration()
    config.set_integer("parallelism.default", 2)
    env = StreamExecutionEnvironment.get_execution_environment(config)
    config.set_integer("parallelism.default", 5)
    assert env.get_parallelism() == 2


def test_flink_1x_savepoint_key_is_read_as_the_new_key_with_a_warning(caplog, monkeypatch):
    from flinklike_spark import config_options

    monkeypatch.setattr(config_options, "_warned_deprecated", set())  # warned once per process: maybe before this
    with caplog.at_level(logging.WARNING, logger="flinklike_spark.config_options"):
        config = Configuration({"execution.savepoint.path": "/tmp/savepoints/sp-1"})
        Configuration({"state.checkpoints.dir": "/tmp/checkpoints"})
    assert config.checkpointing.recovery_path == "/tmp/savepoints/sp-1"
    assert "execution.savepoint.path" in caplog.text and "execution.state-recovery.path" in caplog.text
    # The new key wins when both are given, as in Flink.
    both = Configuration({"execution.savepoint.path": "/old", "execution.state-recovery.path": "/new"})
    assert both.checkpointing.recovery_path == "/new"
    assert Configuration({"state.backend": "rocksdb"}).get("state.backend.type").value == "rocksdb"


def test_unknown_key_names_close_matches_not_every_key():
    with pytest.raises(ConfigurationError) as info:
        Configuration({"execution.checkpointing.intervall": "1 s"})
    message = str(info.value)
    assert "did you mean 'execution.checkpointing.interval'" in message
    assert "docs/configuration.md" in message
    assert "taskmanager.numberOfTaskSlots" not in message  # no dump of every valid key
    assert len(message) < 400
