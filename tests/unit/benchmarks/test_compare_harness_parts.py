"""benchmarks/compare: the expected results and the summary, without running any engine."""

from __future__ import annotations

import collections
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks" / "compare"))

import run  # noqa: E402
import workloads  # noqa: E402


def brute_force(workload: str, records: int, keys: int) -> dict:
    rows = [(i % keys, i // keys) for i in range(records)]  # (key, seq = event time ms)
    if workload == "W1":
        return {"rows": records, "total": sum(seq * 3 + 1 for _, seq in rows)}
    if workload == "W2":
        return {"rows": keys, "sum": records}
    panes = collections.Counter((key, seq // workloads.WINDOW_MS) for key, seq in rows)
    return {"rows": len(panes), "sum": sum(panes.values())}


@pytest.mark.parametrize("workload", ["W1", "W2", "W2v"])
@pytest.mark.parametrize(("records", "keys"), [(10_000, 10), (30_000, 7), (2_500, 1)])
def test_expected_results_match_a_brute_force_count(workload, records, keys):
    if records % keys:
        with pytest.raises(ValueError, match="multiple of keys"):
            workloads.expected(workload, records, keys)
        return
    assert workloads.expected(workload, records, keys) == brute_force(workload, records, keys)


def test_summary_takes_each_engines_best_variant_by_median_and_ignores_runs_the_budget_cut():
    fast, slow = run.Variant("spark", 2), run.Variant("spark", 1)
    outcomes = [
        run.Outcome(fast, "W2", 100, rate=10.0),
        run.Outcome(fast, "W2", 100, rate=30.0),
        run.Outcome(fast, "W2", 100, rate=20.0),
        run.Outcome(slow, "W2", 100, rate=15.0),
        run.Outcome(slow, "W2", 100, error="wrong result {...}: its time does not count"),
        run.Outcome(slow, "W2", 100, error="not run: the time budget of 10 s was spent"),
    ]
    best = run.summarize(outcomes)
    assert best[("W2", "spark")]["rate"] == 20.0 and best[("W2", "spark")]["variant"] == "p=2"
    only_slow = run.summarize(outcomes[3:])[("W2", "spark")]
    assert only_slow["rounds"] == 2 and only_slow["ok"] == 1 and only_slow["rate"] == 15.0
    assert math.isclose(run.summarize(outcomes[:1])[("W2", "spark")]["rate"], 10.0)


def test_unknown_engine_or_workload_is_refused_naming_the_valid_ones(capsys):
    with pytest.raises(SystemExit):
        run.main(["--engines", "flink"])
    assert "unknown engine 'flink'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        run.main(["--workloads", "W9"])
    assert "unknown workload 'W9'" in capsys.readouterr().err
