"""The few Kafka transaction requests librdkafka does not offer: describe, list, and end a transaction by id.

Flink's exactly-once KafkaSink commits a pre-committed transaction after a
restart by resuming it: it sets the producer id and epoch that the transaction
was started with into a fresh producer (by reflection) and sends ``EndTxn``
(``FlinkKafkaInternalProducer.resumeTransaction``). confluent-kafka cannot do
that, and it can neither list nor describe transactions, so this module speaks
those four requests of Kafka's protocol itself, over a plain TCP socket:

* ``FindCoordinator`` (key type transaction): which broker coordinates an id;
* ``DescribeTransactions``: the producer id, epoch and state of an id (read at
  pre-commit, so that the committable carries what ``EndTxn`` needs);
* ``ListTransactions``: every open transaction of a broker (to abort the
  lingering transactions of a crashed job);
* ``EndTxn``: commit (or abort) the transaction of (id, producer id, epoch).
  A commit that was already completed answers success (Kafka treats it as a
  retry), so committing again after a restart is idempotent.

And ``OffsetFetch`` (with ``FindCoordinator`` of key type group): a consumer
group's committed offsets, for the sink's committed-checkpoint markers.
librdkafka's ``AdminClient.list_consumer_group_offsets`` crashes the process
(SIGSEGV in ``rd_kafka_cgrp_op`` from ``rd_kafka_handle_OffsetFetch``, seen with
confluent-kafka's bundled librdkafka) when the group coordinator answers while
it is still loading, as a broker does right after it starts.

Only flexible request versions that Kafka 3.x and 4.x brokers accept are used (each connection checks them
against the broker's ``ApiVersions``); connections are secured as the connector's clients are (TLS, SASL:
:mod:`.broker_connection`).
"""

from __future__ import annotations

import dataclasses
import io
import struct
import threading
from collections.abc import Iterable, Mapping

from connectors.kafka.broker_connection import (
    BrokerAuthenticationError,
    open_broker_socket,
    recv_exactly,
    supported_versions,
)
from flinklike_spark.errors import SinkCommitError

__all__ = [
    "RETRIABLE_CODES",
    "KafkaProtocolError",
    "OpenTransaction",
    "TransactionAdmin",
    "TransactionDescription",
]

_NO_PROPERTIES: Mapping[str, str] = {}
_SECURITY_PREFIXES = ("security.", "ssl.", "sasl.", "enable.sasl.")

_OFFSET_FETCH, _FIND_COORDINATOR, _END_TXN, _DESCRIBE_TRANSACTIONS, _LIST_TRANSACTIONS = 9, 10, 26, 65, 66
_COORDINATOR_GROUP, _COORDINATOR_TRANSACTION = 0, 1
# Error codes this module acts on (org.apache.kafka.common.protocol.Errors).
_NONE = 0
_COORDINATOR_LOAD_IN_PROGRESS = 14
_COORDINATOR_NOT_AVAILABLE = 15
_NOT_COORDINATOR = 16
_CONCURRENT_TRANSACTIONS = 51
_RETRIABLE = frozenset(
    {_COORDINATOR_LOAD_IN_PROGRESS, _COORDINATOR_NOT_AVAILABLE, _NOT_COORDINATOR, _CONCURRENT_TRANSACTIONS}
)
#: Codes that a later attempt may not get: REQUEST_TIMED_OUT, COORDINATOR_LOAD_IN_PROGRESS,
#: COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, CONCURRENT_TRANSACTIONS (a commit or abort of the id under way).
RETRIABLE_CODES = _RETRIABLE | {7}
_ERROR_NAMES = {
    3: "UNKNOWN_TOPIC_OR_PARTITION",
    14: "COORDINATOR_LOAD_IN_PROGRESS",
    15: "COORDINATOR_NOT_AVAILABLE",
    16: "NOT_COORDINATOR",
    47: "INVALID_PRODUCER_EPOCH",
    48: "INVALID_TXN_STATE",
    49: "INVALID_PRODUCER_ID_MAPPING",
    51: "CONCURRENT_TRANSACTIONS",
    53: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    90: "PRODUCER_FENCED",
    105: "TRANSACTIONAL_ID_NOT_FOUND",
}


