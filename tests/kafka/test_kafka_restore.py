"""Restore paths of an exactly-once KafkaSink on a real broker: older checkpoints refused, commits verified, ids bounded.

* A keyed job run to its end through a SIGKILLed TaskExecutor: its older retained checkpoint, restored by name, is
  refused with ``CommittedSinkOutputError`` (its output after that checkpoint
  is committed; a replay would write it again); accepting duplicates writes it
  again, under new transactional ids.
* A restored pre-commit is judged by producer id *and* epoch: Kafka keeps the
  producer id when an id is initialised again, so a later transaction's commit
  on the same id is not this one's (the committed-checkpoint marker decides).
* The ids a job leaves in ``__transaction_state`` stay bounded (docs/kafka.md):
  counted with ``ListTransactions`` after many checkpoints and a resume.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from checkpointing import list_completed_checkpoints
from connectors.kafka.commit_verification import KafkaCommittable, KafkaTransactionLostError
from connectors.kafka.sink import KafkaCommitter
from connectors.kafka.transaction_admin import TransactionAdmin
from flinklike_spark.datastream.connectors.kafka import DeliveryGuarantee
from flinklike_spark.errors import CommittedSinkOutputError, JobCancelledError
from tests.kafka.kafka_jobs import assert_each_key_exactly_once_in_order, read_committed
from tests.kafka.test_kafka_sink import NUM_KEYS, build, kafka_sink
from tests.support.checkpoint_jobs import checkpoint_config
from tests.support.failover_jobs import task_executor_processes, wait_for

ACCEPT = "execution.state-recovery.accept-duplicate-sink-output"
PER_KEY = 500


def all_transactional_ids(bootstrap_servers: str, port: int) -> dict[str, str]:
    """Every transactional id the broker's coordinator holds (any state, ``ListTransactions`` without a filter)."""
    admin = TransactionAdmin(bootstrap_servers)
    try:
        return {t.transactional_id: t.state for t in admin.list_open([("127.0.0.1", port)], states=())}
    finally:
        admin.close()


def seqs_per_key(records) -> dict[int, list[tuple[int, int]]]:
    per_key: dict[int, list[tuple[int, int]]] = {}
    for _key, value, _partition in records:
        key, seq, count = (int(part) for part in value.decode().split(","))
        per_key.setdefault(key, []).append((seq, count))
    return per_key


def _truncate_operator_state(directory: str, job_id: str, checkpoint_id: int) -> None:
    """Damage a checkpoint: the directory form of a restore then falls back to the one before."""
    root = os.path.join(directory, "operator_state", f"job_id={job_id}", f"checkpoint_id={checkpoint_id}")
    for name in os.listdir(root):
        path = os.path.join(root, name)
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)


