"""PyFlink's module paths re-export the one implementation: replacing an import's ``pyflink``
prefix with ``flinklike_spark`` is enough (``pyflink.datastream.window`` -> ``flinklike_spark.datastream.window``)."""

from __future__ import annotations

import importlib

import pytest

pytestmark = pytest.mark.timeout(60)

# PyFlink's module paths (now the homes of their names) and a module that re-exports those names: the
# package's public API (one object each, whichever path a program imports).
PATHS = {
    "flinklike_spark.datastream.functions": "flinklike_spark",
    "flinklike_spark.datastream.state": "flinklike_spark",
    "flinklike_spark.datastream.window": "flinklike_spark",
    "flinklike_spark.common.typeinfo": "flinklike_spark",
    "flinklike_spark.common.types": "flinklike_spark",
    "flinklike_spark.common.watermark_strategy": "flinklike_spark",
    "flinklike_spark.common.time": "flinklike_spark",
    "flinklike_spark.common.configuration": "flinklike_spark.config",
    "flinklike_spark.datastream.connectors": "flinklike_spark.datastream.connectors.base",
}


@pytest.mark.parametrize(("path", "implementation"), sorted(PATHS.items()))
def test_a_pyflink_path_exports_the_implementations_objects(path, implementation):
    module, impl = importlib.import_module(path), importlib.import_module(implementation)
    shared = [name for name in module.__all__ if hasattr(impl, name)]
    assert shared and all(getattr(module, name) is getattr(impl, name) for name in shared)


def test_every_name_of_the_datastream_package_is_the_packages_own_object():
    import flinklike_spark
    import flinklike_spark.datastream as datastream

    shared = [n for n in datastream.__all__ if hasattr(flinklike_spark, n)]
    assert shared and all(getattr(datastream, n) is getattr(flinklike_spark, n) for n in shared)


def test_a_pyflink_program_with_only_its_import_prefix_changed_translates():
    from flinklike_spark.common import Duration, TimestampAssigner, Types, WatermarkStrategy
    from flinklike_spark.datastream import StreamExecutionEnvironment
    from flinklike_spark.datastream.functions import ProcessWindowFunction
    from flinklike_spark.datastream.window import TimeWindow, TumblingEventTimeWindows

    class CountPerWindow(ProcessWindowFunction[tuple, tuple, str, TimeWindow]):
        def process(self, key, context: ProcessWindowFunction.Context[TimeWindow], elements):
            yield key, context.window().start, len(list(elements))

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)

    class SecondField(TimestampAssigner):
        def extract_timestamp(self, value, record_timestamp):
            return value[1]

    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_seconds(1)).with_timestamp_assigner(
        SecondField()
    )
    data = env.from_collection([("a", 1000), ("b", 2000)], type_info=Types.TUPLE([Types.STRING(), Types.LONG()]))
    (data.assign_timestamps_and_watermarks(strategy)
         .key_by(lambda value: value[0], key_type=Types.STRING())
         .window(TumblingEventTimeWindows.of(Duration.of_seconds(5)))
         .process(CountPerWindow(), Types.TUPLE([Types.STRING(), Types.LONG(), Types.INT()]))
         .print())  # fmt: skip
    plan = env.get_execution_plan()
    assert "Window" in plan and "Sink" in plan
