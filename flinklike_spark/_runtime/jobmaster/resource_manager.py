"""ResourceManager of the local cluster: registered TaskExecutors, their slots and liveness.

Registration, heartbeats and losses arrive on RPC threads; the sets they change
are guarded by a lock, and job listeners are notified on the JobMaster's main
thread. RPC calls to TaskExecutors go through a small I/O pool so the main
thread never blocks on the network.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import threading
import time

from collections.abc import Callable
from typing import Any, Protocol

from flinklike_spark.config import Configuration
from flinklike_spark.errors import SlotAllocationError
from flinklike_spark._runtime.rpc import RpcClient

__all__ = ["LivenessProbe", "RegisteredTaskExecutor", "ResourceManager", "SlotInfo", "TaskExecutorLossListener"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SlotInfo:
    """A physical slot allocated to a job: slot ``slot_index`` of TaskExecutor ``resource_id``."""

    resource_id: str
    address: str
    slot_index: int
    allocation_id: str


@dataclasses.dataclass(kw_only=True)
class RegisteredTaskExecutor:
    resource_id: str
    address: str
    num_slots: int
    pid: int
    gateway: RpcClient
    last_heartbeat: float


class TaskExecutorLossListener(Protocol):
    def task_executor_lost(self, resource_id: str, reason: str) -> None: ...


LivenessProbe = Callable[[str], "str | None"]
"""``probe(resource_id)``: why that TaskExecutor is known to be dead (e.g. its process
exited), or None if it may be alive. Must be quick and must not block."""


class ResourceManager:
    """Registered TaskExecutors, their slots and liveness.

    Args:
        config: the cluster's configuration (heartbeat interval and timeout).
        secret: the cluster secret for RPC to TaskExecutors.
        main_thread: where loss listeners are called.
        liveness_probe: asked by :meth:`detect_dead_task_executors`; the local
            cluster knows when a TaskExecutor's process exited.
    """

    def __init__(
        self, config: Configuration, secret: bytes, main_thread, *, liveness_probe: LivenessProbe | None = None
    ) -> None:
        self._config = config
        self._secret = secret
        self._main = main_thread
        self._liveness_probe = liveness_probe
        self._lock = threading.Condition()
        self._executors: dict[str, RegisteredTaskExecutor] = {}
        self._allocated: dict[tuple[str, int], str] = {}  # (resource id, slot index) -> allocation id
        self._listeners: list[TaskExecutorLossListener] = []
        self.io = concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="jm-io")

    # -- membership ---------------------------------------------------------------------------

    def register(self, registration) -> None:
        gateway = RpcClient(registration.address, self._secret)
        with self._lock:
            self._executors[registration.resource_id] = RegisteredTaskExecutor(
                resource_id=registration.resource_id,
                address=registration.address,
                num_slots=registration.num_slots,
                pid=registration.pid,
                gateway=gateway,
                last_heartbeat=time.monotonic(),
            )
            self._lock.notify_all()
        log.info("TaskExecutor %s registered (%d slots, pid %d)", registration.resource_id, registration.num_slots,
                 registration.pid)  # fmt: skip

    def num_registered(self) -> int:
        with self._lock:
            return len(self._executors)

    def wait_for_task_executors(self, count: int, *, timeout: float) -> bool:
        with self._lock:
            return self._lock.wait_for(lambda: len(self._executors) >= count, timeout)

    def heartbeat(self, resource_id: str, metrics: dict[str, Any]) -> bool:
        with self._lock:
            executor = self._executors.get(resource_id)
            if executor is None:
                return False
            executor.last_heartbeat = time.monotonic()
            return True

    def add_job_listener(self, listener: TaskExecutorLossListener) -> None:
        with self._lock:
            self._listeners.append(listener)

    def start_heartbeat_checks(self) -> None:
        interval = self._config.cluster.heartbeat_interval

        def check() -> None:
            timeout = self._config.cluster.heartbeat_timeout.total_seconds()
            now = time.monotonic()
            with self._lock:
                expired = [e.resource_id for e in self._executors.values() if now - e.last_heartbeat > timeout]
            for resource_id in expired:
                self.task_executor_lost(resource_id, f"heartbeat of TaskExecutor {resource_id} timed out")
            self._main.schedule(interval, check)

        self._main.schedule(interval, check)

    def task_executor_lost(self, resource_id: str, reason: str) -> None:
        """Remove a TaskExecutor and tell every job (on the main thread). Idempotent."""
        with self._lock:
            executor = self._executors.pop(resource_id, None)
            if executor is None:
                return
            for key in [k for k in self._allocated if k[0] == resource_id]:
                del self._allocated[key]
            listeners = list(self._listeners)
        log.warning("TaskExecutor %s lost: %s", resource_id, reason)
        executor.gateway.close()
        for listener in listeners:
            self._main.execute(lambda listener=listener: listener.task_executor_lost(resource_id, reason))

    def detect_dead_task_executors(self) -> dict[str, str]:
        """Ask the liveness probe about every registered TaskExecutor now; report the dead ones lost.

        For when a symptom (a consumer's broken connection) may arrive before
        the regular detection (process monitor, heartbeats) noticed the death.
        Returns resource id -> reason of the TaskExecutors found dead.
        """
        probe = self._liveness_probe
        if probe is None:
            return {}
        with self._lock:
            resource_ids = list(self._executors)
        dead = {rid: reason for rid in resource_ids if (reason := probe(rid)) is not None}
        for resource_id, reason in dead.items():
            self.task_executor_lost(resource_id, reason)
        return dead

    # -- slots --------------------------------------------------------------------------------

    def physical_slots(self) -> list[tuple[str, int]]:
        """Every (resource id, slot index), interleaved across TaskExecutors to spread load."""
        with self._lock:
            return self.physical_slots_locked()

    def allocate(self, job_id: str, preferred: int, allocation_id: str) -> concurrent.futures.Future[SlotInfo]:
        """Allocate a free slot for ``job_id``, preferring the ``preferred``-th in interleaved order."""
        with self._lock:
            slots = self.physical_slots_locked()
            free = [s for s in slots if s not in self._allocated]
            if not free:
                future: concurrent.futures.Future = concurrent.futures.Future()
                future.set_exception(
                    SlotAllocationError(
                        f"job {job_id}: no free slot left; the cluster has {len(slots)} slots "
                        f"({len(self._executors)} TaskExecutors x taskmanager.numberOfTaskSlots); raise "
                        f"local.number-taskmanager or taskmanager.numberOfTaskSlots, or lower the parallelism"
                    )
                )
                return future
            choice = slots[preferred % len(slots)] if slots[preferred % len(slots)] in free else free[0]
            self._allocated[choice] = allocation_id
            executor = self._executors[choice[0]]
        slot = SlotInfo(
            resource_id=executor.resource_id, address=executor.address, slot_index=choice[1],
            allocation_id=allocation_id,
        )  # fmt: skip

        def request() -> SlotInfo:
            executor.gateway.call("request_slot", (job_id, allocation_id, slot.slot_index), timeout=30.0)
            return slot

        future = self.io.submit(request)
        future.add_done_callback(lambda f: f.exception() is not None and self._forget(choice, allocation_id))
        return future

    def physical_slots_locked(self) -> list[tuple[str, int]]:
        executors = sorted(self._executors.values(), key=lambda e: e.resource_id)
        most = max((e.num_slots for e in executors), default=0)
        return [(e.resource_id, i) for i in range(most) for e in executors if i < e.num_slots]

    def _forget(self, key: tuple[str, int], allocation_id: str) -> None:
        with self._lock:
            if self._allocated.get(key) == allocation_id:
                del self._allocated[key]

    def release(self, slot: SlotInfo) -> None:
        self._forget((slot.resource_id, slot.slot_index), slot.allocation_id)
        self.call_async(slot.resource_id, "free_slot", slot.allocation_id)

    def call_async(self, resource_id: str, method: str, payload: Any = None) -> concurrent.futures.Future:
        with self._lock:
            executor = self._executors.get(resource_id)
        if executor is None:
            future: concurrent.futures.Future = concurrent.futures.Future()
            future.set_exception(SlotAllocationError(f"TaskExecutor {resource_id} is not registered"))
            return future
        return self.io.submit(executor.gateway.call, method, payload)

    def release_job(self, job_id: str) -> None:
        with self._lock:
            resource_ids = list(self._executors)
            for key in [k for k, a in self._allocated.items() if a.startswith(f"{job_id}/")]:
                del self._allocated[key]
        for resource_id in resource_ids:
            self.call_async(resource_id, "release_job", job_id)

    def task_metrics(self, timeout: float = 2.0) -> dict[str, dict[str, float]]:
        with self._lock:
            executors = list(self._executors.values())
        futures = [self.io.submit(e.gateway.call, "task_metrics", None, timeout=timeout) for e in executors]
        merged: dict[str, dict[str, float]] = {}
        for future in futures:
            try:
                merged.update(future.result(timeout + 1))
            except Exception:  # noqa: BLE001 - metrics are best effort
                log.debug("task_metrics failed", exc_info=True)
        return merged

    def shutdown_task_executors(self) -> set[str]:
        """Tell every registered TaskExecutor to shut down; return the ids that acknowledged.

        They are deregistered first: a TaskExecutor we shut down stops
        heartbeating, and that is not a loss to report.
        """
        with self._lock:
            executors = list(self._executors.values())
            self._executors.clear()
            self._allocated.clear()
        acknowledged = set()
        for executor in executors:
            try:
                executor.gateway.call("shutdown", None, timeout=5.0)
                acknowledged.add(executor.resource_id)
            except Exception:  # noqa: BLE001 - it may already be gone
                log.debug("shutdown of %s failed", executor.resource_id, exc_info=True)
            finally:
                executor.gateway.close()
        return acknowledged

    def close(self) -> None:
        with self._lock:
            executors = list(self._executors.values())
            self._executors.clear()
        for executor in executors:
            executor.gateway.close()
        self.io.shutdown(wait=False, cancel_futures=True)



