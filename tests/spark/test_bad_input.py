"""Bad input fails early, at ``load()``/``start()`` or ``session()``, with a message naming what to fix."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]


def load(spark, tmp_path, **options):
    reader = spark.readStream.format("flinklike").option("execution.checkpointing.dir", str(tmp_path / "job"))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


@pytest.mark.timeout(300)
def test_unknown_option_names_the_key_and_the_valid_ones(spark, tmp_path):
    with pytest.raises(Exception, match=r"unknown configuration key 'execution\.checkpointing\.intervall'") as info:
        load(
            spark, tmp_path, pipeline="tests.spark.pipelines:keyed_count", **{"execution.checkpointing.intervall": "1s"}
        )
    assert "execution.checkpointing.interval" in str(info.value)  # the suggestion


@pytest.mark.timeout(300)
def test_flink_keys_are_case_folded(spark, tmp_path):
    df = load(spark, tmp_path, pipeline="tests.spark.pipelines:keyed_count", **{"taskmanager.numberOfTaskSlots": "2"})
    assert df.columns == ["key", "seq", "count"]


@pytest.mark.timeout(300)
def test_bad_option_value_names_the_valid_values(spark, tmp_path):
    with pytest.raises(Exception, match=r"restart-strategy\.type: invalid value 'sometimes'; valid values"):
        load(spark, tmp_path, pipeline="tests.spark.pipelines:keyed_count", **{"restart-strategy.type": "sometimes"})


@pytest.mark.timeout(300)
def test_missing_pipeline_option(spark, tmp_path):
    with pytest.raises(Exception, match=r"option 'pipeline' is required: 'module:function'"):
        load(spark, tmp_path)


@pytest.mark.timeout(300)
def test_pipeline_that_cannot_be_imported(spark, tmp_path):
    with pytest.raises(Exception, match=r"cannot import module 'no_such_jobs'.*PYTHONPATH"):
        load(spark, tmp_path, pipeline="no_such_jobs:build")
    with pytest.raises(Exception, match=r"module 'tests\.spark\.pipelines' has no attribute 'nope'"):
        load(spark, tmp_path, pipeline="tests.spark.pipelines:nope")
    with pytest.raises(Exception, match=r"tests\.spark\.pipelines\.NUM_KEYS is a int \(4\), not a function"):
        load(spark, tmp_path, pipeline="tests.spark.pipelines:NUM_KEYS")
    with pytest.raises(Exception, match=r"expected 'module:function'"):
        load(spark, tmp_path, pipeline="tests.spark.pipelines")


@pytest.mark.timeout(300)
def test_pipeline_returning_the_wrong_type(spark, tmp_path):
    with pytest.raises(Exception, match=r"returned str; it must return the DataStream"):
        load(spark, tmp_path, pipeline="tests.spark.pipelines:not_a_stream")


@pytest.mark.timeout(300)
def test_pipeline_without_schema_needs_one_from_spark(spark, tmp_path):
    with pytest.raises(Exception, match=r"without a declared schema: pass output_type="):
        load(spark, tmp_path, pipeline="tests.spark.pipelines:no_schema")
    df = (
        spark.readStream.format("flinklike")
        .schema("key long, seq long")
        .option("pipeline", "tests.spark.pipelines:no_schema")
        .option("execution.checkpointing.dir", str(tmp_path / "job"))
        .load()
    )
    assert df.columns == ["key", "seq"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_rows_not_matching_the_declared_schema_fail_the_query(spark, tmp_path):
    df = load(
        spark, tmp_path, pipeline="tests.spark.pipelines:bad_rows", **{"execution.checkpointing.interval": "200 ms"}
    )
    query = df.writeStream.format("noop").trigger(processingTime="500 milliseconds").start()
    try:
        with pytest.raises(Exception, match=r"count.*many|many.*count|do not fit the declared schema"):
            query.awaitTermination(400)
            raise AssertionError("the query did not fail within 400 s")
    finally:
        query.stop()


def run_session(code: str, env: dict, timeout: int = 300) -> subprocess.CompletedProcess:
    script = textwrap.dedent(
        """
        from flinklike_spark.spark import SparkSetupError, session
        try:
            {code}
        except SparkSetupError as exc:
            print("SparkSetupError:", exc)
        """
    ).format(code=code)
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT
    )


def base_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    return env | {"PYTHONPATH": str(ROOT)}


@pytest.mark.timeout(120)
def test_missing_java_is_named_before_spark_starts(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    env = base_env()
    env.pop("JAVA_HOME", None)
    env["PATH"] = str(bin_dir)  # no java on it
    done = run_session("session()", env)
    assert "SparkSetupError: Spark needs Java 17 and none was found" in done.stdout, done.stdout + done.stderr


@pytest.mark.timeout(120)
def test_pyspark_python_without_the_project(tmp_path):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True, timeout=60)
    bare = tmp_path / "bare" / "bin" / "python"
    done = run_session("session()", base_env() | {"PYSPARK_PYTHON": str(bare)})
    assert f"SparkSetupError: PYSPARK_PYTHON='{bare}' cannot import the project" in done.stdout, (
        done.stdout + done.stderr
    )
    assert sys.executable in done.stdout


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.skipif(shutil.which("java") is None and "JAVA_HOME" not in os.environ, reason="needs Java")
def test_delta_jar_that_cannot_be_resolved(tmp_path):
    package = "io.delta:delta-spark_4.2_2.13:0.0.1-no-such-version"
    done = run_session(
        f"session(delta_package={package!r}, config={{'spark.jars.ivy': {str(tmp_path / 'ivy')!r}}})",
        base_env(),
        timeout=360,
    )
    # The JVM did not start (the package cannot be resolved): the error says so and names the package.
    assert "SparkSetupError: Spark did not start (" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"could not resolve package {package!r}" in done.stdout, done.stdout[-2000:]