def _base(transactional_id: str) -> str:
    return transactional_id.rsplit("-", 2)[0]  # <base>-<subtask>-<slot>


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize("prefix", [None, "orders-out"], ids=["lineage-prefix", "user-prefix"])
def test_restoring_an_older_checkpoint_than_the_sink_committed_is_refused_unless_duplicates_are_accepted(
    kafka_broker, kafka_topic, tmp_path, prefix
):
    topic = kafka_topic(partitions=4)
    servers = kafka_broker.bootstrap_servers
    directory = str(tmp_path / "checkpoints")
    config = checkpoint_config(directory, "aligned") | {
        "execution.checkpointing.num-retained": 50,
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": 3,
        "restart-strategy.fixed-delay.delay": "0 ms",
    }
    sink = kafka_sink(servers, topic, DeliveryGuarantee.EXACTLY_ONCE, prefix=prefix)
    other_tests_ids = set(all_transactional_ids(servers, kafka_broker.port))  # the broker is shared
    client = build(config, sink, records_per_key=PER_KEY, rows_per_second=1_000).execute_async("to the end")
    try:  # to the end of its input through a SIGKILLed TaskExecutor
        wait_for(lambda: client.job_id and len(list_completed_checkpoints(directory, client.job_id)) >= 2,
                 "two checkpoints")  # fmt: skip
        task_executor_processes()[0].send_signal(signal.SIGKILL)
        client.wait(timeout=180)
    except BaseException:
        with contextlib.suppress(Exception):
            client.cancel()
        raise
    assert client.num_restarts >= 1
    first = read_committed(servers, topic)
    assert_each_key_exactly_once_in_order(first, NUM_KEYS, PER_KEY)
    completed = [c.checkpoint_id for c in list_completed_checkpoints(directory, client.job_id)]
    assert len(completed) >= 3, completed
    older = completed[1]
    ids_before = set(all_transactional_ids(servers, kafka_broker.port))
    first_bases = {_base(i) for i in ids_before - other_tests_ids}

    named = f"{directory}/{client.job_id}/chk-{older}"
    resumed = checkpoint_config(directory, "aligned") | {"execution.state-recovery.path": named}
    with pytest.raises(CommittedSinkOutputError) as refused:
        build(resumed, sink, records_per_key=PER_KEY).execute("refused")
    message = str(refused.value)
    assert f"cannot restore checkpoint {older} of job {client.job_id}" in message
    assert "sink 'kafka' (KafkaSink(" in message and f"checkpoint {completed[-1]}" in message and ACCEPT in message
    assert len(read_committed(servers, topic)) == len(first), "the refused job wrote to the topic"

    # The newest checkpoint damaged: the directory form falls back to the one before, which is refused too.
    _truncate_operator_state(directory, client.job_id, completed[-1])
    with pytest.raises(CommittedSinkOutputError, match=f"cannot restore checkpoint {completed[-2]} "):
        build(resumed | {"execution.state-recovery.path": directory}, sink, records_per_key=PER_KEY).execute(
            "fell back"
        )
    assert len(read_committed(servers, topic)) == len(first), "the refused job wrote to the topic"

    # Accepted: the output from the older checkpoint on is written again (duplicates are expected),
    # under a new lineage's transactional ids: none of the first job's ids is used again.
    build(resumed | {ACCEPT: True}, sink, records_per_key=PER_KEY).execute("duplicates accepted")
    per_key = seqs_per_key(read_committed(servers, topic))  # a key's records are in one partition, in order
    assert sorted(per_key) == list(range(NUM_KEYS))
    for key, records in per_key.items():
        assert records[:PER_KEY] == [(seq, seq + 1) for seq in range(PER_KEY)], key  # the first run's
        again = records[PER_KEY:]
        restart = again[0][0]
        assert 0 < restart < PER_KEY, (key, restart)  # the older checkpoint's state: each key part-way
        assert again == [(seq, seq + 1) for seq in range(restart, PER_KEY)], key  # once more, in order
    ids_after = set(all_transactional_ids(servers, kafka_broker.port))
    new_bases = {_base(i) for i in ids_after - ids_before}
    assert new_bases and not new_bases & first_bases, "the accepted run wrote under ids of the first lineage"
    assert {i for i in ids_after if _base(i) in first_bases} == ids_before - other_tests_ids
    if prefix is not None:
        assert all(base.startswith(f"{prefix}-") for base in new_bases | first_bases)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_later_transaction_on_the_same_id_is_not_taken_for_the_restored_one(kafka_broker, kafka_topic):
    """Kafka keeps the producer id across InitProducerId: only (producer id, epoch) names a transaction."""
    topic = kafka_topic(partitions=1)
    servers = kafka_broker.bootstrap_servers
    admin = TransactionAdmin(servers)
    committer = KafkaCommitter(servers, {"transaction.timeout.ms": "60000"})
    try:
        # Aborted (its id taken over), then a later transaction on the id commits: the restored one is lost.
        committable, _ = _pre_committed(servers, admin, topic, "restore-aborted", marker_group="restore-aborted-0")
        later = Producer({"bootstrap.servers": servers, "transactional.id": "restore-aborted"})
        later.init_transactions(30)
        later.begin_transaction()
        later.produce(topic, b"later")
        later.commit_transaction(30)
        state = _settled(admin, "restore-aborted")
        assert (state.state, state.producer_id) == ("CompleteCommit", committable.producer_id)
        assert state.producer_epoch != committable.producer_epoch
        with pytest.raises(KafkaTransactionLostError, match="below 7"):
            committer.commit([committable])

        # Committed with its marker, then a later transaction opens on the id: the restored one was committed,
        # and committing it again leaves the later transaction open (not committed in its place).
        committable, pre_committing = _pre_committed(
            servers, admin, topic, "restore-committed", marker_group="restore-committed-0"
        )
        committer.commit([committable])  # by id: the transaction is open, so this commits it
        committer.commit([committable])  # and again (as after a second restore): committed before
        assert _settled(admin, "restore-committed").state == "CompleteCommit"
        later = Producer({"bootstrap.servers": servers, "transactional.id": "restore-committed"})
        later.init_transactions(30)
        later.begin_transaction()
        later.produce(topic, b"later")
        later.flush(30)
        committer.commit([committable])
        state = admin.describe("restore-committed")
        assert state.state == "Ongoing" and state.producer_epoch != committable.producer_epoch
        later.abort_transaction(30)
        del pre_committing
    finally:
        committer.close()
        admin.close()


