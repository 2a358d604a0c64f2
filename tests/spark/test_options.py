"""Spark options -> typed bridge options (no Spark needed: options arrive as a dict of strings)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from flinklike_spark.config import fold_key_case
from flinklike_spark.errors import ConfigurationError
from flinklike_spark.spark.options import ReadOptions, WriteOptions


def test_fold_key_case_restores_flinks_spelling_and_keeps_unknown_keys():
    assert fold_key_case({"taskmanager.numberoftaskslots": "2", "no.such.key": "x"}) == {
        "taskmanager.numberOfTaskSlots": "2",
        "no.such.key": "x",
    }


def test_read_options_from_lower_cased_spark_options():
    options = ReadOptions.parse({
        "pipeline": "jobs:build", "path": "/tmp/j", "maxcheckpointspertrigger": "4",
        "taskmanager.numberoftaskslots": "2", "checkpointlocation": "/tmp/spark",
    })  # fmt: skip
    assert options.pipeline == "jobs:build" and options.directory == "/tmp/j"
    assert options.max_checkpoints_per_trigger == 4
    assert options.config.cluster.slots_per_task_manager == 2
    assert options.config.checkpointing.interval == timedelta(seconds=1)  # the bridge's default
    assert options.config.checkpointing.directory == "/tmp/j"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"pipeline": "a:b"}, "no job directory; set option 'execution.checkpointing.dir'"),
        ({"pipeline": "a:b", "path": "/j", "maxcheckpointspertrigger": "0"}, "maxCheckpointsPerTrigger must be"),
        ({"pipeline": "a:b", "path": "/j", "parallelism.defualt": "2"}, "did you mean 'parallelism.default'"),
        ({"pipeline": "a:b", "path": "/a", "execution.checkpointing.dir": "/b"}, "differ; give one of them"),
    ],
)
def test_bad_read_options(options, message):
    with pytest.raises(ConfigurationError, match=message):
        ReadOptions.parse(options)


def test_read_options_without_a_pipeline_read_a_job_run_by_a_writer():
    assert ReadOptions.parse({"path": "/j"}).pipeline is None


def test_write_options():
    assert WriteOptions.parse({"execution.checkpointing.dir": "/j", "queryid": "q"}).query_id == "q"
    assert WriteOptions.parse({"path": "/j"}).query_id == "default"
    with pytest.raises(ConfigurationError, match=r"unknown options \['parallelism.default'\]"):
        WriteOptions.parse({"path": "/j", "parallelism.default": "2"})
    assert WriteOptions.parse({"path": "/j"}).pipeline is None


def test_write_options_with_a_pipeline_take_flink_keys():
    options = WriteOptions.parse({
        "path": "/j", "pipeline": "jobs:enrich", "queryid": "q", "parallelism.default": "2",
        "taskmanager.numberoftaskslots": "2", "checkpointlocation": "/tmp/spark",
    })  # fmt: skip
    assert options.pipeline == "jobs:enrich" and options.query_id == "q"
    assert options.checkpoint_location == "/tmp/spark"
    assert options.config.cluster.slots_per_task_manager == 2
    assert options.config.checkpointing.interval == timedelta(seconds=1)
    assert options.flink_options["parallelism.default"] == "2"
    assert "checkpointLocation" not in options.flink_options and "checkpointlocation" not in options.flink_options
    with pytest.raises(ConfigurationError, match="did you mean 'parallelism.default'"):
        WriteOptions.parse({"path": "/j", "pipeline": "a:b", "parallelism.defualt": "2"})
