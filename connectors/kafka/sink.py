"""KafkaSink: PyFlink's Kafka sink (FLIP-143), with Kafka transactions for exactly-once output.

Delivery guarantees (:class:`~flinklike_spark.datastream.connectors.base.DeliveryGuarantee`):

* ``NONE``: records are produced as they come; nothing waits for the broker.
* ``AT_LEAST_ONCE``: at every checkpoint barrier the producer is flushed and
  every delivery must have succeeded before the barrier passes, so a completed
  checkpoint covers every record before it. After a failure, records since the
  restored checkpoint are written again.
* ``EXACTLY_ONCE``: each subtask writes the records between two barriers into
  one Kafka transaction under an id of a bounded pool, ``<base>-<subtask>-<slot>``
  (:mod:`.transactional_ids`). At the barrier the transaction commits the
  subtask's committed-checkpoint marker (a consumer group offset: the
  checkpoint id), is flushed, and its identity (id, producer id, epoch,
  checkpoint) becomes the committable stored in the checkpoint (pre-commit);
  when the checkpoint completes the committer commits it. After a restart the
  restored committables are committed again by producer id and epoch, or found
  committed before (:mod:`.commit_verification`), then each subtask aborts every
  other open transaction of the sink that it owns (old subtask ``s`` belongs to
  new subtask ``s % parallelism``), so a ``read_committed`` consumer is never
  blocked by a crashed attempt's transaction.

The markers tell the JobMaster which checkpoint the sink committed
(:meth:`KafkaSink.committed_checkpoint`): restoring an older checkpoint would
write committed output again and is refused (``CommittedSinkOutputError``)
unless duplicates are accepted, in which case the job's new lineage writes
under new ids and markers.

The transaction timeout must outlive a checkpoint plus a restart, or Kafka
aborts a pre-committed transaction and its records are lost: the sink uses
``transaction.timeout.ms`` as given, or else one hour (Flink's default) capped
at the broker's ``transaction.max.timeout.ms``; a value above the broker's
maximum fails the job at submission, naming both.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pyarrow as pa

from connectors.kafka.clients import LIBRDKAFKA_LOG, admin_client, cluster_metadata
from connectors.kafka.commit_verification import (
    CommitRetryPolicy,
    KafkaCommittable,
    KafkaTransactionLostError,
    KafkaTransactionUnknownError,
    commit_by_id,
)
from connectors.kafka.security import librdkafka_properties
from connectors.kafka.serialization import KafkaRecordSerializationSchema, SerializedBatch
from connectors.kafka.transaction_admin import TransactionAdmin
from connectors.kafka.transactional_ids import TransactionalIds, committed_checkpoints
from flinklike_spark.common.types import records_of
from flinklike_spark.connector_api import (
    Committer,
    CommitterContext,
    PrecommittingSinkWriter,
    SinkWriterContext,
    TwoPhaseCommittingSink,
)
from flinklike_spark.datastream.connectors.base import DeliveryGuarantee
from flinklike_spark.errors import CancelTaskError, ConfigurationError, SinkCommitError

__all__ = [
    "DEFAULT_TRANSACTION_TIMEOUT_MS",
    "KafkaCommittable",
    "KafkaCommitter",
    "KafkaSink",
    "KafkaSinkBuilder",
    "KafkaSinkWriter",
    "KafkaTransactionLostError",
    "KafkaTransactionUnknownError",
]

_log = logging.getLogger(__name__)

#: Flink's KafkaSink default transaction timeout (``KafkaSinkBuilder.DEFAULT_KAFKA_TRANSACTION_TIMEOUT``).
DEFAULT_TRANSACTION_TIMEOUT_MS = 60 * 60 * 1000
_BROKER_MAX_TIMEOUT_KEY = "transaction.max.timeout.ms"
_ADMIN_TIMEOUT_S = 15.0
_DESCRIBE_TIMEOUT_S = 10.0
_FLUSH_TIMEOUT_S = 120.0
_FLUSH_SLICE_S = 0.5  # how often a flush or a commit looks for a cancel
_PRODUCE_CHUNK = 10_000  # records per produce_batch call


def _confluent():
    try:
        import confluent_kafka
    except ImportError as e:  # pragma: no cover - the kafka extra is part of the test extra
        raise ImportError("KafkaSink needs confluent-kafka: pip install 'flinklike-spark[kafka]'") from e
    return confluent_kafka


# Producers whose transaction is pre-committed and awaits its commit, by transactional id. The committer
# of the same subtask commits through the live producer (the normal path); a committer without one
# (after a restart, or the JobMaster's final commit) ends the transaction by producer id and epoch.
_AWAITING_COMMIT: dict[str, Any] = {}
_AWAITING_LOCK = threading.Lock()


class KafkaSink(TwoPhaseCommittingSink):
    """Writes a stream to Kafka; build one with :meth:`builder`.

    Use it with ``DataStream.sink_to(sink)``. See the module docstring for what
    each :class:`DeliveryGuarantee` means here. Consumers of an
    ``EXACTLY_ONCE`` sink's topic must set ``isolation.level=read_committed``.
    """

    def __init__(
        self,
        *,
        bootstrap_servers: str,
        record_serializer: KafkaRecordSerializationSchema,
        delivery_guarantee: DeliveryGuarantee = DeliveryGuarantee.NONE,
        transactional_id_prefix: str | None = None,
        properties: dict[str, str] | None = None,
    ) -> None:
        if not bootstrap_servers:
            raise ConfigurationError("KafkaSink: set_bootstrap_servers(...) is required")
        if not isinstance(record_serializer, KafkaRecordSerializationSchema):
            raise ConfigurationError(
                f"KafkaSink: set_record_serializer needs a KafkaRecordSerializationSchema "
                f"(KafkaRecordSerializationSchema.builder()...build()), got {record_serializer!r}"
            )
        if not isinstance(delivery_guarantee, DeliveryGuarantee):
            raise ConfigurationError(
                f"KafkaSink: delivery guarantee {delivery_guarantee!r} is not one of "
                f"{[g.name for g in DeliveryGuarantee]}"
            )
        properties = librdkafka_properties(properties or {}, what="KafkaSink")
        if "transactional.id" in properties:
            raise ConfigurationError(
                "KafkaSink: do not set 'transactional.id'; the sink derives one per subtask and checkpoint "
                "from set_transactional_id_prefix(...)"
            )
        if "transaction.timeout.ms" in properties and not properties["transaction.timeout.ms"].isdigit():
            raise ConfigurationError(
                f"KafkaSink: transaction.timeout.ms must be a number of milliseconds, "
                f"got {properties['transaction.timeout.ms']!r}"
            )
        self.bootstrap_servers = bootstrap_servers
        self.record_serializer = record_serializer
        self.delivery_guarantee = delivery_guarantee
        self.transactional_id_prefix = transactional_id_prefix
        self.properties = properties

    @staticmethod
    def builder() -> KafkaSinkBuilder:
        return KafkaSinkBuilder()

    def __repr__(self) -> str:
        return (
            f"KafkaSink(bootstrap_servers={self.bootstrap_servers!r}, "
            f"delivery_guarantee={self.delivery_guarantee.name})"
        )

    def producer_config(self) -> dict[str, str]:
        config = {"bootstrap.servers": self.bootstrap_servers, **self.properties}
        if self.delivery_guarantee is not DeliveryGuarantee.NONE:
            config.setdefault("acks", "all")
        return config

    def checked_for_submission(self) -> KafkaSink:
        """Reach the cluster and (``EXACTLY_ONCE``) settle the transaction timeout before the job starts.

        Raises:
            ConfigurationError: no broker of the bootstrap servers answered within
                :data:`~.clients.SUBMISSION_TIMEOUT` (the servers are named), or
                ``transaction.timeout.ms`` is above the broker's
                ``transaction.max.timeout.ms`` (both values named).
        """
        metadata = cluster_metadata(self.bootstrap_servers, self.properties, what="KafkaSink")
        if self.delivery_guarantee is not DeliveryGuarantee.EXACTLY_ONCE:
            return self
        broker_max = _broker_max_transaction_timeout(self.bootstrap_servers, self.properties, min(metadata.brokers))
        given = self.properties.get("transaction.timeout.ms")
        if given is not None and int(given) > broker_max:
            raise ConfigurationError(
                f"KafkaSink: transaction.timeout.ms={given} is above the broker's "
                f"{_BROKER_MAX_TIMEOUT_KEY}={broker_max}; lower transaction.timeout.ms "
                f"(set_property('transaction.timeout.ms', ...)) or raise the broker's "
                f"{_BROKER_MAX_TIMEOUT_KEY}"
            )
        if given is not None:
            return self
        timeout = min(DEFAULT_TRANSACTION_TIMEOUT_MS, broker_max)
        return self._with_property("transaction.timeout.ms", str(timeout))

    def _with_property(self, key: str, value: str) -> KafkaSink:
        settled = copy.copy(self)
        settled.properties = {**self.properties, key: value}
        return settled

    def transactional_ids(self, transactional_id_prefix: str) -> TransactionalIds:
        """The sink's ids and committed-checkpoint markers in the lineage of ``transactional_id_prefix``."""
        return TransactionalIds.of(self.transactional_id_prefix, transactional_id_prefix)

    def create_writer(self, context: SinkWriterContext) -> KafkaSinkWriter:
        lineage_prefix = context.transactional_id_prefix or f"flinklike/{context.job_id}/{context.operator_uid}"
        return KafkaSinkWriter(self, context, self.transactional_ids(lineage_prefix))

    def create_committer(self) -> KafkaCommitter:
        return self.create_committer_with(CommitterContext())

    def create_committer_with(self, context: CommitterContext) -> KafkaCommitter:
        return KafkaCommitter(self.bootstrap_servers, self.properties, cancelled=context.cancelled)

    def committed_checkpoint(self, transactional_id_prefix: str, max_subtasks: int) -> int | None:
        """The newest checkpoint whose transactions the sink committed in this lineage: its markers' highest offset.

        ``EXACTLY_ONCE`` only (the other guarantees make no promise about
        duplicates); reads the consumer group offsets of the subtasks' markers
        (:mod:`.transactional_ids`) from the cluster.
        """
        if self.delivery_guarantee is not DeliveryGuarantee.EXACTLY_ONCE:
            return None
        ids = self.transactional_ids(transactional_id_prefix)
        groups = [ids.marker_group(subtask) for subtask in range(max_subtasks)]
        committed = committed_checkpoints(self.bootstrap_servers, self.properties, groups)
        return max((c for c in committed.values() if c is not None), default=None)

    def fence_older_writers(self, transactional_id_prefix: str) -> KafkaSink:
        """Returns the sink unchanged: Kafka fences per transactional id, in the writers.

        ``InitProducerId`` on an id fences the producer that held it and aborts
        its open transaction. The JobMaster cannot do that here: the restored
        checkpoint's pre-committed transactions are among the lineage's open
        ones and must be committed first, which the restored subtasks do before
        their writers open. Each writer then takes over every open transaction
        of the sink that its subtask owns, fencing an older job's producers
        (Flink's KafkaSink fences the same way, when its writers start).
        """
        return self


