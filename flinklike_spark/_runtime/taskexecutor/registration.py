"""What a TaskExecutor tells the ResourceManager when it registers (Flink's ``TaskExecutorRegistration``).

A module of its own so that the gateways, which carry it, and the cluster
endpoint, which receives it, need nothing of the TaskExecutor itself.
"""

from __future__ import annotations

import dataclasses

__all__ = ["TaskExecutorRegistration"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class TaskExecutorRegistration:
    """A TaskExecutor's identity, RPC address and resources."""

    resource_id: str
    address: str
    num_slots: int
    pid: int
    cpu_cores: int = 0  # of the TaskExecutor's machine (the REST API's /taskmanagers)
    physical_memory: int = 0  # bytes
