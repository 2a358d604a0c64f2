"""A real schema registry on 127.0.0.1: Apicurio Registry, serving Confluent's REST API, for tests and examples.

:class:`LocalSchemaRegistry` runs ``io.apicurio:apicurio-registry-app``
(:data:`APICURIO_VERSION`) from Maven Central with Java 17 and its in-memory
storage (H2 in memory: every start is an empty registry). Its Confluent-compatible
API, which Confluent's clients (``confluent_kafka.schema_registry``) and
Flink's ``ConfluentRegistryAvro*`` schemas speak, is at
:attr:`LocalSchemaRegistry.url` (``http://127.0.0.1:<port>/apis/ccompat/v7``).

Maven Central serves the application ready to run: the ``all`` classifier
(a ``.tar.gz``) is Quarkus's build output, the runner jar and its ``lib/``. It
is fetched once with Maven (``mvn dependency:copy``) and unpacked into the same
cache directory as the Kafka broker's jars (``~/.cache/flinklike`` or
``$FLINKLIKE_CACHE``); the fetch is idempotent and safe when several processes
run it at once (:func:`connectors.kafka.testing.fetch_once`).

Lifecycle: ``start()`` starts the JVM on a free loopback port and waits until
``GET <url>/subjects`` answers; ``stop()`` ends it (SIGTERM, then SIGKILL
after a grace period), idempotently. The JVM receives SIGKILL when the thread
that started it dies, so no registry outlives its owner. Start-up takes about
5 s on two cores with the JVM's C1 compiler alone (``-XX:TieredStopAtLevel=1``;
about 17 s with both compilers).

Apicurio 3.x (``3.3.3`` on Maven Central) needs Java 21; 2.6 runs on the
default Java 17 and serves the same ``ccompat/v7`` API, so 2.6 is used.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import logging
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from connectors.kafka.testing import _die_with_parent, default_cache_dir, fetch_once, run_maven
from flinklike_spark._runtime.network.ports import free_port
from flinklike_spark.errors import ConfigurationError, FlinklikeError

__all__ = [
    "APICURIO_VERSION",
    "LocalSchemaRegistry",
    "LocalSchemaRegistryError",
    "fetch_schema_registry",
]

_log = logging.getLogger(__name__)

APICURIO_VERSION = "2.6.13.Final"
"""The ``io.apicurio:apicurio-registry-app`` version the registry runs."""

_ARTIFACT = "io.apicurio:apicurio-registry-app:{version}:tar.gz:all"
_CCOMPAT_PATH = "/apis/ccompat/v7"


class LocalSchemaRegistryError(FlinklikeError, RuntimeError):
    """The local schema registry could not be fetched, started or stopped."""


def _registry_dir(cache_dir: Path, version: str) -> Path:
    return cache_dir / f"apicurio-registry-{version}"


def fetch_schema_registry(
    cache_dir: Path | None = None, *, version: str = APICURIO_VERSION, timeout_s: float = 900.0
) -> Path:
    """The directory of the unpacked registry (its ``*-runner.jar`` and ``lib/``), fetching it with Maven if needed.

    Raises:
        LocalSchemaRegistryError: ``mvn`` is missing or failed, or the archive holds no runner jar.
    """
    cache_dir = (Path(cache_dir) if cache_dir is not None else default_cache_dir()).resolve()
    artifact = _ARTIFACT.format(version=version)

    def fetch(work: Path, into: Path) -> None:
        _log.info("fetching %s with Maven into %s", artifact, into)
        run_maven(
            ["dependency:copy", f"-Dartifact={artifact}", f"-DoutputDirectory={work}"],
            what=f"the schema registry ({artifact})", timeout_s=timeout_s, error=LocalSchemaRegistryError,
        )  # fmt: skip
        archives = list(work.glob("*.tar.gz"))
        if len(archives) != 1:
            raise LocalSchemaRegistryError(f"mvn dependency:copy of {artifact} left {archives} in {work}")
        with tarfile.open(archives[0]) as archive:
            archive.extractall(into, filter="data")
        if not list(into.glob("*-runner.jar")):
            raise LocalSchemaRegistryError(
                f"{archives[0].name} holds no *-runner.jar (it has {sorted(p.name for p in into.iterdir())})"
            )

    return fetch_once(_registry_dir(cache_dir, version), fetch)


@dataclasses.dataclass(frozen=True, kw_only=True)
class LocalSchemaRegistryConfig:
    """How the local registry runs.

    Attributes:
        cache_dir: where the registry is fetched to (None: :func:`default_cache_dir`).
        port: the HTTP port on 127.0.0.1 (None: a free one).
        heap: the JVM's ``-Xmx``.
        startup_timeout: how long ``start()`` waits for the registry to answer.
        log_dir: where ``registry.log`` (the JVM's output) goes (None: a temporary directory).
    """

    cache_dir: Path | None = None
    port: int | None = None
    heap: str = "384m"
    startup_timeout: dt.timedelta = dt.timedelta(seconds=120)
    log_dir: Path | None = None

    def __post_init__(self) -> None:
        port = self.port
        if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536):
            raise ConfigurationError(f"LocalSchemaRegistryConfig.port must be a TCP port 1..65535, got {port!r}")
        if not isinstance(self.startup_timeout, dt.timedelta) or self.startup_timeout <= dt.timedelta(0):
            raise ConfigurationError(
                f"LocalSchemaRegistryConfig.startup_timeout must be a positive timedelta, got {self.startup_timeout!r}"
            )


class LocalSchemaRegistry:
    """Apicurio Registry on 127.0.0.1 with Confluent's API at :attr:`url` (a context manager).

    Not thread-safe: one owner drives its lifecycle.

    Raises (from ``start``):
        LocalSchemaRegistryError: java or mvn missing, the fetch failed, or the
            registry exited or did not answer in time (its log tail is in the message).
    """

    def __init__(self, config: LocalSchemaRegistryConfig | None = None, **overrides: object) -> None:
        config = config or LocalSchemaRegistryConfig()
        if overrides:
            config = dataclasses.replace(config, **overrides)
        self.config = config
        self.port = config.port or free_port()
        self._owns_log_dir = config.log_dir is None
        self.log_dir = Path(config.log_dir) if config.log_dir else Path(tempfile.mkdtemp(prefix="flinklike-registry-"))
        self._process: subprocess.Popen[bytes] | None = None
        self._log_file = None

    @property
    def url(self) -> str:
        """The base URL of Confluent's schema registry API (what ``schema.registry.url`` is set to)."""
        return f"http://127.0.0.1:{self.port}{_CCOMPAT_PATH}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def log_path(self) -> Path:
        return self.log_dir / "registry.log"

    def __enter__(self) -> LocalSchemaRegistry:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"LocalSchemaRegistry(url={self.url!r}, running={self.running})"

    def start(self) -> LocalSchemaRegistry:
        """Fetch the registry if needed, start it and wait until its API answers."""
        if self.running:
            return self
        java = shutil.which("java")
        if java is None:
            raise LocalSchemaRegistryError("the local schema registry needs Java 17+ ('java' is not on PATH)")
        home = fetch_schema_registry(self.config.cache_dir)
        (runner,) = home.glob("*-runner.jar")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        started = time.monotonic()
        self._process = subprocess.Popen(
            [java, f"-Xmx{self.config.heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
             "-Djava.net.preferIPv4Stack=true", "-Dquarkus.http.host=127.0.0.1",
             f"-Dquarkus.http.port={self.port}", "-jar", str(runner)],
            stdin=subprocess.DEVNULL, stdout=self._log_file, stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent, cwd=self.log_dir,
        )  # fmt: skip
        try:
            self._wait_serving(started + self.config.startup_timeout.total_seconds())
        except BaseException:
            self.stop(grace=dt.timedelta(0))
            raise
        _log.info("schema registry %s up in %.1f s (pid %d)", self.url, time.monotonic() - started, self._process.pid)
        return self

    def _wait_serving(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if self._process is None or self._process.poll() is not None:
                code = None if self._process is None else self._process.returncode
                raise LocalSchemaRegistryError(
                    f"the schema registry exited with {code} while starting:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/subjects", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except (OSError, urllib.error.URLError):  # not listening yet, or not serving the API yet
                pass
            time.sleep(0.25)
        raise LocalSchemaRegistryError(
            f"the schema registry did not answer {self.url}/subjects within "
            f"{self.config.startup_timeout.total_seconds():.0f} s:\n{self.log_tail()}"
        )

    def log_tail(self, max_chars: int = 4000) -> str:
        """The end of the registry's log (stdout and stderr of the JVM)."""
        try:
            return self.log_path.read_text(errors="replace")[-max_chars:]
        except OSError:
            return "(no registry log)"

    def stop(self, *, grace: dt.timedelta = dt.timedelta(seconds=20)) -> None:
        """End the registry (SIGTERM; SIGKILL after ``grace``); its schemas are gone. Idempotent."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(grace.total_seconds())
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._log_file is not None:
            with contextlib.suppress(OSError):
                self._log_file.close()
            self._log_file = None
        if self._owns_log_dir:
            shutil.rmtree(self.log_dir, ignore_errors=True)