class KafkaSinkBuilder:
    """PyFlink's ``KafkaSinkBuilder``: ``set_bootstrap_servers`` and ``set_record_serializer`` are required."""

    def __init__(self) -> None:
        self._bootstrap_servers: str | None = None
        self._record_serializer: KafkaRecordSerializationSchema | None = None
        self._delivery_guarantee = DeliveryGuarantee.NONE
        self._transactional_id_prefix: str | None = None
        self._properties: dict[str, str] = {}

    def set_bootstrap_servers(self, bootstrap_servers: str) -> KafkaSinkBuilder:
        self._bootstrap_servers = bootstrap_servers
        return self

    def set_delivery_guarantee(self, delivery_guarantee: DeliveryGuarantee) -> KafkaSinkBuilder:
        self._delivery_guarantee = delivery_guarantee
        return self

    def set_transactional_id_prefix(self, transactional_id_prefix: str) -> KafkaSinkBuilder:
        """The prefix of the sink's transactional ids; keep it stable across restarts and unique per job.

        Without one, the sink uses the job's restore lineage (stable across
        resumes from checkpoints and savepoints of the same job).
        """
        if not isinstance(transactional_id_prefix, str) or not transactional_id_prefix:
            raise ConfigurationError(
                f"transactional id prefix must be a non-empty str, got {transactional_id_prefix!r}"
            )
        if len(transactional_id_prefix.encode()) > 6400:
            raise ConfigurationError("transactional id prefix is longer than 6400 bytes (Flink's maximum)")
        self._transactional_id_prefix = transactional_id_prefix
        return self

    def set_record_serializer(self, record_serializer: KafkaRecordSerializationSchema) -> KafkaSinkBuilder:
        self._record_serializer = record_serializer
        return self

    def set_property(self, key: str, value: str) -> KafkaSinkBuilder:
        self._properties[str(key)] = str(value)
        return self

    def build(self) -> KafkaSink:
        if self._record_serializer is None:
            raise ConfigurationError("KafkaSink: set_record_serializer(...) is required")
        return KafkaSink(
            bootstrap_servers=self._bootstrap_servers or "",
            record_serializer=self._record_serializer,
            delivery_guarantee=self._delivery_guarantee,
            transactional_id_prefix=self._transactional_id_prefix,
            properties=self._properties,
        )