def _settled(admin: TransactionAdmin, tid: str):
    """The id's state once a commit or abort in progress completed (the coordinator writes its markers first)."""
    deadline = time.monotonic() + 30
    while (state := admin.describe(tid)).state.startswith("Prepare"):
        assert time.monotonic() < deadline, state
        time.sleep(0.05)
    return state


def _pre_committed(servers, admin, topic, tid, *, marker_group, checkpoint_id=7):
    """An open transaction with a record and its marker offset, as the sink pre-commits one, and its producer."""
    producer = Producer({"bootstrap.servers": servers, "transactional.id": tid})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, tid.encode())
    producer.flush(30)
    consumer = Consumer({"bootstrap.servers": servers, "group.id": marker_group})
    metadata = consumer.consumer_group_metadata()
    consumer.close()
    producer.send_offsets_to_transaction([TopicPartition(topic, 0, checkpoint_id)], metadata, 30)
    state = admin.describe(tid)
    assert state.state == "Ongoing"
    committable = KafkaCommittable(
        transactional_id=tid,
        producer_id=state.producer_id,
        producer_epoch=state.producer_epoch,
        checkpoint_id=checkpoint_id,
        marker_group=marker_group,
    )
    return committable, producer


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_transactional_ids_stay_bounded_over_many_checkpoints_and_a_resume(kafka_broker, kafka_topic, tmp_path):
    """docs/kafka.md: at most subtasks x (1 + pre-committed transactions awaiting their commit) ids per lineage."""
    topic = kafka_topic(partitions=2)
    servers = kafka_broker.bootstrap_servers
    directory = str(tmp_path / "checkpoints")
    parallelism = 2
    config = checkpoint_config(directory, "aligned", parallelism) | {"execution.checkpointing.interval": "100ms"}
    sink = kafka_sink(servers, topic, DeliveryGuarantee.EXACTLY_ONCE)

    def newest(client) -> int:
        completed = list_completed_checkpoints(directory, client.job_id) if client.job_id else []
        return completed[-1].checkpoint_id if completed else 0

    job_ids = []
    for run, target in enumerate((25, 50)):  # checkpoint ids continue across the resume
        run_config = config if run == 0 else config | {"execution.state-recovery.path": directory}
        client = build(run_config, sink, records_per_key=None, rows_per_second=1_000).execute_async(f"run {run}")
        try:
            wait_for(lambda c=client, t=target: newest(c) >= t, f"checkpoint {target}", 150)
        finally:
            client.cancel()
            with contextlib.suppress(JobCancelledError):
                client.wait(60)
        job_ids.append(client.job_id)
    lineage = f"flinklike/{job_ids[0]}/kafka-"
    ids = {i: s for i, s in all_transactional_ids(servers, kafka_broker.port).items() if i.startswith(lineage)}
    # Each of the 2 subtasks alternates between two ids while every checkpoint's notification arrives
    # before the next barrier; a late notification borrows a third.
    assert len(ids) <= 3 * parallelism, sorted(ids)
    assert {i.rsplit("-", 2)[1] for i in ids} == {"0", "1"}
