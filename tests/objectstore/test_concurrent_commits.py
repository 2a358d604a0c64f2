"""Several processes committing into one Delta table on S3 or Azure at once: no commit is lost.

Delta's log is an ordered list of files ``_delta_log/<version>.json``; two
writers that read the same version both try to create the next one. On S3
that is only safe when the store refuses the second creation (a conditional
put, ``If-None-Match: *``); the engine configures delta-rs to use one
(``aws_conditional_put: etag``), and moto's server honours it. On Azure
delta-rs always creates the entry with ``If-None-Match: *``, which Azure and
Azurite honour. The loser
re-reads and retries (``BridgeTable.commit_once``), so every commit lands once.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest

from checkpointing.layout import scan_table
from flinklike_spark.spark.bridge_tables import BridgeTable

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

PROCESSES = 4
COMMITS = 6

WRITER = textwrap.dedent("""
    import json, sys
    import pyarrow as pa
    from flinklike_spark.spark.bridge_tables import BridgeTable, stage_batches
    from flinklike_spark.config import Configuration
    url, writer, commits, config = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
    schema = pa.schema([("writer", pa.int64()), ("commit", pa.int64())])
    table = BridgeTable(url, storage=Configuration(config).storage)
    sys.stdin.readline()  # start together
    for commit in range(commits):
        batch = pa.record_batch([pa.array([writer]), pa.array([commit])], schema=schema)
        staged = stage_batches(table, [batch], schema, what="test rows")
        assert table.commit_once(schema, [staged], f"writer-{writer}", commit)
""")


def test_concurrent_commits_from_several_processes_lose_nothing(store):
    url = store.url("concurrent")
    schema = pa.schema([("writer", pa.int64()), ("commit", pa.int64())])
    BridgeTable(url, storage=store.storage).create(schema)
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, url, str(w), str(COMMITS), json.dumps(store.config)],
            stdin=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for w in range(PROCESSES)
    ]
    for process in writers:
        process.stdin.write("go\n")
        process.stdin.flush()
    for process in writers:
        _, err = process.communicate(timeout=150)
        assert process.returncode == 0, err[-3000:]
    dt = BridgeTable(url, storage=store.storage).open()
    rows = sorted((r["writer"], r["commit"]) for r in scan_table(dt).to_pylist())
    assert rows == [(w, c) for w in range(PROCESSES) for c in range(COMMITS)]
    assert dt.version() == PROCESSES * COMMITS  # version 0 created the table; one version per commit
    for w in range(PROCESSES):
        assert dt.transaction_version(f"writer-{w}") == COMMITS - 1
