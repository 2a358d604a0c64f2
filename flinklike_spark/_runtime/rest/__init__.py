"""Observability of a cluster endpoint: Flink's REST API, the web dashboard, metrics for Prometheus."""
