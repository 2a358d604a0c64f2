"""The Spark driver program of the cluster tests.

``python cluster_jobs.py serve SPARK_CONF_JSON`` builds one session on the
test cluster and then runs the scenarios the test sends on stdin, one JSON
line ``{"scenario": ..., "args": {...}}`` each, so the tests share one Spark
session (20-60 s to start on this machine). ``cluster_jobs.py SCENARIO
ARGS_JSON`` runs one scenario in the session spark-submit configured.

The driver runs in a process of its own because a process holds one
SparkContext (the ``tests/spark`` suite's local session may live in the
pytest process) and because one test kills it. It reports progress as JSON
lines on stdout (``{"event": ..., "t": seconds since start}``) and reads
commands from stdin, so the test can kill an executor, cancel, or kill this
driver at the right moment.

Scenarios:
    keyed-delta: the keyed job with unaligned checkpoints and a DeltaSink, run
        to the end; with ``report_checkpointed`` it reports ``checkpointed``
        after two completed checkpoints.
    missing-package: ``execute`` while the executors' Python cannot import the
        project (``python_without_project``); reports the error.
    cancel-then-orphan: an unbounded job cancelled on the ``cancel`` command,
        a Spark job on the freed executors, then a second unbounded job that
        runs until the test kills this driver.
    regions: two pipelined regions (seq -> map -> delta over forward edges,
        chaining off, parallelism 2), one per TaskExecutor; after two
        checkpoints it reports ``placement``, then samples the tasks' states
        and the sinks' ``records_in`` every 0.1 s until the job ends. The test
        SIGKILLs the executor of one region and sends ``killed <epoch> <subtask>``;
        ``finished`` reports the restarts, the final attempts, the recovery time
        (kill to the restarted sink's first record), when the lost region's
        sink was deployed again (a slot on the replacement TaskExecutor) and
        the other region's rates before and during the recovery. With
        ``redundant`` (``slotmanager.redundant-taskmanager-num``) it first waits
        for the spares to register and reports the registered TaskExecutors
        with ``placement``; ``finished`` then also tells where the lost region
        was redeployed and when the replacement registered. ``restart_delay``
        overrides the fixed-delay restart's 1 s.
    rescale: an unbounded keyed job under the adaptive scheduler at parallelism 1, with
        ``slotmanager.number-of-slots.max`` 2 (the cluster gives back the executors that host no
        TaskExecutor: ``trimmed`` reports the executors left); it is rescaled to 2 (a TaskExecutor
        starts, Spark is asked for an executor: ``rescaled-up``), then back to 1 (the idle executor is
        given back: ``rescaled-down``), then cancelled (``finished``). Each event lists the
        application's executor ids.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import urllib.request

from checkpointing import latest_completed
from connectors import DeltaSink, SequenceSource
from flinklike_spark import KeyedProcessFunction, MapFunction, StreamExecutionEnvironment
from flinklike_spark.spark.task_executor_launcher import live_executors

NUM_KEYS = 8
STARTED = time.monotonic()


def report(event: str, **fields) -> None:
    """One event line for the test, with ``t``: seconds since this driver started."""
    print(json.dumps({"event": event, "t": round(time.monotonic() - STARTED, 1), **fields}), flush=True)


class SlowPassThrough(KeyedProcessFunction):
    """Keeps records in flight (backpressure), so unaligned checkpoints carry channel state."""

    def __init__(self, seconds_per_record: float) -> None:
        self.seconds_per_record = seconds_per_record

    def process_element(self, value, ctx):
        if self.seconds_per_record:
            time.sleep(self.seconds_per_record)
        yield value


def spark_config(args: dict) -> dict:
    """The engine's configuration: TaskExecutors on Spark, checkpoints, quick loss detection."""
    return {
        "execution.target": "spark",
        "parallelism.default": 2,
        "execution.checkpointing.interval": "300ms",
        "execution.checkpointing.unaligned.enabled": True,
        "execution.checkpointing.dir": args["checkpoints"],
        "taskmanager.memory.segment-size": "2kb",
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": 5,
        "restart-strategy.fixed-delay.delay": "1 s",
        "heartbeat.interval": "1 s",
        "heartbeat.timeout": "8 s",
    }


def keyed_delta_job(args: dict, *, records_per_key: int | None, rate: float | None) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment(spark_config(args))
    (
        env.from_source(
            SequenceSource(num_keys=NUM_KEYS, records_per_key=records_per_key, rows_per_second=rate, batch_size=256),
            name="seq",
        )
        .uid("seq")
        .key_by("key")
        .process(SlowPassThrough(args.get("seconds_per_record", 0.0002)))
        .uid("slow")
        .sink_to(DeltaSink(args["table"]))
        .uid("delta")
    )
    return env


