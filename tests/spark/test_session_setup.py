"""``session()`` resolves its Spark packages from Maven Central only and reports the cause Spark gave.

Each runs in a subprocess, a JVM of its own started as a user's program
starts it: a session resolving a small package into an empty Ivy directory
(so resolution really goes to the network), and a session whose
``spark.submit.pyFiles`` zip does not exist (Spark adds it when its JVM starts).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from flinklike_spark.spark import spark_session

ROOT = Path(__file__).resolve().parents[2]

#: A jar with a parent POM and a BOM, whose jar lookups Spark's default chain sends to every repository.
PROBE_PACKAGE = "org.slf4j:slf4j-api:2.0.13"

IVY_SCRIPT = textwrap.dedent(
    """
    import sys
    from flinklike_spark.spark import session

    ivy, package = sys.argv[1:3]
    spark = session("ivy-probe", delta_package=package, config={"spark.ui.enabled": "false", "spark.jars.ivy": ivy})
    print("ivySettings", spark.conf.get("spark.jars.ivySettings"), flush=True)
    spark.stop()
    """
)

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
def test_packages_resolve_from_maven_central_only(tmp_path):
    tmp = tmp_path
    done = _run(IVY_SCRIPT, str(tmp / "ivy"), PROBE_PACKAGE, cwd=tmp)
    output = done.stdout + done.stderr
    assert f"ivySettings {spark_session.IVY_SETTINGS}" in done.stdout, done.stdout
    assert f":: loading settings :: file = {spark_session.IVY_SETTINGS}" in output, output[-3000:]
    assert (tmp / "ivy" / "jars" / "org.slf4j_slf4j-api-2.0.13.jar").is_file(), output[-3000:]
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
