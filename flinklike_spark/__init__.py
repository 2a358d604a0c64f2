"""flinklike-spark: Apache Flink's streaming runtime model for PySpark users.

The public API mirrors PyFlink's DataStream API::

    from flinklike_spark import StreamExecutionEnvironment, KeyedProcessFunction, ValueStateDescriptor
    env = StreamExecutionEnvironment.get_execution_environment({"parallelism.default": 2})
"""

from flinklike_spark.config import CheckpointingMode, Configuration, TaskManagerMode
from flinklike_spark.connector_api import (
    Boundedness,
    ReadResult,
    Sink,
    SinkWriter,
    SinkWriterContext,
    Source,
    SourceReader,
    SourceReaderContext,
    SourceSplit,
)
from flinklike_spark.datastream import DataStream, DataStreamSink, KeyedStream, StreamExecutionEnvironment
from flinklike_spark.errors import (
    ConfigurationError,
    FlinklikeError,
    JobCancelledError,
    JobExecutionError,
    NonRecoverableError,
    RemoteTaskError,
    SchemaMismatchError,
    mark_non_recoverable,
)
from flinklike_spark.functions import (
    FilterFunction,
    FlatMapFunction,
    KeyedProcessFunction,
    MapFunction,
    ProcessFunction,
    RuntimeContext,
    TimeDomain,
    TimerService,
)
from flinklike_spark.job_client import JobClient, JobExecutionResult
from flinklike_spark.state import (
    ListState,
    ListStateDescriptor,
    MapState,
    MapStateDescriptor,
    ReducingState,
    ReducingStateDescriptor,
    ValueState,
    ValueStateDescriptor,
)
from flinklike_spark.watermarks import WatermarkStrategy

__all__ = [
    "Boundedness",
    "CheckpointingMode",
    "Configuration",
    "ConfigurationError",
    "DataStream",
    "DataStreamSink",
    "FilterFunction",
    "FlatMapFunction",
    "FlinklikeError",
    "JobCancelledError",
    "JobClient",
    "JobExecutionError",
    "JobExecutionResult",
    "KeyedProcessFunction",
    "KeyedStream",
    "ListState",
    "ListStateDescriptor",
    "MapFunction",
    "MapState",
    "MapStateDescriptor",
    "NonRecoverableError",
    "ProcessFunction",
    "ReadResult",
    "ReducingState",
    "ReducingStateDescriptor",
    "RemoteTaskError",
    "RuntimeContext",
    "SchemaMismatchError",
    "Sink",
    "SinkWriter",
    "SinkWriterContext",
    "Source",
    "SourceReader",
    "SourceReaderContext",
    "SourceSplit",
    "StreamExecutionEnvironment",
    "TaskManagerMode",
    "TimeDomain",
    "TimerService",
    "ValueState",
    "ValueStateDescriptor",
    "WatermarkStrategy",
    "mark_non_recoverable",
]
