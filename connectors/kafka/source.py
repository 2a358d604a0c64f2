"""PyFlink's ``KafkaSource``: Kafka topic partitions as splits, read with librdkafka (``confluent-kafka``).

Usage is PyFlink's::

    source = (
        KafkaSource.builder()
        .set_bootstrap_servers("127.0.0.1:9092")
        .set_topics("orders")
        .set_group_id("my-group")
        .set_starting_offsets(KafkaOffsetsInitializer.earliest())
        .set_value_only_deserializer(SimpleStringSchema())
        .build()
    )
    env.from_source(source, WatermarkStrategy.for_monotonous_timestamps(), "orders")

Splits and their owners. Each topic partition is one :class:`KafkaPartitionSplit`
(topic, partition, next offset, stopping offset). Its reader subtask is fixed
by Flink's ``KafkaSourceEnumerator.getSplitOwner``: ``((javaHash(topic) * 31 &
0x7FFFFFFF) % p + partition) % p``. The JobMaster lists the partitions and
resolves the starting (and, bounded, stopping) offsets once, when the job's
splits are created; readers then discover partitions themselves
(``partition.discovery.interval.ms``, every 5 minutes by default for an
unbounded source, off for a bounded one) and take only those they own, starting
at the earliest offset. Because the owner is a function of the partition and
the parallelism, no enumerator RPC is needed, and a job restored at another
parallelism hands each restored split to its new owner
(:meth:`KafkaSource.assign_splits`): nothing is read twice or skipped.

Checkpoints. A split's next offset is its state in the checkpoint (operator
state ``source_splits``, queryable like any other); on completion of a
checkpoint the reader commits those offsets to the consumer group
(``commit.offsets.on.checkpoint``, default true when a group id is set), for
monitoring only, as in Flink: recovery always uses the checkpoint.

Event time. Kafka's record timestamps are the records' timestamps and, without
a timestamp assigner, the event time; watermarks are generated per partition and
combined (minimum over non-idle partitions) in the source operator.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Iterable, Mapping
from datetime import timedelta
from types import MappingProxyType
from typing import Any, Final

import pyarrow as pa

from connectors.kafka.clients import LIBRDKAFKA_LOG, admin_client, cluster_metadata
from connectors.kafka.offsets import (
    KafkaOffsetsInitializer,
    KafkaTopicPartition,
    OffsetsInitializerKind,
    resolve_offsets,
)
from connectors.kafka.security import librdkafka_properties
from connectors.kafka.source_options import (
    DEFAULT_DISCOVERY_INTERVAL,
    KafkaRecordDeserializationSchema,
    KafkaSourceOptions,
)
from connectors.kafka.source_reader import KafkaSourceReader
from connectors.kafka.splits import NO_STOPPING_OFFSET, KafkaPartitionSplit, split_owner
from flinklike_spark.common.serialization import DeserializationSchema
from flinklike_spark.connector_api import Boundedness, Source, SourceReader, SourceReaderContext, SourceSplit
from flinklike_spark.errors import ConfigurationError

__all__ = [
    "READER_PREFETCH",
    "KafkaPartitionSplit",
    "KafkaRecordDeserializationSchema",
    "KafkaSource",
    "KafkaSourceBuilder",
    "KafkaSourceOptions",
    "split_owner",
]

_log = logging.getLogger(__name__)

_MAX_TOPICS_NAMED = 30  # an error lists at most this many of the cluster's topics
#: a reader's prefetch, unless the job sets these librdkafka properties itself
READER_PREFETCH: Final = MappingProxyType(
    {"max.partition.fetch.bytes": 8 * 1024 * 1024, "queued.min.messages": 1_000_000}
)
# Java consumer properties without a librdkafka equivalent (or set by the source itself): not passed on.
_JAVA_ONLY_PROPERTIES = frozenset({
    "key.deserializer", "value.deserializer", "max.poll.records", "default.api.timeout.ms",
    "register.consumer.metrics", "client.id.prefix", "partition.discovery.interval.ms",
    "commit.offsets.on.checkpoint", "request.timeout.ms", "allow.auto.create.topics", "enable.auto.commit",
})  # fmt: skip


class KafkaSource(Source):
    """Reads Kafka topic partitions (see the module docstring). Build with :meth:`builder`."""

    def __init__(self, options: KafkaSourceOptions) -> None:
        self.options = options
        self._pattern = re.compile(options.topic_pattern) if options.topic_pattern is not None else None

    @staticmethod
    def builder() -> KafkaSourceBuilder:
        return KafkaSourceBuilder()

    def __repr__(self) -> str:
        o = self.options
        what = o.topics or o.topic_pattern or [str(p) for p in o.partitions]
        return f"KafkaSource({what}, bootstrap_servers={o.bootstrap_servers!r}, {o.boundedness.value})"

    @property
    def boundedness(self) -> Boundedness:
        return self.options.boundedness

    def output_schema(self) -> pa.Schema:
        return self.options.deserializer.produced_schema()

    def consumer_config(self, client_id: str = "") -> dict[str, Any]:
        """The librdkafka consumer configuration of this source's readers and offset lookups."""
        o = self.options
        config: dict[str, Any] = {
            "bootstrap.servers": o.bootstrap_servers,
            "isolation.level": "read_uncommitted",  # the Java consumer's default, which Flink uses
            "enable.partition.eof": False,
            # With librdkafka's prefetch defaults (1 MiB per partition and fetch, refetch below 100,000
            # queued messages) a consumer waits on the broker: 230k small records/s here against 780-900k
            # with these (benchmarks/kafka.py's plain consumer). Memory stays bounded by
            # queued.max.messages.kbytes (64 MiB). A property the job sets wins.
            **READER_PREFETCH,
        }
        config.update({k: v for k, v in o.properties if k not in _JAVA_ONLY_PROPERTIES})
        config.update({"enable.auto.commit": False, "enable.auto.offset.store": False})
        if o.group_id:
            config["group.id"] = o.group_id
        else:  # librdkafka wants one to create a consumer; nothing is committed without a user's group id
            config["group.id"] = f"flinklike-kafka-source-{uuid.uuid4().hex[:12]}"
        if client_id:
            config["client.id"] = client_id
        config["logger"] = LIBRDKAFKA_LOG
        return config

    def matches(self, topic: str) -> bool:
        """Whether this source reads ``topic`` (by name or pattern; explicit partitions match by topic)."""
        o = self.options
        if self._pattern is not None:
            return self._pattern.fullmatch(topic) is not None
        if o.partitions:
            return any(p.topic == topic for p in o.partitions)
        return topic in o.topics

    def select_partitions(self, available: Iterable[KafkaTopicPartition]) -> list[KafkaTopicPartition]:
        """The partitions among ``available`` this source reads."""
        if self.options.partitions:
            wanted = set(self.options.partitions)
            return sorted(tp for tp in available if tp in wanted)
        return sorted(tp for tp in available if self.matches(tp.topic))

    def list_partitions(self, timeout: float = 30.0) -> list[KafkaTopicPartition]:
        """The partitions this source reads, as the cluster's metadata lists them now.

        Raises:
            confluent_kafka.KafkaException: no broker answered within ``timeout``.
        """
        admin = admin_client(self.options.bootstrap_servers, dict(self.options.properties))
        try:
            metadata = admin.list_topics(timeout=timeout)
        finally:
            admin.poll(0)  # the client's log lines, to logging
        return self.select_partitions(_partitions_of(metadata))

    def checked_for_submission(self) -> KafkaSource:
        """Reach the cluster and find the topics this source reads, before the job starts.

        A topic that does not exist is a typo more often than a topic still to
        come. A bounded source fails; an unbounded one logs a warning (once per
        submission) and goes on: its readers' partition discovery
        (``partition.discovery.interval.ms``) picks the topics up when they
        appear, as Flink's source does. A topic pattern that matches no topic
        is treated the same way.

        Raises:
            ConfigurationError: no broker of the bootstrap servers answered within
                :data:`~.clients.SUBMISSION_TIMEOUT` (the servers are named); or a
                bounded source's topics do not exist, or its pattern matches none
                (the missing topics or the pattern and the cluster's topics are named).
        """
        o = self.options
        metadata = cluster_metadata(o.bootstrap_servers, dict(o.properties), what="KafkaSource")
        existing = sorted(name for name, topic in metadata.topics.items()
                          if topic.error is None and not name.startswith("__"))  # fmt: skip
        if self._pattern is not None:
            if any(self.matches(name) for name in existing):
                return self
            missing = f"no topic matches the pattern {o.topic_pattern!r}"
        else:
            wanted = o.topics or tuple(dict.fromkeys(tp.topic for tp in o.partitions))
            absent = [t for t in wanted if t not in existing]
            if not absent:
                return self
            named = ", ".join(map(repr, absent))
            missing = f"topics {named} do not exist" if len(absent) > 1 else f"topic {named} does not exist"
        listed = ", ".join(map(repr, existing[:_MAX_TOPICS_NAMED])) or "none"
        if len(existing) > _MAX_TOPICS_NAMED:
            listed += f" and {len(existing) - _MAX_TOPICS_NAMED} more"
        where = f"on {o.bootstrap_servers!r} (its topics: {listed})"
        if o.boundedness is Boundedness.BOUNDED:
            raise ConfigurationError(
                f"KafkaSource: {missing} {where}; a bounded source would read nothing. Check set_topics / "
                "set_topic_pattern, or create the topics first"
            )
        if o.discovery_interval is None:
            later = "partition discovery is off (partition.discovery.interval.ms), so they will not be read"
        else:
            later = (
                f"their partitions are read from the earliest offset once they exist (partition discovery "
                f"every {o.discovery_interval.total_seconds():g} s)"
            )
        _log.warning("KafkaSource: %s %s; %s", missing, where, later)
        return self

    def create_splits(self, parallelism: int) -> list[KafkaPartitionSplit]:
        """One split per partition, with the starting (and stopping) offsets resolved now."""
        partitions = self.list_partitions()
        config = self.consumer_config()
        o = self.options
        starts = resolve_offsets(o.starting_offsets, partitions, config)
        stops = resolve_offsets(o.stopping_offsets, partitions, config) if o.stopping_offsets is not None else {}
        return [
            KafkaPartitionSplit(
                split_id=str(tp),
                topic=tp.topic,
                partition=tp.partition,
                next_offset=starts[tp],
                stopping_offset=stops.get(tp, NO_STOPPING_OFFSET),
            )  # fmt: skip
            for tp in partitions
        ]

    def assign_splits(self, splits: list[SourceSplit], parallelism: int) -> list[list[SourceSplit]]:
        """Each split to its owner (:func:`split_owner`): for new jobs and restores at any parallelism."""
        per_subtask: list[list[SourceSplit]] = [[] for _ in range(parallelism)]
        for split in splits:
            if not isinstance(split, KafkaPartitionSplit):
                raise TypeError(f"KafkaSource cannot assign a {type(split).__name__} ({split.split_id!r})")
            per_subtask[split_owner(split.topic, split.partition, parallelism)].append(split)
        return per_subtask

    def create_reader(self, context: SourceReaderContext) -> SourceReader:
        return KafkaSourceReader(self, context)


