"""FileSink and FileSource on Azurite, reached through the job's fs.azure.account.* keys only."""

from __future__ import annotations

import pytest

from connectors import CollectSink, FileSink, FileSource, SequenceSource
from flinklike_spark import StreamExecutionEnvironment

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_a_job_writes_files_to_azure_and_another_reads_them_back(azurite_server):
    store = azurite_server
    directory = store.url("files")
    config = {"parallelism.default": 2, "local.number-taskmanager": 2, **store.config}
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.from_source(SequenceSource(num_keys=3, records_per_key=40), name="seq").sink_to(FileSink(directory))
    env.execute("to azure")
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.from_source(FileSource(directory, format="json"), name="files").sink_to(CollectSink("back"))
    rows = CollectSink.rows(env.execute("from azure"))
    assert sorted((r["key"], r["seq"]) for r in rows) == [(k, s) for k in range(3) for s in range(40)]
