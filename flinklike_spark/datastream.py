"""The PyFlink-style DataStream API and its translation into a JobGraph.

``StreamExecutionEnvironment`` collects transformations; ``execute`` turns them
into a :class:`~flinklike_spark._runtime.graph.job_graph.JobGraph` (operators
chained over forward edges of equal parallelism) and runs it on the embedded
local cluster.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import shutil
import sys
import threading
import uuid
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import cloudpickle
import pyarrow as pa

from flinklike_spark._runtime.graph.job_graph import JobGraph, JobVertex, PartitionerKind, PartitionerSpec
from flinklike_spark._runtime.streaming.operators import OperatorSpec
from flinklike_spark.config import Configuration
from flinklike_spark.connector_api import Sink, Source
from flinklike_spark.errors import ConfigurationError, InvalidProgramError
from flinklike_spark.functions import KeyedProcessFunction, ProcessFunction
from flinklike_spark.storage import UsesStorage
from flinklike_spark.watermarks import WatermarkStrategy

__all__ = ["DataStream", "DataStreamSink", "KeyedStream", "StreamExecutionEnvironment"]


@dataclasses.dataclass(eq=False, kw_only=True)
class _Transformation:
    id: int
    kind: str
    name: str
    function: Any = None
    inputs: list[tuple[_Transformation, PartitionerSpec | None]] = dataclasses.field(default_factory=list)
    parallelism: int | None = None
    uid: str | None = None
    output_schema: pa.Schema | None = None
    input_schema: pa.Schema | None = None
    key_field: str | None = None
    key_selector: Callable[[dict], Any] | None = None
    timestamp_strategy: WatermarkStrategy | None = None
    # issue 13: declared schemas of side outputs (tag id -> schema or None to infer)
    side_output_schemas: dict[str, pa.Schema | None] = dataclasses.field(default_factory=dict)


class StreamExecutionEnvironment:
    """Entry point of a streaming program.

    Args:
        config: Flink configuration keys (see :class:`~flinklike_spark.config.Configuration`).

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
        self._config = config if isinstance(config, Configuration) else Configuration(config or {})
        self._transformations: list[_Transformation] = []
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

    def set_max_parallelism(self, max_parallelism: int) -> StreamExecutionEnvironment:
        self._config = self._config.with_values({"pipeline.max-parallelism": max_parallelism})
        return self

    # -- issue 13: PyFlink's checkpoint and runtime-mode setters (views over configuration keys) ------

    def enable_checkpointing(self, interval: int | Any, mode: Any = None) -> StreamExecutionEnvironment:
        """Checkpoint every ``interval`` (ms or timedelta); ``mode`` a CheckpointingMode (exactly-once default)."""
        values: dict[str, Any] = {"execution.checkpointing.interval": interval}
        if mode is not None:
            values["execution.checkpointing.mode"] = mode
        return self.configure(values)

    def get_checkpoint_config(self):
        """A CheckpointConfig reading and writing this environment's ``execution.checkpointing.*`` keys."""
        from flinklike_spark.execution_options import CheckpointConfig

        return CheckpointConfig(self)

    def get_checkpoint_interval(self) -> int:
        return self.get_checkpoint_config().get_checkpoint_interval()

    def set_runtime_mode(self, execution_mode: Any) -> StreamExecutionEnvironment:
        """STREAMING or AUTOMATIC; BATCH raises a ConfigurationError naming what is supported."""
        from flinklike_spark.execution_options import runtime_mode_value

        return self.configure({"execution.runtime-mode": runtime_mode_value(execution_mode)})

    def disable_operator_chaining(self) -> StreamExecutionEnvironment:
        self._chaining = False
        return self

    def is_chaining_enabled(self) -> bool:
        return self._chaining

    def get_max_parallelism(self) -> int:
        return self.config.pipeline.max_parallelism

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
        """The job that ``execute()`` would run, as JSON in Flink's execution-plan format.

        ``{"nodes": [{"id", "type", "pact", "contents", "parallelism", "predecessors":
        [{"id", "ship_strategy", "side"}]}]}``, one node per operator in definition order.
        """
        default = self.config.pipeline.parallelism
        nodes = []
        for t in self._pending_transformations():
            parallelism = t.parallelism or default
            node: dict[str, Any] = {
                "id": t.id,
                "type": t.name,
                "pact": {"source": "Data Source", "sink": "Data Sink"}.get(t.kind, "Operator"),
                "contents": t.name,
                "parallelism": parallelism,
            }
            predecessors = []
            for upstream, spec in t.inputs:
                if spec is not None:
                    strategy = spec.kind.name
                else:
                    same = (upstream.parallelism or default) == parallelism
                    strategy = "FORWARD" if same else "REBALANCE"
                predecessors.append({"id": upstream.id, "ship_strategy": strategy, "side": "second"})
            if predecessors:
                node["predecessors"] = predecessors
            nodes.append(node)
        return json.dumps({"nodes": nodes}, indent=2)

    def _add(self, **fields: Any) -> _Transformation:
        transformation = _Transformation(id=next(self._ids), **fields)
        self._transformations.append(transformation)
        return transformation

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
            from flinklike_spark.typeinfo import to_arrow_schema

            declared = to_arrow_schema(type_info)
            if not declared.remove_metadata().equals(source.output_schema().remove_metadata()):
                raise ConfigurationError(
                    f"from_source: type_info {declared} differs from the schema of {type(source).__name__}, "
                    f"{source.output_schema()}; leave type_info out (the source declares its schema)"
                )
        display = name or source_name or type(source).__name__
        t = self._add(
            kind="source",
            name=f"Source: {display}",
            function=source,
            output_schema=source.output_schema(),
            timestamp_strategy=watermark_strategy,
        )
        return DataStream(self, [(t, None)])

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
        from flinklike_spark.collection_source import CollectionSource
        from flinklike_spark.typeinfo import to_arrow_schema

        source = CollectionSource(collection, schema=to_arrow_schema(type_info), batch_size=batch_size)
        stream = self.from_source(source, watermark_strategy, name="Collection Source")
        stream._transformation.parallelism = 1
        return stream

    # -- execution --------------------------------------------------------------------------

    def get_job_graph(self, job_name: str | None = None) -> JobGraph:
        """Translate the program into a JobGraph (without running it)."""
        return _JobGraphBuilder(self).build(job_name or self._config.pipeline.name or "flinklike job")

    def execute_async(self, job_name: str | None = None):
        """Start the job on a new cluster chosen by ``execution.target`` and return its JobClient.

        ``local`` (default): an embedded cluster on this machine. ``spark``: the
        JobMaster runs here, in the Spark driver, and TaskExecutors run on the
        executors of the active SparkSession (see
        :mod:`flinklike_spark.spark.task_executor_launcher`).
        """
        from flinklike_spark.config import ExecutionTarget

        job_graph = self.get_job_graph(job_name)
        # As in PyFlink, the next execute() runs only what is defined after this one.
        self._executed_upto = len(self._transformations)
        context = {k: v for k, v in self.context_configuration.items() if k not in self._config}
        config = self._config.with_values(context)
        _bind_storage(job_graph, config)
        if config.cluster.target is ExecutionTarget.SPARK:
            from flinklike_spark.spark.task_executor_launcher import spark_cluster

            cluster = spark_cluster(_spark_cluster_config(config, job_graph))
        else:
            from flinklike_spark._runtime.minicluster import MiniCluster

            cluster = MiniCluster(_local_cluster_config(config, job_graph))
        _close_at_exit(cluster)
        try:  # also on Ctrl-C while the cluster starts: no TaskExecutor is left behind
            cluster.start()
            client = cluster.submit_job(job_graph, owns_cluster=True)
        except BaseException:
            cluster.close()
            raise
        for listener in list(StreamExecutionEnvironment.context_job_listeners):
            listener(client)
        return client

    def _pending_transformations(self) -> list[_Transformation]:
        """The transformations of the next job: those defined since the last ``execute`` plus, as in
        Flink, every transformation they read from (in definition order)."""
        pending = self._transformations[self._executed_upto :]
        needed: set[int] = set()
        stack = list(pending)
        while stack:
            t = stack.pop()
            if t.id not in needed:
                needed.add(t.id)
                stack.extend(upstream for upstream, _ in t.inputs)
        return [t for t in self._transformations if t.id in needed]

    def execute(self, job_name: str | None = None):
        """Run the job to completion and return its JobExecutionResult.

        Raises:
            JobExecutionError: the job failed; ``__cause__`` is the root failure.
        """
        return self.execute_async(job_name).wait()


