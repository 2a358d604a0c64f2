"""The comparison's report: the Markdown tables (throughput with the sanity column, every setting
tried, the scenarios) and the charts, from the outcomes ``run.py`` collected.
"""

from __future__ import annotations

import datetime
import os
import statistics
from pathlib import Path

from plan import ENGINES, FILE_ROWS, NOT_RUN, QUICK_SKIPS, SCENARIO_ENGINES, SCENARIO_PARALLELISM, Outcome, Variant
from workloads import SCENARIOS, WORKLOADS

#: a published figure below this share of its reference (a peer's standalone run, this engine's best
#: single run) is flagged
SANITY_FLAG = 0.7


def _by_variant(outcomes: list[Outcome]) -> dict[tuple[str, Variant], list[Outcome]]:
    """The rounds' runs per (workload, setting); the standalone sanity runs are not among them."""
    by_variant: dict[tuple[str, Variant], list[Outcome]] = {}
    for o in outcomes:
        if o.standalone:
            continue
        by_variant.setdefault((o.workload, o.variant), []).append(o)
    return by_variant


def best_variants(outcomes: list[Outcome]) -> dict[tuple[str, str], Variant]:
    """Per (workload, engine): the setting with the best median rate so far (those with a rate only)."""
    best: dict[tuple[str, str], tuple[float, Variant]] = {}
    for (workload, variant), runs in _by_variant(outcomes).items():
        rates = [o.rate for o in runs if o.rate is not None]
        key = (workload, variant.engine)
        if rates and statistics.median(rates) > best.get(key, (-1.0, None))[0]:
            best[key] = (statistics.median(rates), variant)
    return {key: variant for key, (_rate, variant) in best.items()}


def summarize(outcomes: list[Outcome]) -> dict[tuple[str, str], dict]:
    """Per (workload, engine): the best setting by median busy rate over the rounds, its medians (busy
    and wall), every setting of the sweep (its median rate and load), and the sanity figure: the
    published median against the peer's standalone run of that setting, or (this engine, which has
    none) against the best single run of any setting."""
    best: dict[tuple[str, str], dict] = {}
    sweeps: dict[tuple[str, str], list[dict]] = {}
    for (workload, variant), runs in _by_variant(outcomes).items():
        rates = [o.rate for o in runs if o.rate is not None]
        loads = [o.load for o in runs if o.rate is not None and o.load is not None]
        key = (workload, variant.engine)
        ran = [o for o in runs if not (o.error or "").startswith("not run:")]
        entry = {"variant": variant.label, "rounds": len(ran), "ok": len(rates), "records": runs[0].records,
                 "errors": [o.error for o in runs if o.error], "max": max(rates, default=None),
                 "load": statistics.median(loads) if loads else None,
                 "extra": next((o.extra for o in runs if o.rate is not None), {})}  # fmt: skip
        if rates:
            entry["rate"] = statistics.median(rates)
            walls = [o.wall_rate for o in runs if o.wall_rate is not None]
            if walls:
                entry["wall_rate"] = statistics.median(walls)
        sweeps.setdefault(key, []).append(entry)
        current = best.get(key)
        if current is None or entry.get("rate", -1) > current.get("rate", -1):
            best[key] = entry
    standalone = {(o.workload, o.variant.engine): o for o in outcomes if o.standalone}
    for key, entry in best.items():
        tops = [e["max"] for e in sweeps[key] if e["max"] is not None]
        entry["sweep"] = sweeps[key]
        reference = standalone.get(key)
        if reference is not None:
            entry["standalone"] = reference
            if "rate" in entry and reference.rate:
                entry["sanity"] = entry["rate"] / reference.rate
        elif "rate" in entry and tops:
            entry["sanity"] = entry["rate"] / max(tops)
    return best


TARGETS = (
    ("W2", "flinklike", "bytewax", 5.0, "W2 >= 5x Bytewax (both from an in-process generator)"),
    ("W2", "flinklike", "pyflink", 20.0, "W2 >= 20x PyFlink"),
    ("W2v", "flinklike", "spark", 1.0, "W2v >= Spark's native JVM count (flinklike-spark from its generator)"),
    ("W2v", "flinklike-parquet", "spark", 1.0, "W2v >= Spark's native JVM count, both reading the same Parquet files"),
)

#: column headers of the engines
ENGINE_HEADERS = {"flinklike-parquet": "flinklike (Parquet)"}


def _load(value) -> str:
    return "?" if value is None else f"{value:.1f}"


