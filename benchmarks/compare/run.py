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
from workloads import SCENARIOS, WORKLOADS, expected  # noqa: E402

ENGINES = ("flinklike", "bytewax", "pyflink", "spark")
KEYS = 1000

#: records per run: (full, quick) per workload and engine; sized so one run takes seconds, not minutes
RECORDS = {
    "W1": {"flinklike": (50_000_000, 2_000_000), "bytewax": (50_000_000, 2_000_000), "spark": (3_000_000, 200_000)},
    "W2": {"flinklike": (3_000_000, 500_000), "bytewax": (2_000_000, 200_000), "pyflink": (200_000, 50_000),
           "spark": (300_000, 100_000)},
    "W2v": {"flinklike": (40_000_000, 2_000_000), "bytewax": (1_000_000, 200_000), "pyflink": (10_000_000, 1_000_000),
            "spark": (5_000_000, 200_000)},
    # W3: the keyed count run with and without checkpoints (long enough for several 1 s checkpoints)
    "W3": {"flinklike": (8_000_000, 2_000_000)},
    # W4, W5: records at the fixed --rate, so the run lasts records / rate seconds
    "W4": {"flinklike": (40_000, 8_000), "pyflink": (40_000, 8_000), "spark": (40_000, 8_000)},
    "W5": {"flinklike": (30_000, 6_000), "spark": (30_000, 6_000)},
}  # fmt: skip

#: the scenario workloads' own arguments: (full, quick)
SCENARIO_ARGS = {
    "W3": (["--seconds", "10", "--min-checkpoints", "3"], ["--seconds", "2", "--min-checkpoints", "2"]),
    "W4": (["--rate", "2000"], ["--rate", "2000"]),
    "W5": (["--rate", "1000"], ["--rate", "1000"]),
}
#: parallelism of every scenario run: a keyed exchange between two TaskExecutor processes
SCENARIO_PARALLELISM = 2
#: extra variants of a scenario: (engine, workload) -> modes; ``full`` ones are skipped by --quick
SCENARIO_MODES = {("flinklike", "W5"): (None, "readStream")}
QUICK_SKIPS = {
    ("flinklike", "W5", "readStream"): "skipped in --quick: starts Spark",
    ("spark", "W4", None): "skipped in --quick: two Spark start-ups",
    ("pyflink", "W4", None): "skipped in --quick: starts PyFlink's JVM",
    ("spark", "W5", None): "skipped in --quick: starts Spark",
}

#: why an engine does not run a workload
NOT_RUN = {
    ("pyflink", "W1"): "PyFlink's DataStream API has no vectorized (Arrow batch) operator",
    ("pyflink", "W3"): "optional in the issue and not built: this project's W3 alone",
    ("spark", "W3"): "Spark has no checkpoint barriers to align (a micro-batch commits its offsets and state)",
    ("pyflink", "W5"): "not a W5 peer in the issue",
}
#: engines that are no peer for the scenario workloads at all (left out of their tables)
SCENARIO_ENGINES = ("flinklike", "pyflink", "spark")


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
    metrics: dict | None = None  # scenario workloads: what the runner measured (once its result checked out)


def variants(engine: str, parallelisms: list[int], modes: list[str]) -> list[Variant]:
    if engine == "pyflink":
        return [Variant(engine, p, m) for p in parallelisms for m in modes]
    return [Variant(engine, p) for p in parallelisms]


def command(
    variant: Variant, workload: str, records: int, pythons: dict[str, Path], quick: bool = False
) -> tuple[list[str], dict]:
    script = HERE / f"engine_{variant.engine}.py"
    args = [workload, "--records", str(records), "--keys", str(KEYS), "--parallelism", str(variant.parallelism)]
    if variant.mode:
        args += ["--mode", variant.mode]
    if workload in SCENARIO_ARGS:
        args += SCENARIO_ARGS[workload][1 if quick else 0]
    env = dict(os.environ)
    env["PYTHONFAULTHANDLER"] = "1"  # every Python process of the run (engine, workers) dumps its stack on a crash
    python = pythons[variant.engine]
    if variant.engine == "flinklike":
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(HERE)])
        env["PYSPARK_PYTHON"] = str(python)  # W5 through Spark's readStream: its workers import the project
    else:
        env["PYTHONPATH"] = str(HERE)
        env["PATH"] = os.pathsep.join([str(python.parent), env.get("PATH", "")])  # PyFlink finds its python first
        env["PYSPARK_PYTHON"] = str(python)
        env.pop("VIRTUAL_ENV", None)
    return [str(python), str(script), *args], env


