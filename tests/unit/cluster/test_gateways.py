"""The gateways carry typed messages: an acknowledgement and a decline each travel in a message of
their own over a real Flight node and reach the endpoint's method of the same name."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from checkpointing.schemas import CheckpointKind, SnapshotAlignment
from flinklike_spark._runtime.checkpoint_messages import CheckpointAck, CheckpointDecline
from flinklike_spark._runtime.gateways import (
    JobMasterGateway,
    TaskExecutorGateway,
    TriggerCheckpoint,
    serve_cluster_endpoint,
    serve_task_executor,
)
from flinklike_spark._runtime.network.events import AlignmentType, CheckpointBarrier, CheckpointOptions
from flinklike_spark._runtime.rpc import FlightNode, RpcClient, generate_secret
from flinklike_spark.errors import CheckpointDeclineReason

pytestmark = pytest.mark.timeout(60)


class RecordingEndpoint:
    """A cluster endpoint that records what it was told (every other call is unused here)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def acknowledge_checkpoint(self, ack: CheckpointAck) -> bool:
        self.calls.append(("acknowledge_checkpoint", ack))
        return True

    def decline_checkpoint(self, decline: CheckpointDecline) -> bool:
        self.calls.append(("decline_checkpoint", decline))
        return True


class RecordingTaskExecutor:
    def __init__(self) -> None:
        self.barriers: list[tuple[str, CheckpointBarrier]] = []

    def trigger_checkpoint(self, execution_id: str, barrier: CheckpointBarrier) -> bool:
        self.barriers.append((execution_id, barrier))
        return True


@pytest.fixture
def served():
    secret = generate_secret()
    nodes: list[FlightNode] = []
    clients: list[RpcClient] = []

    def serve(register, component):
        node = FlightNode(secret)
        register(node, component)
        node.start()
        nodes.append(node)
        client = RpcClient(node.address, secret)
        clients.append(client)
        return client

    yield serve
    for client in clients:
        client.close()
    for node in nodes:
        node.shutdown()


def test_acknowledge_and_decline_reach_their_own_endpoint_methods(served):
    endpoint = RecordingEndpoint()
    gateway = JobMasterGateway(served(serve_cluster_endpoint, endpoint))
    ack = CheckpointAck(job_id="j", execution_id="e", checkpoint_id=3, handles=(), mode=SnapshotAlignment.UNALIGNED,
                        alignment=timedelta(milliseconds=5))  # fmt: skip
    decline = CheckpointDecline(job_id="j", execution_id="e", checkpoint_id=4,
                                reason=CheckpointDeclineReason.SUBSUMED, message="subsumed by 5")  # fmt: skip
    gateway.acknowledge_checkpoint(ack)
    gateway.decline_checkpoint(decline)
    assert endpoint.calls == [("acknowledge_checkpoint", ack), ("decline_checkpoint", decline)]


def test_a_savepoint_barrier_arrives_with_its_kind_as_the_enum(served):
    task_executor = RecordingTaskExecutor()
    gateway = TaskExecutorGateway(served(serve_task_executor, task_executor))
    options = CheckpointOptions(checkpoint_type=CheckpointKind.SAVEPOINT, alignment=AlignmentType.FORCED_ALIGNED)
    barrier = CheckpointBarrier(7, 1_000, options)
    assert gateway.trigger_checkpoint("e", barrier) is True
    [(execution_id, received)] = task_executor.barriers
    assert execution_id == "e" and received == barrier
    assert received.options.checkpoint_type is CheckpointKind.SAVEPOINT


def test_every_message_field_names_a_type_not_any():
    import flinklike_spark._runtime.gateways as gateways

    messages = [
        getattr(gateways, name) for name in gateways.__all__ if dataclasses.is_dataclass(getattr(gateways, name))
    ]
    assert TriggerCheckpoint in messages
    untyped = [(m.__name__, f.name) for m in messages for f in dataclasses.fields(m) if "Any" in str(f.type)]
    assert untyped == []
