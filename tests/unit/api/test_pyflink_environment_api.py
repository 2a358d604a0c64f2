"""PyFlink's environment, stream and job-client methods that PyFlink programs call."""

from __future__ import annotations

import json
import sys

import pytest

from connectors import CollectSink
from flinklike_spark import CheckpointingMode, StreamExecutionEnvironment, Types
from flinklike_spark.errors import ConfigurationError, InvalidProgramError

pytestmark = pytest.mark.timeout(60)


def env(**config):
    return StreamExecutionEnvironment.get_execution_environment(
        {"flinklike.local.taskmanager-mode": "thread", "parallelism.default": 2} | config
    )


def test_environment_getters():
    e = env(**{"pipeline.max-parallelism": 64})
    assert e.get_max_parallelism() == 64
    assert e.is_chaining_enabled()
    e.disable_operator_chaining()
    assert not e.is_chaining_enabled()
    assert e.get_checkpointing_mode() == CheckpointingMode.AT_LEAST_ONCE  # Flink 2: while checkpointing is off
    e.enable_checkpointing(1000)
    assert e.get_checkpointing_mode() == CheckpointingMode.EXACTLY_ONCE
    assert env().get_max_parallelism() == -1  # unset, as in Flink


def test_add_python_file_makes_a_module_importable(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    (tmp_path / "my_udfs_for_add_python_file.py").write_text("def double(x):\n    return 2 * x\n")
    e = env()
    e.add_python_file(str(tmp_path / "my_udfs_for_add_python_file.py"))
    import my_udfs_for_add_python_file

    assert my_udfs_for_add_python_file.double(2) == 4
    assert e.config.get("python.files") == str(tmp_path / "my_udfs_for_add_python_file.py")
    with pytest.raises(ConfigurationError, match="does not exist"):
        e.add_python_file(str(tmp_path / "missing.py"))


def test_stream_names_and_the_execution_plan():
    e = env()
    source = e.from_collection([(1, "a")], type_info=Types.TUPLE([Types.INT(), Types.STRING()])).name("numbers")
    assert source.get_name() == "numbers"
    mapped = source.key_by(lambda r: r[1]).map(lambda r: r).name("identity").set_parallelism(1)
    mapped.sink_to(CollectSink("plan"))
    plan = json.loads(e.get_execution_plan())
    by_name = {node["type"]: node for node in plan["nodes"]}
    assert by_name["Source: numbers"]["pact"] == "Data Source"  # Flink's graph calls a source so
    [edge] = by_name["identity"]["predecessors"]
    assert edge["id"] == by_name["Source: numbers"]["id"] and edge["ship_strategy"] == "HASH"
    assert by_name["identity"]["parallelism"] == 1
    assert any(node["pact"] == "Data Sink" for node in plan["nodes"])


@pytest.mark.parametrize("method", ["rebalance", "forward", "broadcast", "shuffle", "rescale"])
def test_repartitioning_a_keyed_stream_is_refused_as_in_pyflink(method):
    keyed = env().from_collection([{"k": 1}]).key_by("k")
    with pytest.raises(InvalidProgramError, match="Cannot override partitioning for KeyedStream"):
        getattr(keyed, method)()
