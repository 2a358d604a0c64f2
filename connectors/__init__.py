"""Built-in connectors: data generators, files, print and collect sinks."""

from connectors.collect import CollectSink
from connectors.datagen import SequenceSource, SequenceSplit
from connectors.files import FileSink, FileSource, FileSplit
from connectors.print_sink import PrintSink

__all__ = [
    "CollectSink",
    "FileSink",
    "FileSource",
    "FileSplit",
    "PrintSink",
    "SequenceSource",
    "SequenceSplit",
]
