"""An object store that cannot work fails ``execute()`` at once (issue 27, item 2), on moto's S3 server.

An unreachable endpoint (a closed loopback port), a bucket that does not
exist, or delta-rs options that reach the wrong place used to fail every
checkpoint or commit while the restart strategy restarted the job (and
botocore and object_store retried each request for seconds to minutes). The
start-up probe writes and deletes a marker through fsspec and a tiny Delta
table through delta-rs with short client timeouts, so the job fails in
seconds naming the URL, the endpoint and the cause.
"""

from __future__ import annotations

import socket
import time

import boto3
import pytest

from connectors import CollectSink, DeltaSink, SequenceSource
from flinklike_spark import StreamExecutionEnvironment
from flinklike_spark._runtime.network.ports import free_port
from flinklike_spark.errors import StorageUnavailableError
from tests.support.object_stores import S3_ACCESS_KEY, S3_BUCKET, S3_SECRET_KEY

pytestmark = pytest.mark.timeout(120)

FAIL_FAST_SECONDS = 30


def job(config: dict, sink=None) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.from_source(SequenceSource(num_keys=2, records_per_key=50, rows_per_second=20)).sink_to(
        sink if sink is not None else CollectSink("probe")
    )
    return env


def fails_fast(env: StreamExecutionEnvironment) -> StorageUnavailableError:
    started = time.monotonic()
    with pytest.raises(StorageUnavailableError) as info:
        env.execute("storage probe")
    assert time.monotonic() - started < FAIL_FAST_SECONDS
    return info.value


def s3_client(store):
    return boto3.client("s3", endpoint_url=store.config["s3.endpoint"], aws_access_key_id=S3_ACCESS_KEY,
                        aws_secret_access_key=S3_SECRET_KEY, region_name="us-east-1")  # fmt: skip


def test_an_unreachable_endpoint_fails_execute_within_seconds(s3_server):
    endpoint = f"http://127.0.0.1:{free_port()}"
    config = s3_server.config | {"s3.endpoint": endpoint, "execution.checkpointing.interval": "200ms",
                                 "execution.checkpointing.dir": s3_server.url("checkpoints")}  # fmt: skip
    error = fails_fast(job(config))
    message = str(error)
    assert "execution.checkpointing.dir 's3://flinklike-test/checkpoints-" in message
    assert f"(through fsspec, endpoint {endpoint})" in message and "Could not connect" in message, message


def test_an_unreachable_restore_path_fails_execute_within_seconds(s3_server):
    config = s3_server.config | {"s3.endpoint": f"http://127.0.0.1:{free_port()}",
                                 "execution.state-recovery.path": s3_server.url("checkpoints")}  # fmt: skip
    error = fails_fast(job(config))
    assert "execution.state-recovery.path" in str(error) and "cannot be read" in str(error)


def test_a_bucket_that_does_not_exist_fails_execute_and_is_not_created(s3_server):
    config = s3_server.config | {"execution.checkpointing.interval": "200ms",
                                 "execution.checkpointing.dir": "s3://no-such-bucket-flinklike/checkpoints"}  # fmt: skip
    error = fails_fast(job(config))
    assert "'s3://no-such-bucket-flinklike/checkpoints' cannot be written" in str(error)
    assert "NoSuchBucket" in str(error) or "does not exist" in str(error) or "FileNotFoundError" in str(error)
    buckets = [b["Name"] for b in s3_client(s3_server).list_buckets()["Buckets"]]
    assert "no-such-bucket-flinklike" not in buckets, "the probe created the misspelt bucket"
    table = fails_fast(job(s3_server.config, DeltaSink("s3://no-such-bucket-flinklike/table")))
    assert "(DeltaSink table) 's3://no-such-bucket-flinklike/table'" in str(table)


def test_delta_rs_options_that_reach_the_wrong_place_fail_execute(s3_server):
    """fsspec reaches the table, delta-rs does not (its explicit options drop the bucket from the URL):
    only the probe's write through delta-rs finds it, before the job's first commit would."""
    sink = DeltaSink(s3_server.url("table"), storage_options={"AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "true"})
    error = fails_fast(job(s3_server.config, sink))
    assert "(DeltaSink table)" in str(error) and sink.path in str(error)
    assert "through delta-rs" in str(error) and "NoSuchBucket" in str(error), str(error)
    assert "\x1b[" not in str(error)  # delta-rs's coloured error chain, without its colours


def test_an_endpoint_that_never_answers_fails_the_probe_at_its_timeout():
    """A socket that accepts connections (the kernel's backlog) but never answers: a hung store."""
    from datetime import timedelta

    from flinklike_spark._runtime.storage_probe import probe_storage
    from flinklike_spark.config import Configuration
    from flinklike_spark.storage import StorageAccess, StorageLocation

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        storage = Configuration({"s3.endpoint": endpoint, "s3.access-key": "AK", "s3.secret-key": "SK",
                                 "s3.region": "us-east-1"}).storage  # fmt: skip
        location = StorageLocation(url="s3://bucket/checkpoints", what="execution.checkpointing.dir",
                                   access=StorageAccess.WRITE, options=storage.options("s3://bucket/checkpoints"))  # fmt: skip
        started = time.monotonic()
        with pytest.raises(StorageUnavailableError) as info:
            probe_storage([location], timeout=timedelta(seconds=1))
        assert time.monotonic() - started < 5
    message = str(info.value)
    assert "execution.checkpointing.dir 's3://bucket/checkpoints' did not answer within 1 s" in message
    assert f"endpoint {endpoint}" in message


@pytest.mark.slow
def test_the_probe_leaves_no_object_behind(s3_server):
    checkpoints, table = s3_server.url("checkpoints"), s3_server.url("table")
    config = s3_server.config | {
        "execution.checkpointing.interval": "200ms",
        "execution.checkpointing.dir": checkpoints,
    }
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.from_source(SequenceSource(num_keys=2, records_per_key=5)).sink_to(DeltaSink(table))
    env.execute("probed on S3")
    keys = [o["Key"] for page in s3_client(s3_server).get_paginator("list_objects_v2").paginate(Bucket=S3_BUCKET)
            for o in page.get("Contents", [])]  # fmt: skip
    assert any(k.startswith(table.removeprefix(f"s3://{S3_BUCKET}/") + "/_delta_log/") for k in keys)
    assert not [k for k in keys if "probe" in k], [k for k in keys if "probe" in k]
