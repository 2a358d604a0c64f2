"""TaskExecutors on the executors of a real Spark standalone cluster (``execution.target: spark``).

The tests share one Spark driver subprocess (``session_driver``, see
conftest.py) on the session's two-executor cluster, in this file's order: the
last one kills that driver. The spark-submit test and the spare TaskExecutor
test (three executors) run drivers of their own, after it.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest

from flinklike_spark._runtime.cluster.endpoint import REGISTRATION_TIMEOUT
from flinklike_spark.spark import DELTA_SPARK_PACKAGE
from tests.support.delta_sink_job import assert_exactly_once_in_order, assert_prefix_exactly_once_in_order
from tests.support.spark_standalone import SPARK_HOME, still_serving, task_executor_workers, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.slow]

JOBS = str(Path(__file__).with_name("cluster_jobs.py"))
NUM_KEYS = 8  # cluster_jobs.NUM_KEYS


def job_args(tmp_path: Path, **extra) -> dict:
    return {"checkpoints": str(tmp_path / "checkpoints"), "table": str(tmp_path / "out"), **extra}


def assert_one_task_executor_per_executor(cluster) -> dict[int, set[int]]:
    """The TaskExecutors (pid -> ports) after checking there is one in each of the 2 executors."""
    workers = task_executor_workers(cluster)
    hosts = {pid: executor.pid for executor in cluster.executor_processes() for pid in
             (w.pid for daemon in executor.children() for w in daemon.children())}  # fmt: skip
    assert len(workers) == 2, f"expected a TaskExecutor in each of the 2 executors, found {workers}"
    assert len({hosts[pid] for pid in workers}) == 2, f"both TaskExecutors in one executor: {workers}"
    return workers


@pytest.mark.timeout(360)
def test_executors_without_the_project_fail_execute_promptly_naming_the_fix(session_driver, tmp_path):
    no_project = tmp_path / "python-without-site-packages"
    no_project.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    no_project.chmod(0o755)
    session_driver.run("missing-package", job_args(tmp_path, python_without_project=str(no_project)))
    missing = session_driver.expect("missing-package", timeout=300)
    assert missing["error"] == "FlinklikeError", missing
    assert "cannot be imported on the Spark executor" in missing["message"]
    assert "--py-files" in missing["message"] and "PYSPARK_PYTHON" in missing["message"]
    # Not the registration timeout: the launcher's own failure, as soon as Spark gave up on the stage.
    assert missing["seconds"] < REGISTRATION_TIMEOUT, missing
    session_driver.expect("done", timeout=30)


@pytest.mark.timeout(420)
def test_a_keyed_job_on_spark_executors_survives_a_killed_executor_exactly_once(
    spark_cluster, session_driver, tmp_path
):
    records_per_key = 2_500
    args = job_args(tmp_path, records_per_key=records_per_key, rate=2_000, report_checkpointed=True)
    session_driver.run("keyed-delta", args)
    checkpointed = session_driver.expect("checkpointed", timeout=240)

    workers = assert_one_task_executor_per_executor(spark_cluster)
    # the driver's REST API shows the TaskExecutors on the executors and their tasks' metrics,
    # which travelled with the heartbeats
    assert checkpointed["task_executor_pids"] == sorted(workers), checkpointed
    assert checkpointed["rest_url"].startswith("http://127.0.0.1:")
    assert checkpointed["records"] and all(n > 0 for n in checkpointed["records"].values()), checkpointed
    spark_cluster.executor_processes()[0].send_signal(signal.SIGKILL)

    finished = session_driver.expect("finished", timeout=300)
    assert finished["restarts"] >= 1, "the job did not notice the lost executor"
    session_driver.expect("done", timeout=30)
    assert_exactly_once_in_order(Path(args["table"]), num_keys=NUM_KEYS, records_per_key=records_per_key)


def executor_of(cluster, pid: int):
    """The executor JVM whose Python worker ``pid`` is."""
    executors = {e.pid: e for e in cluster.executor_processes()}
    [executor] = [executors[p.pid] for p in psutil.Process(pid).parents() if p.pid in executors]
    return executor


@pytest.mark.timeout(420)
def test_cancelling_or_killing_the_driver_leaves_no_task_executor_on_the_executors(
    spark_cluster, session_driver, tmp_path
):
    session_driver.run("cancel-then-orphan", job_args(tmp_path))
    session_driver.expect("running", timeout=240)
    workers = assert_one_task_executor_per_executor(spark_cluster)
    session_driver.send("cancel")
    session_driver.expect("cancelled", timeout=120)
    wait_until(lambda: not still_serving(workers), "the TaskExecutors of the cancelled job to stop", 30)
    session_driver.expect("executors-free", timeout=60)

    session_driver.expect("running", timeout=240)
    workers = assert_one_task_executor_per_executor(spark_cluster)
    session_driver.kill()  # the last test of the shared driver; it frees the cluster's cores
    # heartbeat.timeout is 8 s in cluster_jobs.py; the worker may also stop the executors first.
    wait_until(lambda: not still_serving(workers), "the TaskExecutors of the killed driver to stop", 60)
    wait_until(lambda: not task_executor_workers(spark_cluster), "no TaskExecutor on any executor", 30)


@pytest.mark.timeout(420)
def test_the_same_job_submitted_with_spark_submit(spark_cluster, project_zip, start_driver, tmp_path):
    records_per_key = 1_000
    args = job_args(tmp_path, records_per_key=records_per_key, seconds_per_record=0)
    conf = spark_cluster.spark_conf()
    command = [str(SPARK_HOME / "bin" / "spark-submit"), "--master", conf.pop("spark.master"),
               "--py-files", str(project_zip), "--packages", DELTA_SPARK_PACKAGE,
               "--conf", "spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension",
               "--conf", "spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog"]  # fmt: skip
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    command += [JOBS, "keyed-delta", json.dumps(args)]
    driver = start_driver(command)
    session = driver.expect("session", timeout=240)
    assert session["master"] == spark_cluster.master_url
    driver.expect("finished", timeout=240)
    assert driver.wait(60) == 0
    assert_exactly_once_in_order(Path(args["table"]), num_keys=NUM_KEYS, records_per_key=records_per_key)


@pytest.mark.timeout(600)
def test_a_killed_executors_region_redeploys_at_once_onto_the_spare_task_executor(
    spark_cluster, project_zip, start_driver, tmp_path
):
    """Issue 31 item 4: ``slotmanager.redundant-taskmanager-num: 1`` on 3 one-core executors (a driver of its
    own, after the shared one is gone). The killed executor's region redeploys onto the spare TaskExecutor,
    registered before the kill, without waiting for Spark to start a new executor; the replacement
    TaskExecutor registers later, in the background. Exactly once per key in the Delta table.

    Issue 19 item 4 too: one barrier stage per TaskExecutor, so Spark's abort of the killed executor's stage
    leaves the other TaskExecutor running; only the region it hosted restarts, once, while the other keeps
    its tasks RUNNING at attempt 0. (Recovery onto a new executor, with no spare, is the keyed test's.)"""
    conf = spark_cluster.spark_conf() | {"spark.cores.max": "3", "spark.submit.pyFiles": str(project_zip)}
    driver = start_driver([sys.executable, JOBS, "serve", json.dumps({"spark_conf": conf})])
    driver.expect("session", timeout=240)
    records_per_key = 4_000  # 40 s at 800 rows/s: the replacement (8-11 s after the kill) registers while it runs
    args = job_args(tmp_path, records_per_key=records_per_key, rate=800, redundant=1, restart_delay="0 ms")
    driver.run("regions", args)
    reported = driver.expect("placement", timeout=240)
    placement, before = reported["placement"], reported["task_executors"]
    hosts = {subtask: {placement[f"{v}-{subtask}"]["resource_id"] for v in ("seq", "map", "delta")}
             for subtask in (0, 1)}  # fmt: skip
    assert all(len(h) == 1 for h in hosts.values()) and hosts[0] != hosts[1], placement  # a region each
    assert len(before) == 3 and hosts[0] | hosts[1] < set(before), (placement, before)
    [spare] = set(before) - hosts[0] - hosts[1]
    workers = task_executor_workers(spark_cluster)
    assert len(workers) == 3, f"expected a TaskExecutor in each of the 3 executors, found {workers}"
    [victim_pid] = {placement[f"{v}-0"]["pid"] for v in ("seq", "map", "delta")}
    executor_of(spark_cluster, victim_pid).send_signal(signal.SIGKILL)
    driver.send(f"killed {time.time()} 0")

    finished = driver.expect("finished", timeout=420)
    print(f"region failover onto a spare on Spark: {finished}")
    assert finished["restarts"] == 1, finished
    assert finished["restarted"] == sorted(f"{v}-0" for v in ("seq", "map", "delta")), finished
    assert finished["attempts"] == {f"{v}-{s}": int(s == 0) for v in ("seq", "map", "delta") for s in (0, 1)}, finished
    # While the lost region recovered, the other TaskExecutor kept its tasks RUNNING at attempt 0.
    assert finished["samples_during_recovery"] > 0 and finished["recovery_seconds"] is not None, finished
    assert finished["survivor_states_during_recovery"] == [["RUNNING", 0]], finished
    assert finished["survivor_rate_during"] and finished["survivor_rate_during"] > 0, finished
    assert finished["redeployed_on"] == [spare], finished
    [(replacement, registered)] = finished["replacements_registered"].items()
    assert replacement not in before
    assert finished["redeployed_at"] < registered, f"the region waited for the replacement: {finished}"
    driver.expect("done", timeout=30)
    assert_exactly_once_in_order(Path(args["table"]), num_keys=NUM_KEYS, records_per_key=records_per_key)


@pytest.mark.timeout(600)
def test_a_rescale_asks_spark_for_an_executor_and_gives_the_idle_one_back(
    spark_cluster, project_zip, start_driver, tmp_path
):
    """Issue 44 item 3: ``slotmanager.number-of-slots.max`` on Spark. The application starts with 3 one-core
    executors; the cluster gives back the 2 that host no TaskExecutor. A rescale 1 -> 2 starts a TaskExecutor,
    for which Spark is asked for an executor: a new one (an id the application did not have) hosts it. The
    rescale back to 1 stops that TaskExecutor and gives its executor back. Exactly once per key, in order."""
    conf = spark_cluster.spark_conf() | {"spark.cores.max": "3", "spark.submit.pyFiles": str(project_zip)}
    driver = start_driver([sys.executable, JOBS, "serve", json.dumps({"spark_conf": conf})])
    driver.expect("session", timeout=240)
    driver.run("rescale", job_args(tmp_path))
    [first] = driver.expect("trimmed", timeout=300)["executors"]
    up = driver.expect("rescaled-up", timeout=300)
    assert max(up["rescale"]["parallelismAfter"].values()) == 2, up
    assert len(up["executors"]) == 2 and first in up["executors"], up
    [new] = set(up["executors"]) - {first}
    assert int(new) > 2, f"executor {new} is one of the three the application started with: {up}"
    assert len(up["task_executors"]) == 2, up
    down = driver.expect("rescaled-down", timeout=300)
    assert max(down["rescale"]["parallelismAfter"].values()) == 1, down
    assert len(down["executors"]) == 1 and len(down["task_executors"]) == 1, down
    driver.expect("finished", timeout=180)
    assert_prefix_exactly_once_in_order(tmp_path / "out", num_keys=NUM_KEYS)  # cancelled: a prefix per key
