"""Where a job runs: one place that turns ``execution.target`` into a cluster (Flink's ``PipelineExecutor``s).

``local`` (the default) starts an embedded :class:`~flinklike_spark._runtime.minicluster.MiniCluster`;
``spark`` starts a cluster endpoint in this process (the Spark driver) whose TaskExecutors run on the
executors of the active SparkSession. The Spark launcher is imported here only, and only for that
target, so nothing else in the engine depends on pyspark.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any

from flinklike_spark._runtime.graph.translation import bind_storage, check_connectors
from flinklike_spark._runtime.storage_probe import probe_job_storage
from flinklike_spark.config import Configuration, ExecutionTarget

if TYPE_CHECKING:  # pragma: no cover
    from flinklike_spark._runtime.cluster.endpoint import ClusterEndpoint
    from flinklike_spark._runtime.graph.job_graph import JobGraph

__all__ = ["close_at_exit", "create_cluster", "execute_job_graph", "local_cluster_config", "spark_cluster_config"]


def create_cluster(config: Configuration, job_graph: JobGraph) -> ClusterEndpoint:
    """A new, unstarted cluster for ``job_graph`` on the target ``execution.target`` names.

    Raises:
        ConfigurationError: ``spark`` without an active SparkSession (create one with
            ``flinklike_spark.spark.session()``).
    """
    if config.cluster.target is ExecutionTarget.SPARK:
        from flinklike_spark.spark.task_executor_launcher import spark_cluster

        return spark_cluster(spark_cluster_config(config, job_graph))
    from flinklike_spark._runtime.minicluster import MiniCluster

    return MiniCluster(local_cluster_config(config, job_graph))


def execute_job_graph(job_graph: JobGraph, config: Configuration):
    """Bind the job's storage settings, probe its storage, start a cluster for it and submit it.

    The cluster closes with the job. Storage that cannot work fails here, before
    any TaskExecutor starts (:mod:`~flinklike_spark._runtime.storage_probe`).

    Returns:
        The job's :class:`~flinklike_spark.job_client.JobClient`.

    Raises:
        StorageUnavailableError: a storage location of the job cannot be used.
        ConfigurationError: a connector's external system refuses the job's settings (``SubmissionChecked``).
    """
    bind_storage(job_graph, config)
    check_connectors(job_graph)
    probe_job_storage(job_graph, config)
    cluster = create_cluster(config, job_graph)
    close_at_exit(cluster)
    try:  # also on Ctrl-C while the cluster starts: no TaskExecutor is left behind
        cluster.start()
        return cluster.submit_job(job_graph, owns_cluster=True)
    except BaseException:
        cluster.close()
        raise


def local_cluster_config(config: Configuration, job_graph: JobGraph) -> Configuration:
    """Like Flink's local environment: without ``taskmanager.numberOfTaskSlots`` the
    embedded cluster gets just enough slots for the job's highest parallelism."""
    if "taskmanager.numberOfTaskSlots" in config:
        return config
    needed = max(v.parallelism for v in job_graph)
    task_managers = config.cluster.number_of_task_managers
    return config.with_values({"taskmanager.numberOfTaskSlots": -(-needed // task_managers)})


def spark_cluster_config(config: Configuration, job_graph: JobGraph) -> Configuration:
    """Like Flink on an active resource manager (YARN, Kubernetes): as many TaskExecutors of
    ``taskmanager.numberOfTaskSlots`` slots as the job's highest parallelism needs (the
    ResourceManager's cluster size); each is one Spark task, so it occupies one task slot of an
    executor."""
    needed = max(v.parallelism for v in job_graph)
    slots = config.cluster.slots_per_task_manager
    return config.with_values({"local.number-taskmanager": -(-needed // slots)})


def close_at_exit(cluster: Any) -> None:
    """Close ``cluster`` (cancelling its job) if the interpreter exits while it is open.

    That happens when the program ends, or Ctrl-C interrupts it, outside
    ``JobClient.wait``. The hook is registered with ``threading._register_atexit``
    (what ``concurrent.futures`` itself uses) because it must run before the
    interpreter stops the thread pools: an ``atexit`` hook would run after, when
    cancelling fails with "cannot schedule new futures after shutdown". It holds
    the cluster weakly and does nothing once the cluster is closed.
    """
    ref = weakref.ref(cluster)

    def close() -> None:
        open_cluster = ref()
        if open_cluster is not None:
            open_cluster.close()

    threading._register_atexit(close)  # noqa: SLF001 - see the docstring
