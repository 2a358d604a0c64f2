"""Built-in connectors: data generators, files, print, collect and Delta sinks."""

from connectors.collect import CollectSink
from connectors.collection import CollectionSource, CollectionSplit
from connectors.datagen import SequenceSource, SequenceSplit
from connectors.delta import DeltaSink, read_delta_table
from connectors.files import FileSink, FileSource, FileSplit
from connectors.number_sequence import NumberSequenceSource
from connectors.print_sink import PrintSink

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
