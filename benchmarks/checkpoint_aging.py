"""The cost of a checkpoint as a job ages, measured in one run, locally and on moto's S3.

A job with short checkpoints commits thousands of times to the checkpoint
tables; this ages a checkpoint directory quickly with the engine's own code
path and measures whether a checkpoint's storage work costs more the older
the job is. Per checkpoint, as the JobMaster does:

* the asynchronous part of two subtasks: a :class:`checkpointing.SnapshotWriter`
  each (a few keyed entries, a source split, and with ``--channel-state`` one
  in-flight buffer), so every checkpoint writes Parquet files to
  ``operator_state`` (and ``channel_state``);
* commit: :class:`checkpointing.CheckpointCommitter` (Delta transactions, completion row);
* retention and table maintenance with ``num-retained`` ``--num-retained``, on
  the coordinator's schedule.

Around each mark (``--marks``) it prints the median commit and retention
durations of the ``--window`` checkpoints up to the mark, the time a new
process takes to open the three tables (``DeltaTable(uri)``) and to list the
completed checkpoints (what a restore or the REST API does first), the
number of files under each table's ``_delta_log`` with its bound
(:func:`checkpointing.maintenance.log_file_bound` at the table's commit rate
over the last ``LOG_RETENTION + MAINTENANCE_INTERVAL``), and the size of each table's newest Delta checkpoint (it
holds the tombstones). A savepoint is taken at
checkpoint 10; at the end every retained checkpoint and the savepoint are
verified (``verify_checkpoint``). Then the same on moto's ``ThreadedMotoServer``
(``--s3-marks``).

Checkpoints are triggered every ``--interval-ms`` (100 ms: a job with 100 ms
checkpoints; a checkpoint whose storage work takes longer starts the next one
at once, as Flink's coordinator does with no minimum pause), so a table's
commit rate, and with it the size of its maintained log, is a real job's.

On moto a checkpoint's storage work takes about 300 ms (every request goes
through moto's Python server), so 20,000 checkpoints there take about two
hours. ``--s3-seed`` ages the S3 directory the fast way instead: the local
directory at its last mark is uploaded as it is (tables, logs, Delta
checkpoints, retained files) and the job goes on there for ``--window``
checkpoints past that mark. That is the state an S3 directory has after the
same checkpoints, but for the files' modification times (the upload's:
the job goes on ``LOG_RETENTION`` after it, when the uploaded log has expired, as
a log written there would have).

    python benchmarks/checkpoint_aging.py [--marks 100 1000 10000 20000] [--s3-marks 100 1000 2000]
        [--s3-seed] [--interval-ms 100] [--window 50] [--num-retained 1] [--channel-state] [--stores local s3]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pyarrow as pa
from deltalake import DeltaTable
from quiet import QuietWatch

from checkpointing import (
    CheckpointCommitter,
    CheckpointKind,
    CheckpointLayout,
    CheckpointRecord,
    SnapshotWriter,
    list_completed_checkpoints,
    retain,
    verify_checkpoint,
)
from checkpointing.layout import CHANNEL_STATE, CHECKPOINT_INTERVAL, CHECKPOINTS, LOG_RETENTION, OPERATOR_STATE
from checkpointing.maintenance import MAINTENANCE_INTERVAL, MaintenanceSchedule, log_file_bound

JOB = "aging"
UID = "count"
SAVEPOINT_AT = 10
TABLES = (CHECKPOINTS, OPERATOR_STATE, CHANNEL_STATE)


def write_subtask(layout: CheckpointLayout, checkpoint_id: int, subtask: int, *, channel_state: bool):
    with SnapshotWriter(layout, JOB, checkpoint_id, UID, subtask) as w:
        w.add_keyed_state("count", [(g, f"k{g}", checkpoint_id + g) for g in range(4 * subtask, 4 * subtask + 4)])
        w.add_operator_state("offsets", [(f"split-{subtask}", checkpoint_id)], kind="source_split")
        if channel_state:
            w.add_channel_state("input", 0, subtask, 0, pa.record_batch({"k": pa.array([checkpoint_id])}))
        return w.finish()


def log_files(layout: CheckpointLayout, table: str) -> list[tuple[str, int]]:
    """``(name, size)`` of every file under ``table``'s ``_delta_log``."""
    fs, _ = layout.filesystem()
    path = f"{layout.table_path(table)}/_delta_log"
    fs.invalidate_cache(path)
    try:
        return [(e["name"].rsplit("/", 1)[-1], int(e["size"])) for e in fs.ls(path, detail=True)]
    except FileNotFoundError:
        return []


