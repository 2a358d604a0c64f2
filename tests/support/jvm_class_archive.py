"""A class-data-sharing archive of Spark's classes for the suite's JVMs (a test-run speed-up only).

Every Spark JVM the suite starts (the session fixture's, each documentation
block's, example's and spark-submit's, the standalone cluster's) loads and
verifies some 15,000 classes before it runs anything. A dynamic AppCDS archive
(JDK 13+: ``-XX:ArchiveClassesAtExit`` once, ``-XX:SharedArchiveFile`` after)
maps the classes a small Spark session loaded instead: a local session starts
with half the CPU (5.7 -> 2.9 CPU-s, docs/benchmarks.md). A JVM whose class
path does not match the archive (the Kafka broker) or that starts before the
archive exists runs exactly as without it; ``-Xlog:cds=off`` keeps its warning
off stdout, which tests read.

The archive lives in ``~/.cache/flinklike`` under a name derived from the
``java`` binary and pyspark's jars, so another JDK or Spark gets its own. It is
written once, in the background, by the first test session that misses it,
to a temporary name renamed into place when complete: no JVM ever maps a
partial archive.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

__all__ = ["java_tool_options"]

_DUMP = textwrap.dedent(
    """
    from pyspark.sql import SparkSession
    spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
    df = spark.createDataFrame([(i % 7, i) for i in range(1000)], "k long, v long")
    df.groupBy("k").sum("v").collect()
    spark.range(1000).selectExpr("id % 3 AS k").distinct().count()
    print("JVM_PID", spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid(), flush=True)
    spark.stop()
    """
)
"""Loads the classes of a session, a DataFrame from Python and two aggregations; prints the JVM's pid.
The JVM writes the archive as it exits, after this script's process exited."""


def _archive(cache: Path) -> Path | None:
    java = shutil.which("java")
    try:
        import pyspark
    except ImportError:
        return None
    if java is None:
        return None
    jars = Path(pyspark.__file__).parent / "jars"
    java = os.path.realpath(java)  # an upgraded JDK (a new mtime) rejects an old archive: name a new one
    key = hashlib.sha256(
        "\n".join([java, str(os.stat(java).st_mtime_ns), str(jars), *sorted(os.listdir(jars))]).encode()
    ).hexdigest()[:12]
    return cache / f"spark-classes-{key}.jsa"


def java_tool_options(cache: Path) -> str:
    """The JVM options that map the archive (started in the background when it is missing); "" without
    java or pyspark."""
    archive = _archive(cache)
    if archive is None:
        return ""
    if not archive.exists():
        _dump_in_background(archive)
    return f"-XX:SharedArchiveFile={archive} -Xlog:cds=off -Xlog:cds+dynamic=off"


def _dump_in_background(archive: Path) -> None:
    archive.parent.mkdir(parents=True, exist_ok=True)
    lock = archive.with_suffix(".lock")
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)  # one writer; a stale lock: no archive, no harm
    except FileExistsError:
        return
    os.close(fd)
    partial = archive.with_suffix(f".{os.getpid()}.partial")
    env = dict(os.environ, JAVA_TOOL_OPTIONS=f"-XX:TieredStopAtLevel=1 -XX:ArchiveClassesAtExit={partial}")
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    runner = textwrap.dedent(
        f"""
        import os, re, subprocess, sys, time
        done = subprocess.run([sys.executable, "-c", {_DUMP!r}], capture_output=True, text=True, timeout=300,
                              check=False)
        found = re.search(r"^JVM_PID (\\d+)$", done.stdout, re.M)  # the dumping JVM logs to stdout too
        pid = int(found.group(1)) if done.returncode == 0 and found else None

        def running(pid):
            try:
                with open(f"/proc/{{pid}}/stat") as stat:
                    return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
            except OSError:
                return False

        deadline = time.monotonic() + 120
        while pid is not None and running(pid) and time.monotonic() < deadline:
            time.sleep(0.2)  # the JVM is writing the archive as it exits
        partial = {str(partial)!r}
        if pid is not None and not running(pid) and os.path.exists(partial) and os.path.getsize(partial) > 0:
            os.replace(partial, {str(archive)!r})
        for leftover in (partial, {str(lock)!r}):
            if os.path.exists(leftover):
                os.unlink(leftover)
        """
    )
    subprocess.Popen([sys.executable, "-c", runner], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                     start_new_session=True)  # fmt: skip
