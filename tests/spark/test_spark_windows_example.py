"""``examples/spark_windows.py`` runs as docs/spark.md documents it: Spark in, engine windows, Spark out to Delta.

Run as a subprocess, like a user runs it (its own local SparkSession); the
example itself compares the Delta table Spark wrote with plain Python and
exits non-zero when they differ.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(1200)]

ROOT = Path(__file__).resolve().parents[2]


def test_spark_windows_example(tmp_path):
    # PYTHONFAULTHANDLER: a native crash (once: -11 at exit, after the example printed its check) prints its stacks
    env = os.environ | {"PYTHONPATH": str(ROOT), "PYSPARK_PYTHON": sys.executable, "PYTHONFAULTHANDLER": "1"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "spark_windows.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=1100,
        env=env,
        cwd=ROOT,
    )
    assert done.returncode == 0, f"exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    assert "matches the plain-Python computation" in done.stdout
    assert (tmp_path / "windows" / "_delta_log").is_dir()
    # The engine's query listener is gone before the JVM stops: no py4j stack traces at exit.
    assert "Py4JException" not in done.stderr, done.stderr[-5000:]
    assert "ERROR StreamingQueryListenerBus" not in done.stderr, done.stderr[-5000:]
