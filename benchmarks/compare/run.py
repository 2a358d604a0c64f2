"""Compare flinklike-spark with Bytewax, PyFlink and Spark on the same workloads, in one run.

    python benchmarks/compare/run.py            # full: installs the peers' venvs, a sweep + 2 rounds
    python benchmarks/compare/run.py --quick    # small inputs, 1 round, only peers already installed

Each peer is installed into its own virtual environment (pins in ``peers.py``),
every workload runs on every engine that supports it (``workloads.py``), each
run's result is checked against the expected one before its time counts.
Every engine reads the same records (``inputs.py``): flinklike-spark, Bytewax
and PyFlink from an in-process generator, Spark from Parquet files written once
per run, and flinklike-spark a second time from those same files (the engine
``flinklike-parquet``), so that each source is compared with its like.

Each engine reports two times per run: its *busy* time (processing, start-up
excluded) and its *wall* time from submission; rates and the targets' ratios
are busy against busy, and the report gives wall against wall beside them.
Each engine is measured in its best configuration (``plan.py``): round 1 sweeps
its settings (parallelism 1 and 2; PyFlink's thread and process mode; Spark's
micro-batch size, the whole input in one micro-batch or a quarter of the files
per micro-batch, and ``spark.sql.shuffle.partitions``), the later rounds rerun
the setting that was best, interleaved across engines so that a shared
machine's drift hits all alike; the published figure is that setting's median.
After the rounds each peer's best setting runs once more on its own (a
standalone run in the same sitting, same input): the report's sanity column
sets the published figure against that run (flagged when far below). The results
go to ``<out>/benchmarks-compare.md`` (Markdown tables with machine, date, the
load on the machine per figure, the ratios of the issue's targets, and every
setting tried) and ``<out>/benchmarks-compare.png`` (a matplotlib chart).

The scenario workloads W3 (checkpoints under backpressure, aligned vs
unaligned, and the overhead of 1 s checkpoints), W4 (recovery from a killed
worker, lost/duplicated records per key) and W5 (latency p50/p99 at a fixed
rate) report measurements instead of a rate: each runs once per engine (at
parallelism 2, within its own ``--scenario-budget``), its result is checked
like the others' (W3: the job's result; W4: exactly once per key; W5: every
record reached the sink once) before its numbers count, and they go to a
second table and ``<out>/benchmarks-compare-scenarios.png``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # this harness's modules, benchmarks/quiet.py

from inputs import ensure_input  # noqa: E402
from peers import PEERS, default_venv_dir, ensure_venv  # noqa: E402
from plan import (  # noqa: E402
    ENGINE_SCRIPT,
    ENGINES,
    FILE_ENGINES,
    FILE_ROWS,
    KEYS,
    NOT_RUN,
    QUICK_SKIPS,
    RECORDS,
    SCENARIO_ARGS,
    SCENARIO_MODES,
    SCENARIO_PARALLELISM,
    Outcome,
    Variant,
    variants,
)
from quiet import QuietWatch  # noqa: E402
from report import best_variants, summarize, write_report  # noqa: E402
from workloads import SCENARIOS, WORKLOADS, expected  # noqa: E402


def command(
    variant: Variant,
    workload: str,
    records: int,
    pythons: dict[str, Path],
    quick: bool = False,
    input_dir: Path | None = None,
) -> tuple[list[str], dict]:
    script = HERE / f"engine_{ENGINE_SCRIPT.get(variant.engine, variant.engine)}.py"
    args = [workload, "--records", str(records), "--keys", str(KEYS), "--parallelism", str(variant.parallelism)]
    if variant.mode:
        args += ["--mode", variant.mode]
    if variant.batches is not None:
        args += ["--batches", str(variant.batches)]
    if variant.shuffle_partitions is not None:
        args += ["--shuffle-partitions", str(variant.shuffle_partitions)]
    if variant.engine in FILE_ENGINES and workload not in SCENARIOS:
        args += ["--input", str(input_dir)]
    if workload in SCENARIO_ARGS:
        args += SCENARIO_ARGS[workload][1 if quick else 0]
    env = dict(os.environ)
    env["PYTHONFAULTHANDLER"] = "1"  # every Python process of the run (engine, workers) dumps its stack on a crash
    python = pythons[variant.engine]
    if variant.engine.startswith("flinklike"):
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(HERE)])
        env["PYSPARK_PYTHON"] = str(python)  # W5 through Spark's readStream: its workers import the project
    else:
        env["PYTHONPATH"] = str(HERE)
        env["PATH"] = os.pathsep.join([str(python.parent), env.get("PATH", "")])  # PyFlink finds its python first
        env["PYSPARK_PYTHON"] = str(python)
        env.pop("VIRTUAL_ENV", None)
    return [str(python), str(script), *args], env


def run_one(
    variant: Variant,
    workload: str,
    records: int,
    pythons: dict[str, Path],
    timeout: float,
    quick: bool = False,
    input_dir: Path | None = None,
) -> Outcome:
    outcome = Outcome(variant, workload, records, load=os.getloadavg()[0])
    argv, env = command(variant, workload, records, pythons, quick, input_dir)
    # Its own session: on a timeout the whole group goes, with the JVMs a peer started. Run from the temporary
    # directory: a crashing JVM writes its hs_err file into the working directory, not into the repository.
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tempfile.gettempdir(),
        start_new_session=True,
    )  # fmt: skip
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        outcome.error = f"timed out after {timeout:.0f} s"
        return outcome
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # leftovers of a run that ended (a peer's daemon JVM)
    except ProcessLookupError:
        pass
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        tail = (stderr or stdout).strip().splitlines()[-3:]
        outcome.error = f"exit {proc.returncode}: {' | '.join(tail)[:300]}"
        return outcome
    result = json.loads(lines[-1][len("RESULT ") :])
    want = expected(workload, records, KEYS)
    if result["summary"] != want:
        outcome.error = f"wrong result {result['summary']} (expected {want}): its time does not count"
        return outcome
    outcome.seconds = result["seconds"]
    outcome.wall_seconds = result.get("wall_seconds", result["seconds"])
    outcome.extra = {k: v for k, v in result.items() if k not in ("seconds", "wall_seconds", "summary", "metrics")}
    if workload in SCENARIOS:
        outcome.metrics = result.get("metrics") or {}
        return outcome
    outcome.rate = records / result["seconds"] if result["seconds"] > 0 else None
    return outcome


def machine_description() -> dict:
    import psutil

    load = os.getloadavg()
    ours = {os.getpid()}
    others = []
    for proc in psutil.process_iter(["pid", "name", "cmdline", "cpu_percent"]):
        try:
            proc.cpu_percent(None)
        except psutil.Error:
            continue
    time.sleep(1.0)
    for proc in psutil.process_iter(["pid", "name", "cmdline"]):
        try:
            cpu = proc.cpu_percent(None)
        except psutil.Error:
            continue
        if proc.pid in ours or cpu < 5:
            continue
        cmd = " ".join(proc.info["cmdline"] or [proc.info["name"] or "?"])
        others.append((cpu, cmd[:90]))
    others.sort(reverse=True)
    return {
        "platform": f"{platform.system()} {platform.release()} {platform.machine()}",
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load": f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}",
        "others": [f"{cpu:.0f}% {cmd}" for cpu, cmd in others[:6]],
    }


def scenario_plan(args, pythons: dict[str, Path]) -> list[tuple[Variant, str]]:
    """The scenario runs: one per (engine, workload, mode) that runs here; this project's first."""
    plan = []
    for workload in (w for w in args.workloads if w in SCENARIOS):
        for engine in args.engines:
            if engine not in pythons or (engine, workload) in NOT_RUN or engine not in RECORDS[workload]:
                continue
            for mode in SCENARIO_MODES.get((engine, workload), (None,)):
                if args.quick and (engine, workload, mode) in QUICK_SKIPS:
                    continue
                plan.append((Variant(engine, SCENARIO_PARALLELISM, mode), workload))
    # This project's runs first, then the peers that the targets compare with, so a budget cut costs the rest
    order = [("flinklike", None), ("spark", "W5"), ("spark", "W4"), ("pyflink", "W4")]
    plan.sort(
        key=lambda item: next(i for i, (e, w) in enumerate(order) if e == item[0].engine and w in (None, item[1]))
    )
    return plan


