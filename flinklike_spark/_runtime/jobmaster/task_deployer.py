"""Deployment of executions: a :class:`TaskDeploymentDescriptor` per execution, submitted over RPC.

:class:`RpcTaskDeployer` gives each execution its partition ids, its producers'
addresses, its source splits and what it restores, and submits it to the
TaskExecutor holding its slot.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
from typing import Any

from flinklike_spark._runtime.deployment import (
    CheckpointDeployment,
    InputChannelDeployment,
    InputGateDeployment,
    RestoreDeployment,
    RestoreGate,
    ResultPartitionDeployment,
    TaskDeploymentDescriptor,
)
from flinklike_spark._runtime.graph.execution_graph import (
    Execution,
    ExecutionAttemptID,
    ExecutionGraph,
    ExecutionVertexID,
    IntermediateResultPartitionID,
)
from flinklike_spark._runtime.jobmaster.resource_manager import ResourceManager
from flinklike_spark._runtime.jobmaster.slot_sharing import LogicalSlot
from flinklike_spark.config import Configuration
from flinklike_spark.errors import (
    SlotAllocationError,
)

__all__ = ["RpcTaskDeployer"]


class RpcTaskDeployer:
    """Builds TaskDeploymentDescriptors and submits / cancels tasks over RPC."""

    def __init__(
        self,
        graph: ExecutionGraph,
        config: Configuration,
        resource_manager: ResourceManager,
        on_cancel_unacknowledged,
        *,
        checkpointing: CheckpointDeployment | None = None,
        restore: RestoreDeployment | None = None,
        lineage_id: str = "",
    ) -> None:
        self._graph = graph
        self._config = config
        self._rm = resource_manager
        self._on_cancel_unacknowledged = on_cancel_unacknowledged
        self._checkpointing = checkpointing
        self._restore = restore
        self._lineage_id = lineage_id
        self._restore_by_vertex: dict[ExecutionVertexID, RestoreDeployment | None] = {}
        self._submissions: dict[ExecutionAttemptID, concurrent.futures.Future[None]] = {}
        self._splits: dict[str, list[list[Any]]] = {}

    def set_restore(self, vertex_ids: list[ExecutionVertexID], restore: RestoreDeployment | None) -> None:
        """Restarted vertices start from ``restore`` (None: from scratch) instead of the job's initial one."""
        for vertex_id in vertex_ids:
            self._restore_by_vertex[vertex_id] = restore

    def partition_id(self, partition: IntermediateResultPartitionID) -> str:
        """The network id of a producer's partition: job, producer *attempt* and output index.

        Including the attempt means a restarted producer never serves a consumer
        that was wired to its predecessor.
        """
        producer = self._graph.get_vertex(partition.producer).current_execution
        return f"{self._graph.job_id}/{producer.attempt_id.full_id}/{partition.output_index}"

    def _splits_of(self, job_vertex_id: str, subtask_index: int) -> tuple[Any, ...]:
        job_vertex = self._graph.get_job_vertex(job_vertex_id).job_vertex
        if not job_vertex.is_source:
            return ()
        if job_vertex_id not in self._splits:
            parallelism = job_vertex.parallelism
            source = job_vertex.operators[0].function
            self._splits[job_vertex_id] = source.assign_splits(source.create_splits(parallelism), parallelism)
        return tuple(self._splits[job_vertex_id][subtask_index])

    def descriptor(self, execution: Execution, slot: LogicalSlot) -> TaskDeploymentDescriptor:
        vertex_id = execution.vertex_id
        job_vertex = self._graph.get_job_vertex(vertex_id.job_vertex_id).job_vertex
        gates = []
        gate_specs = self._graph.input_gates(vertex_id)
        for gate in gate_specs:
            channels = []
            for channel in gate.channels:
                producer = self._graph.get_vertex(channel.producer).current_execution.assigned_slot
                if producer is None:
                    raise SlotAllocationError(
                        f"cannot deploy {vertex_id}: its producer {channel.producer} has no slot yet"
                    )
                channels.append(
                    InputChannelDeployment(
                        partition_id=self.partition_id(channel.partition_id),
                        subpartition=channel.subpartition_index,
                        address=producer.physical.address,
                        local=producer.resource_id == slot.resource_id,
                    )
                )
            gates.append(InputGateDeployment(channels=tuple(channels)))
        partitions = tuple(
            ResultPartitionDeployment(
                partition_id=self.partition_id(spec.partition_id),
                num_subpartitions=spec.num_subpartitions,
                partitioner=spec.partitioner,
            )
            for spec in self._graph.result_partitions(vertex_id)
        )
        restore = self._restore_by_vertex.get(vertex_id, self._restore)
        return TaskDeploymentDescriptor(
            job_id=self._graph.job_id,
            job_name=self._graph.job_name,
            execution_id=execution.attempt_id.full_id,
            vertex_id=vertex_id.job_vertex_id,
            task_name=job_vertex.name,
            subtask_index=vertex_id.subtask_index,
            parallelism=job_vertex.parallelism,
            max_parallelism=job_vertex.max_parallelism,
            attempt_number=execution.attempt_number,
            allocation_id=slot.physical.allocation_id,
            operators=job_vertex.operators,
            input_gates=tuple(gates),
            result_partitions=partitions,
            splits=self._splits_of(vertex_id.job_vertex_id, vertex_id.subtask_index),
            config=self._config,
            checkpointing=self._checkpointing,
            lineage_id=self._lineage_id,
            restore=None
            if restore is None
            else dataclasses.replace(
                restore,
                gates=tuple(
                    RestoreGate(
                        producer_vertex_id=gate.producer_job_vertex_id,
                        output_index=gate.channels[0].partition_id.output_index,
                        partitioner=job_vertex.inputs[gate.input_index].partitioner,
                    )
                    for gate in gate_specs
                ),
            ),
        )

    def deploy(self, execution: Execution, slot: LogicalSlot) -> concurrent.futures.Future[None]:
        try:
            tdd = self.descriptor(execution, slot)
        except Exception as exc:  # noqa: BLE001 - becomes the execution's failure
            future: concurrent.futures.Future[None] = concurrent.futures.Future()
            future.set_exception(exc)
            return future
        submitted = self._rm.call_async(slot.resource_id, lambda gateway: gateway.submit_task(tdd))
        self._submissions[execution.attempt_id] = submitted
        submitted.add_done_callback(lambda _f: self._submissions.pop(execution.attempt_id, None))
        return submitted

    def cancel(self, execution: Execution) -> None:
        slot: LogicalSlot | None = execution.assigned_slot
        attempt = execution.attempt_id
        if slot is None:
            self._on_cancel_unacknowledged(attempt)
            return
        submitted = self._submissions.get(attempt)
        if submitted is not None and not submitted.done():
            # A cancel overtaking the submission would find no task, and the task would then run
            # unseen in a slot the JobMaster believes free: cancel once the submission is answered.
            submitted.add_done_callback(lambda _f: self._cancel_submitted(execution, slot))
            return
        self._cancel_submitted(execution, slot)

    def _cancel_submitted(self, execution: Execution, slot: LogicalSlot) -> None:
        attempt = execution.attempt_id
        future = self._rm.call_async(slot.resource_id, lambda gateway: gateway.cancel_task(attempt.full_id))

        def done(f: concurrent.futures.Future) -> None:
            # The TaskExecutor does not know the task (it already ended, never
            # arrived, or the TaskExecutor is gone): no CANCELED report will come.
            if f.exception() is not None or f.result() is False:
                self._on_cancel_unacknowledged(attempt)

        future.add_done_callback(done)
