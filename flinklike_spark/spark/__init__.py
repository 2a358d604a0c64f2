"""PySpark integration: the ``flinklike`` data source, a session with Delta, and helpers.

The only package that imports pyspark. Names are imported lazily, so the
engine's runner process (``flinklike_spark.spark.job_runner``) starts without
importing pyspark.

Example::

    from flinklike_spark.spark import session
    spark = session()
    rows = (spark.readStream.format("flinklike")
            .option("pipeline", "my_jobs:fraud")
            .option("execution.checkpointing.dir", "/tmp/fraud")
            .load())
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "DELTA_SPARK_PACKAGE",
    "FlinklikeDataSource",
    "SparkSetupError",
    "channel_state",
    "checkpoint_history",
    "feed_job",
    "idempotent_delta_writer",
    "job_record",
    "keyed_state",
    "operator_state_as_of",
    "register",
    "register_state_view",
    "resolved_operator_state",
    "session",
    "transform",
]

_HOMES = {
    "DELTA_SPARK_PACKAGE": "spark_session",
    "SparkSetupError": "spark_session",
    "register": "spark_session",
    "session": "spark_session",
    "FlinklikeDataSource": "source",
    "feed_job": "foreach_batch",
    "idempotent_delta_writer": "foreach_batch",
    "channel_state": "inspection",
    "checkpoint_history": "inspection",
    "keyed_state": "inspection",
    "operator_state_as_of": "inspection",
    "job_record": "inspection",
    "register_state_view": "state_views",
    "resolved_operator_state": "state_views",
    "transform": "composition",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
