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

__all__ = ["WINDOW_MS", "WORKLOADS", "expected", "per_key", "print_result"]

WINDOW_MS = 1000

#: workload -> what it measures (the docs' table header)
WORKLOADS = {
    "W1": "stateless vectorized transform (value * 3 + 1 per Arrow batch)",
    "W2": "per-record keyed count with keyed state (emits each key's count when it reaches its last record)",
    "W2v": "keyed count per 1 s tumbling event-time window with built-ins",
}


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
    raise ValueError(f"unknown workload {workload!r}; valid: {sorted(WORKLOADS)}")


def print_result(seconds: float, summary: dict, **extra) -> None:
    print("RESULT " + json.dumps({"seconds": seconds, "summary": summary, **extra}), flush=True)
