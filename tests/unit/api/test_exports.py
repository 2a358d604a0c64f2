"""Every public module says what it exports, once; the package re-exports public names only (as trio checks).

Public modules are those of ``flinklike_spark`` outside ``_runtime`` and of
``connectors`` and ``checkpointing``. Their ``__all__`` must be free of
duplicates and name only attributes that exist (ruff's RUF022 keeps it sorted); ``flinklike_spark`` itself
re-exports no private name and no name it does not list.
"""

from __future__ import annotations

import importlib
import pkgutil
import types

import pytest

pytestmark = pytest.mark.timeout(60)

_OPTIONAL = {"flinklike_spark.spark"}  # needs pyspark (the [spark] extra)


def public_modules() -> list[str]:
    names = []
    for package in ("flinklike_spark", "connectors", "checkpointing"):
        module = importlib.import_module(package)
        names.append(package)
        for info in pkgutil.walk_packages(module.__path__, f"{package}."):
            if "._" in info.name or info.name.endswith("__main__"):
                continue
            names.append(info.name)
    return sorted(names)


@pytest.mark.parametrize("name", public_modules())
def test_all_is_unique_and_exists(name):  # sorted: ruff's RUF022 checks that in CI
    if any(name == opt or name.startswith(opt + ".") for opt in _OPTIONAL):
        pytest.importorskip("pyspark", reason="flinklike_spark.spark needs pyspark")
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{name} has no __all__"
    assert len(set(exported)) == len(exported), f"{name}.__all__ names something twice"
    missing = [n for n in exported if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names what it does not define: {missing}"
    private = [n for n in exported if n.startswith("_")]
    assert not private, f"{name}.__all__ exports private names {private}"


def test_the_package_exports_every_public_name_it_holds_and_nothing_else():
    import flinklike_spark

    public = {
        n for n, v in vars(flinklike_spark).items()
        if not n.startswith("_") and not isinstance(v, types.ModuleType) and n != "annotations"
    }  # fmt: skip
    assert public == set(flinklike_spark.__all__), (
        f"defined but not in __all__: {sorted(public - set(flinklike_spark.__all__))}; "
        f"in __all__ but not defined: {sorted(set(flinklike_spark.__all__) - public)}"
    )


@pytest.mark.parametrize("name", public_modules())
def test_no_exported_name_is_shadowed_by_a_submodule(name):
    """``from package import x`` must give what ``__all__`` promises: a package whose ``x`` is also a
    submodule hands out the module once anything imported it (``flinklike_spark.spark.job_record`` was)."""
    if any(name == opt or name.startswith(opt + ".") for opt in _OPTIONAL):
        pytest.importorskip("pyspark", reason="flinklike_spark.spark needs pyspark")
    module = importlib.import_module(name)
    if not hasattr(module, "__path__"):
        return
    submodules = {info.name for info in pkgutil.iter_modules(module.__path__)}
    clashing = sorted(set(getattr(module, "__all__", ())) & submodules)
    assert not clashing, f"{name}.__all__ names {clashing}, which are also submodules of {name}"


# The module paths of earlier versions (before the DataStream API and Kafka had one home each) and names
# each exported then; every one must still import, as the same object as at its home.
EARLIER_PATHS = {
    "flinklike_spark.functions": ["KeyedProcessFunction", "MapFunction", "RuntimeContext", "TimeDomain"],
    "flinklike_spark.state": ["ValueStateDescriptor", "ListState", "StateTtlConfig"],
    "flinklike_spark.window": ["TumblingEventTimeWindows", "Time", "CountEvictor", "Trigger"],
    "flinklike_spark.window.assigners": ["TumblingEventTimeWindows"],
    "flinklike_spark.window.triggers": ["EventTimeTrigger"],
    "flinklike_spark.window.windows": ["TimeWindow"],
    "flinklike_spark.evictors": ["TimeEvictor"],
    "flinklike_spark.connected_streams": ["ConnectedStreams", "BroadcastStream"],
    "flinklike_spark.windowed_stream": ["WindowedStream"],
    "flinklike_spark.async_stream": ["AsyncDataStream", "AsyncFunction", "FixedDelayRetryStrategy"],
    "flinklike_spark.async_retry": ["RetryingAsyncFunction", "NO_RETRY_STRATEGY", "AsyncRetryStrategy"],
    "flinklike_spark.output_tag": ["OutputTag"],
    "flinklike_spark.aggregations": [],
    "flinklike_spark.execution_options": ["CheckpointConfig", "RuntimeExecutionMode"],
    "flinklike_spark.collection_source": ["CollectionSource"],
    "flinklike_spark.row": ["Row", "RowKind"],
    "flinklike_spark.typeinfo": ["Types", "TypeInformation"],
    "flinklike_spark.watermarks": ["WatermarkStrategy", "TimestampAssigner"],
    "flinklike_spark.duration": ["Duration"],
    "flinklike_spark.datastream.functions": ["AsyncFunction", "AsyncRetryStrategy", "AsyncRetryPredicate"],
    "flinklike_spark.datastream.state": ["BroadcastState", "ReadOnlyBroadcastState", "ValueStateDescriptor"],
    "flinklike_spark.datastream.window": ["TumblingEventTimeWindows", "CountEvictor"],
    "flinklike_spark.datastream.async_retry_strategies": ["FixedDelayRetryStrategy", "NO_RETRY_STRATEGY"],
    "flinklike_spark.common.time": ["Duration", "Time"],
    "flinklike_spark.datastream.connectors.kafka": [
        "KafkaSource",
        "KafkaSink",
        "LocalKafkaBroker",
        "DeliveryGuarantee",
    ],
    "flinklike_spark.datastream.connectors.kafka.source": ["KafkaSource", "KafkaSourceBuilder"],
    "flinklike_spark.datastream.connectors.kafka.sink": ["KafkaSink"],
    "flinklike_spark.datastream.connectors.kafka.local_broker": ["LocalKafkaBroker", "LocalKafkaBrokerConfig"],
    "flinklike_spark.datastream.connectors.kafka.offsets": ["KafkaOffsetsInitializer"],
    "flinklike_spark.datastream.connectors.file_system": ["FileSource", "FileSink", "StreamFormat", "RollingPolicy"],
    "connectors.collection": ["CollectionSource", "CollectionSplit", "CollectionReader"],
    "connectors.spark_bridge": ["SparkInputSource", "SparkOutputSink", "BridgeTable", "INPUT_TABLE"],
    "connectors.print_sink": ["PrintSink"],
    "connectors.collect_stream": ["CollectIterator", "CheckpointedCollectSink", "StreamingCollectSink"],
}


@pytest.mark.parametrize("path", sorted(EARLIER_PATHS))
def test_earlier_module_paths_still_import_their_homes(path):
    if "kafka" in path:
        pytest.importorskip("confluent_kafka", reason="the Kafka connector needs the [kafka] extra")
    module = importlib.import_module(path)
    for name in EARLIER_PATHS[path]:
        value = getattr(module, name)
        home = importlib.import_module(getattr(value, "__module__", module.__name__))
        assert getattr(home, name, value) is value, f"{path}.{name} is not the object at its home"


def test_the_kafka_face_names_every_public_name_of_the_connector():
    pytest.importorskip("confluent_kafka", reason="the Kafka connector needs the [kafka] extra")
    import connectors.kafka
    import flinklike_spark.datastream.connectors.kafka as face

    assert set(connectors.kafka.__all__) <= set(face.__all__)
    assert all(getattr(face, n) is getattr(connectors.kafka, n) for n in connectors.kafka.__all__)
