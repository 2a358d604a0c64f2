"""A real local Spark session with Delta Lake for the ``spark``-marked tests (session-scoped)."""

from __future__ import annotations

import pytest

# The delta-spark 4.4.1 wheel asks for the 4.4.1 jar, which Maven Central does not
# serve (checked 2026-11-23); 4.4.0 is the newest jar built for Spark 4.2.
DELTA_SPARK_PACKAGE = "io.delta:delta-spark_4.2_2.13:4.4.0"


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("flinklike-spark-tests")
        .config("spark.jars.packages", DELTA_SPARK_PACKAGE)
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
