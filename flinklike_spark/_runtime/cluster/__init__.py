"""The engine's cluster: one endpoint (JobMaster side) and pluggable TaskExecutor launchers.

:class:`~flinklike_spark._runtime.cluster.endpoint.ClusterEndpoint` is the
JobMaster's side of a cluster: its RPC node, the ResourceManager, job routing
and loss handling. Where TaskExecutors run is a
:class:`~flinklike_spark._runtime.cluster.launcher.TaskExecutorLauncher`'s
business: local processes or threads (``local_launchers``) or Spark executors
(``flinklike_spark.spark.task_executor_launcher``).
"""

__all__: list[str] = []
