"""Typed RPC between the cluster's processes (Flink's ``TaskExecutorGateway``, ``JobMasterGateway``, ...).

Every RPC is one frozen message dataclass below. The calling side holds a
gateway whose methods build the message and send it over an
:class:`~flinklike_spark._runtime.rpc.RpcClient`; the serving side registers
one handler per message type on its
:class:`~flinklike_spark._runtime.rpc.FlightNode` (:func:`serve_task_executor`,
:func:`serve_cluster_endpoint`), which unpacks the message into a call of the
component's method of the same name. A walk from the checkpoint coordinator to
a task and back is therefore a chain of method calls:
``TaskExecutorGateway.trigger_checkpoint`` -> ``TaskExecutor.trigger_checkpoint``
-> ... -> ``JobMasterGateway.acknowledge_checkpoint`` -> ``ClusterEndpoint.acknowledge_checkpoint``.

Gateways:

* :class:`TaskExecutorGateway`: what the JobMaster and the ResourceManager ask
  of one TaskExecutor (slots, tasks, checkpoints, metrics, shutdown).
* :class:`ResourceManagerGateway`: what a TaskExecutor tells the
  ResourceManager (registration, heartbeats with slot reports).
* :class:`JobMasterGateway`: what a TaskExecutor tells the JobMaster of a task
  (execution state updates, checkpoint acknowledgements and declines, batches
  a collect sink publishes for the client's ``execute_and_collect``, source
  watermarks for watermark alignment).

The last two are served by the one cluster endpoint (the driver process), so a
TaskExecutor reaches both over one client.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from flinklike_spark._runtime.checkpoint_messages import CheckpointAck, CheckpointDecline
    from flinklike_spark._runtime.deployment import TaskDeploymentDescriptor, TaskExecutionState
    from flinklike_spark._runtime.network.events import CheckpointBarrier
    from flinklike_spark._runtime.rpc import FlightNode, RpcClient
    from flinklike_spark._runtime.taskexecutor.registration import TaskExecutorRegistration
    from flinklike_spark._runtime.taskexecutor.task_slot import SlotReport
    from flinklike_spark._runtime.watermark_alignment import WatermarkReport

__all__ = [
    "AcknowledgeCheckpoint",
    "CancelTask",
    "ClusterEndpointRpc",
    "DeclineCheckpoint",
    "DeliverCollectResult",
    "FreeSlot",
    "Heartbeat",
    "JobMasterGateway",
    "NotifyCheckpointAborted",
    "NotifyCheckpointComplete",
    "RegisterTaskExecutor",
    "ReleaseJob",
    "ReportWatermark",
    "RequestSlot",
    "RequestTaskMetrics",
    "ResourceManagerGateway",
    "Shutdown",
    "SubmitTask",
    "TaskExecutorGateway",
    "TaskExecutorRpc",
    "TriggerCheckpoint",
    "UpdateTaskExecutionState",
    "serve_cluster_endpoint",
    "serve_task_executor",
]

_message = dataclasses.dataclass(frozen=True, kw_only=True)


# -- messages to a TaskExecutor ----------------------------------------------------------------


@_message
class RequestSlot:
    """Allocate slot ``slot_index`` to ``allocation_id`` of ``job_id`` and mark it active."""

    job_id: str
    allocation_id: str
    slot_index: int


@_message
class SubmitTask:
    """Start the task the descriptor describes in its (active) slot."""

    descriptor: TaskDeploymentDescriptor


@_message
class CancelTask:
    execution_id: str


@_message
class TriggerCheckpoint:
    """Inject ``barrier`` at a source task (the answer says whether the task took it)."""

    execution_id: str
    barrier: CheckpointBarrier


@_message
class NotifyCheckpointComplete:
    execution_id: str
    checkpoint_id: int


@_message
class NotifyCheckpointAborted:
    execution_id: str
    checkpoint_id: int


@_message
class FreeSlot:
    allocation_id: str


@_message
class ReleaseJob:
    """The job is over on this TaskExecutor: release its partitions and slots."""

    job_id: str


@_message
class RequestTaskMetrics:
    """Every task's metrics, by execution id."""


@_message
class Shutdown:
    """Close the TaskExecutor (its process exits)."""


# -- messages to the cluster endpoint (ResourceManager and JobMaster) ------------------------------


@_message
class RegisterTaskExecutor:
    registration: TaskExecutorRegistration


@_message
class Heartbeat:
    """A TaskExecutor's heartbeat with its slot report and its tasks' metrics (execution id -> name -> value);
    the answer is False once it was declared lost."""

    resource_id: str
    slot_report: SlotReport
    metrics: dict[str, dict[str, float]] | None = None


