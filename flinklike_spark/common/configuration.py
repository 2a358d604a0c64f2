"""PyFlink's pyflink.common.configuration."""

from flinklike_spark.config import Configuration

__all__ = [
    "Configuration",
]
