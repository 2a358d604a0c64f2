"""Real Kafka brokers on 127.0.0.1 (KRaft, broker and controller in one JVM each): one node, or a cluster.

For tests, examples and benchmarks: :class:`LocalKafkaBroker` runs the
``org.apache.kafka:kafka_2.13`` server from Maven Central's jars with Java (17
or newer). The jars are fetched once with Maven (``mvn
dependency:copy-dependencies`` of a generated pom) into a cache directory;
the fetch is idempotent and safe when several processes run it at once (an
exclusive file lock, and the jar directory appears by an atomic rename only
when complete).

Lifecycle: ``start()`` formats the data directory on first use (a random
cluster id) and starts the JVM; ``stop()`` shuts it down cleanly (SIGTERM,
then SIGKILL after a grace period); ``kill()`` SIGKILLs it (a crash);
``restart()`` is ``stop()`` + ``start()`` on the *same* data directory and
ports, so topics, committed offsets and open transactions survive, as with a
real broker that was restarted. The JVM receives SIGKILL when the process (on
Linux: the thread) that started it dies, so no broker outlives its owner.

:class:`LocalKafkaCluster` runs several such nodes as one cluster (every node
a voter of the controller quorum; internal topics and new topics replicated to
every node, ``min.insync.replicas`` 2), so that tests can kill a partition
leader, a transaction coordinator or the whole cluster.

Only loopback addresses are used: the broker, its controller listener and its
advertised listener all bind 127.0.0.1.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime as dt
import hashlib
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from connectors.kafka.clients import admin_client
from flinklike_spark._runtime.network.ports import free_port
from flinklike_spark.errors import ConfigurationError, FlinklikeError

__all__ = [
    "KAFKA_VERSION",
    "KafkaBrokerError",
    "LocalKafkaBroker",
    "LocalKafkaBrokerConfig",
    "LocalKafkaCluster",
    "default_cache_dir",
    "fetch_kafka_jars",
    "fetch_once",
    "run_maven",
]

_log = logging.getLogger(__name__)

KAFKA_VERSION = "4.1.1"
"""The ``org.apache.kafka:kafka_2.13`` version the broker runs."""

_COMPLETE_MARKER = ".complete"
_SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>flinklike</groupId>
  <artifactId>kafka-broker-jars</artifactId>
  <version>1</version>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>{version}</version>
    </dependency>
    <dependency>
      <!-- SLF4J 1.7 -> Log4j 2, as in Kafka's distribution: without it the broker logs nothing, not even why it
           failed to start (Log4j 2's default configuration prints errors to the console, i.e. broker.log) -->
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>2.24.3</version>
    </dependency>
  </dependencies>
</project>
"""


class KafkaBrokerError(FlinklikeError, RuntimeError):
    """The local broker could not be fetched, formatted, started or stopped."""


