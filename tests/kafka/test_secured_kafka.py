"""Kafka on a secured cluster, configured with the Java client's keys as a PyFlink program passes them.

The worker's broker (tests/kafka/conftest.py) serves ``SASL_PLAINTEXT``, ``SSL`` and ``SASL_SSL`` listeners
beside its plaintext one, with certificates made for the session and a SASL user known to PLAIN and SCRAM
(OAUTHBEARER takes unsecured tokens). Every job here reads and writes only through a secured listener; the
test's own producer and ``read_committed`` checker use the plaintext one. Exactly-once checks are per key:
each sequence number once, in order, with the state chain unbroken.
"""

from __future__ import annotations

import contextlib
import signal
import time

import pytest

pytest.importorskip("confluent_kafka")

from checkpointing import list_completed_checkpoints  # noqa: E402
from connectors.kafka.broker_connection import BrokerAuthenticationError  # noqa: E402
from connectors.kafka.security import librdkafka_properties  # noqa: E402
from connectors.kafka.transaction_admin import TransactionAdmin  # noqa: E402
from flinklike_spark.common import Configuration, Types, WatermarkStrategy  # noqa: E402
from flinklike_spark.common.serialization import SimpleStringSchema  # noqa: E402
from flinklike_spark.datastream import StreamExecutionEnvironment  # noqa: E402
from flinklike_spark.datastream.connectors.kafka import (  # noqa: E402
    DeliveryGuarantee,
    KafkaOffsetsInitializer,
    KafkaRecordSerializationSchema,
    KafkaSink,
    KafkaSource,
)
from flinklike_spark.datastream.formats.json import JsonRowDeserializationSchema  # noqa: E402
from flinklike_spark.errors import CommittedSinkOutputError, ConfigurationError, JobCancelledError  # noqa: E402
from tests.kafka.conftest import SASL_PASSWORD, SASL_USER  # noqa: E402
from tests.kafka.kafka_jobs import (  # noqa: E402
    KeyOfLine,
    NumberPerKey,
    assert_each_key_exactly_once_in_order,
    produce_sequences,
    read_committed,
)
from tests.support.failover_jobs import task_executor_processes, wait_for  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

NUM_KEYS, PER_KEY = 6, 300
_PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
_OAUTH = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


def java_keys(case: str, ca: str) -> dict[str, str]:
    """The Java client's properties of ``case`` (``<security.protocol>/<sasl.mechanism>``)."""
    protocol, _, mechanism = case.partition("/")
    keys = {"security.protocol": protocol}
    if protocol.endswith("SSL"):
        keys |= {"ssl.truststore.type": "PEM", "ssl.truststore.location": ca}
    if mechanism:
        module = {"PLAIN": _PLAIN, "OAUTHBEARER": _OAUTH}.get(mechanism, _SCRAM)
        credentials = (
            'unsecuredLoginStringClaim_sub="alice"'
            if mechanism == "OAUTHBEARER"
            else f'username="{SASL_USER}" password="{SASL_PASSWORD}"'
        )
        keys |= {"sasl.mechanism": mechanism, "sasl.jaas.config": f"{module} required {credentials};"}
    return keys


CASES = [
    "SASL_PLAINTEXT/PLAIN",
    "SASL_PLAINTEXT/SCRAM-SHA-256",
    "SASL_PLAINTEXT/OAUTHBEARER",
    "SSL",
    "SASL_SSL/SCRAM-SHA-512",
]


@pytest.mark.parametrize("case", CASES)
def test_the_transaction_requests_authenticate_like_the_clients(kafka_broker, kafka_certificates, case):
    """DescribeTransactions / ListTransactions / FindCoordinator over the secured listener, from Java keys."""
    from confluent_kafka import Producer

    properties = librdkafka_properties(java_keys(case, str(kafka_certificates.ca)), what="test")
    servers = kafka_broker.servers(case.partition("/")[0])
    transactional_id = f"secured-{case.replace('/', '-')}-{time.monotonic_ns()}"
    producer = Producer({"bootstrap.servers": servers, "transactional.id": transactional_id, **properties})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(kafka_broker.create_topic(f"t-{transactional_id}"), b"x")
    producer.flush(30)
    admin = TransactionAdmin(servers, properties, timeout=30)
    try:
        description = admin.describe(transactional_id)
        assert description.state == "Ongoing" and description.producer_id >= 0
        host, port = servers.split(":")
        assert transactional_id in {t.transactional_id for t in admin.list_open([(host, int(port))])}
    finally:
        admin.close()
        producer.abort_transaction(30)


def test_wrong_credentials_are_refused_with_the_brokers_reason(kafka_broker):
    wrong = librdkafka_properties(
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.jaas.config": f'{_SCRAM} required username="{SASL_USER}" password="wrong";',
        },
        what="test",
    )
    admin = TransactionAdmin(kafka_broker.servers("SASL_PLAINTEXT"), wrong, timeout=30)
    with pytest.raises(BrokerAuthenticationError, match="refused SASL authentication"):
        admin.describe("anything")
    admin.close()


