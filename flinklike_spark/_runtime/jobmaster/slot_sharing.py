"""Slot sharing: Flink's default slot-sharing group for the JobMaster.

Subtask *i* of every vertex shares logical slot *i* (one physical slot from
the ResourceManager), so a job needs as many slots as its highest parallelism.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import uuid

from flinklike_spark._runtime.graph.execution_graph import (
    ExecutionVertexID,
)
from flinklike_spark._runtime.jobmaster.resource_manager import ResourceManager, SlotInfo
from flinklike_spark.errors import (
    SlotAllocationError,
)

__all__ = ["LogicalSlot", "SharedSlotAllocator"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class LogicalSlot:
    """One execution's share of a physical slot (Flink's ``LogicalSlot``)."""

    vertex_id: ExecutionVertexID
    physical: SlotInfo

    @property
    def resource_id(self) -> str:
        return self.physical.resource_id


class _SharedSlot:
    """A physical slot request shared by every subtask with the same index."""

    def __init__(self, future: concurrent.futures.Future[SlotInfo]) -> None:
        self.future = future
        self.users: set[ExecutionVertexID] = set()


class SharedSlotAllocator:
    """Slot sharing: subtask ``i`` of every job vertex runs in logical slot ``i``.

    A physical slot is requested from the ResourceManager when its first user
    asks and returned when its last user releases (or withdraws) it. All
    methods run on the JobMaster's main thread.
    """

    def __init__(self, job_id: str, resource_manager: ResourceManager, *, local_recovery: bool = False) -> None:
        self._job_id = job_id
        self._rm = resource_manager
        #: task-local recovery: logical slot index -> the TaskExecutor its last physical slot was on,
        #: asked for again when the slot is requested anew (the subtasks' local state copies are there)
        self._previous: dict[int, str] | None = {} if local_recovery else None
        self._shared: dict[int, _SharedSlot] = {}
        self._requests: dict[ExecutionVertexID, concurrent.futures.Future[LogicalSlot]] = {}

    def allocate_slots(
        self, requests: list[ExecutionVertexID]
    ) -> dict[ExecutionVertexID, concurrent.futures.Future[LogicalSlot]]:
        result = {}
        if self._previous:
            # Local recovery: slots whose previous TaskExecutor is alive ask first, so a slot whose
            # TaskExecutor was lost cannot take the survivor's free slot from the subtasks whose
            # local state is there (the RM serves requests as they come).
            requests = sorted(
                requests, key=lambda v: not self._rm.is_registered(self._previous.get(v.subtask_index, ""))
            )
        for vertex_id in requests:
            index = vertex_id.subtask_index
            shared = self._shared.get(index)
            if shared is None or not self._usable(shared.future):
                allocation_id = f"{self._job_id}/slot-{index}-{uuid.uuid4().hex[:8]}"
                previous = None if self._previous is None else self._previous.get(index)
                physical = self._rm.allocate(self._job_id, index, allocation_id, previous_resource=previous)
                if self._previous is not None:
                    physical.add_done_callback(functools.partial(self._remember, index))
                shared = self._shared[index] = _SharedSlot(physical)
            shared.users.add(vertex_id)
            logical: concurrent.futures.Future[LogicalSlot] = concurrent.futures.Future()
            self._requests[vertex_id] = logical

            def complete(physical: concurrent.futures.Future, vertex_id=vertex_id, logical=logical) -> None:
                if logical.done() or physical.cancelled():
                    return
                error = physical.exception()
                if error is not None:
                    logical.set_exception(error)
                else:
                    logical.set_result(LogicalSlot(vertex_id=vertex_id, physical=physical.result()))

            shared.future.add_done_callback(complete)
            result[vertex_id] = logical
        return result

    def _remember(self, index: int, physical: concurrent.futures.Future[SlotInfo]) -> None:
        if not physical.cancelled() and physical.exception() is None and self._previous is not None:
            self._previous[index] = physical.result().resource_id

    def _usable(self, physical: concurrent.futures.Future[SlotInfo]) -> bool:
        """A shared slot is reused unless its request failed or its TaskExecutor was lost."""
        if not physical.done():
            return True
        if physical.cancelled() or physical.exception() is not None:
            return False
        return self._rm.is_registered(physical.result().resource_id)

    def cancel(self, vertex_id: ExecutionVertexID) -> None:
        logical = self._requests.pop(vertex_id, None)
        if logical is not None and not logical.done():
            logical.set_exception(SlotAllocationError(f"slot request of {vertex_id} was withdrawn"))
            self._drop_user(vertex_id)

    def release(self, slot: LogicalSlot) -> None:
        self._requests.pop(slot.vertex_id, None)
        self._drop_user(slot.vertex_id)

    def _drop_user(self, vertex_id: ExecutionVertexID) -> None:
        index = vertex_id.subtask_index
        shared = self._shared.get(index)
        if shared is None:
            return
        shared.users.discard(vertex_id)
        if shared.users:
            return
        del self._shared[index]
        if shared.future.cancel():  # still waiting for a slot: withdraw the request
            return

        def give_back(physical: concurrent.futures.Future) -> None:
            if not physical.cancelled() and physical.exception() is None:
                self._rm.release(physical.result())

        shared.future.add_done_callback(give_back)
