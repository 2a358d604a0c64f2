"""PyFlink's pyflink.common.watermark_strategy.
"""

from flinklike_spark.watermarks import TimestampAssigner, WatermarkStrategy

__all__ = [
    "TimestampAssigner",
    "WatermarkStrategy",
]
