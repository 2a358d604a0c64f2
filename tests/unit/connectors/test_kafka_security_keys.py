"""The Java Kafka client's security keys become librdkafka's (connectors/kafka/security.py)."""

from __future__ import annotations

import logging

import pytest

from connectors.kafka.security import librdkafka_properties
from flinklike_spark.errors import ConfigurationError

pytestmark = pytest.mark.timeout(30)

PLAIN = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="al\\"ice-secret";'


def test_plain_and_scram_jaas_become_username_and_password():
    props = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.jaas.config": PLAIN}
    assert librdkafka_properties(props, what="KafkaSource") == {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": 'al"ice-secret',
    }
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required\n  username=bob\n  password='x';"
    out = librdkafka_properties({"sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": scram}, what="KafkaSink")
    assert out["sasl.username"] == "bob" and out["sasl.password"] == "'x'"


def test_librdkafkas_own_keys_pass_unchanged_and_win():
    props = {"sasl.jaas.config": PLAIN, "sasl.username": "carol", "linger.ms": "5"}
    out = librdkafka_properties(props, what="KafkaSink")
    assert out["sasl.username"] == "carol" and out["sasl.password"] == 'al"ice-secret' and out["linger.ms"] == "5"


def test_unsecured_oauthbearer_and_oidc():
    unsecured = (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        'unsecuredLoginStringClaim_sub="svc" unsecuredLoginListClaim_scope=",read,write" '
        "unsecuredLoginLifetimeSeconds=600;"
    )
    out = librdkafka_properties({"sasl.mechanism": "OAUTHBEARER", "sasl.jaas.config": unsecured}, what="KafkaSource")
    assert out["enable.sasl.oauthbearer.unsecure.jwt"] == "true"
    assert out["sasl.oauthbearer.config"] == "principal=svc scope=read,write lifeSeconds=600"
    oidc = (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        'clientId="app" clientSecret="s3cret" scope="kafka";'
    )
    out = librdkafka_properties(
        {"sasl.jaas.config": oidc, "sasl.oauthbearer.token.endpoint.url": "https://idp/token"}, what="KafkaSink"
    )
    assert out == {
        "sasl.oauthbearer.token.endpoint.url": "https://idp/token",
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.client.id": "app",
        "sasl.oauthbearer.client.secret": "s3cret",
        "sasl.oauthbearer.scope": "kafka",
    }


@pytest.mark.parametrize(
    ("jaas", "message"),
    [
        ("com.example.MyLoginModule required;", "'com.example.MyLoginModule', which librdkafka cannot run"),
        ("not a jaas entry", "is not a JAAS entry"),
        ("org.apache.kafka.common.security.plain.PlainLoginModule required username=alice;", "lacks ['password']"),
    ],
)
def test_a_jaas_entry_librdkafka_cannot_follow_is_refused_by_name(jaas, message):
    with pytest.raises(ConfigurationError, match=message.replace("[", r"\[").replace("(", r"\(")) as failure:
        librdkafka_properties({"sasl.jaas.config": jaas}, what="KafkaSource")
    assert str(failure.value).startswith("KafkaSource: ")


def test_pem_stores_become_librdkafkas_locations_and_pem_strings(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMII...\n-----END CERTIFICATE-----\n")
    client = tmp_path / "client.pem"
    client.write_text("-----BEGIN PRIVATE KEY-----\n...\n-----END PRIVATE KEY-----\n")
    props = {
        "security.protocol": "SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(ca),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(client),
        "ssl.key.password": "kp",
        "ssl.endpoint.identification.algorithm": "",
    }
    assert librdkafka_properties(props, what="KafkaSink") == {
        "security.protocol": "SSL",
        "ssl.key.password": "kp",
        "ssl.endpoint.identification.algorithm": "none",
        "ssl.ca.location": str(ca),
        "ssl.certificate.location": str(client),
        "ssl.key.location": str(client),
    }
    # Without a declared type, the file shows it (PEM text); PEM strings map to librdkafka's *.pem keys
    assert librdkafka_properties({"ssl.truststore.location": str(ca)}, what="KafkaSink") == {"ssl.ca.location": str(ca)}
    strings = {
        "ssl.truststore.type": "PEM",
        "ssl.truststore.certificates": "CA PEM",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.certificate.chain": "CHAIN PEM",
        "ssl.keystore.key": "KEY PEM",
    }
    assert librdkafka_properties(strings, what="KafkaSink") == {
        "ssl.ca.pem": "CA PEM",
        "ssl.certificate.pem": "CHAIN PEM",
        "ssl.key.pem": "KEY PEM",
    }


def test_a_pkcs12_key_store_is_librdkafkas_keystore(tmp_path):
    p12 = tmp_path / "client.p12"
    p12.write_bytes(b"\x30\x82\x0a\x00 not pem")
    props = {"ssl.keystore.location": str(p12), "ssl.keystore.password": "pw"}
    assert librdkafka_properties(props, what="KafkaSink") == {
        "ssl.keystore.location": str(p12),
        "ssl.keystore.password": "pw",
    }


@pytest.mark.parametrize("store", ["truststore", "keystore"])
def test_a_jks_store_is_refused_with_the_pem_keys_to_use(tmp_path, store):
    jks = tmp_path / f"{store}.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02")
    with pytest.raises(ConfigurationError) as failure:
        librdkafka_properties({f"ssl.{store}.location": str(jks), f"ssl.{store}.password": "pw"}, what="KafkaSink")
    message = str(failure.value)
    assert f"ssl.{store}.location={str(jks)!r} is a JKS" in message and f"ssl.{store}.type=" in message
    assert "pw" not in message.replace(str(jks), "")  # never a secret in the message
    with pytest.raises(ConfigurationError, match="is a JKS"):  # declared, whether or not the file is readable here
        librdkafka_properties({f"ssl.{store}.type": "JKS", f"ssl.{store}.location": "/nowhere/x.jks"}, what="KafkaSink")


def test_java_only_tuning_is_dropped_with_a_warning_and_auth_hooks_are_refused(caplog):
    with caplog.at_level(logging.WARNING, logger="connectors.kafka.security"):
        out = librdkafka_properties({"ssl.protocol": "TLSv1.3", "acks": "all"}, what="KafkaSink")
    assert out == {"acks": "all"}
    assert "'ssl.protocol' has no librdkafka equivalent" in caplog.text
    with pytest.raises(ConfigurationError, match="'sasl.login.callback.handler.class' cannot be used here"):
        librdkafka_properties({"sasl.login.callback.handler.class": "com.example.Handler"}, what="KafkaSource")
