"""The State Processor API on the S3 server: bootstrap a savepoint into S3, resume from it, derive
another one there (keys removed), resume again. Every step reads and writes only the store."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest

from flinklike_spark.state_processor import OperatorTransformation, SavepointReader, SavepointWriter
from tests.support.state_processor_jobs import counts_per_key, run_count_job

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def test_bootstrap_read_edit_and_resume_on_s3(s3_server):
    store = s3_server
    directory = store.url("savepoints")
    history = Counter({key: 1 + key % 7 for key in range(300)})
    data = pa.table({"key": list(history), "count": list(history.values())})
    first = SavepointWriter.new_savepoint().with_operator(
        "count", OperatorTransformation.bootstrap_with(data).key_by("key").states("count")
    ).write(directory, storage=store.config)  # fmt: skip
    assert first.startswith(directory + "/")

    config = {"parallelism.default": 2, "local.number-taskmanager": 2} | store.config
    events = [{"key": key, "amount": 1} for key in range(0, 300, 3)]
    resumed = counts_per_key(run_count_job(config | {"execution.state-recovery.path": first}, events))
    assert resumed == {key: [history[key] + 1] for key in range(0, 300, 3)}

    state = SavepointReader.read(first, storage=store.config).read_keyed_state("count")
    kept = state.filter(pa.compute.greater_equal(state["key"], 150))
    second = SavepointWriter.from_existing_savepoint(first, storage=store.config).with_operator(
        "count", OperatorTransformation.bootstrap_with(kept).key_by("key").states("count")
    ).write(directory, storage=store.config)  # fmt: skip
    assert SavepointReader.read(second, storage=store.config).read_keyed_state("count").num_rows == 150
    resumed = counts_per_key(run_count_job(config | {"execution.state-recovery.path": second}, events))
    assert resumed == {key: [history[key] + 1 if key >= 150 else 1] for key in range(0, 300, 3)}
