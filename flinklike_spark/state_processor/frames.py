"""The data the State Processor API takes and returns: Arrow tables, and Spark DataFrames when a session is given.

Spark is optional: nothing here imports ``pyspark`` unless a Spark DataFrame or
session is passed in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from flinklike_spark.errors import StateProcessorError

__all__ = ["is_spark_dataframe", "to_arrow_table", "to_output"]


def is_spark_dataframe(data: Any) -> bool:
    """True for a ``pyspark.sql.DataFrame`` (classic or Spark Connect), without importing pyspark."""
    return any(cls.__module__.startswith("pyspark.sql") and cls.__name__ == "DataFrame" for cls in type(data).__mro__)


def to_arrow_table(data: Any, what: str) -> pa.Table:
    """``data`` as an Arrow table: a ``pyarrow.Table``/``RecordBatch``, a Spark or pandas DataFrame, or a list of dicts.

    A Spark DataFrame is collected to this process (``DataFrame.toArrow``).

    Raises:
        StateProcessorError: ``data`` is none of these, naming its type.
    """
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if is_spark_dataframe(data):
        return data.toArrow()
    if type(data).__module__.startswith("pandas") and type(data).__name__ == "DataFrame":
        return pa.Table.from_pandas(data, preserve_index=False)
    if isinstance(data, Sequence) and not isinstance(data, (str, bytes)) and all(isinstance(r, Mapping) for r in data):
        return pa.Table.from_pylist([dict(r) for r in data])
    raise StateProcessorError(
        f"{what}: cannot read state data from a {type(data).__name__}; pass a Spark DataFrame, a pyarrow.Table "
        f"or RecordBatch, a pandas DataFrame, or a list of dicts"
    )


def to_output(table: pa.Table, spark: Any) -> Any:
    """``table`` itself, or a Spark DataFrame of it when ``spark`` (a SparkSession) is given."""
    if spark is None:
        return table
    return spark.createDataFrame(table)
