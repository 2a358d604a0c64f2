"""The workloads, their data and their expected results: shared by the harness and every engine's runner.

Plain Python with no imports beyond the standard library, so each engine's
runner imports it in its own venv. Data: ``records`` rows over ``keys`` keys,
row ``i`` is ``key = i % keys``, ``seq = i // keys``; its event time is
``seq`` ms (so a key has 1,000 rows per 1 s window).

Every runner prints one line ``RESULT {"seconds": s, "summary": {...}}``;
the harness compares the summary with :func:`expected` before the time counts.
"""

from __future__ import annotations

import json
import math
import statistics

__all__ = [
    "LATENCY_WARMUP_S",
    "SCENARIOS",
    "WINDOW_MS",
    "WORKLOADS",
    "exactly_once",
    "expected",
    "latency_metrics",
    "per_key",
    "percentiles",
    "print_result",
]

WINDOW_MS = 1000
#: W5: records created before the first output reached the sink, or within this many seconds after, are not
#: measured (start-up: a cluster's, a Spark query's first micro-batch)
LATENCY_WARMUP_S = 2.0

#: workload -> what it measures (the docs' table header)
WORKLOADS = {
    "W1": "stateless vectorized transform (value * 3 + 1 per Arrow batch)",
    "W2": "per-record keyed count with keyed state (emits each key's count when it reaches its last record)",
    "W2v": "keyed count per 1 s tumbling event-time window with built-ins",
    "W3": "checkpoints under backpressure (slow sink behind a keyed count), aligned vs unaligned; "
    "overhead of 1 s checkpoints on W2",
    "W4": "recovery of a keyed exactly-once job from a killed worker: time to output again, lost/duplicated",
    "W5": "end-to-end latency p50/p99 at a fixed input rate (creation time to sink)",
}

#: workloads that report measurements (``metrics``) rather than a rate over ``records``
SCENARIOS = ("W3", "W4", "W5")


def per_key(records: int, keys: int) -> int:
    if records % keys:
        raise ValueError(f"records ({records}) must be a multiple of keys ({keys})")
    return records // keys


def expected(workload: str, records: int, keys: int) -> dict:
    """The summary a correct run reports."""
    m = per_key(records, keys)
    if workload == "W1":
        return {"rows": records, "total": keys * (3 * m * (m - 1) // 2 + m)}
    if workload == "W2":
        return {"rows": keys, "sum": records}
    if workload == "W2v":
        return {"rows": keys * math.ceil(m / WINDOW_MS), "sum": records}
    if workload == "W3":  # W2's result, from the runs with and without checkpoints alike
        return {"rows": keys, "sum": records}
    if workload == "W4":  # exactly once: every (key, seq) in the output once
        return {"keys": keys, "lost": 0, "duplicated": 0}
    if workload == "W5":  # every (key, seq) reached the sink once
        return {"rows": records, "distinct": records}
    raise ValueError(f"unknown workload {workload!r}; valid: {sorted(WORKLOADS)}")


def percentiles(latencies_s: list[float]) -> dict:
    """p50, p99 and max of latencies given in seconds, in milliseconds (nearest-rank)."""
    if not latencies_s:
        return {"p50_ms": None, "p99_ms": None, "max_ms": None}
    ordered = sorted(latencies_s)

    def rank(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))] * 1000

    return {"p50_ms": rank(0.50), "p99_ms": rank(0.99), "max_ms": ordered[-1] * 1000}


def exactly_once(pairs, keys: int, per_key_records: int) -> dict:
    """W4's check from the output's ``(key, seq)`` pairs: lost and duplicated, counted per key and summed.

    ``{"keys": keys, "lost": 0, "duplicated": 0}`` means every ``(key, seq)``
    with ``seq < per_key_records`` is in the output exactly once; pairs beyond
    that range (an unbounded source's later rows) are ignored. ``per_key``
    lists up to five keys that were not exactly once.
    """
    by_key: dict[int, list[int]] = {}
    for key, seq in pairs:
        if 0 <= seq < per_key_records:
            by_key.setdefault(key, []).append(seq)
    lost = duplicated = 0
    worst: dict[str, dict] = {}
    for key in range(keys):
        seqs = by_key.get(key, [])
        distinct = set(seqs)
        key_lost, key_duplicated = per_key_records - len(distinct), len(seqs) - len(distinct)
        lost += key_lost
        duplicated += key_duplicated
        if (key_lost or key_duplicated) and len(worst) < 5:
            worst[str(key)] = {"lost": key_lost, "duplicated": key_duplicated}
    summary = {"keys": len(by_key), "lost": lost, "duplicated": duplicated}
    return summary | ({"per_key": worst} if worst else {})


def latency_metrics(samples: list[tuple[float, float]], rate: float) -> dict:
    """W5's metrics from ``(created, latency)`` pairs in seconds: p50/p99/max in ms of the steady state.

    Records created before the first record reached the sink plus
    LATENCY_WARMUP_S are left out (every engine alike), so start-up is not
    measured; ``measured`` says how many records remain.
    """
    if not samples:
        return {"p50_ms": None, "p99_ms": None, "max_ms": None, "rate": rate, "measured": 0}
    first_output = min(c + lat for c, lat in samples)
    kept = [lat for c, lat in samples if c >= first_output + LATENCY_WARMUP_S]
    return {**percentiles(kept), "rate": rate, "measured": len(kept)}


def micro_batch_phases(progress: list[dict]) -> dict:
    """Median milliseconds of each phase of a query's micro-batches that read rows (``durationMs`` of Spark's
    progress reports: ``latestOffset``, ``queryPlanning``, ``addBatch``, ``commitOffsets``, ...), and their count."""
    batches = [p["durationMs"] for p in progress if p.get("numInputRows")]
    phases = sorted({phase for batch in batches for phase in batch})
    medians = {phase: statistics.median(batch.get(phase, 0) for batch in batches) for phase in phases}
    return {"micro_batches": len(batches), **medians}


def print_result(seconds: float, summary: dict, **extra) -> None:
    print("RESULT " + json.dumps({"seconds": seconds, "summary": summary, **extra}), flush=True)
