"""``StreamExecutionEnvironment``: the entry point of a program (PyFlink's ``stream_execution_environment``).

It records the program's transformations; ``execute`` translates them into a
JobGraph (:mod:`flinklike_spark._runtime.graph.translation`) and runs it on the
cluster that ``execution.target`` selects (:mod:`flinklike_spark._runtime.cluster.targets`).
"""

from __future__ import annotations

import itertools
import logging
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa

from flinklike_spark._runtime.cluster.targets import execute_job_graph
from flinklike_spark._runtime.graph.job_graph import JobGraph
from flinklike_spark._runtime.graph.translation import (
    JobGraphBuilder,
    Transformation,
    execution_plan,
    upstream_closure,
)
from flinklike_spark._runtime.operators.operator_spec import OperatorKind
from flinklike_spark.common.watermark_strategy import WatermarkStrategy
from flinklike_spark.config import Configuration
from flinklike_spark.connector_api import Boundedness, Source
from flinklike_spark.datastream.data_stream import DataStream
from flinklike_spark.errors import ConfigurationError
from flinklike_spark.global_configuration import load_configuration
from flinklike_spark.storage import UsesStorage

_log = logging.getLogger(__name__)

__all__ = ["StreamExecutionEnvironment"]


class StreamExecutionEnvironment:
    """Entry point of a streaming program.

    Args:
        config: Flink configuration keys (see :class:`~flinklike_spark.config.Configuration`),
            over the values of ``$FLINK_CONF_DIR/config.yaml`` if that variable is set
            (:mod:`flinklike_spark.global_configuration`).

    Attributes:
        context_job_listeners: callables invoked with every JobClient this process
            submits (Flink's context environment: the CLI uses it to show progress).
        context_configuration: configuration values of the context (``flinklike run
            --target spark`` puts ``execution.target`` here); applied at ``execute``
            to every key the program did not set itself.
    """

    context_job_listeners: list[Callable[[Any], None]] = []
    context_configuration: dict[str, Any] = {}

    def __init__(self, config: Configuration | Mapping[str, Any] | None = None) -> None:
        # $FLINK_CONF_DIR/config.yaml first; the program's values override it
        self._config = Configuration({**load_configuration(), **(config or {})})
        self._transformations: list[Transformation] = []
        self._ids = itertools.count()
        self._chaining = True
        self._executed_upto = 0  # transformations before this index belong to jobs already executed

    @staticmethod
    def get_execution_environment(
        config: Configuration | Mapping[str, Any] | None = None,
    ) -> StreamExecutionEnvironment:
        return StreamExecutionEnvironment(config)

    @property
    def config(self) -> Configuration:
        return self._config

    def configure(self, values: Mapping[str, Any]) -> StreamExecutionEnvironment:
        """Add or replace configuration values (validated now)."""
        self._config = self._config.with_values(values)
        return self

    def set_parallelism(self, parallelism: int) -> StreamExecutionEnvironment:
        self._config = self._config.with_values({"parallelism.default": parallelism})
        return self

    def get_parallelism(self) -> int:
        return self._config.pipeline.parallelism

    def add_jars(self, *jars_path: str) -> None:
        """PyFlink's ``add_jars``: accepted and ignored. Connectors here are Python (the Kafka connector runs on
        librdkafka), so no Java connector jar is needed; each call is logged at INFO naming the jars."""
        _log.info("add_jars(%s): not needed, flinklike-spark's connectors need no jars; ignored", ", ".join(jars_path))

    def add_classpaths(self, *classpaths: str) -> None:
        """PyFlink's ``add_classpaths``: accepted and ignored, like :meth:`add_jars`."""
        _log.info("add_classpaths(%s): not needed, flinklike-spark runs no JVM; ignored", ", ".join(classpaths))

    def set_max_parallelism(self, max_parallelism: int) -> StreamExecutionEnvironment:
        self._config = self._config.with_values({"pipeline.max-parallelism": max_parallelism})
        return self

    # -- PyFlink's checkpoint and runtime-mode setters (views over configuration keys) ------------

    def enable_checkpointing(self, interval: int | Any, mode: Any = None) -> StreamExecutionEnvironment:
        """Checkpoint every ``interval`` (ms or timedelta); ``mode`` a CheckpointingMode (exactly-once default)."""
        values: dict[str, Any] = {"execution.checkpointing.interval": interval}
        if mode is not None:
            values["execution.checkpointing.mode"] = mode
        return self.configure(values)

    def get_checkpoint_config(self):
        """A CheckpointConfig reading and writing this environment's ``execution.checkpointing.*`` keys."""
        from flinklike_spark.datastream.checkpoint_config import CheckpointConfig

        return CheckpointConfig(self)

    def get_checkpoint_interval(self) -> int:
        return self.get_checkpoint_config().get_checkpoint_interval()

    def set_runtime_mode(self, execution_mode: Any) -> StreamExecutionEnvironment:
        """STREAMING or AUTOMATIC; BATCH raises a ConfigurationError naming what is supported."""
        from flinklike_spark.datastream.checkpoint_config import runtime_mode_value

        return self.configure({"execution.runtime-mode": runtime_mode_value(execution_mode)})

    def disable_operator_chaining(self) -> StreamExecutionEnvironment:
        self._chaining = False
        return self

    def is_chaining_enabled(self) -> bool:
        return self._chaining

    def get_max_parallelism(self) -> int:
        """``pipeline.max-parallelism`` if set, else -1 (as in Flink: the job then uses the key's default)."""
        return self.config.pipeline.max_parallelism if "pipeline.max-parallelism" in self.config else -1

    def get_checkpointing_mode(self):
        """The CheckpointingMode (``execution.checkpointing.mode``)."""
        return self.get_checkpoint_config().get_checkpointing_mode()

    def add_python_file(self, file_path: str) -> None:
        """Make a Python file, or a directory of modules, importable by the job's functions (PyFlink's).

        A ``.py`` file's directory, or the directory itself, goes first on
        ``sys.path`` of this process, which the local cluster's TaskExecutors
        inherit; it is also recorded under Flink's key ``python.files``. On
        Spark executors ship the file with Spark (``spark-submit --py-files``).

        Raises:
            ConfigurationError: the path does not exist.
        """
        path = os.path.abspath(os.fspath(file_path))
        if not os.path.exists(path):
            raise ConfigurationError(f"add_python_file: {file_path!r} does not exist (give a .py file or a directory)")
        directory = path if os.path.isdir(path) else os.path.dirname(path)
        if directory not in sys.path:
            sys.path.insert(0, directory)
        files = [f for f in str(self.config.get("python.files") or "").split(",") if f]
        if path not in files:
            self.configure({"python.files": ",".join([*files, path])})

    def get_execution_plan(self) -> str:
        """The job that ``execute()`` would run, as JSON in Flink's execution-plan format (see
        :func:`~flinklike_spark._runtime.graph.translation.execution_plan`)."""
        return execution_plan(self._pending_transformations(), self.config.pipeline.parallelism)

    # -- transformations (Flink's StreamExecutionEnvironment#addOperator / getTransformations) --------

    def add_transformation(self, **fields: Any) -> Transformation:
        """Record one more operation of the program and return it (the stream API's building block).

        ``fields`` are those of :class:`~flinklike_spark._runtime.graph.translation.Transformation`
        other than ``id``, which is assigned here in definition order.
        """
        transformation = Transformation(id=next(self._ids), **fields)
        self._transformations.append(transformation)
        return transformation

    @property
    def transformations(self) -> tuple[Transformation, ...]:
        """Every transformation recorded so far, in definition order (also those of jobs already executed)."""
        return tuple(self._transformations)

    def from_source(
        self,
        source: Source,
        watermark_strategy: WatermarkStrategy | None = None,
        source_name: str | None = None,
        type_info: Any = None,
        *,
        name: str | None = None,
    ) -> DataStream:
        """A stream reading ``source``; ``watermark_strategy`` gives event time.

        ``type_info`` (PyFlink's) may restate the source's schema; one that differs is an error."""
        if not isinstance(source, Source):
            raise TypeError(f"from_source expects a flinklike_spark Source, got {type(source).__name__}")
        if isinstance(source, UsesStorage):  # its schema may be read from storage right away
            source = source.with_storage(self._config.storage)
        if type_info is not None:
            from flinklike_spark.common.typeinfo import to_arrow_schema

            declared = to_arrow_schema(type_info)
            if not declared.remove_metadata().equals(source.output_schema().remove_metadata()):
                raise ConfigurationError(
                    f"from_source: type_info {declared} differs from the schema of {type(source).__name__}, "
                    f"{source.output_schema()}; leave type_info out (the source declares its schema)"
                )
        display = name or source_name or type(source).__name__
        t = self.add_transformation(
            kind=OperatorKind.SOURCE,
            name=f"Source: {display}",
            function=source,
            output_schema=source.output_schema(),
            timestamp_strategy=watermark_strategy,
        )
        return DataStream(self, [(t, None)])

    def add_source(self, source_func: Source, source_name: str = "Custom Source", type_info: Any = None) -> DataStream:
        """PyFlink's ``add_source`` for the sources offered here as source functions (``FlinkKafkaConsumer``).

        Records keep the source's own timestamps (Kafka's); no watermarks are generated (assign them
        downstream, as with Flink's ``SourceFunction``). Other sources go through :meth:`from_source`.
        """
        if not isinstance(source_func, Source):
            raise TypeError(
                "add_source expects a flinklike_spark source such as FlinkKafkaConsumer (Python SourceFunctions "
                f"are not supported; use from_source with a Source), got {type(source_func).__name__}"
            )
        return self.from_source(source_func, WatermarkStrategy.no_watermarks(), source_name, type_info)

    def from_collection(
        self,
        collection: Any,
        type_info: pa.Schema | None = None,
        *,
        watermark_strategy: WatermarkStrategy | None = None,
        batch_size: int | None = None,
    ) -> DataStream:
        """A bounded stream of the rows (dicts) in ``collection``, read in order by one subtask.

        ``type_info`` is the rows' Arrow schema (inferred when None). ``batch_size``
        rows are read per poll (a watermark may follow each batch).
        """
        from flinklike_spark.common.typeinfo import to_arrow_schema
        from flinklike_spark.datastream.collection_source import CollectionSource

        source = CollectionSource(collection, schema=to_arrow_schema(type_info), batch_size=batch_size)
        stream = self.from_source(source, watermark_strategy, name="Collection Source")
        stream.get_transformation().parallelism = 1
        return stream

    # -- execution --------------------------------------------------------------------------

    def get_job_graph(self, job_name: str | None = None) -> JobGraph:
        """Translate the program into a JobGraph (without running it)."""
        builder = JobGraphBuilder(self._pending_transformations(), self._config.pipeline, chaining=self._chaining)
        return builder.build(job_name or self._config.pipeline.name or "flinklike job")

    def execute_async(self, job_name: str | None = None):
        """Start the job on a new cluster chosen by ``execution.target`` and return its JobClient.

        ``local`` (default): an embedded cluster on this machine. ``spark``: the
        JobMaster runs here, in the Spark driver, and TaskExecutors run on the
        executors of the active SparkSession (see
        :mod:`flinklike_spark._runtime.cluster.targets`).
        """
        job_graph = self.get_job_graph(job_name)
        context = {k: v for k, v in self.context_configuration.items() if k not in self._config}
        config = self._config.with_values(context)
        if config.get("execution.runtime-mode") == "batch":
            config = self._batch_configuration(config)
            for vertex in job_graph:  # rolling aggregations emit final values only: the per-record operator
                for spec in vertex.operators:
                    spec.vectorizable = spec.kind is not OperatorKind.KEYED_REDUCE
        # As in PyFlink, the next execute() runs only what is defined after this one.
        self._executed_upto = len(self._transformations)
        client = execute_job_graph(job_graph, config)
        for listener in list(StreamExecutionEnvironment.context_job_listeners):
            listener(client)
        return client

    def _batch_configuration(self, config: Configuration) -> Configuration:
        """BATCH execution (Flink's): every source bounded, and no checkpoints.

        Raises:
            ConfigurationError: a source is unbounded (it names the source).
        """
        for t in self._pending_transformations():
            if t.kind is OperatorKind.SOURCE and t.function.boundedness is not Boundedness.BOUNDED:
                raise ConfigurationError(
                    f"execution.runtime-mode: batch needs bounded sources; {t.name} ({type(t.function).__name__}) is "
                    f"unbounded: use execution.runtime-mode: streaming, or bound the source"
                )
        return config.with_values({"execution.checkpointing.interval": None})

    def _pending_transformations(self) -> list[Transformation]:
        """The transformations of the next job: those defined since the last ``execute`` plus, as in
        Flink, every transformation they read from (in definition order). As in Flink, a source is
        only part of a job through what reads from it: a source nothing reads from does not run."""
        roots = [t for t in self._transformations[self._executed_upto :] if t.kind is not OperatorKind.SOURCE]
        return upstream_closure(self._transformations, roots)

    def execute(self, job_name: str | None = None):
        """Run the job to completion and return its JobExecutionResult.

        Raises:
            JobExecutionError: the job failed; ``__cause__`` is the root failure.
        """
        return self.execute_async(job_name).wait()
