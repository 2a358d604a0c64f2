"""``DataStream``, ``KeyedStream`` and ``DataStreamSink`` (PyFlink's ``data_stream``).

A stream is a view of the transformations that produce it; every operation
records a new :class:`~flinklike_spark._runtime.graph.translation.Transformation`
with the environment and returns the stream of its output.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from flinklike_spark._runtime.graph.job_graph import PartitionerKind, PartitionerSpec
from flinklike_spark._runtime.graph.translation import Transformation
from flinklike_spark._runtime.operators.operator_spec import OperatorKind
from flinklike_spark.common.typeinfo import to_arrow_schema
from flinklike_spark.common.types import Row
from flinklike_spark.common.watermark_strategy import WatermarkStrategy
from flinklike_spark.connector_api import Sink
from flinklike_spark.datastream.collect_stream import CollectIterator, collect_sink_for, new_collect_id
from flinklike_spark.datastream.connected_streams import BroadcastConnectedStream, BroadcastStream, ConnectedStreams
from flinklike_spark.datastream.functions import KeyedProcessFunction, ProcessFunction
from flinklike_spark.datastream.output_tag import OutputTag
from flinklike_spark.datastream.print_sink import PrintSink
from flinklike_spark.datastream.stream_protocols import EnvironmentLike
from flinklike_spark.datastream.window import CountSlidingWindowAssigner, CountTumblingWindowAssigner
from flinklike_spark.datastream.windowed_stream import AllWindowedStream, WindowedStream
from flinklike_spark.errors import InvalidProgramError

__all__ = ["DataStream", "DataStreamSink", "KeyedStream"]


class DataStream:
    """A stream of rows (dicts) with one Arrow schema, produced by a transformation."""

    def __init__(self, env: EnvironmentLike, inputs: list[tuple[Transformation, PartitionerSpec | None]]) -> None:
        self._env = env
        self._inputs = inputs

    # -- what extensions of the API build on (connect, windows, async I/O, the Spark bridge) ----------

    def get_execution_environment(self) -> EnvironmentLike:
        """The environment this stream belongs to (Flink's ``DataStream#getExecutionEnvironment``)."""
        return self._env

    @property
    def inputs(self) -> list[tuple[Transformation, PartitionerSpec | None]]:
        """What an operator applied to this stream reads: each upstream transformation with the
        partitioner of the edge (None: forward, or rebalance between different parallelisms)."""
        return list(self._inputs)

    def with_inputs(self, inputs: list[tuple[Transformation, PartitionerSpec | None]]) -> DataStream:
        """A plain (non-keyed) stream of this environment reading ``inputs`` (what the stream extensions build on)."""
        return DataStream(self._env, inputs)

    def get_transformation(self) -> Transformation:
        """The transformation producing this stream (Flink's ``DataStream#getTransformation``).

        Raises:
            TypeError: the stream is a union or a repartitioning of others, not one operator's output.
        """
        if len(self._inputs) != 1 or self._inputs[0][1] is not None:
            raise TypeError("name(), uid() and set_parallelism() apply to an operator's output stream")
        return self._inputs[0][0]

    def get_output_schema(self) -> pa.Schema | None:
        """The stream's declared Arrow schema, or None when it is inferred from the first rows."""
        schemas = [t.output_schema for t, _ in self._inputs]
        return schemas[0] if all(s is not None and s == schemas[0] for s in schemas) else None

    def get_watermark_strategy(self) -> WatermarkStrategy | None:
        """The watermark strategy that gives this stream's rows their event timestamps (None: none)."""
        return next((t.timestamp_strategy for t, _ in self._inputs if t.timestamp_strategy), None)

    def transform(
        self, kind: OperatorKind | str, name: str, function: Any, output_type: Any = None, **extra: Any
    ) -> DataStream:
        """The stream of a new operator of ``kind`` (an ``OperatorKind`` or its value) applied to this one
        (Flink's ``DataStream#transform``); ``output_type`` is an Arrow schema or a TypeInformation."""
        output_type = to_arrow_schema(output_type)
        t = self._env.add_transformation(
            kind=kind,
            name=name,
            function=function,
            inputs=list(self._inputs),
            output_schema=output_type,
            input_schema=self.get_output_schema(),
            timestamp_strategy=self.get_watermark_strategy(),
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
        return self.transform(OperatorKind.MAP, "Map", func, output_type)

    def flat_map(self, func: Any, output_type: pa.Schema | None = None) -> DataStream:
        """Apply ``func(row) -> iterable of rows`` (a callable or a FlatMapFunction)."""
        self._check_function(func, "flat_map", "flat_map")
        return self.transform(OperatorKind.FLAT_MAP, "FlatMap", func, output_type)

    def filter(self, func: Any) -> DataStream:
        """Keep the rows for which ``func(row)`` is true."""
        self._check_function(func, "filter", "filter")
        return self.transform(OperatorKind.FILTER, "Filter", func, self.get_output_schema())

    def map_batches(self, func: Callable[[pa.RecordBatch], pa.RecordBatch], output_type: pa.Schema | None = None):
        """Vectorized map: ``func`` takes and returns a ``pyarrow.RecordBatch``."""
        if not callable(func):
            raise TypeError(f"map_batches expects a callable, got {func!r}")
        return self.transform(OperatorKind.MAP_BATCHES, "MapBatches", func, output_type)

    def process(self, func: ProcessFunction, output_type: pa.Schema | None = None) -> DataStream:
        if isinstance(func, KeyedProcessFunction):
            raise TypeError("a KeyedProcessFunction needs a KeyedStream: call key_by(...) first")
        if not isinstance(func, ProcessFunction):
            raise TypeError(f"process expects a ProcessFunction, got {type(func).__name__}")
        return self.transform(OperatorKind.PROCESS, "Process", func, output_type)

    def key_by(self, key: str | Callable[[dict], Any], key_type: Any = None) -> KeyedStream:
        """Partition by key: a field name (vectorized) or a key-selector function.

        ``key_type`` (PyFlink's key TypeInformation) is accepted and not needed: keys are
        Python values, hashed by value."""
        max_parallelism = self._env.config.pipeline.max_parallelism
        if isinstance(key, str):
            schema = self.get_output_schema()
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
            return BroadcastStream(self, broadcast_state_descriptors)
        return self._repartition(PartitionerKind.BROADCAST)

    def connect(self, ds: Any):
        """Pair with ``ds`` (a DataStream, or a BroadcastStream) for a two-input function."""

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

    # -- windows over the whole stream, side outputs -------------------------------------------------

    def window_all(self, window_assigner: Any):
        """Windows over the whole stream, evaluated by one subtask (parallelism 1, as in Flink)."""

        keyed = self.key_by(_whole_stream_key)
        return AllWindowedStream(keyed, window_assigner)

    def count_window_all(self, size: int, slide: int = 0):
        """Count windows over the whole stream (parallelism 1)."""

        if slide:
            return self.window_all(CountSlidingWindowAssigner.of(size, slide))
        return self.window_all(CountTumblingWindowAssigner.of(size))

    def get_side_output(self, output_tag: Any) -> DataStream:
        """The stream of what this operator emitted under ``output_tag`` (``ctx.output(tag, value)``,
        a yielded ``(tag, value)``, or a window's late data)."""

        if not isinstance(output_tag, OutputTag):
            raise TypeError(f"get_side_output expects an OutputTag, got {output_tag!r}")
        producer = self.get_transformation()
        schema = output_tag.type_info or producer.side_output_schemas.get(output_tag.tag_id)
        t = self._env.add_transformation(
            kind=OperatorKind.SIDE_OUTPUT,
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
        schema = self.get_output_schema()
        t = self._env.add_transformation(
            kind=OperatorKind.TIMESTAMPS_WATERMARKS,
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
        (so a restarted job delivers none twice). Results reach this process over the engine's authenticated
        RPC, not through files, so the job's TaskExecutors may run anywhere; see :mod:`flinklike_spark.datastream.collect_stream`.
        """

        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
            raise ValueError(f"limit must be a non-negative int or None, got {limit!r}")
        collect_id = new_collect_id()
        checkpointing = self._env.config.get("execution.checkpointing.interval") is not None
        self.sink_to(collect_sink_for(collect_id, checkpointing=checkpointing)).name("Collect Sink")
        iterator = CollectIterator(self._env.execute_async(job_name), collect_id, self._collected_as())
        if limit is None:
            return iterator
        with iterator:
            return list(itertools.islice(iterator, limit))

    def _collected_as(self) -> Callable[[Any], Any] | None:
        """What :meth:`execute_and_collect` yields for a record: the record itself."""
        return None

    def sink_to(self, sink: Sink) -> DataStreamSink:
        if not isinstance(sink, Sink):
            raise TypeError(f"sink_to expects a flinklike_spark Sink, got {type(sink).__name__}")
        t = self.transform(OperatorKind.SINK, f"Sink: {type(sink).__name__}", sink, None).get_transformation()
        return DataStreamSink(t)

    def print(self, prefix: str | None = None) -> DataStreamSink:

        return self.sink_to(PrintSink(prefix=prefix)).name("Sink: Print to Std. Out")  # Flink's name for it

    def name(self, name: str) -> DataStream:
        t = self.get_transformation()
        t.name = f"Source: {name}" if t.kind is OperatorKind.SOURCE else name  # Flink's graph calls a source so
        return self

    def get_name(self) -> str:
        t = self.get_transformation()
        return t.name.removeprefix("Source: ") if t.kind is OperatorKind.SOURCE else t.name

    def uid(self, uid: str) -> DataStream:
        self.get_transformation().uid = uid
        return self

    def set_parallelism(self, parallelism: int) -> DataStream:
        if not isinstance(parallelism, int) or parallelism < 1:
            raise ValueError(f"parallelism must be a positive int, got {parallelism!r}")
        self.get_transformation().parallelism = parallelism
        return self


class KeyedStream(DataStream):
    """A stream partitioned by key; ``process`` gets keyed state and timers."""

    def __init__(self, env, inputs, key) -> None:
        super().__init__(env, inputs)
        self._key = key

    @property
    def key(self) -> str | Callable[[Any], Any]:
        """What the stream is keyed by: a field name or a key-selector function."""
        return self._key

    def _repartition(self, kind: PartitionerKind) -> DataStream:
        return self._cannot_override(kind.name.lower())

    def _collected_as(self) -> Callable[[Any], Any]:
        """As PyFlink's keyed stream does, ``execute_and_collect`` yields ``Row(f0=key, f1=record)``."""
        key = self._key
        key_of = key if callable(key) else (lambda record: record[key])
        return lambda record: Row(f0=key_of(record), f1=record)

    @staticmethod
    def _cannot_override(method: str) -> DataStream:
        # As in PyFlink: repartitioning a KeyedStream would silently drop the keying.
        raise InvalidProgramError(
            f"Cannot override partitioning for KeyedStream ({method}() after key_by): the stream is "
            f"partitioned by its key; call it before key_by, or on the result of a keyed operation"
        )

    def broadcast(self, *broadcast_state_descriptors: Any):
        return self._repartition(PartitionerKind.BROADCAST)

    def shuffle(self) -> DataStream:
        """Raises, as in PyFlink (the non-keyed ``shuffle`` is not built)."""
        return self._cannot_override("shuffle")

    def rescale(self) -> DataStream:
        """Raises, as in PyFlink (the non-keyed ``rescale`` is not built)."""
        return self._cannot_override("rescale")

    def process(self, func: KeyedProcessFunction, output_type: pa.Schema | None = None) -> DataStream:
        if not isinstance(func, KeyedProcessFunction):
            raise TypeError(f"KeyedStream.process expects a KeyedProcessFunction, got {type(func).__name__}")
        key_field = self._key if isinstance(self._key, str) else None
        key_selector = None if isinstance(self._key, str) else self._key
        return self.transform(
            OperatorKind.KEYED_PROCESS,
            "KeyedProcess",
            func,
            output_type,
            key_field=key_field,
            key_selector=key_selector,
        )

    # -- keyed transformations and windows -------------------------------------------------------

    def _keyed(self, kind: OperatorKind, name: str, func: Any, output_type: pa.Schema | None) -> DataStream:
        key_field = self._key if isinstance(self._key, str) else None
        key_selector = None if isinstance(self._key, str) else self._key
        return self.transform(kind, name, func, output_type, key_field=key_field, key_selector=key_selector)

    def map(self, func: Any, output_type: pa.Schema | None = None) -> DataStream:
        """Like ``DataStream.map``, run keyed: ``get_state`` in the function is the record key's state."""
        self._check_function(func, "map", "map")
        return self._keyed(OperatorKind.KEYED_MAP, "Map", func, output_type)

    def flat_map(self, func: Any, output_type: pa.Schema | None = None) -> DataStream:
        """Like ``DataStream.flat_map``, run keyed (keyed state available)."""
        self._check_function(func, "flat_map", "flat_map")
        return self._keyed(OperatorKind.KEYED_FLAT_MAP, "FlatMap", func, output_type)

    def filter(self, func: Any) -> DataStream:
        """Like ``DataStream.filter``, run keyed (keyed state available)."""
        self._check_function(func, "filter", "filter")
        return self._keyed(OperatorKind.KEYED_FILTER, "Filter", func, self.get_output_schema())

    def reduce(self, func: Any) -> DataStream:
        """Rolling reduce per key: emits ``func(previous result, record)`` for every record
        (the key's first record as is). ``func`` is a ReduceFunction or a callable."""
        self._check_function(func, "reduce", "reduce")
        return self._keyed(OperatorKind.KEYED_REDUCE, "Reduce", func, self.get_output_schema())

    def _aggregation(self, aggregation: str, field: str | int) -> DataStream:
        from flinklike_spark._runtime.operators.keyed_operators import FieldAggregation

        schema = self.get_output_schema()
        if isinstance(field, str) and schema is not None and field not in schema.names:
            raise KeyError(
                f"{aggregation}({field!r}): the stream has no field {field!r}; its fields are {schema.names}"
            )
        return self._keyed(
            OperatorKind.KEYED_REDUCE,
            f"Keyed Aggregation ({aggregation})",
            FieldAggregation(aggregation, field),
            schema,
        )

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

        return WindowedStream(self, window_assigner)

    def count_window(self, size: int, slide: int = 0):
        """Windows of ``size`` elements per key, every ``slide`` elements if given (PyFlink's count windows)."""

        if slide:
            return self.window(CountSlidingWindowAssigner.of(size, slide))
        return self.window(CountTumblingWindowAssigner.of(size))


def _whole_stream_key(row: Any) -> int:
    """The key of ``window_all``: every record has the same one."""
    return 0


class DataStreamSink:
    """The end of a pipeline; supports ``name``, ``uid`` and ``set_parallelism``."""

    def __init__(self, transformation: Transformation) -> None:
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