def run_one(
    variant: Variant, workload: str, records: int, pythons: dict[str, Path], timeout: float, quick: bool = False
) -> Outcome:
    outcome = Outcome(variant, workload, records)
    argv, env = command(variant, workload, records, pythons, quick)
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


def write_report(
    best, scenarios: list[Outcome], machine: dict, args, started: datetime.datetime, minutes: float
) -> Path:
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
    throughput = [w for w in args.workloads if w not in SCENARIOS]
    for workload in throughput:
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
    scenario_workloads = [w for w in args.workloads if w in SCENARIOS]
    if scenario_workloads:
        scenario_chart = out / "benchmarks-compare-scenarios.png"
        lines += scenario_report(scenarios, scenario_workloads, args)
        lines += ["", f"![scenario chart]({scenario_chart.name})", ""]
        draw_scenario_chart(scenarios, scenario_chart, started)
    report.write_text("\n".join(lines))
    draw_chart(best, engines, throughput, chart, started)
    return report


def _ms(value) -> str:
    return "—" if value is None else f"{value:,.0f}"


#: per scenario workload: its table's columns, as (header, function of the metrics)
SCENARIO_COLUMNS = {
    "W3": (
        ("aligned: median checkpoint (ms)", lambda m: f"{_ms(m['aligned_median_ms'])} ({m['aligned_checkpoints']} cp, "
                                                      f"max {_ms(m['aligned_max_ms'])})"),
        ("unaligned: median checkpoint (ms)", lambda m: f"{_ms(m['unaligned_median_ms'])} ({m['unaligned_checkpoints']}"
                                                        f" cp, max {_ms(m['unaligned_max_ms'])})"),
        ("aligned / unaligned", lambda m: f"{m['aligned_over_unaligned']:.1f}x"),
        ("W2 rec/s without checkpoints", lambda m: f"{m['rate_without']:,.0f}"),
        ("with 1 s checkpoints", lambda m: f"{m['rate_with_1s_checkpoints']:,.0f} ({m['checkpoints_during_run']:g} cp "
                                           "per run)"),
        ("overhead", lambda m: f"{m['overhead']:.1%}"),
    ),
    "W4": (
        ("kill -> output again (s)", lambda m: "—" if m["recovery_s"] is None else f"{m['recovery_s']:.2f}"),
        ("failure detected (s)", lambda m: "—" if m.get("detected_s") is None else f"{m['detected_s']:.2f}"),
        ("restarts", lambda m: "—" if m["restarts"] is None else str(m["restarts"])),
        ("rows written", lambda m: f"{m['rows']:,}"),
        ("what is measured", lambda m: m["measures"]),
    ),
    "W5": (
        ("input rate (rec/s)", lambda m: f"{m['rate']:,.0f}"),
        ("p50 (ms)", lambda m: _ms(m["p50_ms"])),
        ("p99 (ms)", lambda m: _ms(m["p99_ms"])),
        ("max (ms)", lambda m: _ms(m["max_ms"])),
        ("records measured", lambda m: f"{m['measured']:,}"),
    ),
}  # fmt: skip

SCENARIO_CHECKS = {
    "W3": "checked: the keyed count's result, with and without checkpoints",
    "W4": "checked: lost = duplicated = 0 per key in the output (exactly once)",
    "W5": "checked: every (key, seq) reached the sink once",
}


def _engine_label(variant: Variant) -> str:
    if variant.mode == "readStream":
        return 'flinklike via spark.readStream.format("flinklike")'
    return variant.engine + (f" ({variant.mode})" if variant.mode else "")