def run_scenarios(args, pythons: dict[str, Path], timeout: float) -> list[Outcome]:
    """Each scenario run once, within the scenario budget (measured from the start of this phase)."""
    budget = args.scenario_budget if args.scenario_budget is not None else (70.0 if args.quick else 420.0)
    clock = time.monotonic()
    outcomes = []
    for variant, workload in scenario_plan(args, pythons):
        records = RECORDS[workload][variant.engine][1 if args.quick else 0]
        remaining = budget - (time.monotonic() - clock)
        if variant.engine == "flinklike":
            # This engine's scenarios run first and always get the whole per-run timeout: the budget bounds
            # the peers' runs, and a busy machine must not cut this engine's (a W5 cut at 12 s on a load of
            # 7 failed the quick run's check though the engine was fine).
            o = run_one(variant, workload, records, pythons, timeout, args.quick)
        elif remaining < 10:
            o = Outcome(variant, workload, records, error=f"not run: the scenario budget of {budget:.0f} s was spent")
        else:
            o = run_one(variant, workload, records, pythons, min(timeout, remaining), args.quick)
        outcomes.append(o)
        shown = json.dumps(o.metrics) if o.metrics is not None else f"FAILED: {o.error}"
        print(f"  {workload} {variant.engine} ({variant.label}): {shown}", flush=True)
    return outcomes


