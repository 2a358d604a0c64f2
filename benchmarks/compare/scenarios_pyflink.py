"""PyFlink's runner of W4 (recovery); called by ``engine_pyflink.py``.

PyFlink's local MiniCluster runs its TaskManagers as threads of the one JVM
that the Python process starts, so there is no TaskManager process to kill.
What can be killed is the Python UDF worker that ``process`` execution mode
starts per task (``beam_boot``): its loss fails the task, and Flink restarts
it from the latest checkpoint (fixed-delay, 0 ms), as a TaskManager loss
would, minus the new TaskManager. This runner measures that.

Job: ``NumberSequenceSource`` -> ``key_by(i % keys)`` -> a
``KeyedProcessFunction`` (a count per key in ValueState; it sleeps
``parallelism / rate`` seconds per record, which paces the job near ``rate``
records/s) emitting ``key,seq,processing time,worker pid`` ->
``FileSink`` (row format, rolled on every checkpoint: part files are
committed when a checkpoint completes, Flink's exactly-once file sink).
Checkpoints every 500 ms. Once a checkpoint completed (a committed part
file) every Python worker process gets SIGKILL; "output again" is the
first part file committed after the kill that holds a record processed after
it (each output line carries its processing time and its worker's pid: the
run fails if a killed worker's pid wrote after the kill). Lost and duplicated ``(key, seq)``
are counted from the committed files once the bounded job has finished.
"""

from __future__ import annotations

import os
import signal
import tempfile
import threading
import time

from workloads import exactly_once, per_key

__all__ = ["run_w4"]


def _committed_files(directory: str) -> list[str]:
    """Part files the FileSink committed (in-progress and pending files are hidden: a leading dot)."""
    found = []
    for root, _dirs, files in os.walk(directory):
        found += [os.path.join(root, f) for f in files if not f.startswith(".")]
    return found


def _rows(path: str) -> list[tuple[int, int, float, int]]:
    """``(key, seq, processed, worker pid)`` of a committed part file."""
    rows = []
    with open(path) as f:
        for line in f:
            key, seq, processed, pid = line.strip().split(",")
            rows.append((int(key), int(seq), float(processed), int(pid)))
    return rows


def _first_after(directory: str, seen: set[str], since: float) -> float | None:
    """Now, if a part file committed since ``seen`` holds a record processed after ``since``; adds to ``seen``."""
    now = time.time()
    for path in sorted(set(_committed_files(directory)) - seen):
        seen.add(path)
        if any(processed > since for _k, _s, processed, _p in _rows(path)):
            return now
    return None


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _python_workers() -> list[int]:
    """Pids of this process's descendants that are PyFlink Python workers (Linux ``/proc``; no psutil here)."""
    me, workers = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().decode(errors="replace")
            if "beam_boot" not in cmdline and "fn_execution" not in cmdline:
                continue
            ancestor = pid
            while ancestor > 1 and ancestor != me:
                ancestor = _parent(ancestor)
        except (OSError, ValueError, IndexError):
            continue
        if ancestor == me:
            workers.append(pid)
    return workers


def run_w4(records: int, keys: int, parallelism: int, *, rate: float) -> tuple[float, dict, dict]:
    from pyflink.common import Configuration, Encoder, Types, WatermarkStrategy
    from pyflink.datastream import CheckpointingMode, KeyedProcessFunction, StreamExecutionEnvironment
    from pyflink.datastream.connectors.file_system import FileSink, RollingPolicy
    from pyflink.datastream.connectors.number_seq import NumberSequenceSource
    from pyflink.datastream.state import ValueStateDescriptor

    m = per_key(records, keys)
    seconds_per_record = parallelism / rate

    class Paced(KeyedProcessFunction):
        def open(self, runtime_context):
            self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

        def process_element(self, value, ctx):
            self.count.update((self.count.value() or 0) + 1)
            time.sleep(seconds_per_record)
            yield f"{value % keys},{value // keys},{time.time():.4f},{os.getpid()}"

    config = Configuration()
    config.set_string("python.execution-mode", "process")
    config.set_string("restart-strategy.type", "fixed-delay")
    config.set_string("restart-strategy.fixed-delay.attempts", "3")
    config.set_string("restart-strategy.fixed-delay.delay", "0 ms")
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.set_parallelism(parallelism)
    env.enable_checkpointing(500, CheckpointingMode.EXACTLY_ONCE)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="compare-w4-pyflink-") as out:
        sink = (
            FileSink.for_row_format(out, Encoder.simple_string_encoder())
            .with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy())
            .build()
        )
        source = env.from_source(NumberSequenceSource(0, records - 1), WatermarkStrategy.no_watermarks(), "seq")
        source.key_by(lambda i: i % keys, key_type=Types.LONG()).process(Paced(), output_type=Types.STRING()).sink_to(
            sink
        )
        client = env.execute_async("w4-recovery")
        result = client.get_job_execution_result()
        done = threading.Event()
        threading.Thread(target=lambda: (result.result(), done.set()), daemon=True).start()
        deadline = time.monotonic() + 300
        while not _committed_files(out):  # a completed checkpoint to restore from
            if done.is_set() or time.monotonic() > deadline:
                raise SystemExit("W4 pyflink: no committed part file before the kill")
            time.sleep(0.05)
        victims = _python_workers()
        if not victims:
            raise SystemExit("W4 pyflink: no Python worker process to kill")
        before = set(_committed_files(out))
        killed_at = time.time()
        for victim in victims:
            os.kill(victim, signal.SIGKILL)
        flowing_at = None
        seen = set(before)
        while not done.is_set():
            if flowing_at is None:
                flowing_at = _first_after(out, seen, killed_at)
            if time.monotonic() > deadline + 300:
                raise SystemExit("W4 pyflink: the job did not finish")
            time.sleep(0.02)
        if flowing_at is None:
            flowing_at = _first_after(out, seen, killed_at)  # only the final commit at the job's end
        pairs, pids_after = [], set()
        for path in _committed_files(out):
            for key, seq, processed, pid in _rows(path):
                pairs.append((key, seq))
                if processed > killed_at:
                    pids_after.add(pid)
    if not pids_after:
        raise SystemExit("W4 pyflink: every record was processed before the kill (raise --records): nothing measured")
    if pids_after & set(victims):
        raise SystemExit(f"W4 pyflink: killed workers {victims} still wrote output after the kill")
    metrics = {
        "recovery_s": None if flowing_at is None else flowing_at - killed_at,
        "restarts": None,  # PyFlink's JobClient does not expose it; new worker pids wrote the output after the kill
        "workers_after": len(pids_after),
        "rows": len(pairs),
        "measures": f"SIGKILL of the {len(victims)} Python UDF worker process(es) (process mode) -> first part "
        "file committed after it",
    }
    return time.perf_counter() - started, exactly_once(pairs, keys, m), metrics
