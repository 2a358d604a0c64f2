"""flinklike-spark: Apache Flink's streaming runtime model for PySpark users.

The public API mirrors PyFlink's DataStream API::

    from flinklike_spark import StreamExecutionEnvironment, KeyedProcessFunction, ValueStateDescriptor
    env = StreamExecutionEnvironment.get_execution_environment({"parallelism.default": 2})
"""

from flinklike_spark import _moved  # noqa: F401 - first: the earlier module paths import their homes
from flinklike_spark.common.time import Duration
from flinklike_spark.common.typeinfo import TypeInformation, Types
from flinklike_spark.common.types import Row, RowKind
from flinklike_spark.common.watermark_strategy import TimestampAssigner, WatermarkStrategy
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
from flinklike_spark.datastream.async_stream import AsyncDataStream, AsyncFunction
from flinklike_spark.datastream.checkpoint_config import CheckpointConfig, RuntimeExecutionMode
from flinklike_spark.datastream.functions import (
    AggregateFunction,
    AllWindowFunction,
    BroadcastProcessFunction,
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    FilterFunction,
    FlatMapFunction,
    KeyedBroadcastProcessFunction,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    KeySelector,
    MapFunction,
    ProcessAllWindowFunction,
    ProcessFunction,
    ProcessWindowFunction,
    ReduceFunction,
    RuntimeContext,
    TimeDomain,
    TimerService,
    WindowFunction,
)
from flinklike_spark.datastream.output_tag import OutputTag
from flinklike_spark.datastream.state import (
    ListState,
    ListStateDescriptor,
    MapState,
    MapStateDescriptor,
    ReducingState,
    ReducingStateDescriptor,
    ValueState,
    ValueStateDescriptor,
)
from flinklike_spark.datastream.window import Time
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
from flinklike_spark.job_client import JobClient, JobExecutionResult

__all__ = [
    "AggregateFunction",
    "AllWindowFunction",
    "AsyncDataStream",
    "AsyncFunction",
    "Boundedness",
    "BroadcastProcessFunction",
    "CheckpointConfig",
    "CheckpointingMode",
    "CoFlatMapFunction",
    "CoMapFunction",
    "CoProcessFunction",
    "Configuration",
    "ConfigurationError",
    "DataStream",
    "DataStreamSink",
    "Duration",
    "FilterFunction",
    "FlatMapFunction",
    "FlinklikeError",
    "JobCancelledError",
    "JobClient",
    "JobExecutionError",
    "JobExecutionResult",
    "KeySelector",
    "KeyedBroadcastProcessFunction",
    "KeyedCoProcessFunction",
    "KeyedProcessFunction",
    "KeyedStream",
    "ListState",
    "ListStateDescriptor",
    "MapFunction",
    "MapState",
    "MapStateDescriptor",
    "NonRecoverableError",
    "OutputTag",
    "ProcessAllWindowFunction",
    "ProcessFunction",
    "ProcessWindowFunction",
    "ReadResult",
    "ReduceFunction",
    "ReducingState",
    "ReducingStateDescriptor",
    "RemoteTaskError",
    "Row",
    "RowKind",
    "RuntimeContext",
    "RuntimeExecutionMode",
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
    "Time",
    "TimeDomain",
    "TimerService",
    "TimestampAssigner",
    "TypeInformation",
    "Types",
    "ValueState",
    "ValueStateDescriptor",
    "WatermarkStrategy",
    "WindowFunction",
    "mark_non_recoverable",
]
