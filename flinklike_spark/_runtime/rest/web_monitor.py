"""WebMonitor: starts and stops a cluster endpoint's REST server and, if configured, its Prometheus reporter.

The cluster endpoint calls :meth:`WebMonitor.start` once its RPC is up and
:meth:`WebMonitor.close` before its main thread stops; everything else lives
in this package.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from flinklike_spark._runtime.rest.metric_store import MetricStore
from flinklike_spark._runtime.rest.prometheus import PrometheusReporter, job_samples
from flinklike_spark._runtime.rest.server import RestServerEndpoint
from flinklike_spark.config import Configuration

__all__ = ["WebMonitor"]

log = logging.getLogger(__name__)


class WebMonitor:
    """The REST API + dashboard (always) and the Prometheus endpoint (with ``metrics.reporter.prom.*``)."""

    def __init__(
        self,
        config: Configuration,
        *,
        jobs: Callable[[], dict[str, Any]],
        main_thread,
        resource_manager,
        adaptive_jobs: Callable[[], dict[str, Any]] = dict,
    ) -> None:
        self.metric_store = MetricStore()
        self.rest = RestServerEndpoint(
            config, jobs=jobs, main_thread=main_thread, resource_manager=resource_manager,
            metric_store=self.metric_store, adaptive_jobs=adaptive_jobs,
        )  # fmt: skip
        self._config = config
        self._jobs = jobs
        self.prometheus: PrometheusReporter | None = None

    def start(self) -> None:
        self.rest.start()
        port_range = self._config.rest.prometheus_port_range
        if port_range is not None:
            self.prometheus = PrometheusReporter(self._samples, host=self._config.rest.bind_address,
                                                 port_range=port_range)  # fmt: skip

    def _samples(self):
        rest = self.rest
        rest._refresh_metrics()
        return rest._on_main_thread(lambda: job_samples(list(self._jobs().values()), self.metric_store.task))

    @property
    def url(self) -> str | None:
        """The dashboard's URL (None before ``start``)."""
        try:
            return self.rest.url
        except RuntimeError:
            return None

    def close(self) -> None:
        if self.prometheus is not None:
            self.prometheus.close()
        self.rest.close()
