"""The W5 job as a ``spark.readStream.format("flinklike")`` pipeline (``latency_pipelines:latency_job``).

Spark's Python workers and the engine's runner import this module by name
(the harness puts this directory on ``PYTHONPATH``). The pipeline option
names a function without arguments, so the sizes come from the environment
variable ``COMPARE_W5`` = ``records,keys,rate`` that the W5 runner sets before
Spark starts (Spark's workers and the runner inherit it).
"""

from __future__ import annotations

import os

from scenarios_flinklike import latency_stream

__all__ = ["latency_job"]


def latency_job(env):
    raw = os.environ.get("COMPARE_W5", "")
    try:
        records, keys, rate = raw.split(",")
        return latency_stream(env, int(records), int(keys), float(rate))
    except ValueError as exc:
        raise ValueError(f"COMPARE_W5 must be 'records,keys,rate' (e.g. '20000,10,1000'), got {raw!r}") from exc
