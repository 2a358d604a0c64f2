"""A real Kafka broker for the Kafka tests: :class:`LocalKafkaBroker` (KRaft, 127.0.0.1).

``kafka_broker`` is one broker that a worker's consecutive Kafka tests share (its
jars are fetched with Maven into ``default_cache_dir()`` on first use, shared with
the example and the docs' blocks); tests that
stop or restart a broker start their own with ``LocalKafkaBroker`` so they do
not disturb the others. ``kafka_topic(partitions=...)`` creates a topic with a
unique name per call. Skipped, with the reason, only where Java is missing, or
Maven is missing and the jars are not cached yet.

``schema_registry`` is a real schema registry (Apicurio Registry, Confluent's
API at ``.url``: :class:`connectors.kafka.local_schema_registry.LocalSchemaRegistry`),
one per test module, fetched into the same cache. Without Java, Maven (and no
cached copy) or ``confluent-kafka[schemaregistry]`` it skips, and under
``CI=true`` it fails.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest

from connectors.kafka.testing import default_cache_dir

CACHE_DIR = default_cache_dir()


def _skip_reason() -> str | None:
    from connectors.kafka.testing import KAFKA_VERSION, _jar_dir

    if shutil.which("java") is None:
        return "the local Kafka broker needs Java 17+ ('java' is not on PATH)"
    if shutil.which("mvn") is None and not (_jar_dir(CACHE_DIR, KAFKA_VERSION) / ".complete").exists():
        return "fetching the Kafka broker's jars needs Maven ('mvn' is not on PATH)"
    return None


def _registry_missing() -> str | None:
    from connectors.kafka.local_schema_registry import APICURIO_VERSION, _registry_dir

    if shutil.which("java") is None:
        return "the local schema registry needs Java 17+ ('java' is not on PATH)"
    if shutil.which("mvn") is None and not (_registry_dir(CACHE_DIR, APICURIO_VERSION) / ".complete").exists():
        return "fetching the schema registry (Apicurio Registry) needs Maven ('mvn' is not on PATH)"
    try:
        import confluent_kafka.schema_registry  # noqa: F401
    except ImportError as e:
        return f'the schema-registry formats need pip install "confluent-kafka[schemaregistry]" ({e})'
    return None


@pytest.fixture(scope="module")
def schema_registry(tmp_path_factory):
    """A fresh, empty schema registry for this test module: ``.url`` is Confluent's API (``/apis/ccompat/v7``).

    A registry that cannot start fails the test (its log tail is in the error)."""
    from connectors.kafka.local_schema_registry import LocalSchemaRegistry
    from tests.support.environment import require_environment

    missing = _registry_missing()
    require_environment(missing is None, missing or "")
    registry = LocalSchemaRegistry(cache_dir=CACHE_DIR, log_dir=tmp_path_factory.mktemp("schema-registry"))
    registry.start()
    yield registry
    registry.stop()


@pytest.fixture(scope="session")
def kafka_cache_dir() -> Path:
    reason = _skip_reason()
    if reason is not None:
        pytest.skip(reason)
    return CACHE_DIR


class _WorkerBroker:
    """The broker this worker's Kafka tests share: started by the first test that needs it, stopped once
    the worker's next test is not a Kafka test (an idle KRaft broker costs 1-2% of a core: kept to the
    worker's end, the workers' brokers idled for most of the suite's run)."""

    broker = None

    @classmethod
    def stop(cls) -> None:
        broker, cls.broker = cls.broker, None
        if broker is not None:
            broker.stop(delete_data=True)


#: The SASL user every worker broker accepts (PLAIN, SCRAM-SHA-256/512; OAUTHBEARER takes any unsecured token).
SASL_USER, SASL_PASSWORD = "alice", "alice-secret"


@pytest.fixture(scope="session")
def kafka_certificates(tmp_path_factory):
    """A CA (``.ca``: what clients trust) and the brokers' PEM key store (``.server``), made for this session."""
    from tests.support.tls import make_certificates

    return make_certificates(tmp_path_factory.mktemp("kafka-tls"))


@pytest.fixture
def kafka_broker(kafka_cache_dir, kafka_certificates, tmp_path_factory):
    """The worker's broker: ``PLAINTEXT`` for the tests' own clients, and ``SASL_PLAINTEXT``, ``SSL`` and
    ``SASL_SSL`` listeners (``kafka_broker.servers(protocol)``) for jobs on a secured cluster."""
    from connectors.kafka.testing import LocalKafkaBroker

    if _WorkerBroker.broker is None or not _WorkerBroker.broker.running:
        _WorkerBroker.stop()
        broker = LocalKafkaBroker(
            cache_dir=kafka_cache_dir,
            data_dir=tmp_path_factory.mktemp("kafka-broker"),
            sasl_users={SASL_USER: SASL_PASSWORD},
            tls_keystore=kafka_certificates.server,
        )
        broker.start()
        _WorkerBroker.broker = broker
    return _WorkerBroker.broker


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield  # the test's own fixtures (jobs, clients) are torn down first
    if nextitem is None or Path(str(nextitem.path)).parent != Path(str(item.path)).parent:
        _WorkerBroker.stop()


@pytest.fixture
def kafka_topic(kafka_broker, request):
    """``kafka_topic(partitions=1, **config) -> name``: a fresh topic on the session broker."""
    test_name = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60]

    def create(partitions: int = 1, **config: str) -> str:
        return kafka_broker.create_topic(f"{test_name}-{uuid.uuid4().hex[:8]}", partitions=partitions, **config)

    return create
