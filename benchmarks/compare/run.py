"""Compare flinklike-spark with Bytewax, PyFlink and Spark on the same workloads, in one run.

    python benchmarks/compare/run.py            # full: installs the peers' venvs, 3 rounds
    python benchmarks/compare/run.py --quick    # small inputs, 1 round, only peers already installed

Each peer is installed into its own virtual environment (pins in ``peers.py``),
every workload runs on every engine that supports it (``workloads.py``), each
run's result is checked against the expected one before its time counts, and
the rounds are interleaved (round 1 of every engine, then round 2...) so that
a shared machine's drift hits all engines alike; medians are reported. Each
engine runs at parallelism 1 and 2 (PyFlink also in thread and process mode)
and is reported with its best variant. The results go to
``<out>/benchmarks-compare.md`` (a Markdown table with machine, date, the
load on the machine, and the ratios of the issue's targets) and
``<out>/benchmarks-compare.png`` (a matplotlib chart).

Workloads W3 (checkpoint duration aligned vs unaligned), W4 (recovery) and
W5 (latency) are not part of this harness yet: see docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))

from peers import PEERS, default_venv_dir, ensure_venv  # noqa: E402
from workloads import WORKLOADS, expected  # noqa: E402

ENGINES = ("flinklike", "bytewax", "pyflink", "spark")
KEYS = 1000

#: records per run: (full, quick) per workload and engine; sized so one run takes seconds, not minutes
RECORDS = {
    "W1": {"flinklike": (50_000_000, 2_000_000), "bytewax": (50_000_000, 2_000_000), "spark": (10_000_000, 200_000)},
    "W2": {"flinklike": (3_000_000, 500_000), "bytewax": (2_000_000, 200_000), "pyflink": (200_000, 50_000),
           "spark": (1_000_000, 100_000)},
    "W2v": {"flinklike": (40_000_000, 2_000_000), "bytewax": (1_000_000, 200_000), "pyflink": (10_000_000, 1_000_000),
            "spark": (10_000_000, 200_000)},
}  # fmt: skip

#: why an engine does not run a workload
NOT_RUN = {("pyflink", "W1"): "PyFlink's DataStream API has no vectorized (Arrow batch) operator"}


@dataclasses.dataclass(frozen=True)
class Variant:
    engine: str
    parallelism: int
    mode: str | None = None

    @property
    def label(self) -> str:
        return f"p={self.parallelism}" + (f", {self.mode}" if self.mode else "")


@dataclasses.dataclass
class Outcome:
    variant: Variant
    workload: str
    records: int
    rate: float | None = None  # records per second, None if the run failed
    seconds: float | None = None
    error: str | None = None


def variants(engine: str, parallelisms: list[int], modes: list[str]) -> list[Variant]:
    if engine == "pyflink":
        return [Variant(engine, p, m) for p in parallelisms for m in modes]
    return [Variant(engine, p) for p in parallelisms]


def command(variant: Variant, workload: str, records: int, pythons: dict[str, Path]) -> tuple[list[str], dict]:
    script = HERE / f"engine_{variant.engine}.py"
    args = [workload, "--records", str(records), "--keys", str(KEYS), "--parallelism", str(variant.parallelism)]
    if variant.mode:
        args += ["--mode", variant.mode]
    env = dict(os.environ)
    python = pythons[variant.engine]
    if variant.engine == "flinklike":
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(HERE)])
    else:
        env["PYTHONPATH"] = str(HERE)
        env["PATH"] = os.pathsep.join([str(python.parent), env.get("PATH", "")])  # PyFlink finds its python first
        env["PYSPARK_PYTHON"] = str(python)
        env.pop("VIRTUAL_ENV", None)
    return [str(python), str(script), *args], env


def run_one(variant: Variant, workload: str, records: int, pythons: dict[str, Path], timeout: float) -> Outcome:
    outcome = Outcome(variant, workload, records)
    argv, env = command(variant, workload, records, pythons)
    # Its own session: on a timeout the whole group goes, with the JVMs a peer started.
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(HERE),
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


def summarize(outcomes: list[Outcome]) -> dict[tuple[str, str], dict]:
    """Per (workload, engine): the best variant by median rate over the rounds, and its medians."""
    by_variant: dict[tuple[str, Variant], list[Outcome]] = {}
    for o in outcomes:
        by_variant.setdefault((o.workload, o.variant), []).append(o)
    best: dict[tuple[str, str], dict] = {}
    for (workload, variant), runs in by_variant.items():
        rates = [o.rate for o in runs if o.rate is not None]
        key = (workload, variant.engine)
        ran = [o for o in runs if not (o.error or "").startswith("not run:")]
        entry = {"variant": variant.label, "rounds": len(ran), "ok": len(rates), "records": runs[0].records,
                 "errors": [o.error for o in runs if o.error]}  # fmt: skip
        if rates:
            entry["rate"] = statistics.median(rates)
        current = best.get(key)
        if current is None or entry.get("rate", -1) > current.get("rate", -1):
            best[key] = entry
    return best


TARGETS = (
    ("W2", "bytewax", 5.0, "W2 >= 5x Bytewax"),
    ("W2", "pyflink", 20.0, "W2 >= 20x PyFlink"),
    ("W2v", "spark", 1.0, "W2v >= Spark's native JVM count"),
)


def write_report(best, machine: dict, args, started: datetime.datetime, minutes: float) -> Path:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    engines = [e for e in ENGINES if e in args.engines]
    lines = [
        "# flinklike-spark against Bytewax, PyFlink and Spark" + (" (quick mode)" if args.quick else ""),
        "",
        f"Measured {started:%Y-%m-%d %H:%M} UTC by `python benchmarks/compare/run.py"
        f"{' --quick' if args.quick else ''}` in {minutes:.1f} min; {args.rounds} interleaved round(s), medians.",
        f"Machine: {machine['platform']}, {machine['cpus']} CPUs, Python {machine['python']}; "
        f"load average (1/5/15 min) at the start {machine['load']}.",
        "",
        "Other processes using CPU at the start (not part of the benchmark):",
        "",
        *([f"- `{p}`" for p in machine["others"]] or ["- none above 5%"]),
        "",
        "Records per second (best variant: parallelism p, PyFlink's execution mode); flinklike-spark counts from "
        "job submission to the end, Spark its busy time (sum of micro-batch durations), Bytewax and PyFlink "
        "the run of the dataflow. Every result was checked before its time counted.",
        "",
        "| workload | " + " | ".join(engines) + " |",
        "|---|" + "---|" * len(engines),
    ]
    for workload in args.workloads:
        cells = []
        for engine in engines:
            if (engine, workload) in NOT_RUN:
                cells.append(f"not run: {NOT_RUN[(engine, workload)]}")
                continue
            entry = best.get((workload, engine))
            if entry is None:
                cells.append(args.skipped.get(engine, "—"))
            elif "rate" not in entry:
                error = entry["errors"][0] if entry["errors"] else "?"
                cells.append(error if error.startswith("not run:") else f"failed: {error}")
            else:
                cells.append(f"{entry['rate']:,.0f} ({entry['variant']}; {entry['records']:,} rec, "
                             f"{entry['ok']}/{entry['rounds']} ok)")  # fmt: skip
        lines.append(f"| {workload}: {WORKLOADS[workload]} | " + " | ".join(cells) + " |")
    lines += ["", "Targets (ratios of the medians above):", ""]
    for workload, peer, target, text in TARGETS:
        ours, theirs = best.get((workload, "flinklike"), {}), best.get((workload, peer), {})
        if "rate" in ours and "rate" in theirs:
            ratio = ours["rate"] / theirs["rate"]
            verdict = "met" if ratio >= target else f"missed by {target / ratio:.1f}x"
            lines.append(f"- {text}: {ratio:.2f}x — {verdict}")
        else:
            lines.append(f"- {text}: not measured in this run ({peer} or flinklike-spark has no result)")
    report = out / "benchmarks-compare.md"
    chart = out / "benchmarks-compare.png"
    lines += ["", f"![throughput chart]({chart.name})", ""]
    report.write_text("\n".join(lines))
    draw_chart(best, engines, args.workloads, chart, started)
    return report


def draw_chart(best, engines, workloads, path: Path, started: datetime.datetime) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    width = 0.8 / len(engines)
    for i, engine in enumerate(engines):
        values = [best.get((w, engine), {}).get("rate", 0) for w in workloads]
        xs = [j + i * width for j in range(len(workloads))]
        bars = ax.bar(xs, values, width, label=engine)
        for bar, value in zip(bars, values):
            if value:
                ax.annotate(f"{value / 1e6:.2g}M", (bar.get_x() + bar.get_width() / 2, value), ha="center",
                            va="bottom", fontsize=7)  # fmt: skip
    ax.set_yscale("log")
    ax.set_xticks([j + width * (len(engines) - 1) / 2 for j in range(len(workloads))], workloads)
    ax.set_ylabel("records / s (log scale)")
    ax.set_title(f"Throughput, best variant per engine ({started:%Y-%m-%d}, {os.cpu_count()} CPUs)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small inputs, 1 round, parallelism 1, no installs")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 3; quick: 1)")
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--install", action=argparse.BooleanOptionalAction, default=None,
                        help="create missing peer venvs (default: yes, except with --quick)")  # fmt: skip
    parser.add_argument("--parallelism", default=None, help="comma-separated parallelisms (default 1,2; quick: 1)")
    parser.add_argument("--modes", default=None, help="PyFlink's execution modes (default thread,process; quick: thread)")
    parser.add_argument("--venv-dir", type=Path, default=default_venv_dir())
    parser.add_argument("--out", default=str(REPO / "docs"))
    parser.add_argument("--timeout", type=float, default=None, help="seconds per run (default 600; quick: 120)")
    parser.add_argument(
        "--budget", type=float, default=None,
        help="seconds for all runs, installs included (default 1080; quick: 170); runs beyond it are reported "
             "as not run, and medians use the rounds completed",
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
    pythons: dict[str, Path] = {"flinklike": Path(sys.executable)}
    args.skipped = {}
    for engine in args.engines:
        if engine == "flinklike":
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
    plan = [
        (variant, workload)
        for workload in args.workloads
        for engine in args.engines
        if engine in pythons and (engine, workload) not in NOT_RUN and engine in RECORDS[workload]
        for variant in variants(engine, args.parallelism, args.modes)
    ]
    # Every workload on every engine once (first parallelism and mode) before the other variants: a
    # budget cut on a loaded machine then costs variants, not whole workloads.
    plan.sort(key=lambda item: (args.parallelism.index(item[0].parallelism),
                                args.modes.index(item[0].mode) if item[0].mode else 0))  # fmt: skip
    if args.quick:  # one round: this project's runs first, so the budget never cuts them
        plan.sort(key=lambda item: item[0].engine != "flinklike")
    budget = args.budget if args.budget is not None else (170.0 if args.quick else 1080.0)
    outcomes: list[Outcome] = []
    for round_number in range(1, args.rounds + 1):
        for variant, workload in plan:
            records = RECORDS[workload][variant.engine][1 if args.quick else 0]
            remaining = budget - (time.monotonic() - clock)
            if remaining < 10:
                o = Outcome(variant, workload, records, error=f"not run: the time budget of {budget:.0f} s was spent")
                outcomes.append(o)
                print(f"  round {round_number} {workload} {variant.engine} ({variant.label}): {o.error}", flush=True)
                continue
            o = run_one(variant, workload, records, pythons, min(timeout, remaining))
            outcomes.append(o)
            shown = f"{o.rate:,.0f} rec/s" if o.rate else f"FAILED: {o.error}"
            print(f"  round {round_number} {workload} {variant.engine} ({variant.label}): {shown}", flush=True)
    best = summarize(outcomes)
    report = write_report(best, machine, args, started, (time.monotonic() - clock) / 60)
    print(report.read_text(), flush=True)
    failed_ours = [o for o in outcomes if o.variant.engine == "flinklike" and o.error]
    return 1 if failed_ours else 0


if __name__ == "__main__":
    sys.exit(main())
