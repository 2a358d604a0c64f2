"""Bad programs, targets and configuration values fail with messages that name the value and the fix."""

from __future__ import annotations

import pytest

from connectors import CollectSink
from flinklike_spark import StreamExecutionEnvironment
from flinklike_spark.cli import main
from flinklike_spark.config import Configuration
from flinklike_spark.errors import ConfigurationError

pytestmark = pytest.mark.timeout(60)


def test_run_of_a_missing_file_is_a_usage_error(capsys):
    assert main(["run", "--no-progress", "/nonexistent/job.py"]) == 2
    assert "no such file: '/nonexistent/job.py'" in capsys.readouterr().err


def test_run_of_a_missing_module_or_a_non_function_is_a_usage_error(capsys, tmp_path, monkeypatch):
    (tmp_path / "jobs_module_for_cli.py").write_text("NOT_A_FUNCTION = 42\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["run", "--no-progress", "no_such_module_for_cli:build"]) == 2
    assert "no module 'no_such_module_for_cli'" in capsys.readouterr().err
    assert main(["run", "--no-progress", "jobs_module_for_cli:build"]) == 2
    assert "has no attribute 'build'" in capsys.readouterr().err
    assert main(["run", "--no-progress", "jobs_module_for_cli:NOT_A_FUNCTION"]) == 2
    assert "has int 'NOT_A_FUNCTION', not a function" in capsys.readouterr().err


@pytest.mark.parametrize("key", ["execution.checkpointing.dir", "execution.state-recovery.path"])
def test_a_location_must_be_a_path_or_url(key, tmp_path):
    with pytest.raises(ConfigurationError, match=rf"{key}: expected a path or URL string .* got int 42"):
        Configuration({key: 42})
    assert Configuration({key: tmp_path}).get(key) == str(tmp_path)


def test_parallelism_above_max_parallelism_names_both_keys():
    env = StreamExecutionEnvironment.get_execution_environment(
        {"parallelism.default": 4, "pipeline.max-parallelism": 2, "flinklike.local.taskmanager-mode": "thread"}
    )
    env.from_collection([{"key": 1}]).key_by("key").map(lambda r: r).sink_to(CollectSink("out"))
    with pytest.raises(
        ConfigurationError, match=r"parallelism 4 \(parallelism\.default\), above pipeline\.max-parallelism 2"
    ):
        env.execute("too parallel")