def _cell(engine: str, workload: str, best: dict, args) -> str:
    if (engine, workload) in NOT_RUN:
        return f"not run: {NOT_RUN[(engine, workload)]}"
    entry = best.get((workload, engine))
    if entry is None:
        return args.skipped.get(engine, "—")
    if "rate" not in entry:
        error = (entry["errors"][0] if entry["errors"] else "?").replace("|", "/")  # no column breaks
        return error if error.startswith("not run:") else f"failed: {error}"
    wall = f"{entry['wall_rate']:,.0f}" if "wall_rate" in entry else "?"
    return (f"{entry['rate']:,.0f} busy, {wall} wall ({entry['variant']}; {entry['records']:,} "
            f"rec, {entry['ok']}/{entry['rounds']} ok, load {_load(entry['load'])})")  # fmt: skip


def sanity_table(best: dict, engines: list[str], workloads: list[str]) -> list[str]:
    """Every setting each engine was swept over, and the published figure against its best single run."""
    lines = [
        "",
        "## Every setting tried, and the sanity column",
        "",
        "Round 1 runs every setting of every engine (the sweep); later rounds rerun each engine's best. "
        "After the rounds each peer's best setting runs once more on its own, on the same input (*standalone*). "
        "*Sanity* is the published figure (the best setting's median busy rate) over that standalone run "
        "(for flinklike-spark, which has none, over the best single run of any setting); below "
        f"{SANITY_FLAG:.0%} it is flagged: that engine was measured far below its own best.",
        "",
        "| workload | engine | settings swept: median busy rec/s (runs, load) | published | best single run | "
        "standalone run | sanity |",
        "|---|---|---|---|---|---|---|",
    ]
    for workload in workloads:
        for engine in engines:
            entry = best.get((workload, engine))
            if entry is None or "rate" not in entry:
                continue
            swept = "; ".join(
                (f"{e['variant']}: {e['rate']:,.0f} ({e['ok']}, {_load(e['load'])})" if "rate" in e
                 else f"{e['variant']}: {(e['errors'] or ['?'])[0][:60].replace('|', '/')}")
                + (f" [{e['extra']['micro_batches']} micro-batch(es), maxFilesPerTrigger "
                   f"{e['extra']['max_files_per_trigger']}]" if "micro_batches" in e["extra"] else "")
                for e in entry["sweep"]
            )  # fmt: skip
            sanity = entry.get("sanity")
            flag = "" if sanity is None or sanity >= SANITY_FLAG else " **far below its best**"
            lines.append(f"| {workload} | {ENGINE_HEADERS.get(engine, engine)} | {swept} | {entry['rate']:,.0f} | "
                         f"{max(e['max'] for e in entry['sweep'] if e['max']):,.0f} | "
                         f"{_standalone_cell(entry.get('standalone'))} | "
                         f"{'—' if sanity is None else f'{sanity:.0%}'}{flag} |")  # fmt: skip
    return lines


