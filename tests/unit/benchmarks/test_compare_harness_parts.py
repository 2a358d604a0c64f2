"""benchmarks/compare: the expected results and the summary, without running any engine."""

from __future__ import annotations

import collections
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks" / "compare"))

import report  # noqa: E402
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


def test_a_peers_sanity_is_its_published_busy_rate_over_its_standalone_run_which_is_no_round():
    best_setting = run.Variant("spark", 2, batches=1, shuffle_partitions=8)
    rounds = [run.Outcome(best_setting, "W2v", 1000, rate=r, seconds=1000 / r, wall_seconds=1000 / r * 2)
              for r in (100.0, 120.0, 110.0)]  # fmt: skip
    standalone = run.Outcome(best_setting, "W2v", 2000, rate=200.0, seconds=10.0, wall_seconds=12.0, standalone=True)
    entry = run.summarize([*rounds, standalone])[("W2v", "spark")]
    assert entry["rate"] == 110.0 and entry["ok"] == 3  # the standalone run is not a round
    assert math.isclose(entry["wall_rate"], 55.0)  # the wall rate of the same runs, by their wall time
    assert entry["standalone"] is standalone and math.isclose(entry["sanity"], 110.0 / 200.0)
    assert entry["variant"] == "p=2, whole input in 1 micro-batch, 8 shuffle partitions"
    assert report.best_variants([standalone]) == {}
    # this engine has no standalone run: its sanity is against its best single run
    ours = run.Variant("flinklike", 2)
    mine = run.summarize([run.Outcome(ours, "W2", 10, rate=r, seconds=10 / r, wall_seconds=1.0) for r in (8.0, 10.0)])
    assert math.isclose(mine[("W2", "flinklike")]["sanity"], 9.0 / 10.0)


def test_spark_is_swept_over_micro_batch_sizes_and_shuffle_partitions():
    swept = run.variants("spark", "W2v", [1, 2], ["thread"], quick=False)
    assert {v.batches for v in swept} == {1, 4} and {v.parallelism for v in swept} == {1, 2}
    assert {v.shuffle_partitions for v in swept if v.parallelism == 2} == {2, 8}
    argv, _env = run.command(swept[-1], "W2v", 1000, {"spark": Path(sys.executable)}, input_dir=Path("/in"))
    assert argv[argv.index("--shuffle-partitions") + 1] == str(swept[-1].shuffle_partitions)


def test_unknown_engine_or_workload_is_refused_naming_the_valid_ones(capsys):
    with pytest.raises(SystemExit):
        run.main(["--engines", "flink"])
    assert "unknown engine 'flink'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        run.main(["--workloads", "W9"])
    assert "unknown workload 'W9'" in capsys.readouterr().err


def test_exactly_once_counts_lost_and_duplicated_records_per_key():
    perfect = [(key, seq) for key in range(3) for seq in range(4)]
    assert workloads.exactly_once(perfect, 3, 4) == workloads.expected("W4", 12, 3)
    assert workloads.exactly_once(reversed(perfect), 3, 4) == {"keys": 3, "lost": 0, "duplicated": 0}
    # key 1 loses seq 2, key 2 gets seq 0 twice and seq 3 three times; rows beyond the range are ignored
    broken = [p for p in perfect if p != (1, 2)] + [(2, 0), (2, 3), (2, 3), (0, 4), (0, 9)]
    assert workloads.exactly_once(broken, 3, 4) == {
        "keys": 3, "lost": 1, "duplicated": 3,
        "per_key": {"1": {"lost": 1, "duplicated": 0}, "2": {"lost": 0, "duplicated": 3}},
    }  # fmt: skip
    # a key with no output at all has lost every record
    assert workloads.exactly_once(perfect[:8], 3, 4)["lost"] == 4


def test_percentiles_are_nearest_rank_in_milliseconds():
    latencies = [i / 1000 for i in range(1, 101)]  # 1 .. 100 ms
    result = workloads.percentiles(latencies[::-1])
    assert math.isclose(result["p50_ms"], 50) and math.isclose(result["p99_ms"], 99)
    assert math.isclose(result["max_ms"], 100)
    assert workloads.percentiles([]) == {"p50_ms": None, "p99_ms": None, "max_ms": None}


def test_latency_leaves_out_records_created_before_the_first_output_plus_the_warm_up():
    # created at t = 0..9 s; the first record arrives after 3 s, the others 0.1 s after their creation, so the
    # first output reaches the sink at t = 1.1 s (the record created at 1 s)
    samples = [(0.0, 3.0)] + [(float(t), 0.1) for t in range(1, 10)]
    metrics = workloads.latency_metrics(samples, rate=1.0)
    kept = [t for t in range(1, 10) if t >= 1.1 + workloads.LATENCY_WARMUP_S]
    assert kept == [4, 5, 6, 7, 8, 9]
    assert metrics["measured"] == len(kept) and math.isclose(metrics["p99_ms"], 100)


def test_scenarios_report_every_engine_with_numbers_or_a_reason(tmp_path):
    ours = run.Variant("flinklike", 2)
    scenarios = [
        run.Outcome(ours, "W4", 100, metrics={"recovery_s": 1.5, "detected_s": 0.03, "restarts": 1, "rows": 100,
                                              "measures": "SIGKILL"}),
        run.Outcome(run.Variant("spark", 2), "W4", 100, error="wrong result {'lost': 3}: its time does not count"),
    ]  # fmt: skip
    args = type("Args", (), {"engines": list(run.ENGINES), "skipped": {}, "quick": False})()
    lines = "\n".join(report.scenario_report(scenarios, ["W4"], args))
    assert "| flinklike | 1.50 | 0.03 | 1 | 100 | SIGKILL |" in lines
    assert "| spark | failed: wrong result {'lost': 3}" in lines
    assert "| pyflink | — |" in lines  # neither run nor refused: the harness had no result for it
    assert "W4 against Spark: not measured in this run" in lines


def test_w4_takes_the_commit_time_of_the_first_output_processed_after_the_kill_also_the_jobs_last(tmp_path):
    """W4's "output flowing again": read from the Delta log after the job, so a last commit counts too
    (a poller stopped when the job ended missed it: ci28)."""
    import time

    import pyarrow as pa
    import scenarios_flinklike
    from deltalake import DeltaTable, write_deltalake

    path = str(tmp_path / "out")

    def commit(processed: float) -> None:
        write_deltalake(path, pa.table({"key": [1], "seq": [0], "processed": [processed]}), mode="append")

    commit(100.0)  # version 0: before the kill
    killed_at = time.time()
    commit(killed_at - 5)  # version 1: committed after the kill, processed before it (a checkpoint's tail)
    assert scenarios_flinklike.first_commit_after(path, 0, killed_at) is None
    commit(killed_at + 1)  # version 2: the job's last commit, processed after the kill
    committed = {entry["version"]: entry["timestamp"] / 1000 for entry in DeltaTable(path).history()}
    assert scenarios_flinklike.first_commit_after(path, 0, killed_at) == committed[2]
    assert scenarios_flinklike.first_commit_after(path, 2, killed_at) is None
