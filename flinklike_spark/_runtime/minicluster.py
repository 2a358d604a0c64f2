"""The embedded local cluster: a :class:`ClusterEndpoint` plus a local TaskExecutor launcher.

TaskExecutors run as child processes (``flinklike.local.taskmanager-mode:
process``, the default; :class:`ProcessLauncher`) or as threads of this
process (``thread``; :class:`ThreadLauncher`). Loss handling and replacements
are the endpoint's (see :mod:`flinklike_spark._runtime.cluster.endpoint`): a
child that exits, or stops heartbeating for ``heartbeat.timeout``, is
reported lost to the running jobs, killed if still there, and replaced (as a
standalone cluster's process supervisor would), so restarted tasks find slots
again within ``slot.request.timeout``.
"""

from __future__ import annotations

from flinklike_spark._runtime.cluster.endpoint import ClusterEndpoint
from flinklike_spark._runtime.cluster.local_launchers import LOCAL_HOST, ProcessLauncher, ThreadLauncher
from flinklike_spark.config import Configuration, TaskManagerMode

__all__ = ["MiniCluster"]


class MiniCluster(ClusterEndpoint):
    """A local cluster. Use as a context manager or call ``start``/``close``.

    Args:
        config: the cluster's configuration (``local.number-taskmanager``,
            ``taskmanager.numberOfTaskSlots``, ``flinklike.local.taskmanager-mode`` ...).
    """

    def __init__(self, config: Configuration | None = None) -> None:
        config = config or Configuration()
        cluster = config.cluster
        if cluster.task_manager_mode is TaskManagerMode.PROCESS:
            launcher = ProcessLauncher(cluster.task_manager_start_method)
        else:
            launcher = ThreadLauncher()
        super().__init__(config, launcher, rpc_host=config.cluster.jobmanager_address or LOCAL_HOST)

    @property
    def task_executor_pids(self) -> dict[str, int]:
        """Resource id -> pid of every TaskExecutor child process (empty in thread mode)."""
        return self.launcher.pids if isinstance(self.launcher, ProcessLauncher) else {}