@_message
class UpdateTaskExecutionState:
    state: TaskExecutionState


@_message
class AcknowledgeCheckpoint:
    """A task acknowledges a checkpoint with its state handles."""

    ack: CheckpointAck


@_message
class DeclineCheckpoint:
    """A task declines a checkpoint (it will never acknowledge it)."""

    decline: CheckpointDecline


@_message
class DeliverCollectResult:
    """One batch a collect sink published for ``execute_and_collect`` (Arrow IPC stream bytes).

    The answer is False if nobody collects ``collect_id`` of ``job_id`` any more
    (see :mod:`flinklike_spark._runtime.collect_results`).
    """

    job_id: str
    collect_id: str
    batch_id: str
    payload: bytes


@_message
class ReportWatermark:
    """A source subtask's watermark for its alignment group; the answer is the highest it may reach."""

    report: WatermarkReport


# -- calling sides ---------------------------------------------------------------------------------


class TaskExecutorGateway:
    """Calls into one TaskExecutor; every method blocks for the answer (run them on an I/O pool).

    Raises (every method): what :meth:`RpcClient.call` raises: the remote exception,
    :class:`~flinklike_spark.errors.RpcTimeoutError`, :class:`~flinklike_spark.errors.BrokenChannelError`, ...
    """

    def __init__(self, client: RpcClient) -> None:
        self._client = client

    def __repr__(self) -> str:
        return f"TaskExecutorGateway({self._client.address!r})"

    @property
    def address(self) -> str:
        return self._client.address

    def request_slot(self, job_id: str, allocation_id: str, slot_index: int, *, timeout: float = 30.0) -> bool:
        return self._client.call(RequestSlot(job_id=job_id, allocation_id=allocation_id, slot_index=slot_index),
                                 timeout=timeout)  # fmt: skip

    def submit_task(self, descriptor: TaskDeploymentDescriptor) -> bool:
        return self._client.call(SubmitTask(descriptor=descriptor))

    def cancel_task(self, execution_id: str) -> bool:
        return self._client.call(CancelTask(execution_id=execution_id))

    def trigger_checkpoint(self, execution_id: str, barrier: CheckpointBarrier) -> bool:
        return self._client.call(TriggerCheckpoint(execution_id=execution_id, barrier=barrier))

    def notify_checkpoint_complete(self, execution_id: str, checkpoint_id: int) -> None:
        self._client.call(NotifyCheckpointComplete(execution_id=execution_id, checkpoint_id=checkpoint_id))

    def notify_checkpoint_aborted(self, execution_id: str, checkpoint_id: int) -> None:
        self._client.call(NotifyCheckpointAborted(execution_id=execution_id, checkpoint_id=checkpoint_id))

    def free_slot(self, allocation_id: str) -> int:
        return self._client.call(FreeSlot(allocation_id=allocation_id))

    def release_job(self, job_id: str) -> None:
        self._client.call(ReleaseJob(job_id=job_id))

    def task_metrics(self, *, timeout: float = 2.0) -> dict[str, dict[str, float]]:
        return self._client.call(RequestTaskMetrics(), timeout=timeout)

    def shutdown(self, *, timeout: float = 5.0) -> None:
        self._client.call(Shutdown(), timeout=timeout)

    def close(self) -> None:
        self._client.close()


class ResourceManagerGateway:
    """A TaskExecutor's calls to the ResourceManager."""

    def __init__(self, client: RpcClient) -> None:
        self._client = client

    def register_task_executor(self, registration: TaskExecutorRegistration) -> bool:
        return self._client.call(RegisterTaskExecutor(registration=registration))

    def heartbeat(
        self,
        resource_id: str,
        slot_report: SlotReport,
        metrics: dict[str, dict[str, float]] | None = None,
        *,
        timeout: float,
    ) -> bool:
        message = Heartbeat(resource_id=resource_id, slot_report=slot_report, metrics=metrics)
        return self._client.call(message, timeout=timeout)


class JobMasterGateway:
    """A TaskExecutor's calls to the JobMaster of its tasks (also a task's ``CheckpointResponder``)."""

    def __init__(self, client: RpcClient) -> None:
        self._client = client

    def update_task_execution_state(self, state: TaskExecutionState) -> None:
        self._client.call(UpdateTaskExecutionState(state=state))

    def acknowledge_checkpoint(self, ack: CheckpointAck) -> None:
        self._client.call(AcknowledgeCheckpoint(ack=ack))

    def decline_checkpoint(self, decline: CheckpointDecline) -> None:
        self._client.call(DeclineCheckpoint(decline=decline))

    def deliver_collect_result(self, job_id: str, collect_id: str, batch_id: str, payload: bytes) -> bool:
        return self._client.call(
            DeliverCollectResult(job_id=job_id, collect_id=collect_id, batch_id=batch_id, payload=payload)
        )

    def report_watermark(self, report: WatermarkReport) -> int:
        # best effort and frequent: a report that cannot get through is retried at the next update
        return self._client.call(ReportWatermark(report=report), timeout=2.0)


