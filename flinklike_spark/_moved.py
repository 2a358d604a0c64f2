"""The module paths of earlier versions, still importable: each is its module's home under another name.

The DataStream API lives in :mod:`flinklike_spark.datastream` and PyFlink's
``pyflink.common`` names in :mod:`flinklike_spark.common` (their one home each);
programs, pickled functions and savepoints written against the earlier
top-level paths (``flinklike_spark.functions``, ``flinklike_spark.window.assigners``,
...) still import them. An import of an old path (or of a submodule below it)
gives the very module object of its home, so classes keep one identity and
``isinstance`` holds across both spellings. Installed when imported, which
``flinklike_spark``'s ``__init__`` does before anything else of the package.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from collections.abc import Mapping
from types import ModuleType

__all__ = ["MOVED_MODULES", "install"]

#: old module path -> its home (a package's mapping covers its submodules too).
MOVED_MODULES: Mapping[str, str] = {
    "flinklike_spark.aggregations": "flinklike_spark.datastream.aggregations",
    "flinklike_spark.async_retry": "flinklike_spark.datastream.async_stream",
    "flinklike_spark.async_stream": "flinklike_spark.datastream.async_stream",
    "flinklike_spark.collection_source": "flinklike_spark.datastream.collection_source",
    "flinklike_spark.connected_streams": "flinklike_spark.datastream.connected_streams",
    "flinklike_spark.duration": "flinklike_spark.common.time",
    "flinklike_spark.evictors": "flinklike_spark.datastream.window.evictors",
    "flinklike_spark.execution_options": "flinklike_spark.datastream.checkpoint_config",
    "flinklike_spark.functions": "flinklike_spark.datastream.functions",
    "flinklike_spark.output_tag": "flinklike_spark.datastream.output_tag",
    "flinklike_spark.row": "flinklike_spark.common.types",
    "flinklike_spark.state": "flinklike_spark.datastream.state",
    "flinklike_spark.typeinfo": "flinklike_spark.common.typeinfo",
    "flinklike_spark.watermarks": "flinklike_spark.common.watermark_strategy",
    "flinklike_spark.window": "flinklike_spark.datastream.window",
    "flinklike_spark.windowed_stream": "flinklike_spark.datastream.windowed_stream",
    # DataStream.print() and execute_and_collect() are the DataStream API's own sinks (as in Flink's core).
    "connectors.collect_stream": "flinklike_spark.datastream.collect_stream",
    "connectors.collection": "flinklike_spark.datastream.collection_source",
    "connectors.spark_bridge": "flinklike_spark.spark.bridge_tables",
    "connectors.print_sink": "flinklike_spark.datastream.print_sink",
    # The Kafka connector lives in connectors/kafka/; flinklike_spark.datastream.connectors.kafka is its face.
    **{
        f"flinklike_spark.datastream.connectors.kafka.{name}": f"connectors.kafka.{name}"
        for name in (
            "clients",
            "legacy",
            "offsets",
            "serialization",
            "sink",
            "source",
            "source_reader",
            "transaction_admin",
        )
    },  # fmt: skip
    "flinklike_spark.datastream.connectors.kafka.local_broker": "connectors.kafka.testing",
}


def home_of(name: str) -> str | None:
    """The home of the old module path ``name`` (or of a submodule below an old package path); else None."""
    if name in MOVED_MODULES:
        return MOVED_MODULES[name]
    parent, _, child = name.rpartition(".")
    while parent:
        if parent in MOVED_MODULES:
            return f"{MOVED_MODULES[parent]}.{name[len(parent) + 1 :]}"
        parent, _, _ = parent.rpartition(".")
    return None


class _Alias(importlib.abc.Loader):
    def __init__(self, home: str) -> None:
        self._home = home

    def create_module(self, spec) -> ModuleType:
        return importlib.import_module(self._home)

    def exec_module(self, module: ModuleType) -> None:
        pass  # the home ran when it was imported


class _MovedModuleFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path=None, target=None):
        home = home_of(fullname)
        if home is None or importlib.util.find_spec(home) is None:
            return None
        return importlib.util.spec_from_loader(fullname, _Alias(home))


def install() -> None:
    """Make the old paths importable (idempotent)."""
    if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _MovedModuleFinder())  # before path finders: an old file left behind loses


install()
