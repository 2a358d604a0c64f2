"""PyFlink's pyflink.common: types, rows, watermark strategies, time and configuration (re-exported;
one implementation each).
"""

from flinklike_spark.common.serialization import Encoder
from flinklike_spark.config import ConfigOption, Configuration
from flinklike_spark.duration import Duration
from flinklike_spark.job_client import JobClient, JobExecutionResult
from flinklike_spark.row import Row, RowKind
from flinklike_spark.typeinfo import TypeInformation, Types
from flinklike_spark.watermarks import TimestampAssigner, WatermarkStrategy
from flinklike_spark.window import Time

__all__ = [
    "ConfigOption",
    "Configuration",
    "Duration",
    "Encoder",
    "JobClient",
    "JobExecutionResult",
    "Row",
    "RowKind",
    "Time",
    "TimestampAssigner",
    "TypeInformation",
    "Types",
    "WatermarkStrategy",
]