def _broker_max_transaction_timeout(bootstrap_servers: str, properties: dict[str, str], broker_id: int) -> int:
    kafka = _confluent()
    from confluent_kafka.admin import ConfigResource

    admin = admin_client(bootstrap_servers, properties)
    resource = ConfigResource(ConfigResource.Type.BROKER, str(broker_id))
    try:
        configs = admin.describe_configs([resource], request_timeout=_DESCRIBE_TIMEOUT_S)[resource].result(
            timeout=_DESCRIBE_TIMEOUT_S
        )
    except kafka.KafkaException as e:
        raise ConfigurationError(f"KafkaSink: cannot read broker {broker_id}'s configuration: {e}") from e
    finally:
        admin.poll(0)  # the client's log lines, to logging
    return int(configs[_BROKER_MAX_TIMEOUT_KEY].value)


class KafkaSinkWriter(PrecommittingSinkWriter):
    """Produces one subtask's records; see :class:`KafkaSink`."""

    def __init__(self, sink: KafkaSink, context: SinkWriterContext, ids: TransactionalIds) -> None:
        self._sink = sink
        self._context = context
        self._ids = ids
        self._guarantee = sink.delivery_guarantee
        self._producer = None  # NONE / AT_LEAST_ONCE: one producer; EXACTLY_ONCE: the open transaction's
        self._transactional_id: str | None = None
        self._marker_topic: str | None = None  # EXACTLY_ONCE: a topic the open transaction wrote to
        self._marker_metadata = None  # EXACTLY_ONCE: the marker group's metadata for TxnOffsetCommit
        self._admin: TransactionAdmin | None = None
        self._failure: BaseException | None = None
        self._partitions: dict[str, list[int]] = {}

    # -- lifecycle ----------------------------------------------------------------------------------------
    def open(self) -> None:
        _confluent()
        if self._guarantee is DeliveryGuarantee.EXACTLY_ONCE:
            self._admin = TransactionAdmin(self._sink.bootstrap_servers, self._sink.properties)
            self._marker_metadata = self._marker_group_metadata()
            self._abort_lingering_transactions()
        else:
            self._producer = self._new_producer({})

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        self._check_failure()
        producer = self._producer_for_writing()
        serializer = self._sink.record_serializer
        serialized = serializer.serialize_batch(batch, self._partitions_of, self._context)
        if serialized is not None:
            self._produce_batch(producer, serialized)
            if self._marker_topic is None:
                self._marker_topic = serialized.topic
        else:
            for record in records_of(batch):
                topic, key, value, partition = serializer.serialize_record(record, self._partitions_of, self._context)
                self._produce(producer, topic, key, value, partition)
                if self._marker_topic is None:
                    self._marker_topic = topic
        producer.poll(0)

    def prepare_commit(self, checkpoint_id: int) -> list[KafkaCommittable]:
        if self._guarantee is DeliveryGuarantee.NONE or self._producer is None:
            return []
        self._flush()
        if self._guarantee is DeliveryGuarantee.AT_LEAST_ONCE:
            return []
        tid, producer = self._transactional_id, self._producer
        marker_group = self._ids.marker_group(self._context.subtask_index)
        # The marker commits with the records, atomically: its offset is the checkpoint that pre-commits them.
        producer.send_offsets_to_transaction(
            [_confluent().TopicPartition(self._marker_topic, 0, checkpoint_id)],
            self._marker_metadata,
            _ADMIN_TIMEOUT_S,
        )
        described = self._admin.describe(tid)
        committable = KafkaCommittable(
            transactional_id=tid,
            producer_id=described.producer_id,
            producer_epoch=described.producer_epoch,
            checkpoint_id=checkpoint_id,
            marker_group=marker_group,
        )
        with _AWAITING_LOCK:
            _AWAITING_COMMIT[tid] = producer
        self._producer = self._transactional_id = self._marker_topic = None
        return [committable]

    def finish(self) -> None:
        if self._producer is not None and self._guarantee is not DeliveryGuarantee.EXACTLY_ONCE:
            self._flush()

    def close(self) -> None:
        producer, self._producer = self._producer, None
        try:
            if producer is not None and self._guarantee is DeliveryGuarantee.EXACTLY_ONCE:
                producer.abort_transaction(10)  # not pre-committed: the job failed or was cancelled
            elif producer is not None and self._failure is None:
                producer.flush(10)
        except Exception as e:  # noqa: BLE001 - closing must not mask the failure that led here
            _log.warning("KafkaSink subtask %s: closing the producer failed: %s", self._context.subtask_index, e)
        finally:
            self._release_awaiting_producers()
            if self._admin is not None:
                self._admin.close()

    def _release_awaiting_producers(self) -> None:
        """Drop this writer's producers whose transactions await a commit that will not come in this task.

        Destroying a librdkafka producer leaves its transaction open: a restored
        job commits it by id (its checkpoint completed) or aborts it (it did not),
        and a finished bounded job's JobMaster commits the final ones by id.
        """
        prefix = self._ids.transactional_id(self._context.subtask_index, 0)[:-1]
        with _AWAITING_LOCK:
            mine = [tid for tid in _AWAITING_COMMIT if tid.startswith(prefix)]
            producers = [_AWAITING_COMMIT.pop(tid) for tid in mine]
        del producers

    # -- helpers ------------------------------------------------------------------------------------------
    def _new_producer(self, extra: dict[str, str]):
        config = {**self._sink.producer_config(), **extra, "logger": LIBRDKAFKA_LOG}
        config.setdefault("client.id", self._ids.marker_group(self._context.subtask_index))
        # Only failed deliveries matter (a delivered record needs nothing): a report per record cost the
        # task thread a Python message object and a callback per record in poll().
        config.setdefault("delivery.report.only.error", True)
        return _confluent().Producer(config)

    def _marker_group_metadata(self):
        """The marker group's metadata for ``send_offsets_to_transaction`` (no member ever joins the group)."""
        consumer = _confluent().Consumer(
            {
                "bootstrap.servers": self._sink.bootstrap_servers,
                "group.id": self._ids.marker_group(self._context.subtask_index),
                "logger": LIBRDKAFKA_LOG,
            }
        )
        try:
            return consumer.consumer_group_metadata()
        finally:
            consumer.close()

    def _free_slot(self) -> int:
        """The lowest slot of this subtask whose id holds no transaction awaiting its commit in this process."""
        subtask = self._context.subtask_index
        with _AWAITING_LOCK:
            slot = 0
            while self._ids.transactional_id(subtask, slot) in _AWAITING_COMMIT:
                slot += 1
        return slot

    def _producer_for_writing(self):
        if self._producer is not None:
            return self._producer
        # EXACTLY_ONCE: the first record after a barrier opens the next transaction, with its own
        # InitProducerId (a new epoch: see .transactional_ids for why producers are not reused).
        tid = self._ids.transactional_id(self._context.subtask_index, self._free_slot())
        producer = self._new_producer({"transactional.id": tid})
        producer.init_transactions(_ADMIN_TIMEOUT_S * 2)
        producer.begin_transaction()
        self._producer, self._transactional_id = producer, tid
        return producer

    def _on_delivery(self, error, message) -> None:
        if error is not None and self._failure is None:
            self._failure = SinkCommitError(
                f"KafkaSink subtask {self._context.subtask_index}: delivery to {message.topic()} failed: {error}"
            )

    def _produce(self, producer, topic: str, key: bytes | None, value: bytes | None, partition: int | None) -> None:
        kwargs = {"on_delivery": self._on_delivery}
        if partition is not None:
            kwargs["partition"] = partition
        while True:
            try:
                producer.produce(topic, value=value, key=key, **kwargs)
                return
            except BufferError:  # the local queue is full: serve deliveries, then try again
                producer.poll(0.05)
                self._check_failure()

    def _produce_batch(self, producer, serialized: SerializedBatch) -> None:
        """Queue a batch's records in order, ``_PRODUCE_CHUNK`` per ``produce_batch`` call.

        librdkafka queues a call's messages in order and marks those that do
        not fit (``_QUEUE_FULL``): a full queue fails a tail of the chunk, which
        is queued again once deliveries made room, so the order holds.
        """
        values, keys = serialized.values, serialized.keys
        kwargs = {"on_delivery": self._on_delivery}
        if serialized.partition is not None:
            kwargs["partition"] = serialized.partition
        for start in range(0, len(values), _PRODUCE_CHUNK):
            end = min(start + _PRODUCE_CHUNK, len(values))
            if keys is None:
                messages = [{"value": value} for value in values[start:end]]
            else:
                messages = [{"value": v, "key": k} for v, k in zip(values[start:end], keys[start:end], strict=True)]
            while messages:
                queued = producer.produce_batch(serialized.topic, messages, **kwargs)
                if queued == len(messages):
                    break
                failed = next(i for i, m in enumerate(messages) if "_error" in m)
                errors = {m["_error"].code() for m in messages[failed:] if "_error" in m}
                if queued != failed or errors != {_confluent().KafkaError._QUEUE_FULL}:
                    raise SinkCommitError(
                        f"KafkaSink subtask {self._context.subtask_index}: producing to {serialized.topic} failed "
                        f"for {len(messages) - queued} of {len(messages)} records: "
                        f"{sorted(str(m['_error']) for m in messages if '_error' in m)[:3]}"
                    )
                messages = messages[failed:]
                for message in messages:
                    del message["_error"]
                producer.poll(0.05)  # serve deliveries: they make room in the queue
                self._check_failure()

    def _flush(self) -> None:
        """Deliver every buffered record (at a barrier, at the end): up to ``_FLUSH_TIMEOUT_S``.

        Flushes in short slices so that a cancelled task (its broker down, say) stops waiting at once
        (CancelTaskError: the task ends CANCELED, as Flink interrupts a flushing task).
        """
        deadline = time.monotonic() + _FLUSH_TIMEOUT_S
        remaining = self._producer.flush(_FLUSH_SLICE_S)
        while remaining and time.monotonic() < deadline:
            if self._context.cancelled():
                raise CancelTaskError(
                    f"KafkaSink subtask {self._context.subtask_index}: cancelled with {remaining} records undelivered"
                )
            remaining = self._producer.flush(_FLUSH_SLICE_S)
        if remaining:
            raise SinkCommitError(
                f"KafkaSink subtask {self._context.subtask_index}: {remaining} records not delivered "
                f"within {_FLUSH_TIMEOUT_S:.0f} s"
            )
        self._check_failure()

    def _check_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _partitions_of(self, topic: str) -> list[int]:
        partitions = self._partitions.get(topic)
        if partitions is None:
            producer = self._producer or self._new_producer({})
            metadata = producer.list_topics(topic, timeout=_ADMIN_TIMEOUT_S).topics[topic]
            if metadata.error is not None:
                raise SinkCommitError(f"KafkaSink: topic {topic!r}: {metadata.error}")
            partitions = self._partitions[topic] = sorted(metadata.partitions)
        return partitions

    def _abort_lingering_transactions(self) -> None:
        """Abort the open transactions of this sink's prefix that this subtask owns.

        Runs after the restored committables were committed (the sink operator
        commits before it opens the writer), so what is still open belongs to an
        attempt that failed before its checkpoint completed. Initializing a
        producer with the same transactional id fences that attempt's producer and
        aborts its transaction.
        """
        admin = admin_client(self._sink.bootstrap_servers, self._sink.properties)
        try:
            brokers = [(b.host, b.port) for b in admin.list_topics(timeout=_ADMIN_TIMEOUT_S).brokers.values()]
        finally:
            admin.poll(0)  # the client's log lines, to logging
        ctx = self._context
        for txn in self._admin.list_open(brokers, states=("Ongoing", "PrepareAbort", "PrepareCommit")):
            owner = self._ids.owner(txn.transactional_id)
            if owner is None or owner % ctx.parallelism != ctx.subtask_index:
                continue
            _log.info(
                "KafkaSink subtask %s: aborting lingering transaction %s", ctx.subtask_index, txn.transactional_id
            )
            producer = self._new_producer({"transactional.id": txn.transactional_id})
            producer.init_transactions(_ADMIN_TIMEOUT_S * 2)
            producer.close()


