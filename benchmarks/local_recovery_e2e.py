"""Issue 31 item 4: a SIGKILLed TaskExecutor of a 1M-key keyed count, with and without local recovery.

A keyed count (``ValueState`` per key, one output row per input row) over
``--keys`` keys fed at ``--rate`` rows/s, parallelism 2 on 2 TaskExecutor
processes (1 slot each), checkpoints every 1 s, ``fixed-delay`` restarts with
0 ms delay. Once a checkpoint completed after every key had been seen, one
TaskExecutor is SIGKILLed (or, ``--failure exception``, a counting subtask
raises once). Prints, per setting of ``execution.state-recovery.from-local``:

* kill -> the first row written by a restarted sink (output flowing again);
* kill -> the completion of the next checkpoint (its own duration too);
* the peak RSS of the TaskExecutor processes before the kill.

With ``--redundant N`` the cluster keeps N spare TaskExecutors
(``slotmanager.redundant-taskmanager-num``); the kill then hits the TaskExecutor
of subtask 0 (never the spare), and the restarted tasks take the spare's slot.

With ``--profile DIR`` py-spy samples, from just before the kill for 6 s, every
TaskExecutor but the killed one (the restarted subtasks restore there) and this
process (the JobMaster), and the run prints where their time went.

    python benchmarks/local_recovery_e2e.py [--keys N] [--rate R] [--redundant N] [--profile DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import signal
import tempfile
import time
from pathlib import Path

from profiling import SampledProfile
from quiet import QuietWatch

from checkpointing import list_completed_checkpoints
from connectors import SequenceSource
from flinklike_spark import KeyedProcessFunction, Sink, SinkWriter, StreamExecutionEnvironment, ValueStateDescriptor
from tests.support.failover_jobs import task_executor_processes, wait_for


class Count(KeyedProcessFunction):
    """The keyed count; raises once when the file ``trigger`` appears (``--failure exception``)."""

    def __init__(self, trigger: str) -> None:
        self.trigger = trigger

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))
        self.checked = 0

    def process_element(self, value, ctx):
        self.checked += 1
        if self.checked % 1000 == 0 and os.path.exists(self.trigger):
            try:
                os.remove(self.trigger)
            except FileNotFoundError:
                pass
            else:
                raise RuntimeError("benchmark failure")
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield {"key": value["key"], "count": count}


class FirstRowSink(Sink):
    """Each writer (one per attempt) records the wall time of its first batch in ``<dir>/first-<n>``."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def create_writer(self, context):
        return _FirstRow(Path(self.directory))


class _FirstRow(SinkWriter):
    def __init__(self, directory: Path) -> None:
        self.directory, self.done = directory, False

    def write(self, batch):
        if not self.done and batch.num_rows:
            self.done = True
            (self.directory / f"first-{os.getpid()}-{id(self)}-{time.time():.4f}").write_text("")

    def close(self):
        pass