def default_cache_dir() -> Path:
    """``$FLINKLIKE_CACHE`` if set, else ``~/.cache/flinklike``."""
    env = os.environ.get("FLINKLIKE_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "flinklike"


def _jar_dir(cache_dir: Path, version: str) -> Path:
    # keyed by the pom too: a changed dependency list fetches into a fresh directory
    digest = hashlib.sha256(_POM.format(version=version).encode()).hexdigest()[:8]
    return cache_dir / f"kafka-{version}-{digest}"


def fetch_kafka_jars(cache_dir: Path | None = None, *, version: str = KAFKA_VERSION, timeout_s: float = 900.0) -> Path:
    """The directory holding the broker's jars, fetching them with Maven if needed.

    Idempotent, and safe when several processes call it at once (see :func:`fetch_once`).

    Raises:
        KafkaBrokerError: ``mvn`` is missing or failed (its output is in the message).
    """
    cache_dir = (Path(cache_dir) if cache_dir is not None else default_cache_dir()).resolve()

    def fetch(work: Path, into: Path) -> None:
        (work / "pom.xml").write_text(_POM.format(version=version))
        _log.info("fetching org.apache.kafka:kafka_2.13:%s and its dependencies with Maven into %s", version, into)
        run_maven(
            ["-f", str(work / "pom.xml"), "dependency:copy-dependencies", f"-DoutputDirectory={into}",
             "-DincludeScope=runtime"],
            what=f"the Kafka broker's jars (org.apache.kafka:kafka_2.13:{version})", timeout_s=timeout_s,
            error=KafkaBrokerError,
        )  # fmt: skip
        if not any(into.glob("kafka_2.13-*.jar")):
            raise KafkaBrokerError(f"mvn dependency:copy-dependencies fetched no kafka_2.13 jar into {into}")

    return fetch_once(_jar_dir(cache_dir, version), fetch)


def fetch_once(target: Path, fetch: Callable[[Path, Path], None]) -> Path:
    """``target``, made by ``fetch(work_dir, into)`` unless a complete copy is there already.

    Idempotent, and safe when several processes call it at once: ``fetch`` runs
    under an exclusive lock on ``<target>.lock`` and fills ``into`` (inside a
    temporary ``work_dir`` next to ``target``), which is renamed to ``target``
    only when ``fetch`` returned; a leftover of a crashed fetch is replaced.
    """
    import fcntl

    if (target / _COMPLETE_MARKER).exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_name(target.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / _COMPLETE_MARKER).exists():  # another process fetched it while we waited
            return target
        work = Path(tempfile.mkdtemp(prefix=f"{target.name}.fetch-", dir=target.parent))
        try:
            into = work / "result"
            into.mkdir()
            fetch(work, into)
            (into / _COMPLETE_MARKER).write_text(dt.datetime.now(dt.UTC).isoformat())
            if target.exists():  # an incomplete leftover of a crashed fetch (no marker): replace it
                shutil.rmtree(target)
            os.rename(into, target)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return target


def run_maven(args: list[str], *, what: str, timeout_s: float, error: type[Exception]) -> None:
    """Run ``mvn -B -q <args>`` to fetch ``what``; raise ``error`` (with Maven's output) if it is missing or fails."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise error(f"fetching {what} needs Maven ('mvn' is not on PATH)")
    try:
        done = subprocess.run([mvn, "-B", "-q", *args], capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as e:
        raise error(f"mvn did not fetch {what} within {timeout_s} s") from e
    if done.returncode != 0:
        raise error(
            f"mvn {' '.join(args)} failed fetching {what} (exit code {done.returncode}):\n"
            f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
        )


def _random_cluster_id() -> str:
    """Kafka's ``Uuid.randomUuid().toString()``: 16 random bytes, URL-safe base64 without padding.

    Like Kafka, never one starting with "-": the storage tool's argument parser
    would take it for an option (1 in 64 random ids did).
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    os.setsid()  # signals to our process group (Ctrl-C in a terminal) do not reach the JVM first


@dataclasses.dataclass(frozen=True, kw_only=True)
class LocalKafkaBrokerConfig:
    """How the local broker runs.

    Attributes:
        data_dir: the broker's log directory (None: a fresh temporary one,
            deleted by ``stop(delete_data=True)`` / the context manager).
        cache_dir: where the jars are fetched to (None: :func:`default_cache_dir`).
        port: the client listener's port (None: a free one, kept across restarts).
        controller_port: the KRaft controller listener's port (None: a free one).
        num_partitions: partitions of auto-created topics.
        transaction_max_timeout: the broker's ``transaction.max.timeout.ms``
            (Kafka's default is 15 minutes).

    Records are kept for ever (``log.retention.ms=-1``): Kafka's default retention
    of 7 days is judged by record timestamps, so records written with old
    timestamps (fixed event times in tests) would vanish within minutes.
        heap: the JVM's ``-Xmx``.
        startup_timeout: how long ``start()`` waits for the broker to serve.
        extra_properties: more ``server.properties`` entries (override the defaults).
        sasl_users: user -> password. When given, a ``SASL_PLAINTEXT`` listener (and, with ``tls_keystore``, a
            ``SASL_SSL`` one) accepts them with ``PLAIN``, ``SCRAM-SHA-256`` and ``SCRAM-SHA-512``, and accepts
            ``OAUTHBEARER`` with unsecured tokens (Kafka's unsecured validator: for tests only).
        tls_keystore: a PEM file with the broker's private key (unencrypted PKCS#8) and its certificate chain.
            When given, an ``SSL`` listener (and, with ``sasl_users``, a ``SASL_SSL`` one) serves TLS with it.
        node_id: this node's id in its cluster.
        quorum: ``(node id, controller port)`` of every voter of the controller quorum (empty: this node alone).
        cluster_id: the id the data directory is formatted with (None: a random one).
        replication_factor: of internal topics and of :meth:`LocalKafkaBroker.create_topic`'s topics;
            ``min.insync.replicas`` is 2 when it is 2 or more.

    The ``PLAINTEXT`` listener always runs (the broker's own and the fixture's admin calls use it);
    :meth:`LocalKafkaBroker.servers` gives each listener's address.
    """

    data_dir: Path | None = None
    cache_dir: Path | None = None
    port: int | None = None
    controller_port: int | None = None
    num_partitions: int = 1
    transaction_max_timeout: dt.timedelta = dt.timedelta(minutes=15)
    heap: str = "512m"
    startup_timeout: dt.timedelta = dt.timedelta(seconds=60)
    extra_properties: dict[str, str] = dataclasses.field(default_factory=dict)
    sasl_users: dict[str, str] = dataclasses.field(default_factory=dict)
    tls_keystore: Path | None = None
    node_id: int = 1
    quorum: tuple[tuple[int, int], ...] = ()
    cluster_id: str | None = None
    replication_factor: int = 1

    def __post_init__(self) -> None:
        for user, password in self.sasl_users.items():
            if not re.fullmatch(r"[\w.-]+", user) or not password or any(c in password for c in '",]\\'):
                raise ConfigurationError(
                    f"LocalKafkaBrokerConfig.sasl_users: user {user!r} must be letters, digits, '.', '_' or '-' "
                    "and its password non-empty without quotes, commas, ']' or backslashes"
                )
        for name in ("port", "controller_port"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536):
                raise ConfigurationError(f"LocalKafkaBrokerConfig.{name} must be a TCP port 1..65535, got {value!r}")
        if not isinstance(self.num_partitions, int) or self.num_partitions < 1:
            raise ConfigurationError(
                f"LocalKafkaBrokerConfig.num_partitions must be an int >= 1, got {self.num_partitions!r}"
            )
        for name in ("transaction_max_timeout", "startup_timeout"):
            value = getattr(self, name)
            if not isinstance(value, dt.timedelta) or value <= dt.timedelta(0):
                raise ConfigurationError(f"LocalKafkaBrokerConfig.{name} must be a positive timedelta, got {value!r}")


class LocalKafkaBroker:
    """One KRaft Kafka broker on 127.0.0.1 (a context manager: ``with LocalKafkaBroker() as broker:``).

    ``bootstrap_servers`` is ``"127.0.0.1:<port>"``; the port and the data
    directory stay the same across ``stop()``/``start()``/``restart()``.
    Not thread-safe: one owner drives its lifecycle.

    Raises (from ``start``):
        KafkaBrokerError: java or mvn missing, the jar fetch, formatting or
            startup failed (the broker's log tail is in the message).
    """

    def __init__(self, config: LocalKafkaBrokerConfig | None = None, **overrides: object) -> None:
        config = config or LocalKafkaBrokerConfig()
        if overrides:
            config = dataclasses.replace(config, **overrides)
        self.config = config
        self._owns_data_dir = config.data_dir is None
        self.data_dir = (
            Path(config.data_dir) if config.data_dir is not None else Path(tempfile.mkdtemp(prefix="flinklike-kafka-"))
        )
        self.port = config.port or free_port()
        self.controller_port = config.controller_port or free_port()
        secured = [("SASL_PLAINTEXT", bool(config.sasl_users)), ("SSL", config.tls_keystore is not None),
                   ("SASL_SSL", bool(config.sasl_users) and config.tls_keystore is not None)]  # fmt: skip
        self._secured_ports = {protocol: free_port() for protocol, wanted in secured if wanted}
        self._process: subprocess.Popen[bytes] | None = None
        self._log_file = None

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    def servers(self, security_protocol: str = "PLAINTEXT") -> str:
        """The bootstrap servers of the listener for ``security_protocol`` (``PLAINTEXT``, ``SASL_PLAINTEXT``,
        ``SSL``, ``SASL_SSL``).

        Raises:
            ConfigurationError: this broker has no such listener (``sasl_users`` / ``tls_keystore`` not set).
        """
        if security_protocol == "PLAINTEXT":
            return self.bootstrap_servers
        if security_protocol not in self._secured_ports:
            raise ConfigurationError(
                f"this broker has no {security_protocol} listener (it has PLAINTEXT"
                f"{''.join(', ' + p for p in self._secured_ports)}); set sasl_users and/or tls_keystore"
            )
        return f"127.0.0.1:{self._secured_ports[security_protocol]}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self.running else None

    @property
    def log_path(self) -> Path:
        return self.data_dir / "broker.log"

    def __enter__(self) -> LocalKafkaBroker:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop(delete_data=self._owns_data_dir)

    def __repr__(self) -> str:
        return f"LocalKafkaBroker({self.bootstrap_servers}, data_dir={str(self.data_dir)!r}, running={self.running})"

    # -- files -----------------------------------------------------------------------------------------

    def _properties(self) -> str:
        config = self.config
        voters = config.quorum or ((config.node_id, self.controller_port),)
        replicas, min_isr = str(config.replication_factor), str(min(2, config.replication_factor))
        props = {
            "process.roles": "broker,controller",
            "node.id": str(config.node_id),
            "controller.quorum.voters": ",".join(f"{node}@127.0.0.1:{port}" for node, port in voters),
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.data_dir / "logs"),
            "num.partitions": str(self.config.num_partitions),
            "offsets.topic.replication.factor": replicas,
            "offsets.topic.num.partitions": "5",
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": min_isr,
            "transaction.state.log.num.partitions": "5",
            "share.coordinator.state.topic.replication.factor": replicas,
            "share.coordinator.state.topic.min.isr": min_isr,
            "default.replication.factor": replicas,
            "min.insync.replicas": min_isr,
            "group.initial.rebalance.delay.ms": "0",
            "transaction.max.timeout.ms": str(int(self.config.transaction_max_timeout.total_seconds() * 1000)),
            "auto.create.topics.enable": "true",
            # Keep every record: time-based retention judges records by their timestamps, and tests write
            # records with fixed (old) timestamps, which the default 7 days would delete within minutes.
            "log.retention.ms": "-1",
            "log.flush.interval.messages": str(2**62),
            "num.network.threads": "2",
            "num.io.threads": "2",
            "background.threads": "2",
        }
        props.update(self._security_properties(props))
        props.update(self.config.extra_properties)
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def _security_properties(self, props: dict[str, str]) -> dict[str, str]:
        """The secured listeners' entries (none without ``sasl_users`` / ``tls_keystore``)."""
        if not self._secured_ports:
            return {}
        listeners = {p: f"{p}://127.0.0.1:{port}" for p, port in self._secured_ports.items()}
        extra = {
            "listeners": ",".join([props["listeners"], *listeners.values()]),
            "advertised.listeners": ",".join([props["advertised.listeners"], *listeners.values()]),
            "listener.security.protocol.map": ",".join(
                [props["listener.security.protocol.map"], *(f"{p}:{p}" for p in listeners)]
            ),
        }
        if self.config.tls_keystore is not None:
            extra.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(self.config.tls_keystore)})
        if self.config.sasl_users:
            extra["sasl.enabled.mechanisms"] = ",".join(_SASL_MECHANISMS)
            plain_users = " ".join(f'user_{u}="{pw}"' for u, pw in self.config.sasl_users.items())
            modules = {
                "plain": f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain_users};",
                "scram-sha-256": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
                "scram-sha-512": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
                "oauthbearer": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
            }
            for listener in (p for p in listeners if p.startswith("SASL_")):
                for mechanism, module in modules.items():
                    extra[f"listener.name.{listener.lower()}.{mechanism}.sasl.jaas.config"] = module
        return extra

    def _scram_credentials(self) -> list[str]:
        """``kafka-storage format`` arguments creating the SCRAM users (KRaft keeps them in the metadata log)."""
        return [
            f"--add-scram={mechanism}=[name={user},password={password}]"
            for user, password in self.config.sasl_users.items()
            for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512")
        ]

    def _java(self) -> str:
        java = shutil.which("java")
        if java is None:
            raise KafkaBrokerError("the local Kafka broker needs Java 17+ ('java' is not on PATH)")
        return java

    def _classpath(self) -> str:
        return str(fetch_kafka_jars(self.config.cache_dir) / "*")

    def _jvm_command(self, java: str, main: str, *args: str) -> list[str]:
        return [
            java, f"-Xmx{self.config.heap}", "-Xms128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-Xshare:auto", "-Djava.awt.headless=true", "-Djava.net.preferIPv4Stack=true",
            "-cp", self._classpath(), main, *args,
        ]  # fmt: skip

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> LocalKafkaBroker:
        """Format the data directory on first use, start the broker and wait until it serves."""
        if self.running:
            return self
        started = self.launch()
        self.wait_serving(started)
        return self

    def launch(self) -> float:
        """Format the data directory on first use and start the JVM, without waiting; returns when it started.

        A node of a cluster serves only once a majority of the quorum runs:
        :class:`LocalKafkaCluster` launches every node, then waits for each.
        """
        java = self._java()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        properties = self.data_dir / "server.properties"
        properties.write_text(self._properties())
        if not (self.data_dir / "logs" / "meta.properties").exists():
            cluster_id = self.config.cluster_id or _random_cluster_id()
            formatted = subprocess.run(
                self._jvm_command(java, "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}",
                                  "-c", str(properties), "--ignore-formatted", *self._scram_credentials()),
                capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip
            if formatted.returncode != 0:
                raise KafkaBrokerError(
                    f"kafka.tools.StorageTool format of {self.data_dir} failed (exit code "
                    f"{formatted.returncode}):\n{formatted.stdout[-3000:]}\n{formatted.stderr[-3000:]}"
                )
        self._log_file = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        started = time.monotonic()
        self._process = subprocess.Popen(
            self._jvm_command(java, "kafka.Kafka", str(properties)),
            stdin=subprocess.DEVNULL, stdout=self._log_file, stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent, cwd=self.data_dir,
        )  # fmt: skip
        return started

    def wait_serving(self, started: float) -> None:
        """Wait until the launched broker serves (``started``: what :meth:`launch` returned); kill it on failure."""
        try:
            self._wait_serving(started + self.config.startup_timeout.total_seconds())
        except BaseException:
            self.kill()
            raise
        _log.info("Kafka broker %s up in %.1f s (pid %d)", self.bootstrap_servers, time.monotonic() - started,
                  self._process.pid)  # fmt: skip

    def _wait_serving(self, deadline: float) -> None:
        try:
            from confluent_kafka.admin import AdminClient
        except ImportError:  # pragma: no cover - the kafka extra is missing; fall back to the socket
            AdminClient = None  # noqa: N806
        while time.monotonic() < deadline:
            if self._process is None or self._process.poll() is not None:
                code = None if self._process is None else self._process.returncode
                raise KafkaBrokerError(f"the Kafka broker exited with {code} while starting:\n{self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    pass
            except OSError:
                time.sleep(0.1)
                continue
            if AdminClient is None:
                return
            admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 0})
            try:
                metadata = admin.list_topics(timeout=2)
                if metadata.brokers:
                    return
            except Exception:  # noqa: BLE001 - not serving yet; retried until the deadline
                time.sleep(0.1)
        raise KafkaBrokerError(
            f"the Kafka broker did not serve {self.bootstrap_servers} within "
            f"{self.config.startup_timeout.total_seconds():.0f} s:\n{self.log_tail()}"
        )

    def log_tail(self, max_chars: int = 4000) -> str:
        """The end of the broker's log (stdout and stderr of the JVM)."""
        try:
            return self.log_path.read_text(errors="replace")[-max_chars:]
        except OSError:
            return "(no broker log)"

    def stop(self, *, delete_data: bool = False, grace: dt.timedelta = dt.timedelta(seconds=30)) -> None:
        """Shut the broker down cleanly (SIGTERM; SIGKILL after ``grace``). Idempotent.

        Args:
            delete_data: also delete the data directory (the broker cannot be restarted after that).
            grace: how long a controlled shutdown may take.
        """
        process = self._process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(grace.total_seconds())
            except subprocess.TimeoutExpired:
                _log.warning("Kafka broker pid %d ignored SIGTERM for %s; killing it", process.pid, grace)
                process.kill()
                process.wait()
        self._release()
        if delete_data:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def kill(self) -> None:
        """SIGKILL the broker (a crash: unflushed data may be lost, transactions stay open). Idempotent."""
        process = self._process
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()
        self._release()

    def restart(self) -> LocalKafkaBroker:
        """``stop()`` then ``start()`` on the same data directory and ports."""
        self.stop()
        return self.start()

    def _release(self) -> None:
        self._process = None
        if self._log_file is not None:
            with contextlib.suppress(OSError):
                self._log_file.close()
            self._log_file = None

    # -- conveniences for tests and examples -----------------------------------------------------------

    def create_topic(self, name: str, *, partitions: int = 1, timeout: float = 30.0, **config: str) -> str:
        """Create topic ``name`` (the configured replication factor) and wait until its partitions have leaders."""
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import NewTopic

        admin = admin_client(self.bootstrap_servers)
        replicas = self.config.replication_factor
        deadline = time.monotonic() + timeout
        while True:  # a broker that just started may drop the first requests (seen under a loaded test run)
            futures = admin.create_topics(
                [NewTopic(name, num_partitions=partitions, replication_factor=replicas, config=dict(config))],
                operation_timeout=timeout,
            )
            try:
                futures[name].result(timeout)
                break
            except KafkaException as e:
                error = e.args[0] if e.args else None
                transient = isinstance(error, KafkaError) and (
                    error.retriable() or error.code() == KafkaError._TRANSPORT
                )
                if not transient or time.monotonic() >= deadline:
                    raise
                _log.info("creating topic %s: %s; retrying", name, error)
                time.sleep(0.5)
        while time.monotonic() < deadline:
            topic = admin.list_topics(name, timeout=timeout).topics.get(name)
            if (
                topic is not None and topic.error is None and len(topic.partitions) == partitions
                and all(p.leader >= 0 for p in topic.partitions.values())
            ):  # fmt: skip
                return name
            time.sleep(0.05)
        raise KafkaBrokerError(f"topic {name!r} has no leaders for its {partitions} partitions after {timeout} s")


