"""PyFlink's ``pyflink.datastream``: the DataStream API (``from flinklike_spark.datastream import ...``).

One implementation, re-exported under PyFlink's module paths: the environment
(:mod:`.stream_execution_environment`), the streams (:mod:`.data_stream`), and
PyFlink's submodules ``window``, ``functions`` and ``state``.
"""

from flinklike_spark.datastream.data_stream import DataStream, DataStreamSink, KeyedStream
from flinklike_spark.datastream.stream_execution_environment import StreamExecutionEnvironment

__all__ = ["DataStream", "DataStreamSink", "KeyedStream", "StreamExecutionEnvironment"]
