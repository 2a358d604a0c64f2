"""The Kafka connector's librdkafka clients: their log lines in Python logging, and the metadata lookup of a submission.

Without a ``logger``, librdkafka writes its log lines to stderr
(``%3|1700000000.123|FAIL|rdkafka#producer-8| ... Connection refused``): a
client whose brokers are unreachable retries the connection some twenty times
a second and writes a line each time. Every client the connector creates is
given :data:`LIBRDKAFKA_LOG` instead (confluent-kafka's ``logger`` setting),
which forwards to the Python logger ``flinklike_spark.kafka.librdkafka``:

* at most one line per (level, facility, client) every 10 seconds; the next
  line let through says how many like it were held back (all of them go to
  DEBUG, for whoever enables it);
* the ``GETPID`` "Coordinator load in progress" (and "Not coordinator",
  "Coordinator not available") warnings go to DEBUG: a fresh broker answers a
  transactional producer's first ``InitProducerId`` so while it loads its
  transaction log, and librdkafka retries until it is done.

confluent-kafka queues a client's log lines and hands them over when the
client is polled (``poll``, ``consume``, ``flush``): an admin client must be
polled after its request (:func:`cluster_metadata` does).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from flinklike_spark.errors import ConfigurationError

__all__ = [
    "LIBRDKAFKA_LOG",
    "LIBRDKAFKA_LOGGER_NAME",
    "SUBMISSION_TIMEOUT",
    "RateLimitedLibrdkafkaLog",
    "admin_client",
    "cluster_metadata",
]

LIBRDKAFKA_LOGGER_NAME = "flinklike_spark.kafka.librdkafka"
#: How long a submission waits for the cluster's metadata (librdkafka's request timeout for the lookup).
SUBMISSION_TIMEOUT = timedelta(seconds=10)
_DEFAULT_INTERVAL = timedelta(seconds=10)
# (facility, text) of lines that are part of normal operation although librdkafka logs them as warnings: a
# fresh broker's transaction coordinator is loading or moving while the first producers ask it for a producer id.
_ROUTINE = (
    ("GETPID", "Coordinator load in progress"),
    ("GETPID", "Not coordinator"),
    ("GETPID", "Coordinator not available"),
)


class RateLimitedLibrdkafkaLog:
    """confluent-kafka's ``logger``: forwards librdkafka's lines to a Python logger, rate-limited.

    confluent-kafka calls ``log(level, "%s [%s] %s", facility, client_name,
    text)`` for every line, on the thread that polls the client; this object is
    shared by every client of the process, so it is thread-safe. Not
    picklable (it holds a lock): put it into a client configuration where the
    client is created, never into a connector that travels.

    Args:
        logger: where the lines go.
        interval: per (level, facility, client), at most one line in this long.
        clock: seconds, monotonic (injectable for tests).
    """

    def __init__(
        self,
        logger: logging.Logger,
        *,
        interval: timedelta = _DEFAULT_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval <= timedelta(0):
            raise ConfigurationError(f"RateLimitedLibrdkafkaLog: interval must be positive, got {interval!r}")
        self.logger = logger
        self._interval = interval.total_seconds()
        self._clock = clock
        self._lock = threading.Lock()
        self._last: dict[tuple[int, str, str], float] = {}  # key -> when its last line was let through
        self._held: dict[tuple[int, str, str], int] = {}  # key -> lines held back since

    def log(self, level: int, msg: str, *args: Any) -> None:
        facility, client = (str(args[0]), str(args[1])) if len(args) >= 3 else ("", "")
        text = str(args[2]) if len(args) >= 3 else msg % args if args else msg
        if any(facility == f and t in text for f, t in _ROUTINE):
            level = logging.DEBUG
        if not self.logger.isEnabledFor(level):
            return
        key = (level, facility, client)
        now = self._clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self._interval:
                self._held[key] = self._held.get(key, 0) + 1
                held = -1
            else:
                self._last[key] = now
                held = self._held.pop(key, 0)
        if held < 0:  # held back: visible only at DEBUG
            self.logger.debug("(held back) %s [%s] %s", facility, client, text)
        elif held:
            self.logger.log(
                level,
                "%s [%s] %s (and %d more such lines in the last %.0f s)",
                facility,
                client,
                text,
                held,
                self._interval,
            )
        else:
            self.logger.log(level, "%s [%s] %s", facility, client, text)


#: The ``logger`` of every librdkafka client the Kafka connector creates.
LIBRDKAFKA_LOG = RateLimitedLibrdkafkaLog(logging.getLogger(LIBRDKAFKA_LOGGER_NAME))

# Keys of a consumer or producer configuration that an admin client accepts too (the others it refuses or
# warns about). Security settings are passed on by prefix.
_ADMIN_KEYS = frozenset({
    "bootstrap.servers", "client.id", "security.protocol", "socket.timeout.ms", "metadata.max.age.ms",
    "reconnect.backoff.ms", "reconnect.backoff.max.ms", "retry.backoff.ms", "log_level", "debug",
    "socket.connection.setup.timeout.ms", "broker.address.family",
})  # fmt: skip


def admin_client(bootstrap_servers: str, properties: Mapping[str, Any] = ()):
    """An ``AdminClient`` with the admin-relevant keys of ``properties`` and its log lines in logging."""
    from confluent_kafka.admin import AdminClient

    config = {k: v for k, v in dict(properties).items()
              if k in _ADMIN_KEYS or k.startswith(("ssl.", "sasl.", "security.", "enable.sasl."))}  # fmt: skip
    return AdminClient({**config, "bootstrap.servers": bootstrap_servers, "logger": LIBRDKAFKA_LOG})


def cluster_metadata(
    bootstrap_servers: str, properties: Mapping[str, Any] = (), *, what: str, timeout: timedelta = SUBMISSION_TIMEOUT
):
    """The cluster's metadata (brokers, topics), or a clear error within ``timeout``.

    Args:
        what: the connector asking (``"KafkaSource"``), the first words of the error.

    Raises:
        ConfigurationError: no broker of ``bootstrap_servers`` answered within
            ``timeout`` (the servers tried and librdkafka's error are named).
    """
    from confluent_kafka import KafkaException

    admin = admin_client(bootstrap_servers, properties)
    try:
        return admin.list_topics(timeout=timeout.total_seconds())
    except KafkaException as e:
        raise ConfigurationError(
            f"{what}: cannot reach the Kafka brokers {bootstrap_servers!r} within {timeout.total_seconds():.0f} s "
            f"({e.args[0].str() if e.args and hasattr(e.args[0], 'str') else e}); check set_bootstrap_servers(...) "
            "and that the cluster is up"
        ) from e
    finally:
        admin.poll(0)  # hands the client's queued log lines to LIBRDKAFKA_LOG