def scenario_report(scenarios: list[Outcome], workloads: list[str], args) -> list[str]:
    """The scenario tables (one per workload: a row per engine), and their targets."""
    lines = [
        "",
        f"## Scenarios (one run each, parallelism {SCENARIO_PARALLELISM}; sizes in `benchmarks/compare/run.py`)",
    ]
    for workload in workloads:
        columns = SCENARIO_COLUMNS[workload]
        lines += ["", f"### {workload}: {WORKLOADS[workload]}", "", f"Results {SCENARIO_CHECKS[workload]}.", "",
                  "| engine | " + " | ".join(h for h, _ in columns) + " |", "|---|" + "---|" * len(columns)]  # fmt: skip
        for o in (o for o in scenarios if o.workload == workload):
            if o.metrics is None:
                cell = o.error if (o.error or "").startswith("not run:") else f"failed: {o.error}"
                lines.append(f"| {_engine_label(o.variant)} | {cell} |" + " |" * (len(columns) - 1))
            else:
                lines.append(f"| {_engine_label(o.variant)} | " + " | ".join(f(o.metrics) for _, f in columns) + " |")
        for engine in SCENARIO_ENGINES:
            if engine not in args.engines or any(o.variant.engine == engine and o.workload == workload for o in scenarios):
                continue
            reason = (f"not run: {NOT_RUN[(engine, workload)]}" if (engine, workload) in NOT_RUN
                      else args.skipped.get(engine) or next((r for (e, w, _), r in QUICK_SKIPS.items()
                                                            if args.quick and e == engine and w == workload), "—"))  # fmt: skip
            lines.append(f"| {engine} | {reason} |" + " |" * (len(columns) - 1))
        skipped_modes = [r for (e, w, _m), r in QUICK_SKIPS.items() if args.quick and e == "flinklike" and w == workload]
        lines += [f"| {_engine_label(Variant('flinklike', SCENARIO_PARALLELISM, 'readStream'))} | {r} |"
                  + " |" * (len(columns) - 1) for r in skipped_modes]  # fmt: skip
    lines += ["", "Scenario targets (from the runs above):", ""]
    lines += scenario_targets(scenarios)
    return lines


def _metrics(scenarios: list[Outcome], workload: str, engine: str, mode: str | None = None) -> dict | None:
    for o in scenarios:
        if o.workload == workload and o.variant.engine == engine and o.variant.mode == mode and o.metrics is not None:
            return o.metrics
    return None


def scenario_targets(scenarios: list[Outcome]) -> list[str]:
    lines = []
    w3 = _metrics(scenarios, "W3", "flinklike")
    if w3:
        ratio = w3["aligned_over_unaligned"]
        verdict = "met" if ratio >= 20 else f"missed by {20 / ratio:.1f}x"
        lines.append(f"- W3 unaligned >= 20x faster than aligned under backpressure: {ratio:.1f}x — {verdict}")
        overhead = w3["overhead"]
        if not w3["checkpoints_during_run"]:
            verdict = "not measured: no checkpoint completed during the runs with checkpoints (too few records)"
        else:
            verdict = "met" if overhead <= 0.10 else f"missed by {overhead - 0.10:.1%} points"
        lines.append(f"- W3 overhead of 1 s checkpoints <= 10%: {overhead:.1%} — {verdict}")
    else:
        lines.append("- W3: not measured in this run")
    ours, spark = _metrics(scenarios, "W4", "flinklike"), _metrics(scenarios, "W4", "spark")
    if ours and spark and ours["recovery_s"] and spark["recovery_s"]:
        ratio = spark["recovery_s"] / ours["recovery_s"]
        lines.append(f"- W4 time to output again, Spark / flinklike-spark: {ratio:.1f}x ({spark['recovery_s']:.2f} s / "
                     f"{ours['recovery_s']:.2f} s; not the same event: see the table)")  # fmt: skip
    else:
        lines.append("- W4 against Spark: not measured in this run")
    spark = _metrics(scenarios, "W5", "spark")
    for mode in (None, "readStream"):
        ours = _metrics(scenarios, "W5", "flinklike", mode)
        label = _engine_label(Variant("flinklike", SCENARIO_PARALLELISM, mode))
        if ours and spark and ours["p99_ms"] and spark["p99_ms"]:
            verdict = "met" if ours["p99_ms"] < spark["p99_ms"] else f"missed by {ours['p99_ms'] / spark['p99_ms']:.1f}x"
            lines.append(f"- W5 p99 below Spark's, {label}: {_ms(ours['p99_ms'])} ms vs {_ms(spark['p99_ms'])} ms — "
                         f"{verdict}")  # fmt: skip
        else:
            lines.append(f"- W5 p99 below Spark's, {label}: not measured in this run")
    return lines


