"""Every public name of PyFlink's DataStream API (``pyflink_public_names.txt``: PyFlink 2.3.0's
``__all__`` of ``pyflink.datastream``, its ``functions``, ``state`` and ``window`` modules and
``pyflink.common``) is either offered under the same path with ``flinklike_spark`` for ``pyflink``,
or listed below as not supported, with the reason."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

NAMES_FILE = Path(__file__).with_name("pyflink_public_names.txt")

_BACKENDS = (
    "state backends are chosen with Flink's state.backend.type key (hashmap, rocksdb), as PyFlink 2.x "
    "configures them; the Java-backed backend objects are not offered"
)
_STORAGE = (
    "checkpoints are always Delta tables under execution.checkpointing.dir (Flink's key); there is no "
    "JobManager-memory storage and no storage object to pass"
)
_JAVA = "a wrapper of a Java class with no role in a Python runtime"

#: (PyFlink module, name) -> why it is not offered.
UNSUPPORTED: dict[tuple[str, str], str] = {
    ("pyflink.datastream", "ExternalizedCheckpointRetention"): (
        "checkpoints are never deleted on cancellation: execution.checkpointing.num-retained keeps them"
    ),
    ("pyflink.datastream", "StateBackend"): _BACKENDS,
    ("pyflink.datastream", "HashMapStateBackend"): _BACKENDS,
    ("pyflink.datastream", "EmbeddedRocksDBStateBackend"): _BACKENDS,
    ("pyflink.datastream", "CustomStateBackend"): _BACKENDS,
    ("pyflink.datastream", "PredefinedOptions"): _BACKENDS + " (RocksDB is tuned with state.backend.rocksdb.*)",
    ("pyflink.datastream", "CheckpointStorage"): _STORAGE,
    ("pyflink.datastream", "JobManagerCheckpointStorage"): _STORAGE,
    ("pyflink.datastream", "FileSystemCheckpointStorage"): _STORAGE,
    ("pyflink.datastream", "CustomCheckpointStorage"): _STORAGE,
    ("pyflink.datastream", "Partitioner"): "custom partitioning (partition_custom) is not built",
    ("pyflink.datastream.functions", "Partitioner"): "custom partitioning (partition_custom) is not built",
    ("pyflink.datastream", "SourceFunction"): "Java SourceFunctions; sources implement Source (from_source)",
    ("pyflink.datastream.functions", "SourceFunction"): "Java SourceFunctions; sources implement Source (from_source)",
    ("pyflink.datastream", "SinkFunction"): "Java SinkFunctions; sinks implement Sink (sink_to / add_sink)",
    ("pyflink.datastream.functions", "SinkFunction"): "Java SinkFunctions; sinks implement Sink (sink_to / add_sink)",
    (
        "pyflink.datastream",
        "SlotSharingGroup",
    ): "one default slot sharing group (Flink's default); no fine-grained resources",
    ("pyflink.datastream", "MemorySize"): "memory sizes are configuration strings ('128 mb'), parsed by the keys",
    ("pyflink.datastream.functions", "AsyncFunctionDescriptor"): "PyFlink's internal operator descriptor",
    ("pyflink.datastream.functions", "BaseBroadcastProcessFunction"): (
        "PyFlink's internal common base; subclass BroadcastProcessFunction or KeyedBroadcastProcessFunction"
    ),
    ("pyflink.datastream.state", "OperatorStateStore"): "operator (non-keyed) state of user functions is not offered",
    (
        "pyflink.datastream.window",
        "TimeWindowSerializer",
    ): "records travel as Arrow columns or pickles, not JVM serializers",
    (
        "pyflink.datastream.window",
        "CountWindowSerializer",
    ): "records travel as Arrow columns or pickles, not JVM serializers",
    (
        "pyflink.datastream.window",
        "GlobalWindowSerializer",
    ): "records travel as Arrow columns or pickles, not JVM serializers",
    ("pyflink.common", "ConfigOptions"): "keys are plain strings with Flink's names (ConfigOption describes them)",
    ("pyflink.common", "ExecutionConfig"): "configuration is Flink's keys (env.configure); no ExecutionConfig object",
    ("pyflink.common", "TypeSerializer"): "records travel as Arrow columns or pickles, not JVM serializers",
    ("pyflink.common", "CompletableFuture"): "JobClient's futures are concurrent.futures.Future objects",
    ("pyflink.common", "InputDependencyConstraint"): _JAVA + " (deprecated batch scheduling)",
    ("pyflink.common", "JobID"): "job ids are strings (JobClient.job_id)",
    ("pyflink.common", "JobStatus"): "JobClient.get_job_status() returns the engine's JobStatus enum (same names)",
    (
        "pyflink.common",
        "RestartStrategies",
    ): "restart strategies are Flink's restart-strategy.* keys, as in PyFlink 2.x",
    ("pyflink.common", "RestartStrategyConfiguration"): "restart strategies are Flink's restart-strategy.* keys",
    ("pyflink.common", "Instant"): "timestamps are epoch milliseconds (ints) and datetime values",
    ("pyflink.common", "AssignerWithPeriodicWatermarksWrapper"): _JAVA + " (legacy watermark assigners)",
}


def public_names() -> list[tuple[str, str]]:
    lines = [line.split() for line in NAMES_FILE.read_text().splitlines() if line and not line.startswith("#")]
    return [(module, name) for module, name in lines]


def offered(module: str, name: str) -> bool:
    ours = importlib.import_module(module.replace("pyflink", "flinklike_spark", 1))
    return hasattr(ours, name)


def test_every_pyflink_name_is_offered_or_listed_with_a_reason():
    names = public_names()
    assert len(names) > 100
    missing = [f"{m}.{n}" for m, n in names if not offered(m, n) and (m, n) not in UNSUPPORTED]
    assert not missing, f"neither offered nor listed as unsupported: {missing}"


def test_the_unsupported_list_holds_only_names_that_are_not_offered():
    names = set(public_names())
    stale = [f"{m}.{n}" for m, n in UNSUPPORTED if (m, n) not in names or offered(m, n)]
    assert not stale, f"listed as unsupported but offered, or not a PyFlink name: {stale}"
    assert all(reason.strip() for reason in UNSUPPORTED.values())


@pytest.mark.slow
def test_the_checked_in_list_is_pyflinks():
    from tests.compat.pyflink_sources import upstream_source

    upstream = []
    for module in dict.fromkeys(m for m, _ in public_names()):
        path = module.removeprefix("pyflink.").replace(".", "/")
        source = upstream_source(
            f"{path}/__init__.py" if module in ("pyflink.datastream", "pyflink.common") else f"{path}.py"
        )
        for node in ast.parse(source).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
                upstream += [(module, element.value) for element in node.value.elts]
    assert upstream == public_names()