def open_seconds(layout: CheckpointLayout, repeat: int = 5) -> float:
    """Median wall time for a new process's opens of the three tables."""
    options = dict(layout.options().delta) or None
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        for table in TABLES:
            DeltaTable(layout.table_uri(table), storage_options=options)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def listing_seconds(layout: CheckpointLayout, repeat: int = 5) -> float:
    """Median wall time of a new process's ``list_completed_checkpoints`` (opens the table, scans it)."""
    times = []
    for _ in range(repeat):
        fresh = CheckpointLayout(base_url=layout.base_url, storage=layout.storage)
        started = time.perf_counter()
        list_completed_checkpoints(fresh, JOB)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def table_versions(layout: CheckpointLayout) -> dict[str, int]:
    """The latest version of each table (-1: not created)."""
    versions = {}
    for table in TABLES:
        dt = layout.open_table(table)
        versions[table] = -1 if dt is None else dt.version()
    return versions


def age(
    layout: CheckpointLayout,
    marks: list[int],
    *,
    window: int,
    num_retained: int,
    channel_state: bool,
    interval: float,
    first: int = 1,
) -> dict:
    """Run checkpoints ``first``..max(marks), one every ``interval`` seconds; return the figures at each mark."""
    committer = CheckpointCommitter(layout)
    maintenance = MaintenanceSchedule()  # the coordinator's cadence
    commits: dict[int, float] = {}
    retentions: dict[int, float] = {}
    # (time, table versions) about every second: the bound's commit rate is the rate over the span a log covers
    samples: collections.deque[tuple[float, dict[str, int]]] = collections.deque()
    span = (LOG_RETENTION + MAINTENANCE_INTERVAL).total_seconds()
    figures = {}
    next_trigger = time.monotonic()
    for checkpoint_id in range(first, max(marks) + 1):
        if (pause := next_trigger - time.monotonic()) > 0:
            time.sleep(pause)
        next_trigger = max(next_trigger + interval, time.monotonic())
        if not samples or time.monotonic() - samples[-1][0] >= 1.0:
            samples.append((time.monotonic(), table_versions(layout)))
            while len(samples) > 2 and samples[1][0] <= time.monotonic() - span:
                samples.popleft()
        kind = CheckpointKind.SAVEPOINT if checkpoint_id == SAVEPOINT_AT else CheckpointKind.CHECKPOINT
        trigger = datetime.now(UTC)
        handles = [write_subtask(layout, checkpoint_id, s, channel_state=channel_state) for s in (0, 1)]
        started = time.perf_counter()
        committer.commit(JOB, checkpoint_id, handles, CheckpointRecord(trigger_time=trigger, kind=kind))
        commits[checkpoint_id] = time.perf_counter() - started
        started = time.perf_counter()
        if kind is CheckpointKind.CHECKPOINT:  # the coordinator's retention after a completed checkpoint
            retain(layout, JOB, num_retained, full_vacuum=maintenance.due())
        retentions[checkpoint_id] = time.perf_counter() - started
        if checkpoint_id in marks:
            ids = range(checkpoint_id - window_of(checkpoint_id, window) + 1, checkpoint_id + 1)
            began, versions_then = samples[0]  # about LOG_RETENTION + MAINTENANCE_INTERVAL ago
            seconds = time.monotonic() - began
            versions_now = table_versions(layout)
            rates = {t: max(0, versions_now[t] - versions_then[t]) / seconds for t in TABLES}
            logs = {t: log_files(layout, t) for t in TABLES}
            figures[checkpoint_id] = {
                "commit": statistics.median(commits[i] for i in ids),
                "retention": statistics.median(retentions[i] for i in ids),
                "storage": statistics.median(commits[i] + retentions[i] for i in ids),
                "storage_mean": statistics.fmean(commits[i] + retentions[i] for i in ids),
                "open": open_seconds(layout),
                "listing": listing_seconds(layout),
                "log_files": {t: len(files) for t, files in logs.items()},
                "bound": {t: log_file_bound(rates[t]) for t in TABLES},
                "rate": rates,
                "delta_checkpoint_bytes": {
                    t: max((s for n, s in files if ".checkpoint." in n), default=0) for t, files in logs.items()
                },
            }
            print_mark(layout, checkpoint_id, figures[checkpoint_id])
    completed = list_completed_checkpoints(layout, JOB)
    for c in completed:
        verify_checkpoint(layout, JOB, c.checkpoint_id)
    figures["verified"] = [(c.checkpoint_id, c.kind.value) for c in completed]
    return figures


