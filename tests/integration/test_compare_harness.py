"""benchmarks/compare/run.py --quick end to end: every workload on this project; peers skipped.

The peers' venvs are looked up in an empty directory, so the harness skips
every peer with its reason (``--quick`` installs nothing), as on a fresh
machine, whatever this machine has cached (with this machine's peer venvs it
started five Spark and PyFlink JVMs and took 109 s of a CI run; 60 s without).
The peers' engine scripts run in the full comparison (docs/benchmarks.md), not
in the test suite. The test checks that
the harness checked and timed this project's runs (from its generator and from
the shared Parquet files), wrote the Markdown table with the sanity section and
the PNG chart, and gave every cell a number or a reason; it does not judge
the speeds, nor how long it took (benchmarks are not timed tests; only the subprocess's
timeout bounds it, so that nothing hangs). The scenario workloads W3-W5 must
have run on this project too: their tables hold its measurements (a run whose
result failed its check shows as ``failed:``, not as numbers) and the
scenario chart is written.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

REPO = Path(__file__).resolve().parents[2]


def test_quick_mode_writes_a_checked_report(tmp_path):
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "compare" / "run.py"), "--quick", "--out", str(tmp_path),
         "--venv-dir", str(tmp_path / "no-peer-venvs")],
        capture_output=True, text=True, timeout=400, cwd=str(REPO),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = (tmp_path / "benchmarks-compare.md").read_text()
    assert (tmp_path / "benchmarks-compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "2 CPUs" in report or "CPUs" in report
    assert re.search(r"Measured \d{4}-\d\d-\d\d \d\d:\d\d UTC", report)
    quiet = re.search(r"Quiet machine: .*?: (a measurement|NOT A MEASUREMENT)", report)
    assert quiet, report[:2000]
    if quiet[1] != "a measurement":  # a verdict is only given in a measurement
        assert "— met" not in report and "— missed" not in report, report
    rows = {line.split(":", 1)[0].strip("| "): line for line in report.splitlines() if re.match(r"\| W\d\w*: ", line)}
    assert sorted(rows) == ["W1", "W2", "W2v"]
    for workload, line in rows.items():
        cells = [c.strip() for c in line.strip("|").split("|")][1:]
        assert len(cells) == 5, line
        for cell in cells[:2]:  # flinklike-spark from its generator and from the shared Parquet files
            m = re.match(r"([\d,]+) busy, ([\d,]+) wall \(p=1; [\d,]+ rec, 1/1 ok, load [\d.]+\)", cell)
            assert m, f"{workload}: {cell!r}"
            busy, wall = (int(v.replace(",", "")) for v in m.groups())
            assert busy >= wall, f"{workload}: busy time is part of the wall time: {cell!r}"
        for cell in cells[2:]:  # the peers: a reason
            assert re.match(r"not run: \w|skipped: not installed", cell), f"{workload}: {cell!r}"
    assert "W2 >= 5x Bytewax" in report and "W2v >= Spark's native JVM count" in report
    assert "both reading the same Parquet files" in report
    assert "The same ratios wall against wall" in report
    # The sanity column: every run of this project has its sweep, published figure and share of its best
    sanity = report.split("## Every setting tried", 1)[1].split("## Scenarios", 1)[0]
    for workload in ("W1", "W2", "W2v"):
        for engine in ("flinklike", "flinklike \\(Parquet\\)"):
            assert re.search(rf"\| {workload} \| {engine} \| p=1: [\d,]+ \(1, [\d.]+\) \| [\d,]+ \| [\d,]+ \| — \| 100% \|",
                             sanity), (workload, engine, sanity)  # fmt: skip
    assert (tmp_path / "benchmarks-compare-scenarios.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ours = {
        workload: re.search(rf"### {workload}:.*?\n\| flinklike \| ([^\n]*)", report, re.S)
        for workload in ("W3", "W4", "W5")
    }
    assert all(ours.values()), report
    # W3: aligned and unaligned medians from at least 2 checkpoints each, the ratio, both throughputs
    assert re.match(r"[\d,]+ \([2-9]\d* cp, max [\d,]+\) \| [\d,]+ \([2-9]\d* cp, max [\d,]+\) \| [\d.]+x \| [\d,]+ \| "
                    r"[\d,]+ \([\d.]+ cp per run\) \| -?[\d.]+% \|", ours["W3"][1]), ours["W3"][1]  # fmt: skip
    # W4: a time to output again, one restart, and (checked by the harness) exactly once
    assert re.match(r"\d+\.\d\d \| \d+\.\d\d \| 1 \| 8,000 \| SIGKILL of a TaskExecutor", ours["W4"][1]), ours["W4"][1]
    # W5: p50 <= p99 at the fixed rate, over a measured share of the records
    w5 = re.match(r"1,000 \| ([\d,]+) \| ([\d,]+) \| [\d,]+ \| ([\d,]+) \|", ours["W5"][1])
    assert w5, ours["W5"][1]
    p50, p99, measured = (int(g.replace(",", "")) for g in w5.groups())
    assert p50 <= p99 and measured > 0
    assert "W3 unaligned >= 20x faster than aligned" in report and "W3 overhead of 1 s checkpoints" in report