def wait_for_checkpoints(client, directory: str, count: int, timeout: float = 180.0) -> None:
    """Waits until checkpoint ``count`` (or a later one) completed: by id, not by the completed checkpoints
    listed, of which one is retained (the default ``num-retained``)."""
    deadline = time.monotonic() + timeout
    while (latest := latest_completed(directory, client.job_id)) is None or latest.checkpoint_id < count:
        if client.done():
            client.wait(0)  # raises the job's failure
            raise AssertionError("the job finished before it was checkpointed")
        if time.monotonic() > deadline:
            raise AssertionError(f"fewer than {count} checkpoints completed within {timeout:.0f} s")
        time.sleep(0.1)


def rest_view(client, timeout: float = 60.0) -> dict:
    """What the driver's REST API says once every vertex counted records: read by vertex, TaskExecutor pids.

    heartbeat.interval is 1 s here, so the metrics stay younger than metrics.fetcher.update-interval
    (10 s) and the REST API never asks the TaskExecutors itself: what it shows came with the heartbeats.
    """
    base = client.web_interface_url
    deadline = time.monotonic() + timeout
    while True:
        with urllib.request.urlopen(f"{base}/jobs/{client.job_id}", timeout=10) as response:
            job = json.loads(response.read())
        records = {v["name"]: v["metrics"]["read-records"] + v["metrics"]["write-records"] for v in job["vertices"]}
        if all(records.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    with urllib.request.urlopen(f"{base}/taskmanagers", timeout=10) as response:
        managers = json.loads(response.read())["taskmanagers"]
    return {"records": records, "rest_url": base, "task_executor_pids": sorted(m["pid"] for m in managers)}


def keyed_delta(spark, args: dict) -> None:
    env = keyed_delta_job(args, records_per_key=args["records_per_key"], rate=args.get("rate"))
    client = env.execute_async("keyed delta on spark")
    report("submitted", job_id=client.job_id, driver_pid=os.getpid())
    if args.get("report_checkpointed"):
        wait_for_checkpoints(client, args["checkpoints"], 2)
        report("checkpointed", **rest_view(client))
    result = client.wait(600)
    report("finished", restarts=client.num_restarts, job_id=result.job_id)


def cancel_then_orphan(spark, args: dict) -> None:
    env = keyed_delta_job(args, records_per_key=None, rate=2000)
    client = env.execute_async("cancel me")
    wait_for_checkpoints(client, args["checkpoints"], 1)
    report("running", job_id=client.job_id)
    assert sys.stdin.readline().strip() == "cancel"
    client.cancel()
    try:
        client.wait(120)
    except Exception as exc:  # noqa: BLE001 - JobCancelledError expected
        report("cancelled", error=type(exc).__name__)
    started = time.monotonic()
    count = spark.sparkContext.parallelize(range(4), 2).count()  # the executors are free again
    report("executors-free", count=count, seconds=round(time.monotonic() - started, 2))
    env = keyed_delta_job(args | {"checkpoints": args["checkpoints"] + "-2"}, records_per_key=None, rate=2000)
    client = env.execute_async("orphan me")
    wait_for_checkpoints(client, args["checkpoints"] + "-2", 1)
    report("running", job_id=client.job_id)
    time.sleep(600)  # until the test kills this driver


def missing_package(spark, args: dict) -> None:
    """``execute`` while the executors' Python cannot import the project; then restore it."""
    sc = spark.sparkContext
    python, sc.pythonExec = sc.pythonExec, args["python_without_project"]  # used by jobs submitted from now on
    env = keyed_delta_job(args | {"checkpoints": args["checkpoints"] + "-missing"}, records_per_key=10, rate=None)
    started = time.monotonic()
    try:
        env.execute("no package on the executors")
    except Exception as exc:  # noqa: BLE001 - reported to the test
        report("missing-package", error=type(exc).__name__, message=str(exc)[:2000],
               seconds=round(time.monotonic() - started, 1))  # fmt: skip
    else:
        report("missing-package", error=None)
    finally:
        sc.pythonExec = python


class Pass(MapFunction):
    def __init__(self, seconds_per_record: float) -> None:
        self.seconds_per_record = seconds_per_record

    def map(self, value):
        time.sleep(self.seconds_per_record)
        return value


def _sink_records(metrics: dict, subtask: int) -> tuple[int, int] | None:
    """(attempt, records_in) of the current attempt of sink subtask ``subtask``, or None."""
    found = None
    for execution_id, values in metrics.items():
        name, _, rest = execution_id.partition("#")
        if name == f"delta-{subtask}" and values:
            attempt = int(rest.partition("/")[0])
            if found is None or attempt > found[0]:
                found = (attempt, int(values.get("records_in", 0)))
    return found


def _rate(samples: list, subtask: int, start: float, end: float) -> float | None:
    """Records per second into sink ``subtask`` (attempt 0) between epoch times ``start`` and ``end``."""
    points = [(t, r[1]) for t, m, _ in samples if start <= t <= end and (r := _sink_records(m, subtask)) and r[0] == 0]
    if len(points) < 2 or points[-1][0] <= points[0][0]:
        return None
    return (points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0])


