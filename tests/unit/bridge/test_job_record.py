"""The Spark bridge's one job record: conditional writes on a real Delta table, claims, and dead runners.

The record is the Delta table ``<dir>/job`` (delta-rs, on the local file
system here); no lock or JSON file stands beside it.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from flinklike_spark.spark.job_record_table import (
    STALE_AFTER,
    JobRecord,
    JobRecordTable,
    ProcessId,
    RunnerState,
    read_record,
)
from flinklike_spark.spark.job_runner import BridgeJobError, RunnerClaim

pytestmark = pytest.mark.timeout(120)


def test_concurrent_writers_never_lose_an_update(tmp_path):
    table = JobRecordTable(str(tmp_path))

    def increment(record: JobRecord | None) -> JobRecord:
        record = record or JobRecord()
        count = (record.progress or {}).get("count", 0)
        return dataclasses.replace(record, progress={"count": count + 1})

    def writer() -> None:
        for _ in range(15):
            table.update(increment)

    threads = [threading.Thread(target=writer) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    record = table.read()
    # A read-modify-write that raced another one and still committed would lose an increment.
    assert record.progress == {"count": 60}
    assert record.seq == 60


def test_the_record_is_a_delta_table_and_nothing_else_is_written(tmp_path):
    table = JobRecordTable(str(tmp_path))
    table.update(lambda _: JobRecord(state=RunnerState.STOPPED, job_id="j1"))
    assert read_record(str(tmp_path)).job_id == "j1"
    files = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert files and all(f.startswith("job/_delta_log/") for f in files), files


def _live_process() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def _held_by(table: JobRecordTable, holder: ProcessId, *, updated: float | None = None) -> None:
    table.update(
        lambda _: JobRecord(
            pid=holder.pid,
            host=holder.host,
            started=holder.started,
            state=RunnerState.RUNNING,
            updated=time.time() if updated is None else updated,
        )
    )


def test_a_claim_held_by_a_live_runner_is_refused_and_one_held_by_a_dead_runner_is_taken_over(tmp_path):
    table = JobRecordTable(str(tmp_path))
    process = _live_process()
    try:
        other = ProcessId.of(process.pid)
        _held_by(table, other)
        with pytest.raises(BridgeJobError, match=rf"another runner \(pid {process.pid} on .*running\) still holds"):
            RunnerClaim(table).acquire(threading.Event(), timeout=0.5)
        assert table.read().pid == process.pid
    finally:
        process.kill()
        process.wait()
    claimed = RunnerClaim(table).acquire(threading.Event(), timeout=0)  # no wait: the holder is dead
    assert (claimed.pid, claimed.state) == (os.getpid(), RunnerState.STARTING)
    assert table.read() == claimed


def test_a_pid_reused_by_another_process_is_not_the_runner():
    me = ProcessId.current()
    assert me.is_alive()
    assert not dataclasses.replace(me, started=me.started - 100).is_alive()


def test_a_runner_on_another_host_is_dead_once_its_heartbeat_is_stale(tmp_path):
    table = JobRecordTable(str(tmp_path))
    elsewhere = ProcessId(pid=os.getpid(), host=f"not-{socket.gethostname()}", started=1.0)
    _held_by(table, elsewhere)
    with pytest.raises(BridgeJobError, match="still holds"):
        RunnerClaim(table).acquire(threading.Event(), timeout=0)
    _held_by(table, elsewhere, updated=time.time() - STALE_AFTER - 1)
    assert RunnerClaim(table).acquire(threading.Event(), timeout=0).host == socket.gethostname()


def test_a_finished_bounded_job_is_not_claimed(tmp_path):
    table = JobRecordTable(str(tmp_path))
    table.update(lambda _: JobRecord(pid=1, host="h", started=1.0, state=RunnerState.FINISHED, bounded=True))
    assert RunnerClaim(table).acquire(threading.Event(), timeout=0) is None
    assert table.read().state is RunnerState.FINISHED


def test_a_runner_that_was_taken_over_writes_nothing_more(tmp_path):
    table = JobRecordTable(str(tmp_path))
    claim = RunnerClaim(table)
    claim.acquire(threading.Event(), timeout=0)
    assert claim.write(state=RunnerState.RUNNING, job_id="mine")
    process = _live_process()
    try:
        _held_by(table, ProcessId.of(process.pid))  # another runner took over (this one looked dead to it)
        assert not claim.write(job_id="mine again")
        assert claim.lost.is_set()
        assert table.read().pid == process.pid and table.read().job_id is None
    finally:
        process.kill()
        process.wait()


def _race(directory: str, start, results, hold) -> None:
    start.wait()
    try:
        record = RunnerClaim(JobRecordTable(directory)).acquire(threading.Event(), timeout=0)
        results.put(("claimed", record.pid))
    except BridgeJobError as exc:
        results.put(("refused", str(exc)))
    hold.wait(60)  # stay alive: a claim of a dead process may be taken over


@pytest.mark.slow
def test_of_several_processes_racing_to_claim_the_job_exactly_one_wins(tmp_path):
    JobRecordTable(str(tmp_path)).update(lambda _: JobRecord(state=RunnerState.STOPPED))  # as after a query stopped
    context = multiprocessing.get_context("spawn")
    start, hold, results = context.Event(), context.Event(), context.Queue()
    racers = [context.Process(target=_race, args=(str(tmp_path), start, results, hold)) for _ in range(4)]
    for racer in racers:
        racer.start()
    try:
        time.sleep(2.0)  # let every racer import and wait at the start line
        start.set()
        outcomes = [results.get(timeout=60) for _ in racers]
    finally:
        hold.set()
        for racer in racers:
            racer.join(30)
    winners = [pid for kind, pid in outcomes if kind == "claimed"]
    assert len(winners) == 1, outcomes
    assert all(f"pid {winners[0]} " in text for kind, text in outcomes if kind == "refused"), outcomes
    assert read_record(str(tmp_path)).pid == winners[0]
