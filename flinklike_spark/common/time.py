"""PyFlink's pyflink.common.time.
"""

from flinklike_spark.duration import Duration
from flinklike_spark.window import Time

__all__ = [
    "Duration",
    "Time",
]