class LocalKafkaCluster:
    """``size`` :class:`LocalKafkaBroker` nodes as one KRaft cluster on 127.0.0.1 (a context manager).

    Every node is a broker and a voter of the controller quorum; internal
    topics and :meth:`create_topic`'s topics have one replica per node and
    ``min.insync.replicas`` 2. ``bootstrap_servers`` lists every node.
    ``nodes[i]`` can be killed, stopped and started on its own; each keeps its
    ports and data directory.
    """

    def __init__(self, size: int = 3, *, data_dir: Path, **overrides: object) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ConfigurationError(f"LocalKafkaCluster: size must be an int >= 1, got {size!r}")
        ports = [(free_port(), free_port()) for _ in range(size)]
        quorum = tuple((node, controller) for node, (_, controller) in enumerate(ports, start=1))
        cluster_id = _random_cluster_id()
        self.nodes = [
            LocalKafkaBroker(
                LocalKafkaBrokerConfig(**overrides),
                data_dir=Path(data_dir) / f"node-{node}",
                port=port,
                controller_port=controller,
                node_id=node,
                quorum=quorum,
                cluster_id=cluster_id,
                replication_factor=size,
            )
            for node, (port, controller) in enumerate(ports, start=1)
        ]

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(node.bootstrap_servers for node in self.nodes)

    def node(self, node_id: int) -> LocalKafkaBroker:
        """The node with Kafka's broker id ``node_id`` (1-based)."""
        return self.nodes[node_id - 1]

    def start(self) -> LocalKafkaCluster:
        """Start every node that is not running, and wait until each serves."""
        launched = [(node, node.launch()) for node in self.nodes if not node.running]
        for node, started in launched:
            node.wait_serving(started)
        return self

    def stop(self, *, delete_data: bool = False) -> None:
        for node in self.nodes:
            node.stop(delete_data=delete_data)

    def __enter__(self) -> LocalKafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def create_topic(self, name: str, *, partitions: int = 1, timeout: float = 30.0, **config: str) -> str:
        """Create topic ``name`` with a replica on every node; wait until its partitions have leaders."""
        running = next(node for node in self.nodes if node.running)
        return running.create_topic(name, partitions=partitions, timeout=timeout, **config)
