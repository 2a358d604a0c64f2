"""Built-in connectors: data generators, files, print, collect and Delta sinks."""

from connectors.collect import CollectSink
from connectors.datagen import SequenceSource, SequenceSplit
from connectors.delta import DeltaSink
from connectors.files import FileSink, FileSource, FileSplit
from connectors.print_sink import PrintSink

__all__ = [
    "CollectSink",
    "DeltaSink",
    "FileSink",
    "FileSource",
    "FileSplit",
    "PrintSink",
    "SequenceSource",
    "SequenceSplit",
]