class KafkaProtocolError(SinkCommitError):
    """A broker answered a transaction request with an error code (named as Kafka names it)."""

    def __init__(self, request: str, error_code: int, detail: str = "") -> None:
        name = _ERROR_NAMES.get(error_code, f"error code {error_code}")
        super().__init__(f"Kafka {request} failed: {name}{f' ({detail})' if detail else ''}")
        self.request = request
        self.error_code = error_code

    def __reduce__(self):
        return _rebuild_protocol_error, (self.request, self.error_code, str(self))


def _rebuild_protocol_error(request: str, error_code: int, message: str) -> KafkaProtocolError:
    error = KafkaProtocolError(request, error_code)
    error.args = (message,)
    return error


@dataclasses.dataclass(frozen=True, kw_only=True)
class TransactionDescription:
    """What ``DescribeTransactions`` tells of one transactional id."""

    transactional_id: str
    state: str  # Kafka's names: Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort, Dead
    producer_id: int
    producer_epoch: int
    timeout_ms: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class OpenTransaction:
    """One row of ``ListTransactions``."""

    transactional_id: str
    producer_id: int
    state: str


class _Writer:
    def __init__(self) -> None:
        self.out = io.BytesIO()

    def int8(self, v: int) -> _Writer:
        self.out.write(struct.pack(">b", v))
        return self

    def int16(self, v: int) -> _Writer:
        self.out.write(struct.pack(">h", v))
        return self

    def int32(self, v: int) -> _Writer:
        self.out.write(struct.pack(">i", v))
        return self

    def int64(self, v: int) -> _Writer:
        self.out.write(struct.pack(">q", v))
        return self

    def uvarint(self, v: int) -> _Writer:
        while v >= 0x80:
            self.out.write(bytes([(v & 0x7F) | 0x80]))
            v >>= 7
        self.out.write(bytes([v]))
        return self

    def string(self, v: str) -> _Writer:  # a legacy (int16-length) string, used by request headers
        data = v.encode()
        return self.int16(len(data)).raw(data)

    def compact_string(self, v: str) -> _Writer:
        data = v.encode()
        return self.uvarint(len(data) + 1).raw(data)

    def compact_array(self, items: list, write) -> _Writer:
        self.uvarint(len(items) + 1)
        for item in items:
            write(self, item)
        return self

    def no_tags(self) -> _Writer:
        return self.uvarint(0)

    def raw(self, data: bytes) -> _Writer:
        self.out.write(data)
        return self

    def bytes(self) -> bytes:
        return self.out.getvalue()


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = memoryview(data)
        self.pos = 0

    def _take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def int8(self) -> int:
        return self._take(">b")

    def int16(self) -> int:
        return self._take(">h")

    def int32(self) -> int:
        return self._take(">i")

    def int64(self) -> int:
        return self._take(">q")

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def compact_string(self) -> str | None:
        length = self.uvarint() - 1
        if length < 0:
            return None
        value = bytes(self.data[self.pos : self.pos + length]).decode()
        self.pos += length
        return value

    def compact_array(self, read) -> list:
        length = self.uvarint() - 1
        return [read(self) for _ in range(max(length, 0))]

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self.pos += self.uvarint()  # size, then the field's bytes


def _parse_servers(bootstrap_servers: str) -> list[tuple[str, int]]:
    servers = []
    for part in bootstrap_servers.split(","):
        part = part.strip()
        if not part:
            continue
        host, _, port = part.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"bootstrap server {part!r} is not host:port")
        servers.append((host.strip("[]"), int(port)))
    if not servers:
        raise ValueError(f"no bootstrap server in {bootstrap_servers!r}")
    return servers


class _Connection:
    """One broker connection; requests on it are serialized by a lock."""

    def __init__(self, address: tuple[str, int], timeout: float, client_id: str, security: Mapping[str, str]) -> None:
        self.address = address
        self._sock, self._versions = open_broker_socket(address, security, timeout=timeout, client_id=client_id)
        self._client_id = client_id
        self._correlation = 0
        self._lock = threading.Lock()

    def request(self, api_key: int, version: int, body: bytes) -> _Reader:
        supported_versions(self._versions, api_key, (version,))  # the broker must speak the version we encode
        with self._lock:
            self._correlation += 1
            header = _Writer().int16(api_key).int16(version).int32(self._correlation)
            header.string(self._client_id).no_tags()  # request header v2
            payload = header.bytes() + body
            self._sock.sendall(struct.pack(">i", len(payload)) + payload)
            size = struct.unpack(">i", self._recv(4))[0]
            reader = _Reader(self._recv(size))
        if reader.int32() != self._correlation:
            raise KafkaProtocolError(f"request {api_key}", -1, "response out of order")
        reader.skip_tags()  # response header v1
        return reader

    def _recv(self, n: int) -> bytes:
        return recv_exactly(self._sock, n, self.address)

    def close(self) -> None:
        self._sock.close()


