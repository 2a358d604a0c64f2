"""PrometheusReporter: every job's and task's metrics on one ``/metrics`` endpoint, named as Flink names them.

Configured with Flink's keys: ``metrics.reporter.prom.factory.class:
org.apache.flink.metrics.prometheus.PrometheusReporterFactory`` and
``metrics.reporter.prom.port`` (a port or a range such as ``9250-9260``; the
first free one is taken; 0 picks any). Unlike Flink, where each JobManager and
TaskManager process runs its own reporter, the cluster endpoint serves them
all: task metrics already travel to it with the heartbeats, so a TaskExecutor
on a Spark executor needs no port that Prometheus could reach. The server
binds ``rest.bind-address`` (loopback by default).

Names follow Flink's Prometheus reporter: ``flink_<scope>_<metric>`` with the
scope's variables as labels, e.g.
``flink_jobmanager_job_numRestarts{job_id, job_name}`` and
``flink_taskmanager_job_task_numRecordsIn{job_id, job_name, task_id,
task_name, subtask_index, task_attempt_num, tm_id}``; a user metric
``<operator>.<group>.<name>`` becomes
``flink_taskmanager_job_task_operator_<group>_<name>{..., operator_name}``.
Every value is a gauge (Flink reports counters as gauges to Prometheus too).
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import re
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["MetricSample", "PrometheusReporter", "job_samples", "prometheus_name"]

log = logging.getLogger(__name__)

_INVALID = re.compile(r"[^a-zA-Z0-9:_]")


def prometheus_name(*parts: str) -> str:
    """``flink_`` plus the parts joined by ``_``, every character Prometheus forbids replaced by ``_``."""
    return _INVALID.sub("_", "_".join(("flink", *parts)))


@dataclasses.dataclass(frozen=True, kw_only=True)
class MetricSample:
    """One value: its Prometheus name, its labels and the value."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float


class _SampleCollector(Collector):
    def __init__(self, read: Callable[[], Iterable[MetricSample]]) -> None:
        self._read = read

    def collect(self):
        families: dict[tuple[str, tuple[str, ...]], GaugeMetricFamily] = {}
        try:
            samples = list(self._read())
        except Exception:  # noqa: BLE001 - a scrape without job metrics beats a failed scrape
            log.warning("collecting metrics for Prometheus failed", exc_info=True)
            samples = []
        for sample in samples:
            label_names = tuple(k for k, _ in sample.labels)
            key = (sample.name, label_names)
            family = families.get(key)
            if family is None:
                if any(name == sample.name for name, _ in families):
                    continue  # Prometheus needs one label set per metric name
                family = families[key] = GaugeMetricFamily(sample.name, sample.name, labels=list(label_names))
            family.add_metric([v for _, v in sample.labels], sample.value)
        yield from families.values()


class PrometheusReporter:
    """Serves ``read()``'s samples at ``http://<host>:<port>/metrics``. ``close`` is idempotent.

    Args:
        read: returns the current samples (called on the scrape's thread).
        host: the interface to bind.
        port_range: (low, high) inclusive; the first free port is used (0: any).

    Raises:
        OSError: from the constructor, when no port of the range is free (naming the range).
    """

    def __init__(self, read: Callable[[], Iterable[MetricSample]], *, host: str, port_range: tuple[int, int]) -> None:
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(_SampleCollector(read))
        low, high = port_range
        last: OSError | None = None
        for port in range(low, high + 1):
            try:
                self._server, self._thread = start_http_server(port, addr=host, registry=self._registry)
                break
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise
                last = exc
        else:
            raise OSError(errno.EADDRINUSE, f"no free port for the Prometheus reporter in {low}-{high} "
                          f"(metrics.reporter.prom.port): {last}")  # fmt: skip
        self.host = host
        log.info("Prometheus metrics at %s", self.url)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()


def job_samples(masters: Iterable, metrics_of: Callable[[str], dict[str, float] | None]) -> list[MetricSample]:
    """The samples of every job and of the current attempt of each of its subtasks (main thread)."""
    from flinklike_spark._runtime.rest.job_views import job_metrics

    samples = []
    for master in masters:
        job = (("job_id", master.job_id), ("job_name", master.job_graph.name))
        for name, value in job_metrics(master).items():
            samples.append(MetricSample(name=prometheus_name("jobmanager", "job", name), labels=job, value=value))
        for vertex in master.graph.vertices():
            execution = vertex.current_execution
            metrics = metrics_of(execution.attempt_id.full_id)
            if not metrics:
                continue
            slot = execution.last_slot
            task = (*job, ("task_id", vertex.job_vertex.id), ("task_name", vertex.job_vertex.name),
                    ("subtask_index", str(vertex.subtask_index)), ("task_attempt_num", str(execution.attempt_number)),
                    ("tm_id", slot.resource_id if slot is not None else ""))  # fmt: skip
            for name, value in metrics.items():
                if not isinstance(value, (int, float)) or isinstance(value, bool):
                    continue
                if "." in name:  # a user metric: <operator>.<group...>.<name>
                    operator, _, rest = name.partition(".")
                    samples.append(
                        MetricSample(
                            name=prometheus_name("taskmanager", "job", "task", "operator", rest),
                            labels=(*task, ("operator_name", operator)),
                            value=float(value),
                        )
                    )
                else:
                    samples.append(MetricSample(name=prometheus_name("taskmanager", "job", "task", name),
                                                labels=task, value=float(value)))  # fmt: skip
    return samples
