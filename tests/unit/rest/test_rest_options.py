"""Flink's rest.*, web.* and metrics.reporter.prom.* keys: defaults, parsing, errors that name the valid values."""

from __future__ import annotations

import errno
import socket
from datetime import timedelta

import pytest

from flinklike_spark import Configuration
from flinklike_spark._runtime.rest.prometheus import PrometheusReporter, prometheus_name
from flinklike_spark._runtime.rest.server import RestServerEndpoint
from flinklike_spark.config import PROMETHEUS_REPORTER_FACTORY
from flinklike_spark.errors import ConfigurationError


def test_defaults_are_flinks_and_loopback_only():
    rest = Configuration().rest
    assert rest.port == 8081 and not rest.port_explicit and rest.bind_address == "127.0.0.1"
    assert rest.cancel_enabled and rest.refresh_interval == timedelta(seconds=3)
    assert rest.fetcher_update_interval == timedelta(seconds=10) and rest.prometheus_port_range is None


def test_prometheus_reporter_keys():
    config = Configuration({"metrics.reporter.prom.factory.class": PROMETHEUS_REPORTER_FACTORY,
                            "metrics.reporter.prom.port": "9250-9260"})  # fmt: skip
    assert config.rest.prometheus_port_range == (9250, 9260)
    default = Configuration({"metrics.reporter.prom.factory.class": PROMETHEUS_REPORTER_FACTORY})
    assert default.rest.prometheus_port_range == (9249, 9249)
    with pytest.raises(ConfigurationError, match="PrometheusReporterFactory"):
        Configuration({"metrics.reporter.prom.factory.class": "org.apache.flink.metrics.jmx.JMXReporterFactory"})
    with pytest.raises(ConfigurationError, match="9250-9260"):
        Configuration({"metrics.reporter.prom.port": "ninety"})
    with pytest.raises(ConfigurationError, match="0..65535"):
        Configuration({"metrics.reporter.prom.port": "9260-9250"})
    with pytest.raises(ConfigurationError, match="rest.port"):
        Configuration({"rest.port": 70000})


def test_prometheus_names_are_flinks_with_forbidden_characters_replaced():
    assert prometheus_name("taskmanager", "job", "task", "numRecordsIn") == "flink_taskmanager_job_task_numRecordsIn"
    assert prometheus_name("taskmanager", "job", "task", "operator", "my-group.bad") == (
        "flink_taskmanager_job_task_operator_my_group_bad"
    )


class _NoJobs:
    """The REST server's collaborators for tests that never reach a job."""

    def execute(self, fn):
        fn()

    def task_executor_infos(self):
        return []


def _server(config: Configuration) -> RestServerEndpoint:
    from flinklike_spark._runtime.rest.metric_store import MetricStore

    return RestServerEndpoint(config, jobs=dict, main_thread=_NoJobs(), resource_manager=_NoJobs(),
                              metric_store=MetricStore())  # fmt: skip


def test_an_explicit_port_that_is_taken_fails_naming_the_keys():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = _server(Configuration({"rest.port": port}))
        with pytest.raises(OSError, match="rest.port") as info:
            server.start()
        assert info.value.errno == errno.EADDRINUSE
        with pytest.raises(OSError, match=r"no free port .*\(metrics.reporter.prom.port\)"):
            PrometheusReporter(list, host="127.0.0.1", port_range=(port, port))


def test_port_zero_picks_a_free_port_and_static_files_are_confined_to_the_package():
    server = _server(Configuration({"rest.port": 0, "rest.address": "dashboard.example"}))
    server.start()
    try:
        assert server.port > 0 and server.url == f"http://dashboard.example:{server.port}"
        assert server.static_file("/")[1] == "text/html"
        assert server.static_file("/app.js")[1] in ("text/javascript", "application/javascript")
        assert server.static_file("/../server.py") is None and server.static_file("/nope.js") is None
    finally:
        server.close()
        server.close()  # idempotent
