"""The job's storage settings: Flink's keys, secrets kept out of sight, a missing package named at submission."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

import pytest

from checkpointing import list_completed_checkpoints
from checkpointing.layout import CHECKPOINTS, OPERATOR_STATE, scan_table
from connectors import DeltaSink
from flinklike_spark.config import Configuration
from flinklike_spark.errors import ConfigurationError, StorageUnavailableError
from tests.support.object_stores import AZURITE_KEY, S3_SECRET_KEY
from tests.support.objectstore_jobs import build, job_config, run_and_cancel


def test_flink_keys_become_each_clients_options():
    storage = Configuration({
        "s3.endpoint": "http://127.0.0.1:9000", "s3.access-key": "AK", "s3.secret-key": "SK",
        "s3.region": "eu-west-1", "s3.path.style.access": "true",
        "fs.azure.account.key.acct1.blob.core.windows.net": "AZKEY",
        "fs.azure.account.endpoint.acct1": "http://127.0.0.1:10000/acct1",
    }).storage  # fmt: skip
    s3 = storage.options("s3://bucket/dir")
    assert s3.fsspec == {"key": "AK", "secret": "SK", "endpoint_url": "http://127.0.0.1:9000",
                         "client_kwargs": {"region_name": "eu-west-1"},
                         "config_kwargs": {"s3": {"addressing_style": "path"}}}  # fmt: skip
    assert s3.delta == {"aws_conditional_put": "etag", "AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK",
                        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_ALLOW_HTTP": "true",
                        "AWS_REGION": "eu-west-1", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false"}  # fmt: skip
    az = storage.options("abfss://cont@acct1.dfs.core.windows.net/dir")
    assert az.delta == {"azure_storage_account_name": "acct1", "azure_storage_account_key": "AZKEY",
                        "azure_storage_endpoint": "http://127.0.0.1:10000/acct1", "azure_allow_http": "true"}  # fmt: skip
    assert "AccountKey=AZKEY" in az.fsspec["connection_string"]
    # explicit deltalake options of a connector win, and reach fsspec too
    explicit = storage.options("s3://bucket/dir", delta={"AWS_ENDPOINT_URL": "http://other:1"})
    assert explicit.delta["AWS_ENDPOINT_URL"] == explicit.fsspec["endpoint_url"] == "http://other:1"
    # no keys: nothing but conditional puts, so the standard credential chains apply
    assert Configuration({}).storage.options("s3://bucket/dir").delta == {"aws_conditional_put": "etag"}
    assert Configuration({}).storage.options("/local/dir").fsspec == {}


def test_half_given_credentials_and_bad_endpoints_are_refused_without_echoing_secrets():
    with pytest.raises(ConfigurationError, match="s3.secret-key is set but s3.access-key is not") as error:
        Configuration({"s3.secret-key": "TOPSECRET"})
    assert "TOPSECRET" not in str(error.value)
    with pytest.raises(ConfigurationError, match="not an http"):
        Configuration({"s3.endpoint": "127.0.0.1:9000"})
    with pytest.raises(ConfigurationError, match="unknown configuration key 'fs.azure.account.kee"):
        Configuration({"fs.azure.account.kee.acct1.blob.core.windows.net": "x"})


def test_reprs_redact_secrets():
    config = Configuration({"s3.access-key": "AK", "s3.secret-key": "TOPSECRET", "s3.session-token": "SESSIONVALUE",
                            "fs.azure.account.key.acct1.blob.core.windows.net": "AZKEY"})  # fmt: skip
    texts = [repr(config), str(config.storage), repr(config.storage.options("s3://b/x")),
             repr(config.storage.options("az://cont/x"))]  # fmt: skip
    for text in texts:
        assert "TOPSECRET" not in text and "SESSIONVALUE" not in text and "AZKEY" not in text, text
    assert "AK" in repr(config)  # an access key id is not a secret


@pytest.mark.parametrize(("url", "extra"), [("s3://bucket/checkpoints", "s3"), ("az://container/checkpoints", "azure")])
def test_a_missing_filesystem_package_fails_execute_naming_the_url_and_the_extra(tmp_path, url, extra):
    package = {"s3": "s3fs", "azure": "adlfs"}[extra]
    script = textwrap.dedent(f"""
        import sys, importlib.abc
        class Block(importlib.abc.MetaPathFinder):  # as if {package} were not installed
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == {package!r}:
                    raise ModuleNotFoundError(f"No module named {{name!r}}")
        sys.meta_path.insert(0, Block())
        from connectors import CollectSink, SequenceSource
        from flinklike_spark import StreamExecutionEnvironment
        from flinklike_spark.errors import ConfigurationError
        env = StreamExecutionEnvironment.get_execution_environment(
            {{"execution.checkpointing.dir": {url!r}, "execution.checkpointing.interval": "1 s"}})
        env.from_source(SequenceSource(num_keys=1, records_per_key=1)).sink_to(CollectSink("x"))
        try:
            env.execute("needs {package}")
        except ConfigurationError as exc:
            print("ERROR", exc)
        import psutil
        print("CHILDREN", len(psutil.Process().children(recursive=True)))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60).stdout
    assert f"ERROR execution.checkpointing.dir {url!r}" in out, out
    assert f'pip install "flinklike-spark[{extra}]"' in out
    assert "CHILDREN 0" in out  # no TaskExecutor was started


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_credentials_appear_in_no_log_repr_error_or_checkpoint_row(store, caplog, capfd):
    """A real job on S3 / Azurite: its logs (JobMaster and TaskExecutors), reprs, a failure's message and
    the checkpoint tables must not contain the secret (key) the job authenticated with."""
    secret, missing = {
        "s3": (S3_SECRET_KEY, "s3://no-such-bucket-flinklike/checkpoints"),
        "azure": (AZURITE_KEY, "az://no-such-container-flinklike/checkpoints"),
    }[store.name]
    directory, table = store.url("checkpoints"), store.url("table")
    layout = store.layout(directory)
    config = job_config(store, directory, "unaligned")
    with caplog.at_level(logging.DEBUG):
        env = build(config, table, seconds_per_record=0.002, rows_per_second=200)
        job_id = run_and_cancel(env, layout, checkpoints=2)
        # a failing job: the bucket / container does not exist (the start-up probe refuses it)
        broken = job_config(store, missing, "aligned") | {"restart-strategy.type": "none"}
        with pytest.raises(StorageUnavailableError) as failure:
            build(broken, table, seconds_per_record=0, rows_per_second=500).execute("fails")
    captured = capfd.readouterr()
    texts = {
        "log records": "\n".join(r.getMessage() + str(r.exc_info or "") for r in caplog.records),
        "stdout/stderr (TaskExecutors)": captured.out + captured.err,
        "error": f"{failure.value!r} {failure.value} {failure.value.__cause__!r}",
        "reprs": " ".join(
            repr(x)
            for x in (
                Configuration(config),
                layout,
                env,
                DeltaSink(table).with_storage(Configuration(config).storage),
                list_completed_checkpoints(layout, job_id),
            )
        ),
    }
    for name in (CHECKPOINTS, OPERATOR_STATE, "channel_state"):
        dt = layout.open_table(name)
        texts[f"table {name}"] = str(scan_table(dt).to_pylist())
    assert len(texts["log records"]) > 1000 and "checkpoint" in texts["log records"]  # the logs were captured
    for where, text in texts.items():
        assert secret not in text, f"the secret key appears in {where}"
