"""Spark's package resolution is done once per machine and is quiet after that (issue 39 item 9).

A session used to print about 45 lines of Ivy resolution at every start although delta-spark's jars were
cached. Now the first resolution runs in a spark-submit of its own, one line per downloaded jar reaches the
user, and later sessions start from the recorded jars: no Ivy line at all, and Delta still works.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from flinklike_spark.spark.packages import downloads_in, package_jars
from flinklike_spark.spark.spark_session import DELTA_SPARK_PACKAGE, IVY_SETTINGS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

# Lines as Ivy 2.5 prints them through spark-submit on a first run (abridged).
IVY_FIRST_RUN = """\
:: loading settings :: file = /x/ivysettings.xml
:: resolving dependencies :: org.apache.spark#spark-submit-parent-1;1.0
\tconfs: [default]
\tfound io.delta#delta-spark_4.2_2.13;4.4.0 in central
\tfound io.delta#delta-storage;4.4.0 in central
downloading https://repo1.maven.org/maven2/io/delta/delta-spark_4.2_2.13/4.4.0/delta-spark_4.2_2.13-4.4.0.jar ...
\t[SUCCESSFUL ] io.delta#delta-spark_4.2_2.13;4.4.0!delta-spark_4.2_2.13.jar (1234ms)
downloading https://repo1.maven.org/maven2/io/delta/delta-storage/4.4.0/delta-storage-4.4.0.jar ...
\t[SUCCESSFUL ] io.delta#delta-storage;4.4.0!delta-storage.jar (12ms)
:: resolution report :: resolve 1376ms :: artifacts dl 32ms
"""

SESSION = textwrap.dedent(
    """
    from flinklike_spark.spark import session
    spark = session()
    spark.sql("CREATE TABLE delta.`{table}` (id INT) USING delta")
    print("rows", spark.sql("SELECT count(*) AS n FROM delta.`{table}`").collect()[0].n)
    spark.stop()
    """
)


def test_one_line_per_downloaded_jar():
    assert downloads_in(IVY_FIRST_RUN) == ["delta-spark_4.2_2.13-4.4.0.jar", "delta-storage-4.4.0.jar"]


def test_a_resolution_is_recorded_and_reused(tmp_path):
    manifest = tmp_path / "packages.json"
    announced: list[str] = []
    settings = {"spark.jars.ivySettings": IVY_SETTINGS}
    jars = package_jars(DELTA_SPARK_PACKAGE, settings, manifest=manifest, announce=announced.append)
    assert jars and all(os.path.isfile(j) for j in jars)
    assert any("delta-spark" in os.path.basename(j) for j in jars)
    assert len(announced) <= len(jars)  # at most one line per jar (none when Ivy's cache had them)
    assert manifest.is_file()
    again = package_jars(DELTA_SPARK_PACKAGE, settings, manifest=manifest, announce=announced.append)
    assert again == jars


def test_a_session_prints_no_ivy_resolution(tmp_path):
    """Before: ~45 lines (":: resolving dependencies", "found ... in central", the resolution report)."""
    env = os.environ | {"PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(
        [sys.executable, "-c", SESSION.format(table=tmp_path / "t")], capture_output=True, text=True, timeout=300,
        env=env, cwd=tmp_path,
    )  # fmt: skip
    assert "rows 0" in done.stdout, done.stderr[-3000:]  # Delta works from the recorded jars
    lines = (done.stdout + done.stderr).splitlines()
    ivy = [line for line in lines if line.startswith(":: ") or " in central" in line or "resolution report" in line]
    assert ivy == [], ivy