# -- serving sides ---------------------------------------------------------------------------------


class TaskExecutorRpc(Protocol):
    """What a TaskExecutor serves (one method per message to a TaskExecutor)."""

    def request_slot(self, job_id: str, allocation_id: str, slot_index: int) -> bool: ...
    def submit_task(self, descriptor: TaskDeploymentDescriptor) -> bool: ...
    def cancel_task(self, execution_id: str) -> bool: ...
    def trigger_checkpoint(self, execution_id: str, barrier: CheckpointBarrier) -> bool: ...
    def notify_checkpoint_complete(self, execution_id: str, checkpoint_id: int) -> None: ...
    def notify_checkpoint_aborted(self, execution_id: str, checkpoint_id: int) -> None: ...
    def free_slot(self, allocation_id: str) -> int: ...
    def release_job(self, job_id: str) -> None: ...
    def task_metrics(self) -> dict[str, dict[str, float]]: ...
    def shutdown(self) -> None: ...


class ClusterEndpointRpc(Protocol):
    """What the cluster endpoint serves for the ResourceManager and the JobMasters."""

    def register_task_executor(self, registration: TaskExecutorRegistration) -> bool: ...
    def heartbeat(
        self, resource_id: str, slot_report: SlotReport, metrics: dict[str, dict[str, float]] | None = None
    ) -> bool: ...
    def update_task_execution_state(self, state: TaskExecutionState) -> bool: ...
    def acknowledge_checkpoint(self, ack: CheckpointAck) -> bool: ...
    def decline_checkpoint(self, decline: CheckpointDecline) -> bool: ...
    def deliver_collect_result(self, job_id: str, collect_id: str, batch_id: str, payload: bytes) -> bool: ...
    def report_watermark(self, report: WatermarkReport) -> int: ...


def serve_task_executor(node: FlightNode, te: TaskExecutorRpc) -> None:
    """Register ``te``'s handler for every message a TaskExecutor serves."""
    node.register_handler(RequestSlot, lambda m: te.request_slot(m.job_id, m.allocation_id, m.slot_index))
    node.register_handler(SubmitTask, lambda m: te.submit_task(m.descriptor))
    node.register_handler(CancelTask, lambda m: te.cancel_task(m.execution_id))
    node.register_handler(TriggerCheckpoint, lambda m: te.trigger_checkpoint(m.execution_id, m.barrier))
    node.register_handler(NotifyCheckpointComplete,
                          lambda m: te.notify_checkpoint_complete(m.execution_id, m.checkpoint_id))  # fmt: skip
    node.register_handler(NotifyCheckpointAborted,
                          lambda m: te.notify_checkpoint_aborted(m.execution_id, m.checkpoint_id))  # fmt: skip
    node.register_handler(FreeSlot, lambda m: te.free_slot(m.allocation_id))
    node.register_handler(ReleaseJob, lambda m: te.release_job(m.job_id))
    node.register_handler(RequestTaskMetrics, lambda m: te.task_metrics())
    node.register_handler(Shutdown, lambda m: te.shutdown())


def serve_cluster_endpoint(node: FlightNode, endpoint: ClusterEndpointRpc) -> None:
    """Register ``endpoint``'s handler for every message the cluster endpoint serves."""
    node.register_handler(RegisterTaskExecutor, lambda m: endpoint.register_task_executor(m.registration))
    node.register_handler(Heartbeat, lambda m: endpoint.heartbeat(m.resource_id, m.slot_report, m.metrics))
    node.register_handler(UpdateTaskExecutionState, lambda m: endpoint.update_task_execution_state(m.state))
    node.register_handler(AcknowledgeCheckpoint, lambda m: endpoint.acknowledge_checkpoint(m.ack))
    node.register_handler(DeclineCheckpoint, lambda m: endpoint.decline_checkpoint(m.decline))
    node.register_handler(DeliverCollectResult,
                          lambda m: endpoint.deliver_collect_result(m.job_id, m.collect_id, m.batch_id, m.payload))  # fmt: skip
    node.register_handler(ReportWatermark, lambda m: endpoint.report_watermark(m.report))
