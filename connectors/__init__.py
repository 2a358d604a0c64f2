"""Built-in connectors: data generators, files, collect and Delta sinks; also listed here are the
DataStream API's own PrintSink and CollectionSource (their home is :mod:`flinklike_spark.datastream`)."""

from connectors.collect import CollectSink
from connectors.datagen import SequenceSource, SequenceSplit
from connectors.delta import DeltaSink, read_delta_table
from connectors.files import FileSink, FileSource, FileSplit
from connectors.number_sequence import NumberSequenceSource
from flinklike_spark.datastream.collection_source import CollectionSource, CollectionSplit
from flinklike_spark.datastream.print_sink import PrintSink

__all__ = [
    "CollectSink",
    "CollectionSource",
    "CollectionSplit",
    "DeltaSink",
    "FileSink",
    "FileSource",
    "FileSplit",
    "NumberSequenceSource",
    "PrintSink",
    "SequenceSource",
    "SequenceSplit",
    "read_delta_table",
]
