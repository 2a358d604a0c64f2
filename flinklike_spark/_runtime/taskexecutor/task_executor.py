"""TaskExecutor: hosts slots and tasks; one per OS process (or thread in thread mode).

It runs one FlightNode serving control RPC (from the JobMaster) and data
streams (to remote consumers), owns the TaskSlotTable, and reports task state
changes and heartbeats to the JobMaster. The same code runs in a spawned
local child, in a thread of the client, and inside a Spark executor's Python
worker (``flinklike_spark.spark.task_executor_launcher``): it imports no pyspark.

A TaskExecutor that cannot reach its JobMaster for ``heartbeat.timeout``, or
whose heartbeats are refused that long (it was declared lost), closes itself,
so nothing keeps running where the JobMaster's process died (a killed Spark
driver leaves no TaskExecutor on the executors).

RPC handlers (called by the JobMaster): ``request_slot``, ``submit_task``,
``cancel_task``, ``free_slot``, ``release_job``, ``task_metrics``,
``trigger_checkpoint``, ``notify_checkpoint_complete``,
``notify_checkpoint_aborted``, ``shutdown``.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import os
import threading
import time

import psutil

from flinklike_spark._runtime.checkpoint_messages import CheckpointAck, CheckpointDecline
from flinklike_spark._runtime.collect_results import JobResultChannel
from flinklike_spark._runtime.deployment import TaskDeploymentDescriptor, TaskExecutionState
from flinklike_spark._runtime.gateways import JobMasterGateway, ResourceManagerGateway, serve_task_executor
from flinklike_spark._runtime.network.events import CheckpointBarrier
from flinklike_spark._runtime.network.partition_manager import ResultPartitionManager
from flinklike_spark._runtime.network.partition_server import PartitionRequestServer
from flinklike_spark._runtime.rpc import FlightNode, RpcClient
from flinklike_spark._runtime.taskexecutor.local_state import TaskLocalStateStore
from flinklike_spark._runtime.taskexecutor.registration import TaskExecutorRegistration
from flinklike_spark._runtime.taskexecutor.slot_table import TaskSlotTable
from flinklike_spark._runtime.taskexecutor.task import Task
from flinklike_spark._runtime.taskexecutor.timer_service import TimerService
from flinklike_spark.config import Configuration
from flinklike_spark.errors import NetworkError, SlotAllocationError, SlotNotFoundError

__all__ = ["TaskExecutor", "run_task_executor", "run_task_executor_process"]

log = logging.getLogger(__name__)


class TaskExecutor:
    """One TaskExecutor. ``start`` registers with the JobMaster; ``close`` is idempotent."""

    def __init__(
        self,
        *,
        resource_id: str,
        config: Configuration,
        secret: bytes,
        jobmaster_address: str,
        host: str = "127.0.0.1",
    ) -> None:
        self.resource_id = resource_id
        self._config = config
        self._secret = secret
        self.partition_manager = ResultPartitionManager()
        self._node = FlightNode(secret, data_server=PartitionRequestServer(self.partition_manager), host=host)
        self._jobmaster_client = RpcClient(jobmaster_address, secret)
        self._jobmaster = JobMasterGateway(self._jobmaster_client)
        self._checkpoint_responder = _LoggingCheckpointResponder(self._jobmaster)
        self._resource_manager = ResourceManagerGateway(self._jobmaster_client)
        self._timer_service = TimerService()
        self.slot_table = TaskSlotTable(
            config.cluster.slots_per_task_manager,
            timer_service=self._timer_service,
            default_slot_timeout=config.cluster.slot_timeout,
        )
        self._tasks_lock = threading.Lock()
        self._tasks: dict[str, Task] = {}
        #: task-local recovery (execution.state-recovery.from-local); copies live under TMPDIR,
        #: which is inside the TaskExecutor's private working directory when it has one
        self.local_state = TaskLocalStateStore() if config.checkpointing.local_recovery else None
        self._checkpoint_io = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="checkpoint-io")
        self._closed = threading.Event()
        self._heartbeat_thread = threading.Thread(target=self._heartbeat_loop, name="tm-heartbeat", daemon=True)

    @classmethod
    def from_bootstrap(cls, bootstrap) -> TaskExecutor:
        """A TaskExecutor for a :class:`~flinklike_spark._runtime.cluster.launcher.TaskExecutorBootstrap`
        (bound to ``bootstrap.host``, or 127.0.0.1)."""
        return cls(
            resource_id=bootstrap.resource_id,
            config=bootstrap.config,
            secret=bootstrap.secret,
            jobmaster_address=bootstrap.jobmaster_address,
            host=bootstrap.host or "127.0.0.1",
        )

    @property
    def address(self) -> str:
        return self._node.address

    def start(self) -> None:
        node = self._node
        serve_task_executor(node, self)
        node.start()
        self._timer_service.start()
        self.slot_table.start(_SlotActions(self))
        self._resource_manager.register_task_executor(
            TaskExecutorRegistration(
                resource_id=self.resource_id,
                address=node.address,
                num_slots=self._config.cluster.slots_per_task_manager,
                pid=os.getpid(),
                cpu_cores=os.cpu_count() or 0,
                physical_memory=psutil.virtual_memory().total,
            ),
        )
        self._heartbeat_thread.start()
        log.info("TaskExecutor %s started at %s", self.resource_id, node.address)

    def wait_closed(self, timeout: float | None = None) -> bool:
        return self._closed.wait(timeout)

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        for task in self._all_tasks():
            task.fail_externally(SlotAllocationError(f"TaskExecutor {self.resource_id} is shutting down"))
        for task in self._all_tasks():
            task.join(5.0)
        try:
            self.slot_table.close()
        except Exception:  # noqa: BLE001
            log.debug("slot table close failed", exc_info=True)
        self.partition_manager.release_all()
        self._timer_service.close()
        self._checkpoint_io.shutdown(wait=False, cancel_futures=True)
        self._node.shutdown()
        self._jobmaster_client.close()
        if self.local_state is not None:
            self.local_state.close()

    def _all_tasks(self) -> list[Task]:
        with self._tasks_lock:
            return list(self._tasks.values())

    def _free_slot_quietly(self, allocation_id: str) -> None:
        try:
            self.slot_table.free_slot(allocation_id)
        except Exception:  # noqa: BLE001
            log.debug("free_slot(%s) failed", allocation_id, exc_info=True)

    # -- RPC (gateways.TaskExecutorRpc, served by gateways.serve_task_executor) --------------------

    def request_slot(self, job_id: str, allocation_id: str, slot_index: int) -> bool:
        if not self.slot_table.allocate_slot(slot_index, job_id, allocation_id):
            raise SlotAllocationError(
                f"TaskExecutor {self.resource_id}: slot {slot_index} cannot be allocated to {allocation_id} "
                f"of job {job_id}; it is held by {self.slot_table.get_current_allocation(slot_index)}"
            )
        self.slot_table.mark_slot_active(allocation_id)
        return True

    def submit_task(self, tdd: TaskDeploymentDescriptor) -> bool:
        task = Task(
            tdd,
            partition_manager=self.partition_manager,
            secret=self._secret,
            report=self._report,
            checkpoint_responder=self._checkpoint_responder,
            checkpoint_io=self._checkpoint_io,
            result_channel=JobResultChannel(self._jobmaster, tdd.job_id),
            report_watermark=self._jobmaster.report_watermark,
            local_state=self.local_state,
        )
        with self._tasks_lock:
            if not self.slot_table.add_task(task):
                raise SlotAllocationError(
                    f"TaskExecutor {self.resource_id}: no active slot {tdd.allocation_id} for task {task.name}"
                )
            self._tasks[task.execution_id] = task
        task.start()
        return True

    def cancel_task(self, execution_id: str) -> bool:
        with self._tasks_lock:
            task = self._tasks.get(execution_id)
        if task is None:
            return False
        task.cancel()
        return True

    def _task(self, execution_id: str) -> Task | None:
        with self._tasks_lock:
            return self._tasks.get(execution_id)

    def trigger_checkpoint(self, execution_id: str, barrier: CheckpointBarrier) -> bool:
        task = self._task(execution_id)
        return task is not None and task.trigger_checkpoint(barrier)

    def notify_checkpoint_complete(self, execution_id: str, checkpoint_id: int) -> None:
        task = self._task(execution_id)
        if task is not None:
            task.notify_checkpoint(checkpoint_id, completed=True)

    def notify_checkpoint_aborted(self, execution_id: str, checkpoint_id: int) -> None:
        task = self._task(execution_id)
        if task is not None:
            task.notify_checkpoint(checkpoint_id, completed=False)

    def free_slot(self, allocation_id: str) -> int:
        return self.slot_table.free_slot(allocation_id)

    def release_job(self, job_id: str) -> None:
        if self.local_state is not None:
            self.local_state.release_job(job_id)
        for partition_id in self.partition_manager.partition_ids():
            if partition_id.startswith(f"{job_id}/"):
                self.partition_manager.release(partition_id)
        # As Flink's TaskExecutor does when a job's JobMaster disconnects: the job's empty slots become
        # inactive and are freed after taskmanager.slot.timeout unless the ResourceManager frees them
        # first (its free_slot follows for every slot it allocated); slots still holding tasks are freed now.
        for allocation_id in self.slot_table.get_allocation_ids_per_job(job_id):
            try:
                inactive = self.slot_table.mark_slot_inactive(allocation_id)
            except SlotNotFoundError:  # freed meanwhile
                continue
            if not inactive:
                self._free_slot_quietly(allocation_id)

    def task_metrics(self) -> dict[str, dict[str, float]]:
        with self._tasks_lock:
            tasks = list(self._tasks.values())
        metrics = {task.execution_id: task.metrics() for task in tasks}
        return {execution_id: values for execution_id, values in metrics.items() if values}  # started tasks only

    def shutdown(self) -> None:
        threading.Thread(target=self.close, name="tm-shutdown", daemon=True).start()

    # -- reporting ------------------------------------------------------------------------------

    def _report(self, state: TaskExecutionState) -> None:
        if state.state.is_terminal:
            with self._tasks_lock:
                task = self._tasks.pop(state.execution_id, None)
                if task is not None:
                    state = dataclasses.replace(state, metrics=task.metrics())  # the final counts, for the REST API
                    try:
                        self.slot_table.remove_task(state.execution_id)
                    except Exception:  # noqa: BLE001
                        log.debug("remove_task(%s) failed", state.execution_id, exc_info=True)
        self._jobmaster.update_task_execution_state(state)

    def _heartbeat_loop(self) -> None:
        interval = self._config.cluster.heartbeat_interval.total_seconds()
        timeout = self._config.cluster.heartbeat_timeout.total_seconds()
        last_ok = time.monotonic()
        while not self._closed.wait(interval):
            try:
                # Task metrics travel with the heartbeat (also from Spark executors, which nothing else polls).
                report = self.slot_table.create_slot_report(self.resource_id)
                known = self._resource_manager.heartbeat(
                    self.resource_id, report, self.task_metrics(), timeout=max(1.0, interval)
                )
                if known is not False:
                    last_ok = time.monotonic()
                why = "refused the heartbeats (declared this TaskExecutor lost)"
            except NetworkError:
                why = "unreachable"
            except Exception:  # noqa: BLE001
                log.debug("heartbeat failed", exc_info=True)
                continue
            if time.monotonic() - last_ok > timeout:
                log.error("JobMaster %s for %.0f s; TaskExecutor %s shuts down", why, timeout, self.resource_id)
                self.close()
                return


class _LoggingCheckpointResponder:
    """A task's :class:`CheckpointResponder`: the JobMaster gateway; a report it cannot deliver is logged.

    Never raises: the coordinator times out a checkpoint whose report was lost.
    """

    def __init__(self, jobmaster: JobMasterGateway) -> None:
        self._jobmaster = jobmaster

    def acknowledge_checkpoint(self, ack: CheckpointAck) -> None:
        try:
            self._jobmaster.acknowledge_checkpoint(ack)
        except Exception:  # noqa: BLE001 - the coordinator times the checkpoint out
            log.warning("could not acknowledge checkpoint %d to the JobMaster", ack.checkpoint_id, exc_info=True)

    def decline_checkpoint(self, decline: CheckpointDecline) -> None:
        try:
            self._jobmaster.decline_checkpoint(decline)
        except Exception:  # noqa: BLE001 - the coordinator times the checkpoint out
            log.warning("could not decline checkpoint %d to the JobMaster", decline.checkpoint_id, exc_info=True)


class _SlotActions:
    """The slot table's callbacks into its TaskExecutor (Flink's ``SlotActionsImpl``)."""

    def __init__(self, task_executor: TaskExecutor) -> None:
        self._te = task_executor

    def free_slot(self, allocation_id: str) -> None:
        self._te._free_slot_quietly(allocation_id)

    def timeout_slot(self, allocation_id: str, ticket) -> None:
        if self._te.slot_table.is_valid_timeout(allocation_id, ticket):
            log.info("slot %s timed out while inactive; freeing it", allocation_id)
            self._te._free_slot_quietly(allocation_id)


def run_task_executor(bootstrap) -> TaskExecutor:
    """Start a TaskExecutor from its bootstrap and block until it closed (shutdown RPC, or its
    JobMaster gone for ``heartbeat.timeout``); return it. Used where the caller's process lives on
    afterwards (a Spark Python worker)."""
    executor = TaskExecutor.from_bootstrap(bootstrap)
    try:
        executor.start()
        executor.wait_closed()
    finally:
        executor.close()
    return executor


def run_task_executor_process(bootstrap) -> None:
    """Entry point of a spawned TaskExecutor process: run until told to shut down, then exit."""
    logging.basicConfig(
        level=bootstrap.log_level, format=f"%(asctime)s %(levelname)s [{bootstrap.resource_id}] %(name)s: %(message)s"
    )
    executor = TaskExecutor.from_bootstrap(bootstrap)
    executor.start()
    executor.wait_closed()
    # Give the shutdown thread a moment to finish releasing resources.
    time.sleep(0.1)
    os._exit(0)
