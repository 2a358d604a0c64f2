"""``session()`` resolves its Spark packages from Maven Central only and reports the cause Spark gave.

Each runs in a subprocess, a JVM of its own started as a user's program
starts it: a session resolving a small package into an empty Ivy directory
(so resolution really goes to the network), and a session whose
``spark.submit.pyFiles`` zip does not exist (Spark adds it when its JVM starts).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from flinklike_spark.spark import spark_session
from flinklike_spark.spark.packages import package_jars

ROOT = Path(__file__).resolve().parents[2]

#: A jar with a parent POM and a BOM, whose jar lookups Spark's default chain sends to every repository.
PROBE_PACKAGE = "org.slf4j:slf4j-api:2.0.13"

PY_FILES_SCRIPT = textwrap.dedent(
    """
    import sys
    from flinklike_spark.spark import SparkSetupError, session

    try:
        session("py-files", config={"spark.ui.enabled": "false", "spark.submit.pyFiles": sys.argv[1]})
    except SparkSetupError as exc:
        print("SETUP ERROR", exc, flush=True)
    """
)


def _run(script: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = os.environ | {"PYTHONPATH": str(ROOT), "PYSPARK_PYTHON": sys.executable}
    env.pop("DEFAULT_ARTIFACT_REPOSITORY", None)
    done = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=500, env=env, cwd=cwd
    )
    assert done.returncode == 0, f"exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return done


def test_the_ivy_settings_name_maven_central_as_the_only_resolver():
    root = ET.parse(spark_session.IVY_SETTINGS).getroot()
    resolvers = list(root.find("resolvers"))
    assert [(r.tag, r.get("name"), r.get("root")) for r in resolvers] == [
        ("ibiblio", "central", "https://repo1.maven.org/maven2/")
    ]
    assert root.find("settings").get("defaultResolver") == "central"


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_packages_resolve_from_maven_central_only(tmp_path, caplog, monkeypatch):
    """session() resolves its package once, in a spark-submit of its own with the project's Ivy settings."""
    monkeypatch.delenv("DEFAULT_ARTIFACT_REPOSITORY", raising=False)
    settings = {"spark.jars.ivySettings": spark_session.IVY_SETTINGS, "spark.jars.ivy": str(tmp_path / "ivy")}
    with caplog.at_level(logging.DEBUG, logger="flinklike_spark.spark.packages"):
        jars = package_jars(PROBE_PACKAGE, settings, manifest=tmp_path / "packages.json", announce=lambda _: None)
    output = caplog.text
    assert jars == [str(tmp_path / "ivy" / "jars" / "org.slf4j_slf4j-api-2.0.13.jar")], output[-3000:]
    assert f":: loading settings :: file = {spark_session.IVY_SETTINGS}" in output, output[-3000:]
    assert "spark-packages" not in output, output[-5000:]
    assert "proxy server" not in output, output[-5000:]


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_missing_py_files_zip_is_reported_as_the_cause_spark_gave(tmp_path):
    missing = tmp_path / "not-built" / "flinklike.zip"
    done = _run(PY_FILES_SCRIPT, str(missing), cwd=tmp_path)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("SETUP ERROR")), None)
    assert line is not None, done.stdout + done.stderr[-3000:]
    assert line.startswith(f"SETUP ERROR Spark did not start: java.io.FileNotFoundException: File file:{missing} "
                           f"does not exist"), line  # fmt: skip
    assert "package" not in line, line  # the Delta package is not the cause
