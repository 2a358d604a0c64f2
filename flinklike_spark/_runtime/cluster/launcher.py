"""What a TaskExecutor needs to start, and the protocol of whatever starts TaskExecutors.

A :class:`TaskExecutorBootstrap` is everything a TaskExecutor needs, wherever
it runs: its resource id, the configuration, the cluster secret, the
JobMaster's RPC address, the interface to bind and the log level. It travels
cloudpickled: over a child's stdin (local processes) or inside a Spark task's
closure (Spark executors). It replaces the untyped dict that used to pass
between the MiniCluster and ``process_main``.

A :class:`TaskExecutorLauncher` starts TaskExecutors from bootstraps and tells
the :class:`~flinklike_spark._runtime.cluster.endpoint.ClusterEndpoint` when
one is gone for good. Registration, heartbeats and everything else go over RPC
and are the endpoint's business, so a launcher only starts, watches and stops.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Protocol

import cloudpickle

from flinklike_spark.config import Configuration
from flinklike_spark.errors import ConfigurationError

__all__ = ["TaskExecutorBootstrap", "TaskExecutorLauncher"]

_SECRET_MIN_BYTES = 16


@dataclasses.dataclass(frozen=True, kw_only=True)
class TaskExecutorBootstrap:
    """Everything one TaskExecutor needs to start and register.

    Attributes:
        resource_id: the TaskExecutor's id; unique within the cluster, never reused.
        config: the cluster's configuration.
        secret: the per-cluster RPC secret (not shown in ``repr``).
        jobmaster_address: the endpoint's Flight address (``grpc+tcp://host:port``).
        host: interface the TaskExecutor binds and advertises; None lets the
            launcher decide (``127.0.0.1`` locally, the executor's host on Spark).
        log_level: the ``logging`` level of the TaskExecutor's process.
        sys_path: entries a separate interpreter puts first on ``sys.path`` (local
            processes: the client's path, so user modules next to the script import).
    """

    resource_id: str
    config: Configuration
    secret: bytes = dataclasses.field(repr=False)
    jobmaster_address: str
    host: str | None = None
    log_level: int = 30
    sys_path: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.resource_id, str) or not self.resource_id:
            raise ConfigurationError(f"TaskExecutor resource id must be a non-empty string, got {self.resource_id!r}")
        if not isinstance(self.config, Configuration):
            raise ConfigurationError(f"bootstrap config must be a Configuration, got {type(self.config).__name__}")
        if not isinstance(self.secret, bytes) or len(self.secret) < _SECRET_MIN_BYTES:
            raise ConfigurationError(f"bootstrap secret must be at least {_SECRET_MIN_BYTES} bytes")
        if not isinstance(self.jobmaster_address, str) or "://" not in self.jobmaster_address:
            raise ConfigurationError(
                f"jobmaster_address must be a Flight URI like 'grpc+tcp://host:port', got {self.jobmaster_address!r}"
            )
        object.__setattr__(self, "sys_path", tuple(self.sys_path))

    def with_host(self, host: str) -> TaskExecutorBootstrap:
        """This bootstrap with ``host`` as the interface, unless one was configured."""
        return self if self.host else dataclasses.replace(self, host=host)

    def to_bytes(self) -> bytes:
        return cloudpickle.dumps(self)

    @staticmethod
    def from_bytes(data: bytes) -> TaskExecutorBootstrap:
        bootstrap = cloudpickle.loads(data)
        if not isinstance(bootstrap, TaskExecutorBootstrap):
            raise TypeError(f"expected a TaskExecutorBootstrap, got {type(bootstrap).__name__}")
        return bootstrap


class TaskExecutorLauncher(Protocol):
    """Starts TaskExecutors somewhere and reports when one is gone.

    Call order: :meth:`launch` (any number of times: the first batch, then
    replacements), :meth:`exit_reason` polled by the endpoint's monitor,
    :meth:`kill` for a TaskExecutor the ResourceManager declared lost,
    :meth:`close` once. All methods may be called from different threads.
    """

    description: str
    """Where TaskExecutors run, for logs and messages (e.g. ``"local processes"``)."""

    def launch(self, bootstraps: Sequence[TaskExecutorBootstrap]) -> None:
        """Start one TaskExecutor per bootstrap, together; return without waiting for registration.

        Raises:
            FlinklikeError: they cannot be started at all.
        """

    def exit_reason(self, resource_id: str) -> str | None:
        """Why TaskExecutor ``resource_id`` is gone (its process or task ended), or None."""

    def launch_failure(self) -> str | None:
        """A failure that keeps every TaskExecutor from starting (e.g. the project is missing where
        they run), so the endpoint fails at once instead of waiting for registrations; or None."""

    def exited(self) -> dict[str, int | None]:
        """Resource ids of TaskExecutors known to have exited, with exit codes where there are any
        (for the message when registrations time out)."""

    def forget(self, resource_id: str) -> None:
        """Drop what is kept about a TaskExecutor that is gone and was replaced."""

    def kill(self, resource_id: str, reason: str) -> None:
        """Make sure a TaskExecutor the ResourceManager declared lost stops (it may be frozen)."""

    @property
    def returns_hosts(self) -> bool:
        """Whether :meth:`give_back_idle` can ever give something back (Spark executors); local processes: no."""

    def give_back_idle(self, count: int | None) -> list[str]:
        """Return up to ``count`` (None: all) idle hosts of TaskExecutors to their resource provider.

        Called after TaskExecutors were released (a rescale down) and, with
        ``slotmanager.number-of-slots.max``, once the cluster started: a Spark
        executor that hosts no TaskExecutor is given back, as Spark's dynamic
        allocation gives back an idle executor; local processes exit by themselves
        (nothing to do). Returns what was given back (e.g. Spark executor ids).
        """

    def close(self, acknowledged: Iterable[str], timeout: float) -> None:
        """Stop every TaskExecutor; those in ``acknowledged`` were already told to shut down over RPC.
        Idempotent; returns when nothing the launcher started runs any more (at most about ``timeout``)."""