class KafkaCommitter(Committer):
    """Commits pre-committed transactions: through the live producer if this process has it, else by id.

    Every wait of a commit (the live producer's, the retries by id) looks at
    ``cancelled`` at least every ``_FLUSH_SLICE_S`` and raises
    :class:`CancelTaskError` once it is true: the transaction stays open, and
    the next restore commits it by id (its checkpoint completed).
    """

    def __init__(
        self, bootstrap_servers: str, properties: dict[str, str], *, cancelled: Callable[[], bool] = lambda: False
    ) -> None:
        self._bootstrap_servers = bootstrap_servers
        self._properties = properties
        self._cancelled = cancelled
        self._admin: TransactionAdmin | None = None

    def commit(self, committables: list[KafkaCommittable]) -> None:
        for committable in committables:
            with _AWAITING_LOCK:
                producer = _AWAITING_COMMIT.get(committable.transactional_id)
            if producer is None:
                self._commit_by_id(committable)
                continue
            try:
                self._commit_live(committable.transactional_id, producer)
            except _confluent().KafkaException as e:
                # Timed out, or the coordinator moved: what happened to the transaction is Kafka's to tell.
                _log.warning("KafkaSink: committing %r failed (%s); checking it by id", committable.transactional_id, e)
                self._commit_by_id(committable)
            finally:
                # Off the awaiting list only now, so that no writer takes the id over while it commits.
                with _AWAITING_LOCK:
                    _AWAITING_COMMIT.pop(committable.transactional_id, None)
            producer.close()

    def _commit_live(self, tid: str, producer) -> None:
        """``commit_transaction`` in slices: a timed-out call resumes the same commit (librdkafka's contract).

        Raises:
            CancelTaskError: the task was cancelled first.
            KafkaException: a non-retriable error, or ``_FLUSH_TIMEOUT_S`` passed.
        """
        deadline = time.monotonic() + _FLUSH_TIMEOUT_S
        while True:
            try:
                producer.commit_transaction(_FLUSH_SLICE_S)
                return
            except _confluent().KafkaException as e:
                if not e.args[0].retriable() or time.monotonic() >= deadline:
                    raise
            if self._cancelled():
                raise CancelTaskError(f"KafkaSink: cancelled while committing transaction {tid!r}; it stays open")

    def _commit_by_id(self, committable: KafkaCommittable) -> None:
        """Commit a restored transaction by producer id and epoch, or find it committed before.

        See :mod:`.commit_verification`: retriable answers are retried until the
        transaction timeout; only an abort (or the timeout) is loss.

        Raises:
            KafkaTransactionUnknownError: the cluster does not know the transaction
                (another cluster's checkpoint, a recreated broker, an expired id).
            KafkaTransactionLostError: the cluster aborted it.
        """
        if self._admin is None:
            self._admin = TransactionAdmin(self._bootstrap_servers, self._properties)
        timeout_ms = int(self._properties.get("transaction.timeout.ms", DEFAULT_TRANSACTION_TIMEOUT_MS))
        commit_by_id(
            self._admin,
            committable,
            policy=CommitRetryPolicy(deadline=timedelta(milliseconds=timeout_ms)),
            marker=self._marker,
            unknown=lambda detail: self._unknown(committable, detail),
            cancelled=self._cancelled,
            lost_hint=(
                f". Is transaction.timeout.ms ({self._properties.get('transaction.timeout.ms', 'default')}) "
                "shorter than a checkpoint plus a restart?"
            ),
        )

    def _marker(self, group: str) -> int | None:
        return committed_checkpoints(self._bootstrap_servers, self._properties, [group])[group]

    def _unknown(self, committable: KafkaCommittable, detail: str) -> KafkaTransactionUnknownError:
        return KafkaTransactionUnknownError(
            f"KafkaSink: transaction {committable.transactional_id!r} (producer id {committable.producer_id}, "
            f"epoch {committable.producer_epoch}) of the restored checkpoint or savepoint is unknown to the Kafka "
            f"cluster at {self._bootstrap_servers!r} ({detail}). The savepoint was taken against another Kafka "
            "cluster, or this cluster lost its transaction state (a broker recreated with an empty data "
            "directory), or the id expired (transactional.id.expiration.ms, 7 days by default); its records "
            "are not in this cluster. Options: resume against the cluster the savepoint was taken on; or drop "
            "the sink's pending transactions from the savepoint and resume from the copy, keeping all other "
            "state (SavepointWriter.from_existing_savepoint(path).remove_operator('<the KafkaSink's uid>')"
            ".write(dir)); or start the job without execution.state-recovery.path"
        )

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None
