"""A program that ran streaming queries ends without the engine's listener in Spark's way.

The engine's query listener (:mod:`flinklike_spark.spark.writer_jobs`) is a
Python object the JVM calls through py4j. When the interpreter exits, the JVM
stops only after this process closed its stdin, and query events still queued
then reach a callback server that is gone: ``ERROR StreamingQueryListenerBus``
with a ``Py4JException`` stack trace per event (``examples/spark_windows.py``
ended so). The listener is removed at interpreter exit, before that.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import atexit, sys
    from flinklike_spark.spark import session

    spark = session("clean-exit", config={"spark.ui.enabled": "false"})
    jstreams = spark._jsparkSession.streams()
    before = len(jstreams.listListeners())
    queries = [
        spark.readStream.format("rate").option("rowsPerSecond", 100).load().writeStream.format("noop")
        .trigger(processingTime="500 milliseconds").start()
        for _ in range(2)
    ]
    queries[0].processAllAvailable()
    queries[0].stop()  # one stopped, one still running at exit
    atexit._run_exitfuncs()  # what the interpreter runs first when it exits
    print("listeners", before, len(jstreams.listListeners()), flush=True)
    """
)


def test_the_engine_listener_is_removed_before_the_jvm_stops(tmp_path):
    env = os.environ | {"PYTHONPATH": str(ROOT), "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=500, env=env, cwd=tmp_path
    )
    assert done.returncode == 0, f"exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    assert "listeners 1 0" in done.stdout, done.stdout  # registered by session(), gone at exit
    for noise in ("Py4JException", "ERROR StreamingQueryListenerBus"):
        at = done.stderr.find(noise)
        assert at < 0, done.stderr[max(at - 3000, 0) : at + 2000]