def _standalone_cell(reference: Outcome | None) -> str:
    if reference is None:
        return "—"
    if reference.rate is None:
        return (reference.error or "?")[:60].replace("|", "/")
    return f"{reference.rate:,.0f} ({reference.records:,} rec, load {_load(reference.load)})"


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
        f"Quiet machine: {args.quietness.line()}. Targets get a verdict only in a measurement (benchmarks/quiet.py).",
        "",
        "Other processes using CPU at the start (not part of the benchmark):",
        "",
        *([f"- `{p}`" for p in machine["others"]] or ["- none above 5%"]),
        "",
        "Records per second of the best setting of each engine (its median over the rounds; every setting "
        "tried is in the next section), by *busy* time (processing, start-up excluded; the best setting is "
        "chosen by it) and by *wall* time from submission. Busy: flinklike-spark from its first task running "
        "to its last task finished (the JobMaster's execution timestamps), Spark the sum of its micro-batches' "
        "`triggerExecution`, PyFlink its job's net runtime (Flink's JobExecutionResult), Bytewax the run of "
        "the dataflow (its workers start inside it: busy and wall are one time). Wall: from job submission "
        "(flinklike-spark, PyFlink), from the streaming query's start (Spark) to the end. Every result was "
        "checked before its time counted. *load* is the 1-minute load average when the runs started "
        "(median). Every engine reads the same records (row i: key i % 1000, seq i // 1000, event time seq "
        "ms): flinklike-spark, Bytewax and PyFlink from an in-process generator, Spark and flinklike (Parquet) "
        f"from the same Parquet files ({FILE_ROWS[1 if args.quick else 0]:,} rows each); a slower peer reads "
        "the first N of them (its record "
        "count is in its cell).",
        "",
        "| workload | " + " | ".join(ENGINE_HEADERS.get(e, e) for e in engines) + " |",
        "|---|" + "---|" * len(engines),
    ]
    throughput = [w for w in args.workloads if w not in SCENARIOS]
    for workload in throughput:
        cells = [_cell(engine, workload, best, args) for engine in engines]
        lines.append(f"| {workload}: {WORKLOADS[workload]} | " + " | ".join(cells) + " |")
    lines += ["", "Targets (ratios of the busy medians above: busy against busy):", ""]
    for workload, ours_engine, peer, target, text in TARGETS:
        if workload not in throughput:
            continue
        ours, theirs = best.get((workload, ours_engine), {}), best.get((workload, peer), {})
        if "rate" in ours and "rate" in theirs:
            ratio = ours["rate"] / theirs["rate"]
            verdict = _verdict(args, ratio >= target, f"missed by {target / ratio:.2f}x")
            lines.append(f"- {text}: {ratio:.2f}x ({ours['rate']:,.0f} vs {theirs['rate']:,.0f} rec/s) — {verdict}")
        else:
            lines.append(f"- {text}: not measured in this run ({peer} or {ours_engine} has no result)")
    lines += ["", "The same ratios wall against wall (no verdict: the targets are busy against busy):", ""]
    for workload, ours_engine, peer, _target, text in TARGETS:
        ours, theirs = best.get((workload, ours_engine), {}), best.get((workload, peer), {})
        if workload in throughput and "wall_rate" in ours and "wall_rate" in theirs:
            lines.append(f"- {text}: {ours['wall_rate'] / theirs['wall_rate']:.2f}x ({ours['wall_rate']:,.0f} vs "
                         f"{theirs['wall_rate']:,.0f} rec/s)")  # fmt: skip
    lines += sanity_table(best, engines, throughput)
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
            if engine not in args.engines or any(
                o.variant.engine == engine and o.workload == workload for o in scenarios
            ):
                continue
            reason = (f"not run: {NOT_RUN[(engine, workload)]}" if (engine, workload) in NOT_RUN
                      else args.skipped.get(engine) or next((r for (e, w, _), r in QUICK_SKIPS.items()
                                                            if args.quick and e == engine and w == workload), "—"))  # fmt: skip
            lines.append(f"| {engine} | {reason} |" + " |" * (len(columns) - 1))
        skipped_modes = [
            r for (e, w, _m), r in QUICK_SKIPS.items() if args.quick and e == "flinklike" and w == workload
        ]
        lines += [f"| {_engine_label(Variant('flinklike', SCENARIO_PARALLELISM, 'readStream'))} | {r} |"
                  + " |" * (len(columns) - 1) for r in skipped_modes]  # fmt: skip
    lines += ["", "Scenario targets (from the runs above):", ""]
    lines += scenario_targets(scenarios, args)
    return lines


def _metrics(scenarios: list[Outcome], workload: str, engine: str, mode: str | None = None) -> dict | None:
    for o in scenarios:
        if o.workload == workload and o.variant.engine == engine and o.variant.mode == mode and o.metrics is not None:
            return o.metrics
    return None


def _verdict(args, met: bool, missed: str) -> str:
    """ "met", or how it was missed, for a run on a quiet machine; no verdict otherwise (benchmarks/quiet.py)."""
    if not args.quietness.is_measurement:
        return "no verdict (not a measurement)"
    return "met" if met else missed


def scenario_targets(scenarios: list[Outcome], args) -> list[str]:
    lines = []
    w3 = _metrics(scenarios, "W3", "flinklike")
    if w3:
        ratio = w3["aligned_over_unaligned"]
        verdict = _verdict(args, ratio >= 20, f"missed by {20 / ratio:.1f}x")
        lines.append(f"- W3 unaligned >= 20x faster than aligned under backpressure: {ratio:.1f}x — {verdict}")
        overhead = w3["overhead"]
        if not w3["checkpoints_during_run"]:
            verdict = "not measured: no checkpoint completed during the runs with checkpoints (too few records)"
        else:
            verdict = _verdict(args, overhead <= 0.10, f"missed by {overhead - 0.10:.1%} points")
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
            verdict = _verdict(
                args, ours["p99_ms"] < spark["p99_ms"], f"missed by {ours['p99_ms'] / spark['p99_ms']:.1f}x"
            )
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
