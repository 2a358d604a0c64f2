"""Moved: the bridge tables live in :mod:`flinklike_spark.spark.bridge_tables`.

This module only re-exports the names user pipelines import (the README's
``from connectors.spark_bridge import SparkInputSource``); the project itself
imports :mod:`flinklike_spark.spark.bridge_tables`. It does not import pyspark.
"""

from __future__ import annotations

from flinklike_spark.spark.bridge_tables import (
    CHECKPOINT_COLUMN,
    INPUT_TABLE,
    OUTPUT_APP_ID,
    OUTPUT_TABLE,
    BridgeTable,
    SparkInputReader,
    SparkInputSource,
    SparkInputSplit,
    SparkOutputSink,
    conform_batch,
    last_commit_info,
    output_offset,
    spark_partition_of,
    stage_batches,
)

__all__ = [
    "CHECKPOINT_COLUMN",
    "INPUT_TABLE",
    "OUTPUT_APP_ID",
    "OUTPUT_TABLE",
    "BridgeTable",
    "SparkInputReader",
    "SparkInputSource",
    "SparkInputSplit",
    "SparkOutputSink",
    "conform_batch",
    "last_commit_info",
    "output_offset",
    "spark_partition_of",
    "stage_batches",
]
