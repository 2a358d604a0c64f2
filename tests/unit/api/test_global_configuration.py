"""$FLINK_CONF_DIR/config.yaml: the values an environment starts from, as in Flink 2.x."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from flinklike_spark import Configuration, StreamExecutionEnvironment
from flinklike_spark.errors import ConfigurationError
from flinklike_spark.global_configuration import load_configuration

pytestmark = pytest.mark.timeout(30)

NESTED = """\
parallelism:
  default: 3
execution:
  checkpointing:
    interval: 10s
    unaligned.enabled: true
jobmanager.memory.process.size: 1600m   # a Flink cluster's key this engine has no use for
"""


@pytest.fixture
def conf_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("FLINK_CONF_DIR", str(tmp_path))
    return tmp_path


def test_without_flink_conf_dir_nothing_is_loaded(monkeypatch):
    monkeypatch.delenv("FLINK_CONF_DIR", raising=False)
    assert load_configuration() == {}
    assert StreamExecutionEnvironment.get_execution_environment().get_parallelism() == 1


def test_nested_and_dotted_keys_are_the_same_and_foreign_keys_are_skipped(conf_dir, caplog):
    (conf_dir / "config.yaml").write_text(NESTED)
    with caplog.at_level(logging.INFO, logger="flinklike_spark.global_configuration"):
        values = load_configuration()
    assert values == {"parallelism.default": 3, "execution.checkpointing.interval": "10s",
                      "execution.checkpointing.unaligned.enabled": True}  # fmt: skip
    assert "jobmanager.memory.process.size" in caplog.text
    env = StreamExecutionEnvironment.get_execution_environment()
    assert env.get_parallelism() == 3
    assert env.config.checkpointing.interval == timedelta(seconds=10)


@pytest.mark.parametrize("as_configuration", [False, True])
def test_the_programs_values_override_the_file(conf_dir, as_configuration):
    (conf_dir / "config.yaml").write_text(NESTED)
    values = {"parallelism.default": 5}
    env = StreamExecutionEnvironment.get_execution_environment(Configuration(values) if as_configuration else values)
    assert env.get_parallelism() == 5
    assert env.config.checkpointing.interval == timedelta(seconds=10)  # not set by the program: from the file


def test_an_empty_file_sets_nothing(conf_dir):
    (conf_dir / "config.yaml").write_text("# nothing yet\n")
    assert load_configuration() == {}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("parallelism.default: many\n", ["config.yaml", "parallelism.default", "many"]),
        ("parallelism: [1, 2\n", ["config.yaml", "not valid YAML"]),
        ("- parallelism.default: 2\n", ["config.yaml", "must be a mapping", "list"]),
        ("parallelism.default: 2\nparallelism:\n  default: 3\n", ["config.yaml", "'parallelism.default'", "twice"]),
        ("1: 2\n", ["config.yaml", "keys must be strings", "int 1"]),
    ],
)
def test_a_bad_file_names_itself_and_the_problem(conf_dir, text, expected):
    (conf_dir / "config.yaml").write_text(text)
    with pytest.raises(ConfigurationError) as info:
        StreamExecutionEnvironment.get_execution_environment()
    for part in expected:
        assert part in str(info.value)


def test_a_conf_dir_without_config_yaml_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("FLINK_CONF_DIR", str(tmp_path / "conf"))
    with pytest.raises(ConfigurationError) as info:
        load_configuration()
    assert "FLINK_CONF_DIR" in str(info.value) and "config.yaml" in str(info.value)
    assert str(tmp_path / "conf") in str(info.value)
