"""PyFlink's pyflink.common.types.
"""

from flinklike_spark.row import Row, RowKind

__all__ = [
    "Row",
    "RowKind",
]