def task_executor_ids(client) -> list[str]:
    """The TaskExecutors registered now, by the driver's REST API."""
    with urllib.request.urlopen(f"{client.web_interface_url}/taskmanagers", timeout=10) as response:
        return sorted(m["id"] for m in json.loads(response.read())["taskmanagers"])


def wait_for_task_executors(client, count: int, timeout: float = 180.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while len(registered := task_executor_ids(client)) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"only {registered} of {count} TaskExecutors registered within {timeout:.0f} s")
        time.sleep(0.2)
    return registered


def _read_kill() -> tuple[float, int]:
    """The test's ``killed <epoch> <subtask>`` line."""
    _, killed_at, victim = sys.stdin.readline().split()
    return float(killed_at), int(victim)


def regions(spark, args: dict, kill=None) -> dict:
    """The ``regions`` scenario; ``kill(placement) -> (epoch, subtask)`` kills in-process (a benchmark),
    else the test's ``killed`` line is read from stdin. Returns what ``finished`` reports."""
    redundant = args.get("redundant", 0)
    config = spark_config(args) | {"jobmanager.execution.failover-strategy": "region",
                                   "execution.checkpointing.unaligned.enabled": False,
                                   "slotmanager.redundant-taskmanager-num": redundant,
                                   "restart-strategy.fixed-delay.delay": args.get("restart_delay", "1 s")}  # fmt: skip
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.disable_operator_chaining()
    (
        env.from_source(
            SequenceSource(
                num_keys=NUM_KEYS, records_per_key=args["records_per_key"], rows_per_second=args["rate"], batch_size=64
            ),
            name="seq",
        )  # fmt: skip
        .uid("seq")
        .map(Pass(args.get("seconds_per_record", 0.0002)))
        .uid("map")
        .sink_to(DeltaSink(args["table"]))
        .uid("delta")
    )
    client = env.execute_async("two regions on spark")
    wait_for_checkpoints(client, args["checkpoints"], 2)
    before = wait_for_task_executors(client, 2 + redundant)
    samples: list = []  # (epoch seconds, task metrics, placement)
    registrations: dict[str, float] = {}  # TaskExecutors that registered after the start: when first seen
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.1):
            placement = client.get_task_placement()
            try:
                metrics = client.task_metrics()
                for resource_id in set(task_executor_ids(client)) - set(before):
                    registrations.setdefault(resource_id, time.time())
            except Exception:  # noqa: BLE001 - a TaskExecutor going away; the next sample asks again
                metrics = {}
            samples.append((time.time(), metrics, placement))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    time.sleep(5)  # a baseline of both regions' rates before the test kills one
    placement = client.get_task_placement()
    report("placement", placement=placement, task_executors=before)
    killed_at, victim = _read_kill() if kill is None else kill(placement)
    survivor = 1 - victim
    try:
        result = client.wait(600)
    finally:
        stop.set()
        sampler.join()
    recovered_at = next((t for t, m, _ in samples if t > killed_at and (r := _sink_records(m, victim))
                         and r[0] >= 1 and r[1] > 0), None)  # fmt: skip
    redeployed_at = next((t for t, _, p in samples if t > killed_at and p[f"delta-{victim}"]["attempt"] >= 1
                          and p[f"delta-{victim}"]["resource_id"] is not None), None)  # fmt: skip
    during = [p for t, _, p in samples if killed_at <= t <= (recovered_at or killed_at)]
    survivor_tasks = {f"{v}-{survivor}" for v in ("seq", "map", "delta")}
    survivor_states = sorted({(p[task]["state"], p[task]["attempt"]) for p in during for task in survivor_tasks})
    final = client.get_task_placement()
    finished = dict(
        job_id=result.job_id,
        restarts=client.num_restarts,
        attempts=client.get_attempt_numbers(),
        restarted=sorted(set().union(*(e.restarted for e in client.get_exception_history()))),
        survivor_states_during_recovery=survivor_states,
        samples_during_recovery=len(during),
        recovery_seconds=None if recovered_at is None else round(recovered_at - killed_at, 2),
        redeployed_seconds=None if redeployed_at is None else round(redeployed_at - killed_at, 2),
        survivor_rate_before=_rate(samples, survivor, killed_at - 5, killed_at),
        survivor_rate_during=None if recovered_at is None else _rate(samples, survivor, killed_at, recovered_at),
        task_executors_before=before,
        redeployed_on=sorted(
            {
                p[f"{v}-{victim}"]["resource_id"]
                for _, _, p in samples
                for v in ("seq", "map", "delta")
                if p[f"{v}-{victim}"]["attempt"] >= 1 and p[f"{v}-{victim}"]["resource_id"]
            }
        ),
        redeployed_at=round(max(final[f"{v}-{victim}"]["deployed_at"] for v in ("seq", "map", "delta")) - killed_at, 2),
        replacements_registered={r: round(t - killed_at, 2) for r, t in registrations.items()},
    )
    report("finished", **finished)
    return finished


