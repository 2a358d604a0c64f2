"""ResourceManager of the local cluster: registered TaskExecutors, their slots and liveness.

Registration, heartbeats and losses arrive on RPC threads; the sets they change
are guarded by a lock, and job listeners are notified on the JobMaster's main
thread. RPC calls to TaskExecutors go through a small I/O pool so the main
thread never blocks on the network.

Slot requests that find no free slot wait (in arrival order) until a slot is
released or a (replacement) TaskExecutor registers, at most
``slot.request.timeout``; then they fail with
:class:`~flinklike_spark.errors.NoResourceAvailableError`. A request the
cluster could never serve (more slots than its configured size, spare
TaskExecutors of ``slotmanager.redundant-taskmanager-num`` included) fails at once.
Any free slot serves any request, so after a TaskExecutor is lost the restarted
tasks take the spares' free slots at once; only without a free slot does a
request wait for the replacement to register.
A slot's ``request_slot`` RPC waits for an earlier ``free_slot`` of the same
slot, so a restarted task never races its predecessor's release.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar

from flinklike_spark._runtime.gateways import TaskExecutorGateway
from flinklike_spark._runtime.rpc import RpcClient
from flinklike_spark._runtime.taskexecutor.task_slot import SlotReport
from flinklike_spark.config import Configuration
from flinklike_spark.errors import NoResourceAvailableError, SlotAllocationError

__all__ = ["LivenessProbe", "RegisteredTaskExecutor", "ResourceManager", "SlotInfo", "TaskExecutorLossListener"]

T = TypeVar("T")
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
    gateway: TaskExecutorGateway
    last_heartbeat: float
    cpu_cores: int = 0
    physical_memory: int = 0
    registered_at: float = 0.0  # epoch seconds


@dataclasses.dataclass(kw_only=True, eq=False)
class _SlotRequest:
    job_id: str
    preferred: int
    allocation_id: str
    future: concurrent.futures.Future[SlotInfo]
    timeout: Any = None
    #: local recovery: the TaskExecutor that ran this slot's subtasks before (their local state is there)
    previous_resource: str | None = None


# How long a slot request waits for the same slot's earlier free_slot RPC.
_FREE_WAIT = 10.0


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
        self._losses: dict[str, tuple[str, float]] = {}  # resource id -> (reason, epoch seconds)
        self._lock = threading.Condition()
        self._executors: dict[str, RegisteredTaskExecutor] = {}
        self._allocated: dict[tuple[str, int], str] = {}  # (resource id, slot index) -> allocation id
        self._listeners: list[TaskExecutorLossListener] = []
        self._waiting: list[_SlotRequest] = []  # slot requests waiting for a free slot, oldest first
        self._freeing: dict[tuple[str, int], concurrent.futures.Future] = {}  # free_slot RPCs in flight
        self._on_demand: set[str] = set()  # TaskExecutors started for a rescale (mark_on_demand)
        self.io = concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="jm-io")

    # -- membership ---------------------------------------------------------------------------

    def register(self, registration) -> None:
        gateway = TaskExecutorGateway(RpcClient(registration.address, self._secret))
        with self._lock:
            self._executors[registration.resource_id] = RegisteredTaskExecutor(
                resource_id=registration.resource_id,
                address=registration.address,
                num_slots=registration.num_slots,
                pid=registration.pid,
                gateway=gateway,
                last_heartbeat=time.monotonic(),
                cpu_cores=getattr(registration, "cpu_cores", 0),
                physical_memory=getattr(registration, "physical_memory", 0),
                registered_at=time.time(),
            )
            self._lock.notify_all()
        self._serve_waiting()
        log.info("TaskExecutor %s registered (%d slots, pid %d)", registration.resource_id, registration.num_slots,
                 registration.pid)  # fmt: skip

    def task_executor_pids(self) -> dict[str, int]:
        """Process id of every registered TaskExecutor, by resource id."""
        with self._lock:
            return {rid: e.pid for rid, e in self._executors.items()}

    def is_registered(self, resource_id: str) -> bool:
        with self._lock:
            return resource_id in self._executors

    def num_registered(self) -> int:
        with self._lock:
            return len(self._executors)

    def wait_for_task_executors(self, count: int, *, timeout: float) -> bool:
        with self._lock:
            return self._lock.wait_for(lambda: len(self._executors) >= count, timeout)

    def heartbeat(self, resource_id: str, slot_report: SlotReport) -> bool:
        """A TaskExecutor is alive; reconcile its slot report. False: it is not registered (any more).

        A slot the TaskExecutor holds for an allocation this ResourceManager no
        longer knows (its release RPC was lost, or its JobMaster's job ended)
        is freed on the TaskExecutor. A slot this side believes allocated but
        the report shows free may be a request still in flight, and is left.
        """
        with self._lock:
            executor = self._executors.get(resource_id)
            if executor is None:
                return False
            executor.last_heartbeat = time.monotonic()
            known = {a for (rid, _), a in self._allocated.items() if rid == resource_id}
            orphans = [
                s.allocation_id for s in slot_report.slot_statuses if not s.is_free and s.allocation_id not in known
            ]
        for allocation_id in orphans:
            log.info("TaskExecutor %s holds slot %s, which no job uses; freeing it", resource_id, allocation_id)
            self.call_async(resource_id, lambda gateway, a=allocation_id: gateway.free_slot(a))
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
            self._losses[resource_id] = (reason, time.time())
            for key in [k for k in self._allocated if k[0] == resource_id]:
                del self._allocated[key]
            listeners = list(self._listeners)
        log.warning("TaskExecutor %s lost: %s", resource_id, reason)
        executor.gateway.close()
        for listener in listeners:
            self._main.execute(lambda listener=listener: listener.task_executor_lost(resource_id, reason))

    @property
    def can_detect_deaths(self) -> bool:
        """Whether :meth:`detect_dead_task_executors` can tell (a liveness probe is configured)."""
        return self._liveness_probe is not None

    def losses(self) -> dict[str, tuple[str, float]]:
        """Every TaskExecutor reported lost so far: resource id -> (reason, when, epoch seconds)."""
        with self._lock:
            return dict(self._losses)

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

    def task_executor_infos(self) -> list[tuple[RegisteredTaskExecutor, int, float]]:
        """Every registered TaskExecutor with its allocated slot count and seconds since its last heartbeat."""
        with self._lock:
            now = time.monotonic()
            return [
                (e, sum(1 for (rid, _) in self._allocated if rid == e.resource_id), now - e.last_heartbeat)
                for e in self._executors.values()
            ]

    # -- slots --------------------------------------------------------------------------------

    def allocate(
        self, job_id: str, preferred: int, allocation_id: str, *, previous_resource: str | None = None
    ) -> concurrent.futures.Future[SlotInfo]:
        """Allocate a slot for ``job_id``, preferring the ``preferred``-th in interleaved order.

        With ``previous_resource`` (task-local recovery), a free slot of that TaskExecutor
        comes first (Flink's local-recovery-aware slot assignment): the restarted
        subtasks find their local state copies there.

        The future fails with :class:`NoResourceAvailableError` at once if the
        cluster's configured size cannot hold one more slot, or after
        ``slot.request.timeout`` without a free slot. Cancelling the future
        withdraws a waiting request.
        """
        future: concurrent.futures.Future[SlotInfo] = concurrent.futures.Future()
        cluster = self._config.cluster
        # Spares' slots count: like Flink's redundant workers, they are ordinary free slots.
        capacity = (cluster.number_of_task_managers + cluster.redundant_task_managers) * cluster.slots_per_task_manager
        with self._lock:
            self._waiting = [r for r in self._waiting if not r.future.done()]  # drop withdrawn requests
            slots = self.physical_slots_locked()
            if len(self._allocated) + len(self._waiting) >= max(capacity, len(slots)):
                future.set_exception(
                    NoResourceAvailableError(
                        f"job {job_id}: no free slot left; the cluster has {max(capacity, len(slots))} slots "
                        f"({len(self._executors)} TaskExecutors x taskmanager.numberOfTaskSlots); raise "
                        f"local.number-taskmanager or taskmanager.numberOfTaskSlots, or lower the parallelism"
                    )
                )
                return future
            request = _SlotRequest(job_id=job_id, preferred=preferred, allocation_id=allocation_id, future=future,
                                   previous_resource=previous_resource)  # fmt: skip
            self._waiting.append(request)
        self._serve_waiting()
        if not future.done():
            timeout = cluster.slot_request_timeout
            request.timeout = self._main.schedule(timeout, lambda: self._expire(request, timeout))
        return future

    def _expire(self, request: _SlotRequest, timeout) -> None:
        with self._lock:
            if request not in self._waiting:
                return
            self._waiting.remove(request)
        if not request.future.done():
            request.future.set_exception(
                NoResourceAvailableError(
                    f"job {request.job_id}: no slot became available within slot.request.timeout ({timeout}); "
                    f"{self.num_registered()} TaskExecutors are registered"
                )
            )

    def _serve_waiting(self) -> None:
        """Hand free slots to waiting requests, oldest first (any thread)."""
        served = []
        with self._lock:
            for request in list(self._waiting):
                if request.future.done():  # withdrawn
                    self._waiting.remove(request)
                    continue
                slots = self.physical_slots_locked()
                free = [s for s in slots if s not in self._allocated]
                if not free:
                    break
                preferred = slots[request.preferred % len(slots)]
                previous = [s for s in free if s[0] == request.previous_resource]
                if previous and preferred[0] != request.previous_resource:
                    choice = previous[0]
                else:
                    choice = preferred if preferred in free else free[0]
                self._allocated[choice] = request.allocation_id
                self._waiting.remove(request)
                served.append((request, choice, self._executors[choice[0]], self._freeing.get(choice)))
        for request, choice, executor, freeing in served:
            if request.timeout is not None:
                request.timeout.cancel()
            self._request_slot(request, choice, executor, freeing)

    def _request_slot(self, request: _SlotRequest, choice, executor: RegisteredTaskExecutor, freeing) -> None:
        slot = SlotInfo(
            resource_id=executor.resource_id, address=executor.address, slot_index=choice[1],
            allocation_id=request.allocation_id,
        )  # fmt: skip

        def call() -> SlotInfo:
            if freeing is not None:
                try:
                    freeing.result(_FREE_WAIT)
                except Exception:  # noqa: BLE001 - the request below reports what is wrong
                    log.debug("free_slot before %s failed", request.allocation_id, exc_info=True)
            deadline = time.monotonic() + _FREE_WAIT
            while True:
                try:
                    executor.gateway.request_slot(request.job_id, request.allocation_id, slot.slot_index)
                    return slot
                except SlotAllocationError:
                    # Still RELEASING: its last cancelled task has not been removed yet.
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)

        def done(f: concurrent.futures.Future) -> None:
            error = f.exception()
            if error is not None:
                self._forget(choice, request.allocation_id)
            if not request.future.set_running_or_notify_cancel():
                if error is None:  # withdrawn meanwhile: give the slot back
                    self.release(slot)
            elif error is not None:
                request.future.set_exception(error)
            else:
                request.future.set_result(slot)

        self.io.submit(call).add_done_callback(done)

    def physical_slots_locked(self) -> list[tuple[str, int]]:
        """Every (resource id, slot index), interleaved across TaskExecutors to spread load (lock held).

        The slots of TaskExecutors started for a rescale come last: a rescale down leaves them idle.
        """

        def interleaved(executors: list[RegisteredTaskExecutor]) -> list[tuple[str, int]]:
            most = max((e.num_slots for e in executors), default=0)
            return [(e.resource_id, i) for i in range(most) for e in executors if i < e.num_slots]

        executors = sorted(self._executors.values(), key=lambda e: e.resource_id)
        return interleaved([e for e in executors if e.resource_id not in self._on_demand]) + interleaved(
            [e for e in executors if e.resource_id in self._on_demand]
        )

    def mark_on_demand(self, resource_ids: Iterable[str]) -> None:
        """Count ``resource_ids`` as started for a rescale (their slots are handed out last)."""
        with self._lock:
            self._on_demand.update(resource_ids)

    def _forget(self, key: tuple[str, int], allocation_id: str) -> None:
        with self._lock:
            if self._allocated.get(key) == allocation_id:
                del self._allocated[key]
        self._serve_waiting()

    def release(self, slot: SlotInfo) -> None:
        key = (slot.resource_id, slot.slot_index)
        freeing = self.call_async(slot.resource_id, lambda gateway: gateway.free_slot(slot.allocation_id))
        with self._lock:
            self._freeing[key] = freeing

        def forget_freeing(f: concurrent.futures.Future) -> None:
            with self._lock:
                if self._freeing.get(key) is f:
                    del self._freeing[key]

        freeing.add_done_callback(forget_freeing)
        self._forget(key, slot.allocation_id)

    def call_async(self, resource_id: str, call: Callable[[TaskExecutorGateway], T]) -> concurrent.futures.Future[T]:
        """Run ``call(gateway)`` against TaskExecutor ``resource_id`` on the I/O pool.

        The future fails with SlotAllocationError if the TaskExecutor is not registered.
        """
        with self._lock:
            executor = self._executors.get(resource_id)
        if executor is None:
            future: concurrent.futures.Future = concurrent.futures.Future()
            future.set_exception(SlotAllocationError(f"TaskExecutor {resource_id} is not registered"))
            return future
        return self.io.submit(call, executor.gateway)

    def release_job(self, job_id: str) -> list[concurrent.futures.Future]:
        """Free ``job_id``'s slots and tell every TaskExecutor to release the job; the calls' futures."""
        with self._lock:
            resource_ids = list(self._executors)
            for key in [k for k, a in self._allocated.items() if a.startswith(f"{job_id}/")]:
                del self._allocated[key]
        return [self.call_async(rid, lambda gateway: gateway.release_job(job_id)) for rid in resource_ids]

    def total_slots(self) -> int:
        """The slots of every registered TaskExecutor."""
        with self._lock:
            return sum(e.num_slots for e in self._executors.values())

    def release_task_executor(self, resource_id: str) -> bool:
        """Deregister an idle TaskExecutor and tell it to shut down; False if it holds a slot or is not registered.

        Deregistered first, so that its silence is not a loss.
        """
        with self._lock:
            executor = self._executors.get(resource_id)
            if executor is None or any(rid == resource_id for rid, _ in self._allocated):
                return False
            del self._executors[resource_id]
            self._on_demand.discard(resource_id)
        try:
            executor.gateway.shutdown(timeout=5.0)
        except Exception:  # noqa: BLE001 - gone already: the launcher reaps it
            log.debug("shutdown of %s failed", resource_id, exc_info=True)
        finally:
            executor.gateway.close()
        log.info("TaskExecutor %s released (idle)", resource_id)
        return True

    def slots_for_job(self, job_id: str) -> int:
        """How many slots ``job_id`` could hold now: the registered ones that are free or already its own."""
        with self._lock:
            mine_or_free = sum(
                1 for key in self.physical_slots_locked()
                if key not in self._allocated or self._allocated[key].startswith(f"{job_id}/")
            )  # fmt: skip
        return mine_or_free

    def task_metrics(self, timeout: float = 2.0) -> dict[str, dict[str, float]]:
        with self._lock:
            executors = list(self._executors.values())
        futures = [self.io.submit(e.gateway.task_metrics, timeout=timeout) for e in executors]
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
                executor.gateway.shutdown(timeout=5.0)
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