def test_a_jks_trust_store_fails_the_program_before_it_runs(tmp_path):
    store = tmp_path / "truststore.jks"
    store.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02")
    builder = (
        KafkaSink.builder()
        .set_bootstrap_servers("127.0.0.1:1")
        .set_record_serializer(
            KafkaRecordSerializationSchema.builder()
            .set_topic("t")
            .set_value_serialization_schema(SimpleStringSchema())
            .build()
        )
        .set_property("security.protocol", "SSL")
        .set_property("ssl.truststore.location", str(store))
    )
    with pytest.raises(ConfigurationError, match=r"KafkaSink: ssl.truststore.location=.* is a JKS trust store"):
        builder.build()


def pipeline(servers: str, java: dict[str, str], in_topic: str, out_topic: str, config: Configuration):
    """Kafka -> per-key sequence check -> Kafka EXACTLY_ONCE, PyFlink's calls with the Java client's keys."""
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.enable_checkpointing(200)
    row = Types.ROW_NAMED(["key", "seq"], [Types.INT(), Types.LONG()])
    source = KafkaSource.builder().set_bootstrap_servers(servers).set_topics(in_topic).set_group_id("secured")
    source = source.set_starting_offsets(KafkaOffsetsInitializer.earliest())
    source = source.set_value_only_deserializer(JsonRowDeserializationSchema.builder().type_info(row).build())
    sink = KafkaSink.builder().set_bootstrap_servers(servers).set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE)
    sink = sink.set_record_serializer(
        KafkaRecordSerializationSchema.builder()
        .set_topic(out_topic)
        .set_key_serialization_schema(KeyOfLine())
        .set_value_serialization_schema(SimpleStringSchema())
        .build()
    ).set_transactional_id_prefix(f"secured-{out_topic}")
    for key, value in java.items():
        source = source.set_property(key, value)
        sink = sink.set_property(key, value)
    ds = env.from_source(source.build(), WatermarkStrategy.no_watermarks(), "secured source").uid("source")
    ds.key_by(lambda r: r["key"], key_type=Types.INT()).process(NumberPerKey(), output_type=Types.STRING()).uid(
        "count"
    ).sink_to(sink.build()).uid("sink")
    return env


@pytest.mark.parametrize(
    ("case", "kill"), [("SASL_PLAINTEXT/PLAIN", True), ("SASL_SSL/SCRAM-SHA-512", False), ("SSL", False)]
)
def test_exactly_once_on_a_secured_listener_with_java_keys(
    kafka_broker, kafka_topic, kafka_certificates, tmp_path, case, kill
):
    plain = kafka_broker.bootstrap_servers
    in_topic, out_topic = kafka_topic(partitions=3), kafka_topic(partitions=3)
    # With the kill, half of the input comes after the restart: its output is committed by a checkpoint newer
    # than the one restored, so the older checkpoint restored below is behind the sink's committed output.
    before = PER_KEY // 2 if kill else PER_KEY
    produce_sequences(plain, in_topic, num_keys=NUM_KEYS, per_key=before, partitions=3)
    config = Configuration(
        {
            "parallelism.default": "2",
            "local.number-taskmanager": "2",
            "execution.checkpointing.dir": str(tmp_path / "checkpoints"),
            "restart-strategy.type": "fixed-delay",
            "restart-strategy.fixed-delay.attempts": "5",
            "restart-strategy.fixed-delay.delay": "200 ms",
            "execution.checkpointing.num-retained": "1000",  # the older checkpoints, to try restoring one
        }
    )
    servers = kafka_broker.servers(case.partition("/")[0])
    java = java_keys(case, str(kafka_certificates.ca))
    client = pipeline(servers, java, in_topic, out_topic, config).execute_async()
    total = NUM_KEYS * PER_KEY
    try:
        if kill:
            wait_for(
                lambda: len(read_committed(plain, out_topic, timeout=30)) > total // 4, "output before the kill", 120
            )
            task_executor_processes()[0].send_signal(signal.SIGKILL)
            wait_for(lambda: client.num_restarts >= 1, "the restart", 60)
            produce_sequences(
                plain, in_topic, num_keys=NUM_KEYS, per_key=PER_KEY - before, partitions=3, first_seq=before
            )
        wait_for(lambda: len(read_committed(plain, out_topic, timeout=30)) >= total, "all output", 180)
        time.sleep(1.0)  # a duplicate would be committed by now
    finally:
        client.cancel()
        with contextlib.suppress(JobCancelledError):
            client.wait(60)
    output = read_committed(plain, out_topic)
    assert_each_key_exactly_once_in_order(output, NUM_KEYS, PER_KEY)
    if kill:
        # An older retained checkpoint of it, restored by name: the sink committed output after it, so the
        # restore is refused (through the secured listener) before anything is written again.
        completed = [c.checkpoint_id for c in list_completed_checkpoints(str(tmp_path / "checkpoints"), client.job_id)]
        assert len(completed) >= 2, completed
        older = f"{tmp_path / 'checkpoints'}/{client.job_id}/chk-{completed[0]}"
        config.set_string("execution.state-recovery.path", older)
        with pytest.raises(CommittedSinkOutputError, match=f"cannot restore checkpoint {completed[0]} "):
            pipeline(servers, java, in_topic, out_topic, config).execute_async("older checkpoint").cancel()
        assert len(read_committed(plain, out_topic)) == len(output), "the refused job wrote to the topic"
