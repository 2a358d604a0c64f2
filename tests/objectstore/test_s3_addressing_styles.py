"""S3 requests carry their bucket in both addressing styles (issue 27, item 1).

With ``s3.path.style.access: false`` and an explicit ``s3.endpoint`` (the
README's AWS configuration), delta-rs used to send
``GET <endpoint>/tables/orders/_delta_log/...``: the bucket was gone, and a
path-style reading of that URL names the bucket ``tables``. The jobs below run
against moto's server, reached through an HTTP proxy (``s3.proxy.host`` /
``s3.proxy.port`` pointing at moto itself), so that virtual-hosted host names
like ``flinklike-test.localhost`` need no DNS: moto serves a request by its
``Host`` header (``<bucket>.<host>`` is virtual-hosted, ``localhost`` is
path-style) and logs each request's full URL, which the tests check.
"""

from __future__ import annotations

import logging
import re
import urllib.parse

import pytest

from connectors import DeltaSink, SequenceSource, read_delta_table
from flinklike_spark import StreamExecutionEnvironment
from flinklike_spark.config import Configuration
from tests.support.object_stores import S3_BUCKET

README_S3 = {
    "s3.endpoint": "https://s3.eu-west-1.amazonaws.com",
    "s3.access-key": "AKIA-EXAMPLE",
    "s3.secret-key": "secret",
    "s3.region": "eu-west-1",
    "s3.path.style.access": "false",
}


def test_virtual_hosted_style_gives_delta_rs_the_bucket_endpoint_and_fsspec_the_service_endpoint():
    storage = Configuration(README_S3).storage
    options = storage.options("s3://my-bucket/tables/orders")
    # object_store sends virtual-hosted requests to the endpoint as given: the bucket must be in its host
    assert options.delta["AWS_ENDPOINT_URL"] == "https://my-bucket.s3.eu-west-1.amazonaws.com"
    assert options.delta["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] == "true"
    # botocore puts the bucket in front of the endpoint's host itself
    assert options.fsspec["endpoint_url"] == "https://s3.eu-west-1.amazonaws.com"
    assert options.fsspec["config_kwargs"] == {"s3": {"addressing_style": "virtual"}}
    # per URL: another bucket gets its own endpoint; s3a:// the same
    assert storage.options("s3a://other/x").delta["AWS_ENDPOINT_URL"] == "https://other.s3.eu-west-1.amazonaws.com"
    # an endpoint that already names the bucket is kept
    named = Configuration(README_S3 | {"s3.endpoint": "https://my-bucket.s3.eu-west-1.amazonaws.com"}).storage
    assert named.options("s3://my-bucket/t").delta["AWS_ENDPOINT_URL"] == "https://my-bucket.s3.eu-west-1.amazonaws.com"
    # path style and an unset style keep the endpoint: the bucket goes into the path
    for style in ({"s3.path.style.access": "true"}, {}):
        config = {k: v for k, v in README_S3.items() if k != "s3.path.style.access"} | style
        path_style = Configuration(config).storage.options("s3://my-bucket/tables/orders")
        assert path_style.delta["AWS_ENDPOINT_URL"] == "https://s3.eu-west-1.amazonaws.com"


def test_a_proxy_reaches_both_clients():
    storage = Configuration({"s3.proxy.host": "proxy.example", "s3.proxy.port": "3128"}).storage
    options = storage.options("s3://b/x")
    assert options.delta["AWS_PROXY_URL"] == "http://proxy.example:3128"
    assert options.fsspec["config_kwargs"]["proxies"] == {
        "http": "http://proxy.example:3128", "https": "http://proxy.example:3128"}  # fmt: skip
    from flinklike_spark.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="s3.proxy.host and s3.proxy.port"):
        Configuration({"s3.proxy.host": "proxy.example"}).storage  # noqa: B018 - parsing raises


_REQUEST = re.compile(r'"(?P<method>[A-Z]+) (?P<target>\S+) HTTP/1\.[01]"')


def _run_job(store, *, path_style: bool, caplog) -> tuple[list[str], str]:
    """A bounded job with checkpoints and a DeltaSink on moto, through moto as proxy; its request URLs."""
    port = urllib.parse.urlsplit(store.config["s3.endpoint"]).port
    config = store.config | {
        # moto serves 'localhost' path-style, '<bucket>.localhost' virtual-hosted
        "s3.endpoint": f"http://localhost:{port}",
        "s3.path.style.access": "true" if path_style else "false",
        "s3.proxy.host": "127.0.0.1",
        "s3.proxy.port": str(port),
        "execution.checkpointing.interval": "200ms",
        "execution.checkpointing.dir": store.url("checkpoints"),
        "restart-strategy.type": "none",
    }
    table = store.url("table")
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.from_source(SequenceSource(num_keys=3, records_per_key=20, batch_size=10)).sink_to(DeltaSink(table))
    werkzeug = logging.getLogger("werkzeug")
    level = werkzeug.level
    werkzeug.setLevel(logging.INFO)
    try:
        with caplog.at_level(logging.INFO, logger="werkzeug"):
            env.execute("addressing style")
    finally:
        werkzeug.setLevel(level)
    rows = read_delta_table(table, storage=Configuration(config).storage)
    assert sorted(zip(rows.column("key").to_pylist(), rows.column("seq").to_pylist())) == [
        (k, s) for k in range(3) for s in range(20)]  # fmt: skip
    targets = [m["target"] for r in caplog.records if (m := _REQUEST.search(r.getMessage()))]
    key = table.removeprefix(f"s3://{S3_BUCKET}/")
    # the requests that concern the table (a listing names it in its query string)
    return [urllib.parse.urlsplit(t) for t in targets if key in urllib.parse.unquote(t)], key


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_virtual_hosted_requests_of_a_job_carry_the_bucket_in_the_host(s3_server, caplog):
    requests, _ = _run_job(s3_server, path_style=False, caplog=caplog)
    port = urllib.parse.urlsplit(s3_server.config["s3.endpoint"]).port
    assert any("_delta_log" in r.path for r in requests), requests  # delta-rs's requests are among them
    assert any(r.path.endswith(".parquet") for r in requests), requests  # and fsspec's
    wrong = [r.geturl() for r in requests if r.netloc != f"{S3_BUCKET}.localhost:{port}"]
    assert not wrong, f"requests without the bucket in the host: {wrong[:5]}"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_path_style_requests_of_a_job_carry_the_bucket_in_the_path(s3_server, caplog):
    requests, _ = _run_job(s3_server, path_style=True, caplog=caplog)
    port = urllib.parse.urlsplit(s3_server.config["s3.endpoint"]).port
    assert any("_delta_log" in r.path for r in requests), requests
    assert any(r.path.endswith(".parquet") for r in requests), requests
    wrong = [r.geturl() for r in requests if r.netloc != f"localhost:{port}" or r.path.split("/")[1] != S3_BUCKET]
    assert not wrong, f"requests without the bucket as the first path segment: {wrong[:5]}"