def draw_scenario_chart(scenarios: list[Outcome], path: Path, started: datetime.datetime) -> None:
    """Three panels: W3 checkpoint durations, W4 time to output again, W5 p50/p99."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(12, 4.2))
    w3 = _metrics(scenarios, "W3", "flinklike")
    ax = axes[0]
    if w3:
        bars = ax.bar(["aligned", "unaligned"], [w3["aligned_median_ms"], w3["unaligned_median_ms"]],
                      color=["tab:red", "tab:green"])  # fmt: skip
        ax.bar_label(bars, fmt="%.0f ms", fontsize=8)
        ax.set_yscale("log")
    ax.set_title("W3 median checkpoint under backpressure\n(flinklike-spark)", fontsize=9)
    ax.set_ylabel("ms (log scale)")
    ax = axes[1]
    w4 = [(o.variant.engine, o.metrics["recovery_s"]) for o in scenarios
          if o.workload == "W4" and o.metrics and o.metrics.get("recovery_s") is not None]  # fmt: skip
    if w4:
        bars = ax.bar([e for e, _ in w4], [v for _, v in w4], color="tab:blue")
        ax.bar_label(bars, fmt="%.1f s", fontsize=8)
    ax.set_title("W4 kill -> output again", fontsize=9)
    ax.set_ylabel("seconds")
    ax = axes[2]
    w5 = [(("flinklike\nreadStream" if o.variant.mode else o.variant.engine), o.metrics) for o in scenarios
          if o.workload == "W5" and o.metrics and o.metrics.get("p99_ms") is not None]  # fmt: skip
    if w5:
        xs = range(len(w5))
        p50 = ax.bar([x - 0.2 for x in xs], [m["p50_ms"] for _, m in w5], 0.4, label="p50")
        p99 = ax.bar([x + 0.2 for x in xs], [m["p99_ms"] for _, m in w5], 0.4, label="p99")
        ax.bar_label(p50, fmt="%.0f", fontsize=7)
        ax.bar_label(p99, fmt="%.0f", fontsize=7)
        ax.set_xticks(list(xs), [label for label, _ in w5], fontsize=8)
        ax.set_yscale("log")
        ax.legend(fontsize=8)
    ax.set_title("W5 end-to-end latency at a fixed rate", fontsize=9)
    ax.set_ylabel("ms (log scale)")
    fig.suptitle(f"Scenarios ({started:%Y-%m-%d}, {os.cpu_count()} CPUs)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


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
    plan.sort(key=lambda item: next(i for i, (e, w) in enumerate(order) if e == item[0].engine and w in (None, item[1])))
    return plan


def run_scenarios(args, pythons: dict[str, Path], timeout: float) -> list[Outcome]:
    """Each scenario run once, within the scenario budget (measured from the start of this phase)."""
    budget = args.scenario_budget if args.scenario_budget is not None else (70.0 if args.quick else 420.0)
    clock = time.monotonic()
    outcomes = []
    for variant, workload in scenario_plan(args, pythons):
        records = RECORDS[workload][variant.engine][1 if args.quick else 0]
        remaining = budget - (time.monotonic() - clock)
        if remaining < 10:
            o = Outcome(variant, workload, records, error=f"not run: the scenario budget of {budget:.0f} s was spent")
        else:
            o = run_one(variant, workload, records, pythons, min(timeout, remaining), args.quick)
        outcomes.append(o)
        shown = json.dumps(o.metrics) if o.metrics is not None else f"FAILED: {o.error}"
        print(f"  {workload} {variant.engine} ({variant.label}): {shown}", flush=True)
    return outcomes


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
        help="seconds for the throughput workloads' runs, installs included (default 690; quick: 100); runs "
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
    throughput = [w for w in args.workloads if w not in SCENARIOS]
    plan = [
        (variant, workload)
        for workload in throughput
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
    budget = args.budget if args.budget is not None else (100.0 if args.quick else 690.0)
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
    scenario_outcomes = run_scenarios(args, pythons, timeout)
    outcomes += scenario_outcomes
    best = summarize([o for o in outcomes if o.workload not in SCENARIOS])
    report = write_report(best, scenario_outcomes, machine, args, started, (time.monotonic() - clock) / 60)
    print(report.read_text(), flush=True)
    # A run the budget cut is reported as not run; a run that failed or whose result was wrong fails the harness.
    failed_ours = [o for o in outcomes if o.variant.engine == "flinklike" and o.error and not o.error.startswith("not run:")]
    return 1 if failed_ours else 0


if __name__ == "__main__":
    sys.exit(main())
