"""CollectionSource: in-memory rows as a bounded source (``env.from_collection`` builds one).

The implementation lives in :mod:`flinklike_spark.datastream.collection_source` (the core API needs it
without depending on ``connectors``); it is listed here with the other connectors.
"""

from flinklike_spark.datastream.collection_source import CollectionReader, CollectionSource, CollectionSplit

__all__ = ["CollectionReader", "CollectionSource", "CollectionSplit"]