def run(
    keys: int,
    rate: int,
    local: bool,
    failure: str,
    redundant: int = 0,
    incremental: bool = False,
    profile: Path | None = None,
) -> dict:
    wait_for(lambda: not task_executor_processes(), "the previous run's TaskExecutors to exit", 60)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        checkpoints = str(directory / "checkpoints")
        config = {
            "parallelism.default": 2,
            "local.number-taskmanager": 2,
            "execution.checkpointing.interval": "1 s",
            "execution.checkpointing.dir": checkpoints,
            "restart-strategy.type": "fixed-delay",
            "restart-strategy.fixed-delay.attempts": 10,
            "restart-strategy.fixed-delay.delay": "0 ms",
            "execution.state-recovery.from-local": local,
            "slotmanager.redundant-taskmanager-num": redundant,
            "execution.checkpointing.incremental": incremental,
        }
        env = StreamExecutionEnvironment.get_execution_environment(config)
        (
            env.from_source(SequenceSource(num_keys=keys, records_per_key=None, rows_per_second=rate), name="seq")
            .key_by("key")
            .process(Count(str(directory / "fail")))
            .sink_to(FirstRowSink(str(directory)))
        )
        client = env.execute_async("local recovery e2e")
        try:
            all_seen = time.time() + keys / rate + 1.0
            while True:
                time.sleep(0.2)
                done = list_completed_checkpoints(checkpoints, client.job_id) if client.job_id else []
                if done and done[-1].trigger_time.timestamp() > all_seen:
                    break
            wait_for(
                lambda: len(task_executor_processes()) == 2 + redundant,
                f"{2 + redundant} TaskExecutors (now {[p.pid for p in task_executor_processes()]})",
                60,
            )
            processes = task_executor_processes()
            rss = sum(p.memory_info().rss for p in processes)
            last = done[-1].checkpoint_id
            [victim] = {p["pid"] for task, p in client.get_task_placement().items() if task.endswith("-0")}
            profiled = [os.getpid(), *(p.pid for p in processes if p.pid != victim)]
            sampler = None
            if profile is not None:
                sampler = SampledProfile(profiled, seconds=6, out=profile / f"from-local-{str(local).lower()}").start()
            killed = time.time()
            if failure == "sigkill":
                os.kill(victim, signal.SIGKILL)
            else:
                (directory / "fail").write_text("x")
            deadline = time.monotonic() + 120
            first = next_checkpoint = running = None
            while (first is None or next_checkpoint is None) and time.monotonic() < deadline:
                time.sleep(0.05)
                placement = client.get_task_placement()
                if running is None and all(p["attempt"] >= 1 and p["state"] == "RUNNING" for p in placement.values()):
                    running = time.time()  # every restarted task restored its state (INITIALIZING -> RUNNING)
                stamps = [float(p.name.rsplit("-", 1)[1]) for p in directory.glob("first-*")]
                after = [s for s in stamps if s > killed]
                first = min(after) if first is None and after else first
                newer = [c for c in list_completed_checkpoints(checkpoints, client.job_id) if c.checkpoint_id > last]
                next_checkpoint = newer[0] if next_checkpoint is None and newer else next_checkpoint
            if first is None or next_checkpoint is None:
                history = [str(e.root_cause).partition("\n")[0] for e in client.get_exception_history()]
                raise SystemExit(
                    f"after the kill: first output {first}, next checkpoint {next_checkpoint}; "
                    f"status {client.get_job_status()}, restarts {client.num_restarts}: {history}"
                )
            placement = client.get_task_placement()
            restarted_on = {p["resource_id"] for p in placement.values()}
            deployed = max(p["deployed_at"] for p in placement.values())
            if sampler is not None:
                sampler.wait()  # the samples cover the restore and the next checkpoint
                print(f"profile, from-local={str(local).lower()} (pid {os.getpid()} is the JobMaster's):")
                print(sampler.summary())
        finally:
            if not client.done():
                client.cancel()
            with contextlib.suppress(Exception):  # JobCancelledError: the wait closes the job's cluster
                client.wait(60)
        return {
            "restarted_on": sorted(restarted_on),
            "deployed": deployed - killed,
            "running": None if running is None else running - killed,
            "checkpoint_triggered": next_checkpoint.trigger_time.timestamp() - killed,
            "first_output": first - killed,
            "next_checkpoint": next_checkpoint.completion_time.timestamp() - killed,
            "checkpoint_duration": (next_checkpoint.completion_time - next_checkpoint.trigger_time).total_seconds(),
            "rss_mib": rss / 2**20,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--rate", type=int, default=100_000)
    parser.add_argument(
        "--failure",
        choices=["sigkill", "exception"],
        default="sigkill",
        help="SIGKILL a TaskExecutor, or raise once in a counting subtask",
    )
    parser.add_argument("--local", choices=["both", "true", "false"], default="both")
    parser.add_argument(
        "--incremental",
        action="store_true",
        help="incremental checkpoints (the first one after the failover builds on the restored chain)",
    )
    parser.add_argument(
        "--redundant", type=int, default=0, help="spare TaskExecutors (slotmanager.redundant-taskmanager-num)"
    )
    parser.add_argument("--profile", type=Path, default=None, help="py-spy the restore into this directory")
    args = parser.parse_args()
    settings = {"both": (False, True), "true": (True,), "false": (False,)}[args.local]
    with QuietWatch() as quiet:
        results = {
            local: run(args.keys, args.rate, local, args.failure, args.redundant, args.incremental, args.profile)
            for local in settings
        }
    print(f"machine: {platform.machine()} cores={os.cpu_count()} python={platform.python_version()}")
    print(
        f"{args.keys:,} keys, {args.rate:,} rows/s, parallelism 2, failure: {args.failure}, "
        f"{args.redundant} spare TaskExecutors, {'incremental' if args.incremental else 'full'} checkpoints"
    )
    for local, r in results.items():
        print(f"  from-local={str(local).lower():5}  kill->first output {r['first_output']:6.2f} s  "
              f"kill->next checkpoint {r['next_checkpoint']:6.2f} s (it took {r['checkpoint_duration']:5.2f} s)  "
              f"TE RSS before kill {r['rss_mib']:6.0f} MiB  restarted on {r['restarted_on']}")  # fmt: skip
        running = "not seen" if r["running"] is None else f"{r['running']:.2f} s"
        print(f"      timeline after the kill: restarted tasks deployed {r['deployed']:.2f} s, all RUNNING "
              f"(state restored) {running}, next checkpoint triggered {r['checkpoint_triggered']:.2f} s")  # fmt: skip

    for local, r in results.items():
        quiet.target(f"from-local={str(local).lower()}: kill -> next completed checkpoint {r['next_checkpoint']:.2f} s "
                     "(target < 1 s)", r["next_checkpoint"] < 1.0)  # fmt: skip
        quiet.target(f"from-local={str(local).lower()}: kill -> first output {r['first_output']:.2f} s "
                     "(target < 0.5 s)", r["first_output"] < 0.5)  # fmt: skip
    quiet.report()


if __name__ == "__main__":
    main()
