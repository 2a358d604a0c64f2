"""The cluster endpoint and its launchers: typed bootstrap, loss and replacement, prompt launch failures,
TaskExecutors that close themselves when their JobMaster is gone."""

from __future__ import annotations

import pickle
import time

import pytest

from flinklike_spark import Configuration
from flinklike_spark._runtime.cluster.endpoint import ClusterEndpoint
from flinklike_spark._runtime.cluster.launcher import TaskExecutorBootstrap
from flinklike_spark._runtime.cluster.local_launchers import ThreadLauncher
from flinklike_spark._runtime.gateways import Heartbeat, RegisterTaskExecutor
from flinklike_spark._runtime.rpc import FlightNode, generate_secret
from flinklike_spark._runtime.taskexecutor.task_executor import TaskExecutor
from flinklike_spark.errors import ConfigurationError, FlinklikeError


def bootstrap(**overrides) -> TaskExecutorBootstrap:
    values = dict(resource_id="tm-1", config=Configuration(), secret=b"s" * 32,
                  jobmaster_address="grpc+tcp://127.0.0.1:1")  # fmt: skip
    return TaskExecutorBootstrap(**(values | overrides))


def test_the_bootstrap_is_typed_round_trips_and_hides_the_secret():
    original = bootstrap(sys_path=["/a", "/b"], config=Configuration({"heartbeat.interval": "1 s"}))
    assert "sss" not in repr(original)
    copy = TaskExecutorBootstrap.from_bytes(original.to_bytes())
    assert copy == original and copy.sys_path == ("/a", "/b")
    assert original.with_host("10.0.0.7").host == "10.0.0.7"
    assert bootstrap(host="10.0.0.1").with_host("10.0.0.7").host == "10.0.0.1"  # taskmanager.host wins
    with pytest.raises(ConfigurationError, match="at least 16 bytes"):
        bootstrap(secret=b"short")
    with pytest.raises(ConfigurationError, match="grpc\\+tcp://host:port"):
        bootstrap(jobmaster_address="localhost:1")
    with pytest.raises(TypeError, match="TaskExecutorBootstrap"):
        TaskExecutorBootstrap.from_bytes(pickle.dumps({"resource_id": "tm-1"}))


def test_execution_target_names_the_valid_values():
    assert Configuration().cluster.target.value == "local"
    assert Configuration({"execution.target": "SPARK"}).cluster.target.value == "spark"
    with pytest.raises(ConfigurationError, match="execution.target: invalid value 'yarn'; valid values: local, spark"):
        Configuration({"execution.target": "yarn"})


class _NoPythonLauncher(ThreadLauncher):
    """Starts nothing and reports what a Spark launcher reports when executors lack the project."""

    description = "nowhere"

    def launch(self, bootstraps) -> None:
        self.launched = [b.resource_id for b in bootstraps]

    def launch_failure(self) -> str | None:
        return "flinklike_spark cannot be imported on the Spark executor 10.0.0.7"


@pytest.mark.timeout(30)
def test_a_launch_failure_fails_start_at_once_instead_of_waiting_for_registrations():
    endpoint = ClusterEndpoint(Configuration({"local.number-taskmanager": 2}), _NoPythonLauncher())
    started = time.monotonic()
    with pytest.raises(FlinklikeError, match="on nowhere cannot start: flinklike_spark cannot be imported"):
        endpoint.start()
    assert time.monotonic() - started < 10
    assert len(endpoint.launcher.launched) == 2


@pytest.mark.timeout(30)
def test_the_cluster_launches_the_spare_task_executors_with_the_others():
    config = Configuration({"local.number-taskmanager": 2, "slotmanager.redundant-taskmanager-num": 1})
    endpoint = ClusterEndpoint(config, _NoPythonLauncher())
    with pytest.raises(FlinklikeError, match="cannot start"):
        endpoint.start()
    assert len(endpoint.launcher.launched) == 3


class _RefusingJobMaster:
    """A real Flight node that accepts the registration and then refuses or answers heartbeats."""

    def __init__(self, secret: bytes, *, known: bool) -> None:
        self.node = FlightNode(secret)
        self.node.register_handler(RegisterTaskExecutor, lambda message: True)
        self.node.register_handler(Heartbeat, lambda message: known)
        self.node.start()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("gone", ["refused", "unreachable"])
def test_a_task_executor_closes_itself_when_its_jobmaster_is_gone_for_the_heartbeat_timeout(gone):
    secret = generate_secret()
    jobmaster = _RefusingJobMaster(secret, known=gone != "refused")
    config = Configuration({"heartbeat.interval": "50 ms", "heartbeat.timeout": "500 ms"})
    executor = TaskExecutor(resource_id="tm-x", config=config, secret=secret, jobmaster_address=jobmaster.node.address)
    try:
        executor.start()
        if gone == "unreachable":
            jobmaster.node.shutdown()  # the driver died
        else:
            assert not executor.wait_closed(0.3), "closed before the heartbeat timeout"
        assert executor.wait_closed(10), f"the TaskExecutor kept running with its JobMaster {gone}"
    finally:
        executor.close()
        jobmaster.node.shutdown()