def run_throughput(args, pythons: dict[str, Path], timeout: float, clock: float) -> list[Outcome]:
    """The throughput workloads: round 1 sweeps every setting of every engine, rounds 2.. rerun the
    setting that was best in round 1 (per workload and engine); rounds are interleaved across engines.
    Runs once the budget is spent are reported as not run."""
    quick = 1 if args.quick else 0
    throughput = [w for w in args.workloads if w not in SCENARIOS]
    sweep = [
        (variant, workload)
        for workload in throughput
        for engine in args.engines
        if engine in pythons and (engine, workload) not in NOT_RUN and engine in RECORDS[workload]
        for variant in variants(engine, workload, args.parallelism, args.modes, args.quick)
    ]
    file_records = [RECORDS[w][v.engine][quick] for v, w in sweep if v.engine in FILE_ENGINES]
    if file_records:
        seconds = ensure_input(str(args.input_dir), max(file_records), KEYS, FILE_ROWS[quick])
        print(
            f"  shared Parquet input: {max(file_records):,} records in {args.input_dir} ({seconds:.1f} s)", flush=True
        )
    # Every workload on every engine once (its first setting) before the other settings: a budget
    # cut on a loaded machine then costs settings, not whole workloads.
    order = {(v, w): i for i, (v, w) in enumerate(sweep)}
    first = {}
    for v, w in sweep:
        first.setdefault((v.engine, w), order[(v, w)])
    sweep.sort(key=lambda item: (order[item] - first[(item[0].engine, item[1])], order[item]))
    if args.quick:  # one round: this project's runs first, so the budget never cuts them
        sweep.sort(key=lambda item: not item[0].engine.startswith("flinklike"))
    budget = args.budget if args.budget is not None else (100.0 if args.quick else 1800.0)
    outcomes: list[Outcome] = []
    for round_number in range(1, args.rounds + 1):
        plan = sweep if round_number == 1 else [(v, w) for (w, _e), v in best_variants(outcomes).items()]
        for variant, workload in plan:
            records = RECORDS[workload][variant.engine][quick]
            remaining = budget - (time.monotonic() - clock)
            if remaining < 10:
                o = Outcome(variant, workload, records, error=f"not run: the time budget of {budget:.0f} s was spent")
            else:
                o = run_one(variant, workload, records, pythons, min(timeout, remaining), input_dir=args.input_dir)
            outcomes.append(o)
            shown = f"{o.rate:,.0f} rec/s" if o.rate else f"FAILED: {o.error}"
            load = f" (load {o.load:.1f})" if o.load is not None else ""
            print(f"  round {round_number} {workload} {variant.engine} ({variant.label}): {shown}{load}", flush=True)
    # The sanity reference: each peer's best setting once more, on its own after the rounds (not in --quick).
    for (workload, engine), variant in best_variants(outcomes).items():
        if args.quick or engine.startswith("flinklike"):
            continue
        records = RECORDS[workload][engine][quick]
        remaining = budget - (time.monotonic() - clock)
        if remaining < 10:
            o = Outcome(variant, workload, records, error=f"not run: the time budget of {budget:.0f} s was spent")
        else:
            o = run_one(variant, workload, records, pythons, min(timeout, remaining), input_dir=args.input_dir)
        o.standalone = True
        outcomes.append(o)
        shown = f"{o.rate:,.0f} rec/s" if o.rate else f"FAILED: {o.error}"
        print(f"  standalone {workload} {engine} ({variant.label}, {records:,} rec): {shown}", flush=True)
    return outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small inputs, 1 round, parallelism 1, no installs")
    parser.add_argument("--rounds", type=int, default=None,
                        help="rounds: the first sweeps every setting, the others rerun each engine's best "
                             "(default 3; quick: 1)")  # fmt: skip
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--install", action=argparse.BooleanOptionalAction, default=None,
                        help="create missing peer venvs (default: yes, except with --quick)")  # fmt: skip
    parser.add_argument("--parallelism", default=None, help="comma-separated parallelisms (default 1,2; quick: 1)")
    parser.add_argument(
        "--modes", default=None, help="PyFlink's execution modes (default thread,process; quick: thread)"
    )
    parser.add_argument("--venv-dir", type=Path, default=default_venv_dir())
    parser.add_argument("--out", default=str(REPO / "docs"))
    parser.add_argument("--timeout", type=float, default=None, help="seconds per run (default 600; quick: 120)")
    parser.add_argument(
        "--budget", type=float, default=None,
        help="seconds for the throughput workloads' runs, installs included (default 1800; quick: 100); runs "
             "beyond it are reported as not run, and medians use the rounds completed",
    )  # fmt: skip
    parser.add_argument(
        "--scenario-budget", type=float, default=None,
        help="seconds for the scenario workloads W3-W5, after the throughput ones (default 420; quick: 70)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    args.engines = [e for e in args.engines.split(",") if e]
    args.workloads = [w for w in args.workloads.split(",") if w]
    for engine in args.engines:
        if engine not in ENGINES:
            parser.error(f"unknown engine {engine!r}; valid: {list(ENGINES)}")
    for workload in args.workloads:
        if workload not in WORKLOADS:
            parser.error(f"unknown workload {workload!r}; valid: {list(WORKLOADS)}")
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.parallelism = [int(p) for p in (args.parallelism or ("1" if args.quick else "1,2")).split(",") if p]
    args.modes = [m for m in (args.modes or ("thread" if args.quick else "thread,process")).split(",") if m]
    for mode in args.modes:
        if mode not in ("thread", "process"):
            parser.error(f"unknown PyFlink execution mode {mode!r}; valid: ['thread', 'process']")
    install = (not args.quick) if args.install is None else args.install
    timeout = args.timeout or (120.0 if args.quick else 600.0)
    started = datetime.datetime.now(datetime.UTC)
    clock = time.monotonic()
    print(f"compare: {'quick' if args.quick else 'full'} run, engines {args.engines}, workloads {args.workloads}",
          flush=True)  # fmt: skip
    machine = machine_description()
    args.input_dir = Path(tempfile.mkdtemp(prefix="compare-input-"))
    pythons: dict[str, Path] = {"flinklike": Path(sys.executable), "flinklike-parquet": Path(sys.executable)}
    args.skipped = {}
    for engine in args.engines:
        if engine.startswith("flinklike"):
            continue
        if engine in ("pyflink", "spark") and shutil.which("java") is None:
            args.skipped[engine] = "skipped: no java on PATH"
            print(f"  {engine}: skipped, no java on PATH", flush=True)
            continue
        python = ensure_venv(PEERS[engine], args.venv_dir, install=install)
        if python is None:
            args.skipped[engine] = "skipped: not installed" + (" (--quick installs nothing)" if not install else "")
            continue
        pythons[engine] = python
    with QuietWatch() as quiet:
        try:
            outcomes = run_throughput(args, pythons, timeout, clock)
        finally:
            shutil.rmtree(args.input_dir, ignore_errors=True)
        scenario_outcomes = run_scenarios(args, pythons, timeout)
    args.quietness = quiet.result
    outcomes += scenario_outcomes
    best = summarize([o for o in outcomes if o.workload not in SCENARIOS])
    report = write_report(best, scenario_outcomes, machine, args, started, (time.monotonic() - clock) / 60)
    print(report.read_text(), flush=True)
    # A run the budget cut is reported as not run; a run that failed or whose result was wrong fails the harness.
    failed_ours = [
        o
        for o in outcomes
        if o.variant.engine.startswith("flinklike") and o.error and not o.error.startswith("not run:")
    ]
    return 1 if failed_ours else 0


if __name__ == "__main__":
    sys.exit(main())
