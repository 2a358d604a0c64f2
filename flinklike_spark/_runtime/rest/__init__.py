"""Observability of a cluster endpoint: Flink's REST API, the web dashboard, metrics for Prometheus.

:class:`~flinklike_spark._runtime.rest.web_monitor.WebMonitor` is what the
cluster endpoint starts: the REST server (``server.py``, JSON views in
``job_views.py``, the dashboard's static files in ``static/``), the task
metrics that arrive with heartbeats (``metric_store.py``) and, with Flink's
``metrics.reporter.prom.*`` keys, the Prometheus endpoint (``prometheus.py``).
"""

__all__: list[str] = []
