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
from flinklike_spark.common.time import Duration
from flinklike_spark.common.typeinfo import TypeInformation, Types
from flinklike_spark.common.types import Row, RowKind
from flinklike_spark.common.watermark_strategy import TimestampAssigner, WatermarkStrategy
from flinklike_spark.config import ConfigOption, Configuration
from flinklike_spark.datastream.window import Time
from flinklike_spark.job_client import JobClient, JobExecutionResult

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
