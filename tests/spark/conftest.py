"""A real local Spark session with Delta Lake for the ``spark``-marked tests (one per test session).

Built with :func:`flinklike_spark.spark.session`, as a user builds it: Delta
configured from the pinned jar, the ``flinklike`` data source registered,
``PYSPARK_PYTHON`` set to this interpreter. Spark takes 20 s or more to start,
so every Spark test module shares this one session.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    from flinklike_spark.spark import session

    spark = session("flinklike-spark-tests", config={"spark.ui.enabled": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    yield spark
    for query in spark.streams.active:
        query.stop()
    spark.stop()