def executor_ids(spark) -> list[str]:
    """The application's live executors (not the driver)."""
    return sorted((eid for eid, _ in live_executors(spark.sparkContext)), key=int)


def _wait_for_executors(spark, count: int, timeout: float = 120.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while len(ids := executor_ids(spark)) != count:
        if time.monotonic() > deadline:
            raise AssertionError(f"the application has executors {ids}, expected {count} within {timeout:.0f} s")
        time.sleep(0.5)
    return ids


def rescale(spark, args: dict) -> None:
    config = spark_config(args) | {
        "jobmanager.scheduler": "adaptive", "parallelism.default": 1, "slotmanager.number-of-slots.max": 2,
        "restart-strategy.type": "none",
    }  # fmt: skip
    env = StreamExecutionEnvironment.get_execution_environment(config)
    (
        env.from_source(SequenceSource(num_keys=NUM_KEYS, records_per_key=None, rows_per_second=400), name="seq")
        .uid("seq").key_by("key").process(SlowPassThrough(0.0002)).uid("slow")
        .sink_to(DeltaSink(args["table"])).uid("delta")
    )  # fmt: skip
    client = env.execute_async("rescaled on spark")
    wait_for_checkpoints(client, args["checkpoints"], 2)
    report("trimmed", executors=_wait_for_executors(spark, 1))

    def bounds(upper: int) -> dict:
        return {v: {"parallelism": {"lowerBound": 1, "upperBound": upper}} for v in client.get_resource_requirements()}

    up = client.update_resource_requirements(bounds(2))
    report("rescaled-up", rescale=up, executors=executor_ids(spark), task_executors=task_executor_ids(client))
    wait_for_checkpoints(client, args["checkpoints"], up["checkpoint"] + 2)
    down = client.update_resource_requirements(bounds(1))
    report("rescaled-down", rescale=down, executors=_wait_for_executors(spark, 1),
           task_executors=task_executor_ids(client))  # fmt: skip
    wait_for_checkpoints(client, args["checkpoints"], down["checkpoint"] + 2)
    client.cancel()
    try:
        client.wait(120)
    except Exception as exc:  # noqa: BLE001 - cancelled: the expected end
        report("finished", ended=type(exc).__name__)
    else:
        report("finished", ended="without an error")


SCENARIOS = {"keyed-delta": keyed_delta, "missing-package": missing_package, "cancel-then-orphan": cancel_then_orphan,
             "regions": regions, "rescale": rescale}  # fmt: skip


def serve(spark) -> None:
    for line in sys.stdin:
        command = json.loads(line)
        try:
            SCENARIOS[command["scenario"]](spark, command["args"])
        except Exception as exc:  # noqa: BLE001 - reported; the next test may still use the session
            report("error", scenario=command["scenario"], message=f"{type(exc).__name__}: {exc}"[:3000])
        else:
            report("done", scenario=command["scenario"])


def main() -> None:
    from flinklike_spark.spark import session

    mode, argument = sys.argv[1], json.loads(sys.argv[2])
    # Under spark-submit the session is the one spark-submit configured (spark_conf None).
    spark = session("flinklike-cluster-tests", master=None, config=argument.get("spark_conf"))
    spark.sparkContext.setLogLevel("WARN")
    report("session", master=spark.sparkContext.master)
    try:
        if mode == "serve":
            serve(spark)
        else:
            SCENARIOS[mode](spark, argument)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
