"""Option ``pipeline.args`` (issue 39 item 10): a pipeline's own parameters as a JSON object, handed to the
pipeline function as keyword arguments, and ``.load(path)`` naming the job's directory."""

from __future__ import annotations

import json

import pytest

from flinklike_spark.errors import ConfigurationError
from flinklike_spark.spark.options import ReadOptions, WriteOptions

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(600)]


def test_pipeline_args_reach_the_pipeline_function(spark, tmp_path):
    query = (
        spark.readStream.format("flinklike")
        .option("pipeline", "tests.spark.pipelines:bounded_count_of")
        .option("pipeline.args", json.dumps({"records_per_key": 7, "keys": 3}))
        .load(str(tmp_path / "job"))
        .writeStream.format("delta")
        .option("checkpointLocation", str(tmp_path / "spark"))
        .trigger(availableNow=True)
        .start(str(tmp_path / "out"))
    )
    query.awaitTermination(300)
    rows = spark.read.format("delta").load(str(tmp_path / "out")).collect()
    per_key: dict[int, list[int]] = {}
    for row in sorted(rows, key=lambda r: (r.key, r["count"])):
        per_key.setdefault(row.key, []).append(row["count"])
    assert per_key == {k: list(range(1, 8)) for k in range(3)}


def test_pipeline_args_the_function_does_not_take_are_refused_naming_its_signature(spark, tmp_path):
    reader = (
        spark.readStream.format("flinklike")
        .option("pipeline", "tests.spark.pipelines:bounded_count_of")
        .option("pipeline.args", json.dumps({"records_per_keys": 7}))
    )
    with pytest.raises(Exception, match=r"records_per_keys") as info:
        reader.load(str(tmp_path / "job"))  # Spark asks the pipeline for its schema here
    assert "bounded_count_of(env" in str(info.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [("{bad", "is not JSON"), ("[1, 2]", "is a JSON list; give a JSON object")],
)
def test_pipeline_args_must_be_a_json_object(text, message):
    options = {"pipeline": "m:f", "pipeline.args": text, "path": "/tmp/job"}
    with pytest.raises(ConfigurationError, match=message):
        ReadOptions.parse(options)
    with pytest.raises(ConfigurationError, match=message):
        WriteOptions.parse(options)
    with pytest.raises(ConfigurationError, match="without option pipeline"):
        WriteOptions.parse({"pipeline.args": "{}", "path": "/tmp/job"})
