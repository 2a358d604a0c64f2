"""KafkaSink exactly once on a 3-node KRaft cluster (replication factor 3, ``min.insync.replicas`` 2) under faults.

Each test runs a keyed job (``SequenceSource`` -> ``NumberPerKey`` ->
``KafkaSink`` EXACTLY_ONCE) while a broker fails, then reads the topic as a
``read_committed`` consumer and checks per key: each ``seq`` once, in order,
with the keyed state's chain unbroken. Reading to the end of every partition
also shows that no transaction was left open (it would hold the consumer back).
"""

from __future__ import annotations

import contextlib
import json
import signal
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("confluent_kafka")

from connectors.kafka.testing import LocalKafkaCluster  # noqa: E402
from connectors.kafka.transaction_admin import TransactionAdmin  # noqa: E402
from flinklike_spark.datastream.connectors.kafka import DeliveryGuarantee, KafkaSink  # noqa: E402
from tests.kafka.kafka_jobs import assert_each_key_exactly_once_in_order, read_committed  # noqa: E402
from tests.kafka.test_kafka_sink import NUM_KEYS, RECORDS_PER_KEY, build, kafka_sink  # noqa: E402
from tests.support.checkpoint_jobs import checkpoint_config  # noqa: E402
from tests.support.failover_jobs import task_executor_processes, wait_for  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

RESTARTS = {
    "restart-strategy.type": "fixed-delay",
    "restart-strategy.fixed-delay.attempts": 10,
    "restart-strategy.fixed-delay.delay": "1 s",
}


@pytest.fixture(scope="module")
def kafka_cluster(kafka_cache_dir, tmp_path_factory):
    cluster = LocalKafkaCluster(
        3,
        data_dir=tmp_path_factory.mktemp("kafka-cluster"),
        cache_dir=kafka_cache_dir,
        heap="384m",
        # a dead broker is fenced (its partitions get new leaders) within seconds, not Kafka's 9 s
        extra_properties={"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500"},
    )
    with cluster:
        yield cluster


@pytest.fixture
def cluster(kafka_cluster, request):
    """The module's cluster with every node running (a test may have left one down)."""
    kafka_cluster.start()
    return kafka_cluster


def _topic(cluster: LocalKafkaCluster, request, partitions: int = 3) -> str:
    name = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60]
    return cluster.create_topic(f"{name}-{time.monotonic_ns() % 10**8}", partitions=partitions)


def _leader(cluster: LocalKafkaCluster, topic: str, partition: int) -> int:
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient({"bootstrap.servers": cluster.bootstrap_servers}).list_topics(topic, timeout=30)
    return metadata.topics[topic].partitions[partition].leader


def _run(env, cluster: LocalKafkaCluster, topic: str, directory: str, fault) -> object:
    """Run the job; once two checkpoints completed call ``fault(client)``; wait for the end; return the client."""
    from checkpointing import list_completed_checkpoints

    client = env.execute_async("kafka cluster under a fault")
    try:
        wait_for(lambda: len(list_completed_checkpoints(directory, client.job_id)) >= 2, "two checkpoints", 120)
        fault(client)
        client.wait(timeout=300)
    except BaseException:
        with contextlib.suppress(Exception):
            client.cancel()
        raise
    cluster.start()  # every node up again, so that every partition can be read to its end
    assert_each_key_exactly_once_in_order(read_committed(cluster.bootstrap_servers, topic), NUM_KEYS, RECORDS_PER_KEY)
    return client


def test_a_partition_leader_killed_mid_job(cluster, request, tmp_path):
    topic = _topic(cluster, request)
    directory = str(tmp_path / "checkpoints")
    sink = kafka_sink(cluster.bootstrap_servers, topic, DeliveryGuarantee.EXACTLY_ONCE)
    env = build(checkpoint_config(directory, "aligned") | RESTARTS, sink, rows_per_second=1000)
    killed = {}

    def kill_the_leader(client) -> None:
        killed["node"] = _leader(cluster, topic, 0)
        cluster.node(killed["node"]).kill()
        wait_for(lambda: _leader(cluster, topic, 0) not in (-1, killed["node"]), "a new leader", 60)

    _run(env, cluster, topic, directory, kill_the_leader)
    assert killed["node"] in (1, 2, 3)


def test_the_whole_cluster_restarted_while_the_job_runs(cluster, request, tmp_path):
    topic = _topic(cluster, request)
    directory = str(tmp_path / "checkpoints")
    sink = kafka_sink(cluster.bootstrap_servers, topic, DeliveryGuarantee.EXACTLY_ONCE)
    env = build(checkpoint_config(directory, "unaligned") | RESTARTS, sink, rows_per_second=1000)

    def restart_everything(client) -> None:
        cluster.stop()
        time.sleep(2)
        cluster.start()

    _run(env, cluster, topic, directory, restart_everything)


class _KillCoordinatorBeforeFirstCommit:
    """Wraps a committer: before the first commit of the job, SIGKILLs the broker coordinating its transaction.

    The checkpoint completed (its transactions are pre-committed and recorded)
    and nothing is committed yet: the commit must find the coordinator that
    takes over the transaction log's partition, and commit there.
    """

    def __init__(self, inner, servers: str, pids: Path, marker: Path) -> None:
        self.inner, self.servers, self.pids, self.marker = inner, servers, pids, marker

    def commit(self, committables):
        import os

        if committables and not self.marker.exists():
            self.marker.write_text("")
            admin = TransactionAdmin(self.servers)
            try:
                _, port = admin.coordinator(committables[0].transactional_id)
            finally:
                admin.close()
            pid = json.loads(self.pids.read_text())[str(port)]
            os.kill(pid, signal.SIGKILL)
            self.marker.write_text(str(port))
        self.inner.commit(committables)

    def close(self):
        self.inner.close()


