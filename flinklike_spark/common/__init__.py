"""PyFlink's pyflink.common: types, rows, watermark strategies, time and configuration (re-exported;
one implementation each).
"""

from flinklike_spark.common.serialization import (
    ByteArraySchema,
    DeserializationSchema,
    Encoder,
    SerializationSchema,
    SimpleStringSchema,
)
from flinklike_spark.config import ConfigOption, Configuration
from flinklike_spark.duration import Duration
from flinklike_spark.job_client import JobClient, JobExecutionResult
from flinklike_spark.row import Row, RowKind
from flinklike_spark.typeinfo import TypeInformation, Types
from flinklike_spark.watermarks import TimestampAssigner, WatermarkStrategy
from flinklike_spark.window import Time

__all__ = [
    "ByteArraySchema",
    "ConfigOption",
    "Configuration",
    "DeserializationSchema",
    "Duration",
    "Encoder",
    "JobClient",
    "JobExecutionResult",
    "Row",
    "RowKind",
    "SerializationSchema",
    "SimpleStringSchema",
    "Time",
    "TimestampAssigner",
    "TypeInformation",
    "Types",
    "WatermarkStrategy",
]
