"""``execution.target: spark``: TaskExecutors as long-lived tasks on the executors of a Spark cluster.

The JobMaster (a :class:`~flinklike_spark._runtime.cluster.endpoint.ClusterEndpoint`)
runs in the Spark driver, the user's process with the SparkSession. Every
TaskExecutor runs as the one task of a barrier stage of its own
(``sc.parallelize([0], 1).barrier().mapPartitions(...)``): a barrier stage
is never retried by Spark (a retry would start a second TaskExecutor under the
same resource id), and one stage per TaskExecutor means that Spark's abort of
one stage takes no other TaskExecutor with it. The gang start that one shared
stage gave is the engine's own: the cluster waits for all registrations up to
its registration timeout. Each binds the host of the executor it landed on
(``BarrierTaskContext.getTaskInfos()``, unless ``taskmanager.host`` is set),
registers with the JobMaster over the authenticated Flight RPC and exchanges
data with the others over the engine's own network. Each stage runs from a
driver thread under a Spark job group of its own, so it can be cancelled
(``sc.cancelJobGroup``).

Lifetime: a TaskExecutor's task returns when the TaskExecutor closes: at the
cluster's shutdown RPC (job finished or cancelled), which frees the Spark
executors, or on its own when the JobMaster has been unreachable for
``heartbeat.timeout`` (a killed driver leaves nothing running). Closing the
launcher cancels the job group of any stage still running after the grace
period.

Executor loss: Spark aborts the barrier stage of each TaskExecutor that ran
on the lost executor, and only those (with one stage for all TaskExecutors
of a launch, Spark would kill the survivors too). Each of them is reported gone (:meth:`exit_reason`); the endpoint
reports them lost (failover restarts the regions they hosted) and launches
replacements, each again a stage of its own, once the cluster has task slots
for them. A TaskExecutor declared lost by heartbeat timeout has its stage
cancelled.

Elastic resources (with ``slotmanager.number-of-slots.max``, docs/elastic.md): a
barrier stage cannot run under Spark's dynamic allocation (SPARK-24942), so
the launcher asks Spark itself. A TaskExecutor launched while no executor has a
free task slot raises the application's executor target to one task slot per
TaskExecutor (``SparkContext.requestTotalExecutors``, within ``spark.cores.max``); :meth:`give_back_idle` kills executors that run
no task (``SparkContext.killExecutor``, which also lowers the application's
executor target, so the master does not start them again).

Security: the bootstrap, with the cluster's RPC secret, travels inside the
task closure, like any closure data. Protect it on an untrusted network with
Spark's own settings: ``spark.authenticate`` (only authenticated processes
join the application) and ``spark.network.crypto.enabled`` (RPC, including
task closures, encrypted). The engine's own Flight traffic is authenticated
but not encrypted.

Shipping code: the executors' Python workers must import ``flinklike_spark``
(and ``connectors``/``checkpointing``): install the package where
``PYSPARK_PYTHON`` runs, or ship it with ``--py-files``/``spark.submit.pyFiles``
(a zip of the packages) or an archive (``--archives`` with a packed
environment). Without it a TaskExecutor task fails at once with
:class:`TaskExecutorLaunchError` naming these fixes, and ``execute`` fails
with that message instead of waiting for registrations.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from flinklike_spark._runtime.cluster.endpoint import ClusterEndpoint
from flinklike_spark._runtime.cluster.launcher import TaskExecutorBootstrap
from flinklike_spark.config import Configuration
from flinklike_spark.errors import ConfigurationError, FlinklikeError

__all__ = ["SparkTaskExecutorLauncher", "TaskExecutorLaunchError", "live_executors", "spark_cluster"]

log = logging.getLogger(__name__)

_NOT_IMPORTABLE = "flinklike_spark cannot be imported on the Spark executor"
_SHIP_HELP = (
    "Executors must be able to import the project: install flinklike-spark where PYSPARK_PYTHON runs on every "
    "executor, or ship it with spark-submit --py-files flinklike.zip (or spark.submit.pyFiles / "
    "SparkContext.addPyFile) or --archives with a packed environment; see docs/spark.md 'TaskExecutors on Spark executors'"
)
_SLOT_WAIT = 60.0  # seconds a launch waits for free task slots before it submits anyway


class TaskExecutorLaunchError(FlinklikeError, RuntimeError):
    """TaskExecutors cannot start on the Spark executors (e.g. the project is missing there)."""


def _task_executor_partition(payload: bytes, not_importable: str, ship_help: str):
    """The barrier task that runs the TaskExecutor of ``payload`` (the stage's only partition).

    A nested function: cloudpickle ships it by value, so unpickling it on an
    executor needs no ``flinklike_spark``, and a missing package is reported
    by the task with the fix instead of as an unpickling error.
    """

    def run(_rows):
        import faulthandler
        import os
        import sys

        if not faulthandler.is_enabled():  # pyspark's own (spark.python.worker.faulthandler.enabled) wins
            faulthandler.enable(all_threads=True)  # a native crash leaves its stack in the executor's stderr

        from pyspark import BarrierTaskContext

        context = BarrierTaskContext.get()
        index = context.partitionId()
        host = context.getTaskInfos()[index].address.rsplit(":", 1)[0]
        try:
            from flinklike_spark._runtime.cluster.launcher import TaskExecutorBootstrap
            from flinklike_spark._runtime.taskexecutor.task_executor import run_task_executor
        except ImportError as exc:
            raise RuntimeError(
                f"{not_importable} {host} (Python {sys.executable}, pid {os.getpid()}): {exc}. {ship_help}"
            ) from None
        bootstrap = TaskExecutorBootstrap.from_bytes(payload).with_host(host)
        run_task_executor(bootstrap)
        yield bootstrap.resource_id

    return run


@dataclasses.dataclass(kw_only=True, eq=False)
class _Stage:
    """The barrier stage of one TaskExecutor and how it ended."""

    group: str
    resource_id: str
    thread: threading.Thread | None = None
    ended: str | None = None  # why the stage is over (None while it runs)
    lost: str | None = None  # declared lost by the ResourceManager: why


def live_executors(sc: Any) -> list[tuple[str, int]]:
    """The application's live executors (not the driver): ``(executor id, tasks running on it)``, from Spark's
    status store."""
    summaries = sc._jvm.scala.jdk.javaapi.CollectionConverters.asJava(sc._jsc.sc().statusStore().executorList(True))
    return [(s.id(), s.activeTasks()) for s in summaries if s.id() != "driver"]


class SparkTaskExecutorLauncher:
    """Starts each TaskExecutor as a one-task barrier stage on the executors of ``spark``'s cluster.

    Args:
        spark: the driver's SparkSession.
        slot_wait: seconds a launch waits for enough free task slots before submitting anyway
            (Spark itself re-checks a barrier stage's slots only every 15 s).
        elastic: ask Spark for executors when a launch finds no free task slot
            (``slotmanager.number-of-slots.max`` is set); else the application's executors are Spark's affair.
    """

    description = "Spark executors"

    def __init__(self, spark, *, slot_wait: float = _SLOT_WAIT, elastic: bool = False) -> None:
        self._sc = spark.sparkContext
        self._elastic = elastic
        self._slot_wait = slot_wait
        self._lock = threading.Lock()
        self._stages: dict[str, _Stage] = {}  # resource id -> its stage
        self._failure: str | None = None
        self._closed = threading.Event()

    # -- launching ------------------------------------------------------------------------------

    def launch(self, bootstraps: Sequence[TaskExecutorBootstrap]) -> None:
        for bootstrap in bootstraps:
            stage = _Stage(group=f"flinklike-taskexecutor-{uuid.uuid4().hex[:8]}", resource_id=bootstrap.resource_id)
            stage.thread = threading.Thread(
                target=self._run_stage, args=(stage, bootstrap.to_bytes()), name=f"spark-{stage.group}", daemon=True
            )
            with self._lock:
                self._stages[stage.resource_id] = stage
            stage.thread.start()

    def _task_slots(self) -> int | None:
        """Task slots of the registered executors, or None where Spark runs tasks in the driver (local)."""
        if self._sc.master.startswith("local"):
            return None
        conf = self._sc.getConf()
        per_executor = int(conf.get("spark.executor.cores", "1")) // max(1, int(conf.get("spark.task.cpus", "1")))
        executors = len(self._sc._jsc.sc().statusTracker().getExecutorInfos()) - 1  # minus the driver
        return executors * per_executor

    def _running_task_executors(self, excluding: _Stage | None) -> int:
        with self._lock:
            return sum(1 for s in self._stages.values() if s is not excluding and s.ended is None)

    def _wait_for_slots(self, stage: _Stage) -> None:
        """Wait until the cluster has a free task slot for ``stage`` beside the other running stages:
        a barrier stage submitted without a free slot is only re-checked by Spark every 15 s. Without
        one at first, ask Spark for one more executor."""
        deadline = time.monotonic() + self._slot_wait
        asked = False
        while not self._closed.is_set() and time.monotonic() < deadline:
            slots = self._task_slots()
            if slots is None or slots - self._running_task_executors(stage) >= 1:
                return
            if self._elastic and not asked:
                asked = True
                self._request_executors(stage)
            time.sleep(0.2)

    def _request_executors(self, stage: _Stage) -> None:
        """Set the application's executor target to what its TaskExecutors need: one task slot each.

        ``requestTotalExecutors`` rather than ``requestExecutors(1)``: under static allocation the
        target starts at 0 and ``killExecutor`` lowers it (floored at 0), so a relative request would
        not exceed the executors the application still has."""
        conf = self._sc.getConf()
        per_executor = max(
            1, int(conf.get("spark.executor.cores", "1")) // max(1, int(conf.get("spark.task.cpus", "1")))
        )
        wanted = -(-(self._running_task_executors(excluding=None)) // per_executor)
        no_locality = getattr(getattr(self._sc._jvm.scala.collection.immutable, "Map$"), "MODULE$").empty()
        granted = self._sc._jsc.sc().requestTotalExecutors(wanted, 0, no_locality)
        log.info("no free Spark task slot for TaskExecutor %s: asked Spark for %d executors in all (%s)",
                 stage.resource_id, wanted, "accepted" if granted else "refused")  # fmt: skip

    @property
    def returns_hosts(self) -> bool:
        """Executors of a cluster manager can be given back; local mode's one JVM cannot."""
        return not self._sc.master.startswith("local")

    def give_back_idle(self, count: int | None) -> list[str]:
        """Kill up to ``count`` (None: all) executors that run no task and that no TaskExecutor still starting
        will need; their ids."""
        if not self.returns_hosts:
            return []
        executors = live_executors(self._sc)
        idle = sorted((eid for eid, active in executors if active == 0), key=lambda e: (len(e), e), reverse=True)
        busy_tasks = sum(active for _, active in executors)
        starting = max(0, self._running_task_executors(excluding=None) - busy_tasks)  # stages not running yet
        spare = idle[starting:] if count is None else idle[starting:][:count]
        given = [eid for eid in spare if self._sc._jsc.sc().killExecutor(eid)]
        if given:
            log.info("gave back idle Spark executors %s", given)
        return given

    def _run_stage(self, stage: _Stage, payload: bytes) -> None:
        """Driver thread: run the barrier stage until its TaskExecutors return or Spark aborts it."""
        outcome = "its Spark tasks returned"
        try:
            self._wait_for_slots(stage)
            if self._closed.is_set():
                outcome = "the launcher closed before it started"
                return
            sc = self._sc
            sc.setJobGroup(stage.group, f"flinklike TaskExecutor {stage.resource_id}", interruptOnCancel=True)
            run = _task_executor_partition(payload, _NOT_IMPORTABLE, _SHIP_HELP)
            sc.parallelize([0], 1).barrier().mapPartitions(run).collect()
        except Exception as exc:  # noqa: BLE001 - the outcome is reported through exit_reason
            text = str(exc)
            outcome = f"its Spark stage failed: {_summary(text)}"
            if _NOT_IMPORTABLE in text:
                with self._lock:
                    self._failure = _summary(text[text.index(_NOT_IMPORTABLE) :])
            if not self._closed.is_set():
                log.warning("Spark stage %s of TaskExecutor %s ended: %s", stage.group, stage.resource_id, outcome)
        finally:
            with self._lock:
                stage.ended = outcome

    # -- the endpoint's questions ---------------------------------------------------------------

    def exit_reason(self, resource_id: str) -> str | None:
        """Gone when its stage ended, or when it was declared lost: its task may still run until the
        cancellation of its stage arrives, but it will never serve again, so it is replaced now."""
        with self._lock:
            stage = self._stages.get(resource_id)
            if stage is None:
                return None
            ended = stage.ended or stage.lost
        if ended is None:
            return None
        return f"TaskExecutor {resource_id} on Spark is gone: {ended} (Spark job group {stage.group})"

    def launch_failure(self) -> str | None:
        with self._lock:
            return self._failure

    def exited(self) -> dict[str, int | None]:
        with self._lock:
            return {rid: None for rid, stage in self._stages.items() if stage.ended is not None}

    def forget(self, resource_id: str) -> None:
        with self._lock:
            self._stages.pop(resource_id, None)

    def kill(self, resource_id: str, reason: str) -> None:
        """A TaskExecutor declared lost: cancel its stage (its own only) and report it gone at once,
        so that it is replaced; its heartbeats are refused from now on in any case."""
        with self._lock:
            stage = self._stages.get(resource_id)
            if stage is None or stage.ended is not None:
                return
            stage.lost = f"declared lost ({reason})"
        log.warning("TaskExecutor %s on Spark declared lost (%s); cancelling its Spark stage", resource_id, reason)
        self._cancel(stage)

    def _cancel(self, stage: _Stage) -> None:
        try:
            self._sc.cancelJobGroup(stage.group)
        except Exception:  # noqa: BLE001 - the SparkContext may be stopping; its executors go with it
            log.debug("cancelling Spark job group %s failed", stage.group, exc_info=True)

    def close(self, acknowledged: Iterable[str], timeout: float) -> None:
        """Wait up to ``timeout`` for the stages to return (TaskExecutors told to shut down), then
        cancel the job groups of stages still running and wait for them to end."""
        self._closed.set()
        with self._lock:
            stages = list(self._stages.values())
        deadline = time.monotonic() + timeout
        for stage in stages:
            if stage.thread is not None:
                stage.thread.join(max(0.0, deadline - time.monotonic()))
        for stage in stages:
            if stage.thread is not None and stage.thread.is_alive():
                log.warning("Spark stage %s still runs after %.0f s; cancelling it", stage.group, timeout)
                self._cancel(stage)
                stage.thread.join(30.0)


def _summary(text: str) -> str:
    """The first meaningful lines of a Spark error (its JVM stack trace is noise here)."""
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("at ")]
    return " ".join(lines[:3])[:1000]


def spark_cluster(config: Configuration, spark=None) -> ClusterEndpoint:
    """A cluster whose JobMaster runs here, in the Spark driver, and whose TaskExecutors run on
    ``spark``'s executors (default: the active session).

    ``jobmanager.rpc.address`` defaults to ``spark.driver.host``, which executors reach.

    Raises:
        ConfigurationError: no ``spark`` given and no active SparkSession.
    """
    from pyspark.sql import SparkSession

    if spark is None:
        spark = SparkSession.getActiveSession()
        if spark is None:
            raise ConfigurationError(
                "execution.target: spark needs an active SparkSession in this process (its executors run the "
                "TaskExecutors); create one first, e.g. with flinklike_spark.spark.session(), or use "
                "execution.target: local"
            )
    host = config.cluster.jobmanager_address or spark.sparkContext.getConf().get("spark.driver.host", "127.0.0.1")
    launcher = SparkTaskExecutorLauncher(spark, elastic=config.cluster.max_slots is not None)
    return ClusterEndpoint(config, launcher, rpc_host=host, resource_id_prefix="spark-taskmanager")