class CoordinatorKillingKafkaSink(KafkaSink):
    pids: Path
    marker: Path

    def create_committer_with(self, context):
        inner = super().create_committer_with(context)
        return _KillCoordinatorBeforeFirstCommit(inner, self.bootstrap_servers, self.pids, self.marker)


def test_the_transaction_coordinator_killed_between_pre_commit_and_commit(cluster, request, tmp_path):
    topic = _topic(cluster, request)
    directory = str(tmp_path / "checkpoints")
    base = kafka_sink(cluster.bootstrap_servers, topic, DeliveryGuarantee.EXACTLY_ONCE)
    sink = CoordinatorKillingKafkaSink(
        bootstrap_servers=cluster.bootstrap_servers,
        record_serializer=base.record_serializer,
        delivery_guarantee=DeliveryGuarantee.EXACTLY_ONCE,
    )
    sink.pids, sink.marker = tmp_path / "pids.json", tmp_path / "killed"
    sink.pids.write_text(json.dumps({str(node.port): node.pid for node in cluster.nodes}))
    env = build(checkpoint_config(directory, "aligned") | RESTARTS, sink, rows_per_second=1000)
    client = env.execute_async("coordinator killed before a commit")
    try:
        client.wait(timeout=300)
    except BaseException:
        with contextlib.suppress(Exception):
            client.cancel()
        raise
    killed_port = int(sink.marker.read_text())
    assert any(node.port == killed_port and not node.running for node in cluster.nodes), "no coordinator was killed"
    cluster.start()
    assert_each_key_exactly_once_in_order(read_committed(cluster.bootstrap_servers, topic), NUM_KEYS, RECORDS_PER_KEY)


def test_a_scale_down_from_3_to_2_takes_over_the_removed_subtasks_transactions(cluster, request, tmp_path):
    """The job fails for good with every TaskExecutor SIGKILLed (transactions of all 3 subtasks left open);
    resumed at parallelism 2, the restored pre-commits are committed and the removed subtask's open
    transaction is aborted (else it would hold the read_committed consumer back)."""
    topic = _topic(cluster, request)
    directory = str(tmp_path / "checkpoints")
    sink = kafka_sink(cluster.bootstrap_servers, topic, DeliveryGuarantee.EXACTLY_ONCE)
    config = checkpoint_config(directory, "aligned", parallelism=3) | {
        "restart-strategy.type": "none",
        "local.number-taskmanager": 3,
    }
    from checkpointing import list_completed_checkpoints

    first = build(config, sink, rows_per_second=600).execute_async("at parallelism 3")
    wait_for(lambda: len(list_completed_checkpoints(directory, first.job_id)) >= 2, "two checkpoints", 120)
    for process in task_executor_processes():
        process.send_signal(signal.SIGKILL)
    with contextlib.suppress(Exception):
        first.wait(timeout=120)
    assert first.done()
    resumed = config | {
        "parallelism.default": 2,
        "local.number-taskmanager": 2,
        "execution.state-recovery.path": f"{directory}/{first.job_id}",
    }
    build(resumed, sink).execute_async("at parallelism 2").wait(timeout=300)
    assert_each_key_exactly_once_in_order(read_committed(cluster.bootstrap_servers, topic), NUM_KEYS, RECORDS_PER_KEY)


def test_checkpoints_that_fail_while_transactions_are_open(cluster, request, tmp_path):
    """A slow operator makes checkpoints expire (300 ms timeout) while the sink's transactions are open; the
    job goes on, and each open transaction commits with the next checkpoint that completes."""
    topic = _topic(cluster, request)
    directory = str(tmp_path / "checkpoints")
    sink = kafka_sink(cluster.bootstrap_servers, topic, DeliveryGuarantee.EXACTLY_ONCE)
    config = checkpoint_config(directory, "aligned") | {
        "execution.checkpointing.interval": "200ms",
        "execution.checkpointing.timeout": "300ms",
        "execution.checkpointing.tolerable-failed-checkpoints": 1000,
    }
    env = build(config, sink, rows_per_second=1000, seconds_per_record=0.003)  # input beyond what it processes
    client = env.execute_async("checkpoints expire")
    failed = 0
    try:
        while not client.done():  # the REST API goes with the job's cluster: read its counts while it runs
            with contextlib.suppress(OSError, ValueError):
                url = f"{client.web_interface_url}/jobs/{client.job_id}/checkpoints"
                with urllib.request.urlopen(url, timeout=10) as response:
                    failed = max(failed, json.load(response)["counts"]["failed"])
            time.sleep(0.5)
        client.wait(timeout=300)
    except BaseException:
        with contextlib.suppress(Exception):
            client.cancel()
        raise
    assert failed >= 1, "no checkpoint failed while the transactions were open"
    assert_each_key_exactly_once_in_order(read_committed(cluster.bootstrap_servers, topic), NUM_KEYS, RECORDS_PER_KEY)
