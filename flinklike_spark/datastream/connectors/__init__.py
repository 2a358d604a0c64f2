"""PyFlink's ``pyflink.datastream.connectors``: the file system connector here, Kafka in
``connectors.kafka`` (Pulsar and Elasticsearch are not offered: read them with Spark and feed the
engine through ``writeStream``)."""

from flinklike_spark.datastream.connectors.base import DeliveryGuarantee
from flinklike_spark.datastream.connectors.file_system import (
    FileSink,
    FileSource,
    OutputFileConfig,
    RollingPolicy,
    StreamFormat,
)

__all__ = ["DeliveryGuarantee", "FileSink", "FileSource", "OutputFileConfig", "RollingPolicy", "StreamFormat"]