def _bind_storage(job_graph: JobGraph, config: Configuration) -> None:
    """Check every storage URL of the job on the client, then give its connectors the job's storage settings.

    A URL whose filesystem package is missing fails here, naming the URL and
    the extra to install, before any task is deployed (a task would fail with
    an ImportError on every restart). Connectors that implement
    :class:`~flinklike_spark.storage.UsesStorage` are replaced in the graph by
    copies bound to ``config.storage``, which travel to the TaskExecutors.
    """
    storage = config.storage
    options = config.checkpointing
    if options.directory is not None:
        storage.check_available(options.directory, what="execution.checkpointing.dir")
    if options.recovery_path is not None:
        storage.check_available(options.recovery_path, what="execution.state-recovery.path")
    for vertex in job_graph:
        for op in vertex.operators:
            if isinstance(op.function, UsesStorage):
                for url in op.function.storage_urls():
                    storage.check_available(url, what=f"{op.name} ({type(op.function).__name__}) path")
                op.function = op.function.with_storage(storage)


def _local_cluster_config(config: Configuration, job_graph: JobGraph) -> Configuration:
    """Like Flink's local environment: without ``taskmanager.numberOfTaskSlots`` the
    embedded cluster gets just enough slots for the job's highest parallelism."""
    if "taskmanager.numberOfTaskSlots" in config:
        return config
    needed = max(v.parallelism for v in job_graph)
    task_managers = config.cluster.number_of_task_managers
    return config.with_values({"taskmanager.numberOfTaskSlots": -(-needed // task_managers)})


def _spark_cluster_config(config: Configuration, job_graph: JobGraph) -> Configuration:
    """Like Flink on an active resource manager (YARN, Kubernetes): as many TaskExecutors of
    ``taskmanager.numberOfTaskSlots`` slots as the job's highest parallelism needs (the
    ResourceManager's cluster size); each is one Spark task, so it occupies one task slot of an
    executor."""
    needed = max(v.parallelism for v in job_graph)
    slots = config.cluster.slots_per_task_manager
    return config.with_values({"local.number-taskmanager": -(-needed // slots)})


def _close_at_exit(cluster: Any) -> None:
    """Close ``cluster`` (cancelling its job) if the interpreter exits while it is open.

    That happens when the program ends, or Ctrl-C interrupts it, outside
    ``JobClient.wait``. The hook is registered with ``threading._register_atexit``
    (what ``concurrent.futures`` itself uses) because it must run before the
    interpreter stops the thread pools: an ``atexit`` hook would run after, when
    cancelling fails with "cannot schedule new futures after shutdown". It holds
    the cluster weakly and does nothing once the cluster is closed.
    """
    ref = weakref.ref(cluster)

    def close() -> None:
        open_cluster = ref()
        if open_cluster is not None:
            open_cluster.close()

    threading._register_atexit(close)  # noqa: SLF001 - see the docstring


class DataStream:
    """A stream of rows (dicts) with one Arrow schema, produced by a transformation."""

    def __init__(
        self,
        env: StreamExecutionEnvironment,
        inputs: list[tuple[_Transformation, PartitionerSpec | None]],
    ) -> None:
        self._env = env
        self._inputs = inputs

    @property
    def _transformation(self) -> _Transformation:
        if len(self._inputs) != 1 or self._inputs[0][1] is not None:
            raise TypeError("name(), uid() and set_parallelism() apply to an operator's output stream")
        return self._inputs[0][0]

    def _schema(self) -> pa.Schema | None:
        schemas = [t.output_schema for t, _ in self._inputs]
        return schemas[0] if all(s is not None and s == schemas[0] for s in schemas) else None

    def _timestamps(self) -> WatermarkStrategy | None:
        return next((t.timestamp_strategy for t, _ in self._inputs if t.timestamp_strategy), None)

    def _then(self, kind: str, name: str, function: Any, output_type: pa.Schema | None, **extra: Any) -> DataStream:
        from flinklike_spark.typeinfo import to_arrow_schema  # issue 13: Types.ROW_NAMED as output_type

        output_type = to_arrow_schema(output_type)
        t = self._env._add(
            kind=kind,
            name=name,
            function=function,
            inputs=list(self._inputs),
            output_schema=output_type,
            input_schema=self._schema(),
            timestamp_strategy=self._timestamps(),
            **extra,
        )
        return DataStream(self._env, [(t, None)])

    @staticmethod
    def _check_function(function: Any, method: str, what: str) -> None:
        if not (callable(function) or hasattr(function, method)):
            raise TypeError(f"{what} expects a callable or an object with .{method}(), got {function!r}")

    def map(self, func: Any, output_type: pa.Schema | None = None) -> DataStream:
        """Apply ``func(row) -> row`` (a callable or a MapFunction) to every row."""
        self._check_function(func, "map", "map")
        return self._then("map", "Map", func, output_type)

    def flat_map(self, func: Any, output_type: pa.Schema | None = None) -> DataStream:
        """Apply ``func(row) -> iterable of rows`` (a callable or a FlatMapFunction)."""
        self._check_function(func, "flat_map", "flat_map")
        return self._then("flat_map", "FlatMap", func, output_type)

    def filter(self, func: Any) -> DataStream:
        """Keep the rows for which ``func(row)`` is true."""
        self._check_function(func, "filter", "filter")
        return self._then("filter", "Filter", func, self._schema())

    def map_batches(self, func: Callable[[pa.RecordBatch], pa.RecordBatch], output_type: pa.Schema | None = None):
        """Vectorized map: ``func`` takes and returns a ``pyarrow.RecordBatch``."""
        if not callable(func):
            raise TypeError(f"map_batches expects a callable, got {func!r}")
        return self._then("map_batches", "MapBatches", func, output_type)

    def process(self, func: ProcessFunction, output_type: pa.Schema | None = None) -> DataStream:
        if isinstance(func, KeyedProcessFunction):
            raise TypeError("a KeyedProcessFunction needs a KeyedStream: call key_by(...) first")
        if not isinstance(func, ProcessFunction):
            raise TypeError(f"process expects a ProcessFunction, got {type(func).__name__}")
        return self._then("process", "Process", func, output_type)

    def key_by(self, key: str | Callable[[dict], Any], key_type: Any = None) -> KeyedStream:
        """Partition by key: a field name (vectorized) or a key-selector function.

        ``key_type`` (PyFlink's key TypeInformation) is accepted and not needed: keys are
        Python values, hashed by value."""
        max_parallelism = self._env.config.pipeline.max_parallelism
        if isinstance(key, str):
            schema = self._schema()
            if schema is not None and key not in schema.names:
                raise KeyError(f"key_by({key!r}): the stream has no field {key!r}; its fields are {schema.names}")
            spec = PartitionerSpec(kind=PartitionerKind.HASH, key_field=key, max_parallelism=max_parallelism)
        elif callable(key):
            spec = PartitionerSpec(kind=PartitionerKind.HASH, key_selector=key, max_parallelism=max_parallelism)
        else:
            raise TypeError(f"key_by expects a field name or a key-selector function, got {key!r}")
        return KeyedStream(self._env, [(t, spec) for t, _ in self._inputs], key)

    def _repartition(self, kind: PartitionerKind) -> DataStream:
        return DataStream(self._env, [(t, PartitionerSpec(kind=kind)) for t, _ in self._inputs])

    def rebalance(self) -> DataStream:
        return self._repartition(PartitionerKind.REBALANCE)

    def broadcast(self, *broadcast_state_descriptors: Any):
        """Send every row to every consumer subtask; with MapStateDescriptors, a BroadcastStream
        to ``connect`` to (broadcast state)."""
        if broadcast_state_descriptors:
            from flinklike_spark.connected_streams import BroadcastStream

            return BroadcastStream(self, broadcast_state_descriptors)
        return self._repartition(PartitionerKind.BROADCAST)

    def connect(self, ds: Any):
        """Pair with ``ds`` (a DataStream, or a BroadcastStream) for a two-input function."""
        from flinklike_spark.connected_streams import BroadcastConnectedStream, BroadcastStream, ConnectedStreams

        if isinstance(ds, BroadcastStream):
            return BroadcastConnectedStream(self, ds)
        if not isinstance(ds, DataStream):
            raise TypeError(f"connect expects a DataStream or a BroadcastStream, got {ds!r}")
        return ConnectedStreams(self, ds)

    def forward(self) -> DataStream:
        return self._repartition(PartitionerKind.FORWARD)

    def union(self, *streams: DataStream) -> DataStream:
        """One stream of the rows of this and ``streams`` (all must have the same fields)."""
        inputs = list(self._inputs)
        for stream in streams:
            if stream._env is not self._env:
                raise ValueError("union of streams from different environments")
            inputs.extend(stream._inputs)
        return DataStream(self._env, inputs)

    # -- issue 13: windows over the whole stream, side outputs ---------------------------------------

    def window_all(self, window_assigner: Any):
        """Windows over the whole stream, evaluated by one subtask (parallelism 1, as in Flink)."""
        from flinklike_spark.windowed_stream import AllWindowedStream

        keyed = self.key_by(_whole_stream_key)
        return AllWindowedStream(keyed, window_assigner)

    def count_window_all(self, size: int, slide: int = 0):
        """Count windows over the whole stream (parallelism 1)."""
        from flinklike_spark.window import CountSlidingWindowAssigner, CountTumblingWindowAssigner

        if slide:
            return self.window_all(CountSlidingWindowAssigner.of(size, slide))
        return self.window_all(CountTumblingWindowAssigner.of(size))

    def get_side_output(self, output_tag: Any) -> DataStream:
        """The stream of what this operator emitted under ``output_tag`` (``ctx.output(tag, value)``,
        a yielded ``(tag, value)``, or a window's late data)."""
        from flinklike_spark.output_tag import OutputTag

        if not isinstance(output_tag, OutputTag):
            raise TypeError(f"get_side_output expects an OutputTag, got {output_tag!r}")
        producer = self._transformation
        schema = output_tag.type_info or producer.side_output_schemas.get(output_tag.tag_id)
        t = self._env._add(
            kind="side_output",
            name=f"SideOutput: {output_tag.tag_id}",
            function=output_tag,
            inputs=[(producer, None)],
            output_schema=schema,
            input_schema=schema,
            timestamp_strategy=producer.timestamp_strategy,
        )
        return DataStream(self._env, [(t, None)])

    def assign_timestamps_and_watermarks(self, watermark_strategy: WatermarkStrategy) -> DataStream:
        """Event time from here on: ``watermark_strategy``'s assigner gives timestamps, and watermarks
        follow the rows passing through (the input's watermarks are replaced, as in Flink)."""
        if not isinstance(watermark_strategy, WatermarkStrategy) or watermark_strategy.timestamp_assigner is None:
            raise TypeError(
                f"assign_timestamps_and_watermarks expects a WatermarkStrategy with a timestamp assigner, "
                f"got {watermark_strategy!r}"
            )
        schema = self._schema()
        t = self._env._add(
            kind="timestamps_watermarks",
            name="Timestamps/Watermarks",
            function=watermark_strategy,
            inputs=list(self._inputs),
            output_schema=schema,
            input_schema=schema,
            timestamp_strategy=watermark_strategy,
        )
        return DataStream(self._env, [(t, None)])

    def add_sink(self, sink_func: Sink) -> DataStreamSink:
        """PyFlink's name for :meth:`sink_to` (the sink is a flinklike_spark Sink)."""
        return self.sink_to(sink_func)

    def execute_and_collect(self, job_name: str | None = None, limit: int | None = None):
        """Run the job (this stream and every pipeline defined since the last ``execute``) and return
        this stream's records as PyFlink does: an iterator that yields them while the job runs (also an
        unbounded one) and cancels the job when closed, or, with ``limit``, a list of at most ``limit``
        records, after which the job is cancelled if it still runs.

        With checkpointing enabled, records are delivered when the checkpoint after them completes
        (so a restarted job delivers none twice); see ``connectors/collect_stream.py``.
        """
        from connectors.collect_stream import CollectIterator, collect_sink_for

        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
            raise ValueError(f"limit must be a non-negative int or None, got {limit!r}")
        directory = CollectIterator.make_directory()
        try:
            checkpointing = self._env.config.get("execution.checkpointing.interval") is not None
            self.sink_to(collect_sink_for(directory, checkpointing=checkpointing)).name("Collect Sink")
            iterator = CollectIterator(self._env.execute_async(job_name), directory)
        except BaseException:  # the job did not start: nothing will read or remove the directory
            shutil.rmtree(directory, ignore_errors=True)
            raise
        if limit is None:
            return iterator
        with iterator:
            return list(itertools.islice(iterator, limit))

    def sink_to(self, sink: Sink) -> DataStreamSink:
        if not isinstance(sink, Sink):
            raise TypeError(f"sink_to expects a flinklike_spark Sink, got {type(sink).__name__}")
        t = self._then("sink", f"Sink: {type(sink).__name__}", sink, None)._transformation
        return DataStreamSink(t)

    def print(self, prefix: str | None = None) -> DataStreamSink:
        from connectors.print_sink import PrintSink

        return self.sink_to(PrintSink(prefix=prefix))

    def name(self, name: str) -> DataStream:
        self._transformation.name = name
        return self

    def get_name(self) -> str:
        return self._transformation.name

    def uid(self, uid: str) -> DataStream:
        self._transformation.uid = uid
        return self

    def set_parallelism(self, parallelism: int) -> DataStream:
        if not isinstance(parallelism, int) or parallelism < 1:
            raise ValueError(f"parallelism must be a positive int, got {parallelism!r}")
        self._transformation.parallelism = parallelism
        return self


class KeyedStream(DataStream):
    """A stream partitioned by key; ``process`` gets keyed state and timers."""

    def __init__(self, env, inputs, key) -> None:
        super().__init__(env, inputs)
        self._key = key

    def _repartition(self, kind: PartitionerKind) -> DataStream:
        # PyFlink: rebalance()/forward()/broadcast() on a KeyedStream would silently drop the keying.
        raise InvalidProgramError(
            f"Cannot override partitioning for KeyedStream ({kind.name.lower()}() after key_by): the stream is "
            f"partitioned by its key; call it before key_by, or on the result of a keyed operation"
        )

    def broadcast(self, *broadcast_state_descriptors: Any):
        return self._repartition(PartitionerKind.BROADCAST)

    def process(self, func: KeyedProcessFunction, output_type: pa.Schema | None = None) -> DataStream:
        if not isinstance(func, KeyedProcessFunction):
            raise TypeError(f"KeyedStream.process expects a KeyedProcessFunction, got {type(func).__name__}")
        key_field = self._key if isinstance(self._key, str) else None
        key_selector = None if isinstance(self._key, str) else self._key
        return self._then(
            "keyed_process", "KeyedProcess", func, output_type, key_field=key_field, key_selector=key_selector
        )

    # -- issue 13: keyed transformations and windows ----------------------------------------------

    def _keyed(self, kind: str, name: str, func: Any, output_type: pa.Schema | None) -> DataStream:
        key_field = self._key if isinstance(self._key, str) else None
        key_selector = None if isinstance(self._key, str) else self._key
        return self._then(kind, name, func, output_type, key_field=key_field, key_selector=key_selector)

    def map(self, func: Any, output_type: pa.Schema | None = None) -> DataStream:
        """Like ``DataStream.map``, run keyed: ``get_state`` in the function is the record key's state."""
        self._check_function(func, "map", "map")
        return self._keyed("keyed_map", "Map", func, output_type)

    def flat_map(self, func: Any, output_type: pa.Schema | None = None) -> DataStream:
        """Like ``DataStream.flat_map``, run keyed (keyed state available)."""
        self._check_function(func, "flat_map", "flat_map")
        return self._keyed("keyed_flat_map", "FlatMap", func, output_type)

    def filter(self, func: Any) -> DataStream:
        """Like ``DataStream.filter``, run keyed (keyed state available)."""
        self._check_function(func, "filter", "filter")
        return self._keyed("keyed_filter", "Filter", func, self._schema())

    def reduce(self, func: Any) -> DataStream:
        """Rolling reduce per key: emits ``func(previous result, record)`` for every record
        (the key's first record as is). ``func`` is a ReduceFunction or a callable."""
        self._check_function(func, "reduce", "reduce")
        return self._keyed("keyed_reduce", "Keyed Reduce", func, self._schema())

    def _aggregation(self, aggregation: str, field: str | int) -> DataStream:
        from flinklike_spark._runtime.streaming.keyed_operators import FieldAggregation

        schema = self._schema()
        if isinstance(field, str) and schema is not None and field not in schema.names:
            raise KeyError(f"{aggregation}({field!r}): the stream has no field {field!r}; its fields are {schema.names}")
        return self._keyed("keyed_reduce", f"Keyed Aggregation ({aggregation})", FieldAggregation(aggregation, field), schema)

    def sum(self, position_to_sum: str | int = 0) -> DataStream:
        """Rolling sum of one field per key; the other fields are those of the key's first record."""
        return self._aggregation("sum", position_to_sum)

    def min(self, position_to_min: str | int = 0) -> DataStream:
        """Rolling minimum of one field per key (other fields from the key's first record)."""
        return self._aggregation("min", position_to_min)

    def max(self, position_to_max: str | int = 0) -> DataStream:
        """Rolling maximum of one field per key (other fields from the key's first record)."""
        return self._aggregation("max", position_to_max)

    def min_by(self, position_to_min_by: str | int = 0) -> DataStream:
        """Per key, the record with the smallest value of the field so far (the earliest on ties)."""
        return self._aggregation("min_by", position_to_min_by)

    def max_by(self, position_to_max_by: str | int = 0) -> DataStream:
        """Per key, the record with the largest value of the field so far (the earliest on ties)."""
        return self._aggregation("max_by", position_to_max_by)

    def window(self, window_assigner: Any):
        """Cut each key's elements into windows; end with reduce/aggregate/apply/process."""
        from flinklike_spark.windowed_stream import WindowedStream

        return WindowedStream(self, window_assigner)

    def count_window(self, size: int, slide: int = 0):
        """Windows of ``size`` elements per key, every ``slide`` elements if given (PyFlink's count windows)."""
        from flinklike_spark.window import CountSlidingWindowAssigner, CountTumblingWindowAssigner

        if slide:
            return self.window(CountSlidingWindowAssigner.of(size, slide))
        return self.window(CountTumblingWindowAssigner.of(size))


def _whole_stream_key(row: Any) -> int:
    """The key of ``window_all``: every record has the same one."""
    return 0


class DataStreamSink:
    """The end of a pipeline; supports ``name``, ``uid`` and ``set_parallelism``."""

    def __init__(self, transformation: _Transformation) -> None:
        self._t = transformation

    def name(self, name: str) -> DataStreamSink:
        self._t.name = name
        return self

    def uid(self, uid: str) -> DataStreamSink:
        self._t.uid = uid
        return self

    def set_parallelism(self, parallelism: int) -> DataStreamSink:
        if not isinstance(parallelism, int) or parallelism < 1:
            raise ValueError(f"parallelism must be a positive int, got {parallelism!r}")
        self._t.parallelism = parallelism
        return self


def _check_picklable(t: _Transformation, uid: str) -> None:
    """Raise InvalidProgramError unless what ``t`` ships to the TaskExecutors pickles.

    Functions, sources and sinks travel cloudpickled inside the task deployment;
    without this check a function holding a lock or a client failed the job at
    deployment with only "cannot pickle '_thread.lock' object".
    """
    role = {"source": "source", "sink": "sink"}.get(t.kind, "function")
    parts = [(role, t.function), ("key selector", t.key_selector), ("watermark strategy", t.timestamp_strategy)]
    parts += [("key selector", spec.key_selector) for _, spec in t.inputs if spec is not None]
    for what, value in parts:
        if value is None:
            continue
        try:
            cloudpickle.dumps(value)
        except Exception as exc:  # noqa: BLE001 - pickling raises TypeError, PicklingError, AttributeError, ...
            raise InvalidProgramError(
                f"the {what} of operator {t.name!r} (uid {uid!r}), {_short_repr(value)}, cannot be pickled: "
                f"{type(exc).__name__}: {exc}. It is pickled (cloudpickle) to run in the TaskExecutors: create "
                f"locks, connections, clients and open files in open(), not in __init__ or a closure"
            ) from exc


def _short_repr(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 100 else text[:97] + "..."


class _JobGraphBuilder:
    """Chains transformations into job vertices.

    A transformation is chained to its single upstream when the edge is FORWARD
    (explicitly or by default), the parallelism matches, and chaining is on.
    A default edge between different parallelisms becomes REBALANCE (as in Flink).
    """

    def __init__(self, env: StreamExecutionEnvironment) -> None:
        self._env = env

    def build(self, job_name: str) -> JobGraph:
        env = self._env
        transformations = env._pending_transformations()
        if not any(t.kind == "sink" for t in transformations):
            raise ValueError("the job has no sink: add sink_to(...) or print() before execute()")
        self._check_sink_names(transformations)
        default_parallelism = env.config.pipeline.parallelism
        max_parallelism = env.config.pipeline.max_parallelism
        parallelism = {t.id: t.parallelism or default_parallelism for t in transformations}
        for t in transformations:  # a side-output stream runs beside (chained to) its producer
            if t.kind == "side_output":
                parallelism[t.id] = parallelism[t.inputs[0][0].id]
        for t in transformations:
            if parallelism[t.id] > max_parallelism:
                source = "set_parallelism()" if t.parallelism else "parallelism.default"
                raise ConfigurationError(
                    f"operator {t.name!r} has parallelism {parallelism[t.id]} ({source}), above "
                    f"pipeline.max-parallelism {max_parallelism}: key groups cannot be spread over more "
                    f"subtasks than there are; lower the parallelism or raise pipeline.max-parallelism"
                )
        uids = self._uids(transformations)

        def edge_spec(upstream: _Transformation, t: _Transformation, spec: PartitionerSpec | None):
            if spec is None:
                kind = PartitionerKind.FORWARD if parallelism[upstream.id] == parallelism[t.id] else (
                    PartitionerKind.REBALANCE
                )
                return PartitionerSpec(kind=kind)
            if spec.kind is PartitionerKind.FORWARD and parallelism[upstream.id] != parallelism[t.id]:
                raise ValueError(
                    f"forward() between {upstream.name!r} (parallelism {parallelism[upstream.id]}) and "
                    f"{t.name!r} (parallelism {parallelism[t.id]}) needs equal parallelism"
                )
            return spec

        head_of: dict[int, _Transformation] = {}
        for t in transformations:
            chained = (
                env._chaining
                and len(t.inputs) == 1
                and t.kind != "source"
                and edge_spec(t.inputs[0][0], t, t.inputs[0][1]).kind is PartitionerKind.FORWARD
            )
            head_of[t.id] = head_of[t.inputs[0][0].id] if chained else t

        members: dict[int, list[_Transformation]] = {}
        for t in transformations:
            members.setdefault(head_of[t.id].id, []).append(t)

        for t in transformations:
            _check_picklable(t, uids[t.id])
        graph = JobGraph(job_id=uuid.uuid4().hex, name=job_name)
        index_in_vertex: dict[int, int] = {}
        specs: dict[int, OperatorSpec] = {}
        for head_id, chain in members.items():
            head = chain[0]
            names = " -> ".join(t.name for t in chain)
            vertex = JobVertex(
                id=uids[head_id],
                name=names,
                parallelism=parallelism[head_id],
                max_parallelism=max_parallelism,
                is_source=head.kind == "source",
            )
            for position, t in enumerate(chain):
                index_in_vertex[t.id] = position
                upstream_name = t.inputs[0][0].name if t.inputs else None
                spec = OperatorSpec(
                    uid=uids[t.id],
                    name=t.name,
                    kind=t.kind,
                    function=t.function,
                    input_schema=t.input_schema,
                    input_name=upstream_name,
                    output_schema=t.output_schema,
                    key_field=t.key_field,
                    key_selector=t.key_selector,
                    timestamp_strategy=t.timestamp_strategy,
                )
                specs[t.id] = spec
                vertex.operators.append(spec)
            graph.add_vertex(vertex)

        for t in transformations:
            for upstream, spec in t.inputs:
                tag = t.function.tag_id if t.kind == "side_output" else None
                if tag is not None:
                    specs[upstream.id].side_output_schemas[tag] = t.output_schema
                if head_of[t.id] is head_of[upstream.id]:
                    specs[upstream.id].chained_outputs.append(index_in_vertex[t.id])
                    if tag is not None:
                        specs[upstream.id].chained_output_tags[index_in_vertex[t.id]] = tag
                    continue
                source_vertex = uids[head_of[upstream.id].id]
                edge = graph.connect(source_vertex, uids[head_of[t.id].id], edge_spec(upstream, t, spec))
                # Only the head of a vertex has network inputs.
                if head_of[t.id] is not t:
                    raise AssertionError("a chained operator cannot have a network input")
                edge_index = graph.vertices[source_vertex].outputs.index(edge)
                specs[upstream.id].network_outputs.append(edge_index)
                if tag is not None:
                    specs[upstream.id].network_output_tags[edge_index] = tag
        return graph

    @staticmethod
    def _check_sink_names(transformations: list[_Transformation]) -> None:
        """Sinks report results under their ``name`` (CollectSink): two with one name would overwrite."""
        seen: dict[str, str] = {}
        for t in transformations:
            name = getattr(t.function, "name", None) if t.kind == "sink" else None
            if not isinstance(name, str):
                continue
            if name in seen:
                raise ConfigurationError(
                    f"two sinks named {name!r} in one job ({seen[name]!r} and {t.name!r}): their results would "
                    f"overwrite each other; give each {type(t.function).__name__} a distinct name"
                )
            seen[name] = t.name

    @staticmethod
    def _uids(transformations: list[_Transformation]) -> dict[int, str]:
        uids: dict[int, str] = {}
        seen: set[str] = set()
        for t in transformations:
            uid = t.uid or f"{t.kind.replace('_', '-')}-{t.id}"
            if uid in seen:
                raise ValueError(f"duplicate operator uid {uid!r}: uids must be unique within a job")
            seen.add(uid)
            uids[t.id] = uid
        return uids