class TransactionAdmin:
    """Transaction requests against one Kafka cluster. Thread-safe; ``close()`` when done.

    Args:
        bootstrap_servers: ``host:port[,host:port...]``.
        properties: the connector's librdkafka properties; their ``security.*``, ``ssl.*`` and ``sasl.*`` keys
            secure the connections (:mod:`.broker_connection`).
        timeout: seconds for connecting and for each response.
        client_id: the client id the broker logs.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        properties: Mapping[str, str] = _NO_PROPERTIES,
        *,
        timeout: float = 30.0,
        client_id: str = "flinklike-txn",
    ) -> None:
        self._servers = _parse_servers(bootstrap_servers)
        self._security = {k: v for k, v in properties.items() if k.startswith(_SECURITY_PREFIXES)}
        self._timeout = timeout
        self._client_id = client_id
        self._connections: dict[tuple[str, int], _Connection] = {}
        self._lock = threading.Lock()

    def _connection(self, address: tuple[str, int]) -> _Connection:
        with self._lock:
            connection = self._connections.get(address)
            if connection is None:
                connection = self._connections[address] = _Connection(
                    address, self._timeout, self._client_id, self._security
                )
            return connection

    def _any_broker(self) -> _Connection:
        errors = []
        for address in self._servers:
            try:
                return self._connection(address)
            except BrokerAuthenticationError:
                raise  # the same credentials go to every broker: the broker's reason is the error
            except OSError as e:
                errors.append(f"{address[0]}:{address[1]}: {e}")
        raise ConnectionError(f"no Kafka bootstrap server reachable ({'; '.join(errors)})")

    def _drop(self, connection: _Connection) -> None:
        with self._lock:
            if self._connections.get(connection.address) is connection:
                del self._connections[connection.address]
        connection.close()

    def _call(self, connection: _Connection, api_key: int, version: int, body: bytes) -> _Reader:
        try:
            return connection.request(api_key, version, body)
        except OSError:
            self._drop(connection)
            raise

    def coordinator(self, transactional_id: str, key_type: int = _COORDINATOR_TRANSACTION) -> tuple[str, int]:
        """The (host, port) of the broker that coordinates ``transactional_id`` (or a group: ``key_type`` 0)."""
        body = _Writer().compact_string(transactional_id).int8(key_type).no_tags().bytes()
        reader = self._call(self._any_broker(), _FIND_COORDINATOR, 3, body)
        reader.int32()  # throttle
        error = reader.int16()
        message = reader.compact_string()
        reader.int32()  # node id
        host = reader.compact_string() or ""
        port = reader.int32()
        if error != _NONE:
            raise KafkaProtocolError("FindCoordinator", error, message or transactional_id)
        return host, port

    def describe(self, transactional_id: str) -> TransactionDescription:
        """The state of ``transactional_id`` (state ``Dead``/unknown ids raise ``TRANSACTIONAL_ID_NOT_FOUND``)."""

        def topic(reader: _Reader) -> None:
            reader.compact_string()
            reader.compact_array(lambda r: r.int32())
            reader.skip_tags()

        def state(reader: _Reader) -> tuple:
            error = reader.int16()
            tid = reader.compact_string()
            txn_state = reader.compact_string()
            timeout_ms = reader.int32()
            reader.int64()  # start time
            producer_id = reader.int64()
            epoch = reader.int16()
            reader.compact_array(topic)
            reader.skip_tags()
            return error, tid, txn_state, timeout_ms, producer_id, epoch

        body = _Writer().compact_array([transactional_id], _Writer.compact_string).no_tags().bytes()
        reader = self._call(self._connection(self.coordinator(transactional_id)), _DESCRIBE_TRANSACTIONS, 0, body)
        reader.int32()  # throttle
        ((error, tid, txn_state, timeout_ms, producer_id, epoch),) = reader.compact_array(state)
        if error != _NONE:
            raise KafkaProtocolError("DescribeTransactions", error, transactional_id)
        return TransactionDescription(
            transactional_id=tid, state=txn_state, producer_id=producer_id, producer_epoch=epoch, timeout_ms=timeout_ms
        )

    def list_open(
        self, brokers: Iterable[tuple[str, int]], *, states: tuple[str, ...] = ("Ongoing",)
    ) -> list[OpenTransaction]:
        """The transactions in ``states`` that any of ``brokers`` coordinates (ask every broker of the cluster)."""

        def row(reader: _Reader) -> OpenTransaction:
            tid = reader.compact_string()
            producer_id = reader.int64()
            txn_state = reader.compact_string()
            reader.skip_tags()
            return OpenTransaction(transactional_id=tid, producer_id=producer_id, state=txn_state)

        body = (
            _Writer()
            .compact_array(list(states), _Writer.compact_string)
            .compact_array([], _Writer.int64)
            .no_tags()
            .bytes()
        )
        found: list[OpenTransaction] = []
        for address in brokers:
            reader = self._call(self._connection(address), _LIST_TRANSACTIONS, 0, body)
            reader.int32()  # throttle
            error = reader.int16()
            if error != _NONE:
                raise KafkaProtocolError("ListTransactions", error, f"{address[0]}:{address[1]}")
            reader.compact_array(lambda r: r.compact_string())  # unknown state filters
            found.extend(reader.compact_array(row))
        return found

    def end(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        *,
        commit: bool,
        attempts: int = 20,
        backoff: float = 0.1,
    ) -> None:
        """Commit (or abort) the transaction that (``producer_id``, ``producer_epoch``) holds under the id.

        Retries while the coordinator is moving or busy (``CONCURRENT_TRANSACTIONS``,
        ``NOT_COORDINATOR``, ...). Committing a transaction that is already
        committed succeeds. Raises :class:`KafkaProtocolError` otherwise, e.g.
        ``PRODUCER_FENCED`` / ``INVALID_PRODUCER_EPOCH`` when a newer producer
        took the id over (the transaction was aborted then).
        """
        import time

        body = (
            _Writer()
            .compact_string(transactional_id)
            .int64(producer_id)
            .int16(producer_epoch)
            .int8(1 if commit else 0)
            .no_tags()
            .bytes()
        )
        error = _NONE
        for attempt in range(attempts):
            try:
                reader = self._call(self._connection(self.coordinator(transactional_id)), _END_TXN, 3, body)
            except KafkaProtocolError as e:
                if e.error_code not in _RETRIABLE:
                    raise
                error = e.error_code
            else:
                reader.int32()  # throttle
                error = reader.int16()
                if error == _NONE:
                    return
                if error not in _RETRIABLE:
                    break
            time.sleep(backoff * min(2**attempt, 10))
        raise KafkaProtocolError("EndTxn", error, transactional_id)

    def committed_offsets(self, group: str) -> dict[tuple[str, int], int]:
        """Consumer group ``group``'s committed offsets, ``{(topic, partition): offset}`` (empty: none).

        One attempt: raises :class:`KafkaProtocolError` with the group's (or a
        partition's) error code, retriable ones included (see ``RETRIABLE_CODES``).
        """

        def partition(reader: _Reader) -> tuple[int, int, int]:
            index, offset = reader.int32(), reader.int64()
            reader.int32()  # committed leader epoch
            reader.compact_string()  # metadata
            error = reader.int16()
            reader.skip_tags()
            return index, offset, error

        def topic(reader: _Reader) -> tuple[str, list]:
            name = reader.compact_string() or ""
            partitions = reader.compact_array(partition)
            reader.skip_tags()
            return name, partitions

        connection = self._connection(self.coordinator(group, _COORDINATOR_GROUP))
        body = _Writer().compact_string(group).uvarint(0).no_tags().bytes()  # topics: null, i.e. every topic
        reader = self._call(connection, _OFFSET_FETCH, 6, body)
        reader.int32()  # throttle
        topics = reader.compact_array(topic)
        error = reader.int16()
        if error != _NONE:
            raise KafkaProtocolError("OffsetFetch", error, group)
        offsets = {}
        for name, partitions in topics:
            for index, offset, partition_error in partitions:
                if partition_error != _NONE:
                    raise KafkaProtocolError("OffsetFetch", partition_error, f"{group} {name}-{index}")
                offsets[(name, index)] = offset
        return offsets

    def close(self) -> None:
        with self._lock:
            connections, self._connections = list(self._connections.values()), {}
        for connection in connections:
            connection.close()