class KafkaSourceBuilder:
    """PyFlink's ``KafkaSourceBuilder``: every setter returns the builder; :meth:`build` checks the whole."""

    def __init__(self) -> None:
        self._bootstrap_servers: str | None = None
        self._topics: tuple[str, ...] = ()
        self._topic_pattern: str | None = None
        self._partitions: tuple[KafkaTopicPartition, ...] = ()
        self._group_id: str | None = None
        self._client_id_prefix = ""
        self._properties: dict[str, str] = {}
        self._starting = KafkaOffsetsInitializer.earliest()
        self._stopping: KafkaOffsetsInitializer | None = None
        self._boundedness = Boundedness.CONTINUOUS_UNBOUNDED
        self._deserializer: KafkaRecordDeserializationSchema | None = None

    def set_bootstrap_servers(self, bootstrap_servers: str) -> KafkaSourceBuilder:
        self._bootstrap_servers = bootstrap_servers
        return self

    def set_group_id(self, group_id: str) -> KafkaSourceBuilder:
        self._group_id = group_id
        return self

    def set_topics(self, *topics: str) -> KafkaSourceBuilder:
        """Read these topics (all their partitions); replaces a topic pattern or partition set."""
        flat: list[str] = []
        for topic in topics:
            flat.extend([topic] if isinstance(topic, str) else list(topic))
        self._topics, self._topic_pattern, self._partitions = tuple(flat), None, ()
        return self

    def set_topic_pattern(self, topic_pattern: str) -> KafkaSourceBuilder:
        """Read every topic whose whole name matches the regular expression (Java's ``Pattern``)."""
        try:
            re.compile(topic_pattern)
        except (re.error, TypeError) as e:
            raise ConfigurationError(f"set_topic_pattern: {topic_pattern!r} is not a regular expression: {e}") from e
        self._topics, self._topic_pattern, self._partitions = (), topic_pattern, ()
        return self

    def set_partitions(self, partitions: Iterable[KafkaTopicPartition]) -> KafkaSourceBuilder:
        """Read exactly these partitions (no discovery beyond them)."""
        partitions = tuple(sorted(set(partitions)))
        for tp in partitions:
            if not isinstance(tp, KafkaTopicPartition):
                raise ConfigurationError(f"set_partitions expects KafkaTopicPartition values, got {tp!r}")
        self._topics, self._topic_pattern, self._partitions = (), None, partitions
        return self

    def set_starting_offsets(self, starting_offsets_initializer: KafkaOffsetsInitializer) -> KafkaSourceBuilder:
        self._starting = _initializer("set_starting_offsets", starting_offsets_initializer)
        return self

    def set_unbounded(self, stopping_offsets_initializer: KafkaOffsetsInitializer) -> KafkaSourceBuilder:
        """Stop at these offsets, but run as an unbounded (streaming) source."""
        self._stopping = _initializer("set_unbounded", stopping_offsets_initializer)
        self._boundedness = Boundedness.CONTINUOUS_UNBOUNDED
        return self

    def set_bounded(self, stopping_offsets_initializer: KafkaOffsetsInitializer) -> KafkaSourceBuilder:
        """Stop at these offsets (resolved when the job starts); the job finishes when all partitions did."""
        self._stopping = _initializer("set_bounded", stopping_offsets_initializer)
        self._boundedness = Boundedness.BOUNDED
        return self

    def set_value_only_deserializer(self, deserialization_schema: DeserializationSchema) -> KafkaSourceBuilder:
        self._deserializer = KafkaRecordDeserializationSchema.value_only(deserialization_schema)
        return self

    def set_deserializer(self, deserializer: KafkaRecordDeserializationSchema) -> KafkaSourceBuilder:
        if not isinstance(deserializer, KafkaRecordDeserializationSchema):
            raise ConfigurationError(
                "set_deserializer expects a KafkaRecordDeserializationSchema (e.g. "
                f"KafkaRecordDeserializationSchema.value_only(SimpleStringSchema())), got {deserializer!r}"
            )
        self._deserializer = deserializer
        return self

    def set_client_id_prefix(self, prefix: str) -> KafkaSourceBuilder:
        self._client_id_prefix = prefix
        return self

    def set_property(self, key: str, value: str) -> KafkaSourceBuilder:
        """A Kafka consumer property (passed to librdkafka) or one of the source's own:
        ``partition.discovery.interval.ms`` (<= 0 disables discovery), ``commit.offsets.on.checkpoint``,
        ``client.id.prefix``, ``group.id``."""
        self._properties[str(key)] = str(value)
        return self

    def set_properties(self, props: Mapping[str, Any]) -> KafkaSourceBuilder:
        for key, value in dict(props).items():
            self.set_property(key, value)
        return self

    def build(self) -> KafkaSource:
        """Check the settings and build the source.

        Raises:
            ConfigurationError: no bootstrap servers, no topics / pattern / partitions,
                no deserializer, or a malformed source property.
        """
        props = dict(self._properties)
        bootstrap = self._bootstrap_servers or props.get("bootstrap.servers")
        if not bootstrap:
            raise ConfigurationError("KafkaSource: set_bootstrap_servers(...) is required (e.g. '127.0.0.1:9092')")
        if not (self._topics or self._topic_pattern or self._partitions):
            raise ConfigurationError("KafkaSource: one of set_topics, set_topic_pattern or set_partitions is required")
        if self._deserializer is None:
            raise ConfigurationError(
                "KafkaSource: a deserializer is required: set_value_only_deserializer(SimpleStringSchema()) "
                "or set_deserializer(KafkaRecordDeserializationSchema.value_only(...))"
            )
        group_id = self._group_id or props.get("group.id") or None
        commit_setting = props.get("commit.offsets.on.checkpoint")
        commit = _bool_property("commit.offsets.on.checkpoint", commit_setting, default=True)
        if commit_setting is not None and commit and not group_id:
            raise ConfigurationError(
                "KafkaSource: commit.offsets.on.checkpoint=true needs a consumer group: call set_group_id(...)"
            )
        commit = commit and group_id is not None
        discovery: timedelta | None = DEFAULT_DISCOVERY_INTERVAL
        if "partition.discovery.interval.ms" in props:
            try:
                ms = int(props["partition.discovery.interval.ms"])
            except ValueError as e:
                raise ConfigurationError(
                    "KafkaSource: partition.discovery.interval.ms must be an integer number of ms (<= 0: off), "
                    f"got {props['partition.discovery.interval.ms']!r}"
                ) from e
            discovery = timedelta(milliseconds=ms) if ms > 0 else None
        if self._boundedness is Boundedness.BOUNDED or self._partitions:
            discovery = None  # Flink: no discovery for bounded sources; fixed partitions need none
        if self._starting.kind is OffsetsInitializerKind.COMMITTED and not group_id:
            raise ConfigurationError("KafkaSource: committed_offsets() starting offsets need set_group_id(...)")
        prefix = self._client_id_prefix or props.get("client.id.prefix", "")
        return KafkaSource(KafkaSourceOptions(
            bootstrap_servers=bootstrap, topics=self._topics, topic_pattern=self._topic_pattern,
            partitions=self._partitions, group_id=group_id, client_id_prefix=prefix,
            properties=tuple(sorted((k, v) for k, v in librdkafka_properties(props, what="KafkaSource").items()
                                    if k not in ("bootstrap.servers", "group.id"))),
            starting_offsets=self._starting, stopping_offsets=self._stopping, boundedness=self._boundedness,
            deserializer=self._deserializer, discovery_interval=discovery, commit_offsets_on_checkpoint=commit,
        ))  # fmt: skip


def _partitions_of(metadata) -> list[KafkaTopicPartition]:
    """The partitions of the user topics in a cluster's metadata (internal ``__`` topics left out)."""
    return [
        KafkaTopicPartition(name, p)
        for name, topic in metadata.topics.items()
        if topic.error is None and not name.startswith("__")
        for p in topic.partitions
    ]


def _initializer(where: str, value: Any) -> KafkaOffsetsInitializer:
    if not isinstance(value, KafkaOffsetsInitializer):
        raise ConfigurationError(
            f"{where} expects a KafkaOffsetsInitializer (earliest(), latest(), committed_offsets(...), "
            f"timestamp(ms), offsets({{...}})), got {value!r}"
        )
    return value


def _bool_property(name: str, value: str | None, *, default: bool) -> bool:
    if value is None:
        return default
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise ConfigurationError(f"KafkaSource: {name} must be 'true' or 'false', got {value!r}")
    return text == "true"