def window_of(mark: int, window: int) -> int:
    """Checkpoints measured up to ``mark``: ``window``, or half the checkpoints before a small mark."""
    return max(1, min(window, mark // 2))


def print_mark(layout: CheckpointLayout, mark: int, f: dict) -> None:
    store = layout.base_url.split("://")[0] if "://" in layout.base_url else "local"
    logs = ", ".join(f"{t} {f['log_files'][t]} (bound {f['bound'][t]} at {f['rate'][t]:.1f} commits/s)" for t in TABLES)
    sizes = ", ".join(f"{t} {b / 1024:.0f} KiB" for t, b in f["delta_checkpoint_bytes"].items())
    print(
        f"  {store} at checkpoint {mark:>6,}: commit {f['commit'] * 1000:6.1f} ms, retention "
        f"{f['retention'] * 1000:6.1f} ms, both {f['storage'] * 1000:6.1f} ms (mean {f['storage_mean'] * 1000:.1f}); "
        f"new process: open 3 tables {f['open'] * 1000:5.1f} ms, list checkpoints {f['listing'] * 1000:5.1f} ms\n"
        f"      _delta_log files: {logs}; newest Delta checkpoint: {sizes}",
        flush=True,
    )


@contextlib.contextmanager
def local_layout() -> Iterator[CheckpointLayout]:
    directory = tempfile.mkdtemp(prefix="bench-aging-")
    try:
        yield CheckpointLayout(base_url=directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def s3_store() -> Iterator:
    from tests.support.moto_s3 import running_s3_server

    with running_s3_server() as store:
        yield store


def seed(local: CheckpointLayout, s3: CheckpointLayout) -> int:
    """Copy every file of the local checkpoint directory to the S3 one and wait until the copied log expired.

    The copies are as new as the upload, so their ``_delta_log`` files expire
    ``LOG_RETENTION`` after it; a job that goes on from the directory deletes them
    at its first maintenance, as a job on S3 would have deleted its older log.
    Returns how many files were copied.
    """
    fs, root = s3.filesystem()
    source = local.base_url.rstrip("/")
    files = [os.path.join(d, f) for d, _, names in os.walk(source) for f in names]
    for path in files:
        fs.put_file(path, f"{root}/{os.path.relpath(path, source)}")
    fs.invalidate_cache()
    time.sleep(LOG_RETENTION.total_seconds())
    return len(files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--marks", type=int, nargs="+", default=[100, 1_000, 10_000, 20_000])
    parser.add_argument("--s3-marks", type=int, nargs="+", default=None, help="marks on moto (default: --marks)")
    parser.add_argument("--window", type=int, default=50, help="checkpoints up to each mark whose median is printed")
    parser.add_argument("--num-retained", type=int, default=1)
    parser.add_argument("--channel-state", action="store_true", help="every checkpoint also writes channel state")
    parser.add_argument("--stores", nargs="+", default=["local", "s3"], choices=["local", "s3"])
    parser.add_argument("--interval-ms", type=float, default=100.0, help="checkpoint interval (default 100 ms)")
    parser.add_argument(
        "--s3-seed", action="store_true",
        help="on moto, also the local directory at its last mark uploaded and --window checkpoints past it",
    )  # fmt: skip
    args = parser.parse_args()
    if args.s3_seed and args.stores != ["local", "s3"]:
        parser.error("--s3-seed ages the local directory first: use it with --stores local s3")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"machine: {platform.machine()} cores={os.cpu_count()} python={platform.python_version()} "
          f"load={os.getloadavg()[0]:.1f}; commit {commit}; num-retained {args.num_retained}, "
          f"channel state {'on' if args.channel_state else 'off'}, a checkpoint every {args.interval_ms:g} ms, "
          f"medians of the {args.window} checkpoints up to each mark", flush=True)  # fmt: skip
    print(f"log file bound per table (checkpointing.maintenance.log_file_bound): ceil(n * (1 + 1/{CHECKPOINT_INTERVAL}))"
          f" + 2 with n = r * ({LOG_RETENTION.total_seconds():g} s + {MAINTENANCE_INTERVAL.total_seconds():g} s)"
          f" + 2 * {CHECKPOINT_INTERVAL}, r = the table's commits per second", flush=True)  # fmt: skip
    results = {}
    options = {
        "window": args.window, "num_retained": args.num_retained, "channel_state": args.channel_state,
        "interval": args.interval_ms / 1000,
    }  # fmt: skip
    with QuietWatch() as quiet, contextlib.ExitStack() as stack:
        local = stack.enter_context(local_layout()) if "local" in args.stores else None
        s3 = stack.enter_context(s3_store()) if "s3" in args.stores else None
        for store in args.stores:
            marks = sorted(args.marks if store == "local" or args.s3_marks is None else args.s3_marks)
            figures = age(local if store == "local" else s3.layout(s3.url("aging")), marks, **options)
            results[store] = (marks, figures)
            print(f"  {store}: verified restorable at the end: {figures['verified']}", flush=True)
        if args.s3_seed:
            seeded, last = s3.layout(s3.url("aging-seeded")), max(args.marks)
            copied = seed(local, seeded)
            print(f"  s3: the local directory at checkpoint {last:,} uploaded ({copied} files)", flush=True)
            mark = last + args.window
            figures = age(seeded, [mark], first=last + 1, **options)
            marks, earlier = results["s3"]
            results["s3"] = ([*marks, mark], earlier | figures)
            print(f"  s3 (seeded): verified restorable at the end: {figures['verified']}", flush=True)
        for store, (marks, figures) in results.items():
            first, last = figures[marks[0]], figures[marks[-1]]
            ratio = last["storage"] / first["storage"]
            quiet.target(
                f"{store}: commit + retention at checkpoint {marks[-1]:,} is {ratio:.2f}x the one at "
                f"{marks[0]:,} ({last['storage'] * 1000:.1f} vs {first['storage'] * 1000:.1f} ms; target <= 1.2x)",
                ratio <= 1.2,
            )
            over = [(m, t) for m in marks for t in TABLES if figures[m]["log_files"][t] > figures[m]["bound"][t]]
            quiet.target(
                f"{store}: _delta_log files within log_file_bound(commits/s) at every mark "
                f"({'all within' if not over else f'over at {over}'})",
                not over,
            )
    quiet.report()


if __name__ == "__main__":
    main()
