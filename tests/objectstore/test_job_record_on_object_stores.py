"""The bridge's job record on S3 (moto) and Azure (Azurite): conditional commits make it safe without a lock file.

The record used to be a local JSON file guarded by an fcntl lock, so for an
object-store job directory it lived in a local temp dir. Now it is the Delta
table ``<dir>/job`` on the store itself, written with conditional commits.
The record is written by a child process, as the bridge's processes write it
(the store servers run in this process, and some delta-rs calls keep the GIL).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

WRITERS = textwrap.dedent("""
    import dataclasses, json, sys, threading
    from flinklike_spark.config import Configuration
    from flinklike_spark.spark.job_record_table import JobRecord, JobRecordTable, RunnerState, read_record
    from flinklike_spark.spark.job_runner import RunnerClaim
    directory, config = sys.argv[1], json.loads(sys.argv[2])
    table = JobRecordTable(directory, Configuration(config).storage)

    def increment(record):
        record = record or JobRecord()
        return dataclasses.replace(record, progress={"count": (record.progress or {}).get("count", 0) + 1})

    threads = [threading.Thread(target=lambda: [table.update(increment) for _ in range(4)]) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    counted = read_record(directory, config).progress["count"]
    claim = RunnerClaim(table, run_id="run-1")
    claimed = claim.acquire(threading.Event(), timeout=0)
    claim.release(RunnerState.STOPPED)
    final = read_record(directory, config)
    print(json.dumps({"count": counted, "claimed": [claimed.state.value, claimed.run_id, claimed.progress],
                      "final": final.state.value}))
""")


def test_racing_writers_of_the_record_on_a_store_lose_no_update_and_leave_only_the_table(store):
    directory = store.url("job-record")
    done = subprocess.run([sys.executable, "-c", WRITERS, directory, json.dumps(store.config)],
                          capture_output=True, text=True, timeout=150)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"count": 12, "claimed": ["starting", "run-1", None], "final": "stopped"}
    fs, root = store.filesystem(directory)
    files = fs.find(root)
    assert files and all("/job/_delta_log/" in path for path in files), files
