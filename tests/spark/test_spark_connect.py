"""The data source through Spark Connect (the client Spark 4 steers users to), against a local Connect server.

Spark Connect sessions have no SparkContext, and one process cannot hold both
a classic and a Connect local session, so the scenario runs in a child process
(as a user's program would) while the rest of the Spark tests share a classic one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(420)]  # a child process with its own JVM

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import json, sys
    from flinklike_spark.spark import session
    from flinklike_spark.spark.spark_session import is_connect_session

    job_dir, out, spark_checkpoint = sys.argv[1:4]
    spark = session("flinklike-connect-test", remote="local[2]", config={"spark.ui.enabled": "false"})
    query = (
        spark.readStream.format("flinklike")
        .option("pipeline", "tests.spark.pipelines:bounded_count")
        .option("execution.checkpointing.dir", job_dir)
        .load()
        .writeStream.format("delta")
        .option("checkpointLocation", spark_checkpoint)
        .trigger(availableNow=True)
        .start(out)
    )
    query.awaitTermination(300)
    rows = [r.asDict() for r in spark.read.format("delta").load(out).collect()]
    print("RESULT " + json.dumps({"connect": is_connect_session(spark), "rows": rows}))
    spark.stop()
    """
)


def test_register_and_read_through_spark_connect(tmp_path):
    pytest.importorskip("grpc", reason="Spark Connect needs pyspark[connect] (in the [spark] and [test] extras)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "job"), str(tmp_path / "out"), str(tmp_path / "spark")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    result = json.loads(lines[-1].removeprefix("RESULT "))
    assert result["connect"] is True
    per_key: dict[int, list[int]] = {}
    for row in result["rows"]:
        per_key.setdefault(row["key"], []).append(row["count"])
    assert {key: sorted(counts) for key, counts in per_key.items()} == {key: list(range(1, 51)) for key in range(4)}
