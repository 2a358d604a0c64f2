"""``connect``: ConnectedStreams, BroadcastStream and BroadcastConnectedStream (PyFlink's names).

``a.connect(b)`` pairs two streams (of possibly different fields) for one
two-input function: ``map(CoMapFunction)``, ``flat_map(CoFlatMapFunction)``,
``process(CoProcessFunction)``, or after ``key_by(key_a, key_b)`` (or
connecting two KeyedStreams) ``process(KeyedCoProcessFunction)`` with keyed
state and timers shared by both inputs per key. ``b.broadcast(descriptor)``
makes a BroadcastStream; ``a.connect(broadcast_stream).process(...)`` runs a
(Keyed)BroadcastProcessFunction. See :mod:`flinklike_spark._runtime.operators.co_operators`
for how the runtime carries the two inputs.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from flinklike_spark._runtime.graph.job_graph import PartitionerKind, PartitionerSpec
from flinklike_spark._runtime.operators.co_operators import KEY, CoOperatorDescriptor, SideWrapper
from flinklike_spark._runtime.operators.operator_spec import OperatorKind
from flinklike_spark.common.typeinfo import to_arrow_schema
from flinklike_spark.datastream.functions import (
    BroadcastProcessFunction,
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    KeyedBroadcastProcessFunction,
    KeyedCoProcessFunction,
)
from flinklike_spark.datastream.state import MapStateDescriptor
from flinklike_spark.datastream.stream_protocols import StreamLike
from flinklike_spark.errors import ConfigurationError

__all__ = ["BroadcastConnectedStream", "BroadcastStream", "ConnectedStreams"]


def _unkeyed(stream: StreamLike) -> tuple[StreamLike, Any]:
    """The stream before its key_by (if it is a KeyedStream) and its key (or None)."""
    key = getattr(stream, "key", None)
    if key is not None:
        return stream.with_inputs([(t, None) for t, _ in stream.inputs]), key
    return stream, None


def _wrap(stream: StreamLike, side: int, key: Any) -> StreamLike:
    wrapper = SideWrapper(side, key if isinstance(key, str) else None, None if isinstance(key, str) else key)
    wrapped = stream.map(wrapper)
    wrapped.get_transformation().name = f"Connect input {side + 1}"
    return wrapped


def _co_operator(first: StreamLike, second: StreamLike, name: str, function: Any, output_type, *, keyed: bool,
                 first_spec: PartitionerSpec | None, second_spec: PartitionerSpec | None,
                 broadcast_descriptors: tuple = ()) -> StreamLike:  # fmt: skip
    env = first.get_execution_environment()
    output_type = to_arrow_schema(output_type)
    descriptor = CoOperatorDescriptor(
        function=function,
        broadcast_descriptors=broadcast_descriptors,
    )
    inputs = [(t, first_spec) for t, _ in first.inputs] + [(t, second_spec) for t, _ in second.inputs]
    t = env.add_transformation(
        kind=OperatorKind.KEYED_CO_PROCESS if keyed else OperatorKind.CO_PROCESS,
        name=name,
        function=descriptor,
        inputs=inputs,
        output_schema=output_type,
        timestamp_strategy=first.get_watermark_strategy() or second.get_watermark_strategy(),
        # keyed: the key every input row carries; what restores check and redistribute state by
        key_field=KEY if keyed else None,
    )
    return first.with_inputs([(t, None)])


def _key_spec(env: Any) -> PartitionerSpec:
    return PartitionerSpec(
        kind=PartitionerKind.HASH, key_field=KEY, max_parallelism=env.config.pipeline.max_parallelism
    )


class ConnectedStreams:
    """Two streams processed together by one two-input function."""

    def __init__(self, first: StreamLike, second: StreamLike) -> None:
        if first.get_execution_environment() is not second.get_execution_environment():
            raise ConfigurationError("connect() of streams from different environments")
        self._first, self._key1 = _unkeyed(first)
        self._second, self._key2 = _unkeyed(second)

    @property
    def keyed(self) -> bool:
        return self._key1 is not None

    def key_by(self, key_selector1: Any, key_selector2: Any, key_type: Any = None) -> ConnectedStreams:
        """Key both inputs (field names or key selectors producing keys of the same type); ``key_type``
        (PyFlink's key TypeInformation) is accepted and not needed."""
        connected = ConnectedStreams(self._first, self._second)
        connected._key1, connected._key2 = key_selector1, key_selector2
        return connected

    def _build(self, name: str, function: Any, output_type: pa.Schema | None) -> StreamLike:
        if (self._key1 is None) != (self._key2 is None):
            # A keyed and a non-keyed input may be connected and then keyed both (as in PyFlink), not used so.
            raise ConfigurationError(
                "connect a KeyedStream only with another KeyedStream (or key_by both after connect)"
            )
        env = self._first.get_execution_environment()
        first = _wrap(self._first, 0, self._key1)
        second = _wrap(self._second, 1, self._key2)
        spec = _key_spec(env) if self.keyed else None
        return _co_operator(first, second, name, function, output_type, keyed=self.keyed,
                            first_spec=spec, second_spec=spec)  # fmt: skip

    def map(self, func: CoMapFunction, output_type: pa.Schema | None = None) -> StreamLike:
        if not isinstance(func, CoMapFunction):
            raise TypeError(f"ConnectedStreams.map expects a CoMapFunction, got {func!r}")
        return self._build("Co-Map", func, output_type)

    def flat_map(self, func: CoFlatMapFunction, output_type: pa.Schema | None = None) -> StreamLike:
        if not isinstance(func, CoFlatMapFunction):
            raise TypeError(f"ConnectedStreams.flat_map expects a CoFlatMapFunction, got {func!r}")
        return self._build("Co-Flat Map", func, output_type)

    def process(self, func: Any, output_type: pa.Schema | None = None) -> StreamLike:
        if self.keyed and not isinstance(func, KeyedCoProcessFunction):
            raise TypeError(f"keyed ConnectedStreams.process expects a KeyedCoProcessFunction, got {func!r}")
        if not self.keyed and not isinstance(func, CoProcessFunction):
            if isinstance(func, KeyedCoProcessFunction):
                raise TypeError("a KeyedCoProcessFunction needs keyed inputs: call key_by(key1, key2) first")
            raise TypeError(f"ConnectedStreams.process expects a CoProcessFunction, got {func!r}")
        return self._build("Co-Process" if not self.keyed else "Keyed Co-Process", func, output_type)


class BroadcastStream:
    """A stream sent to every parallel instance, carrying the broadcast state descriptors."""

    def __init__(self, stream: StreamLike, descriptors: tuple[MapStateDescriptor, ...]) -> None:
        for descriptor in descriptors:
            if not isinstance(descriptor, MapStateDescriptor):
                raise ConfigurationError(f"broadcast state needs MapStateDescriptors, got {descriptor!r}")
        self._stream = stream
        self.descriptors = descriptors


class BroadcastConnectedStream:
    """A (keyed or not) stream connected with a BroadcastStream."""

    def __init__(self, stream: StreamLike, broadcast: BroadcastStream) -> None:
        self._stream, self._key = _unkeyed(stream)
        self._broadcast = broadcast

    def process(self, func: Any, output_type: pa.Schema | None = None) -> StreamLike:
        keyed = self._key is not None
        if keyed and not isinstance(func, KeyedBroadcastProcessFunction):
            raise TypeError(
                f"a keyed stream connected with a broadcast stream needs a KeyedBroadcastProcessFunction, got {func!r}"
            )
        if not keyed and not isinstance(func, BroadcastProcessFunction):
            raise TypeError(
                f"a stream connected with a broadcast stream needs a BroadcastProcessFunction, got {func!r}"
            )
        env = self._stream.get_execution_environment()
        first = _wrap(self._stream, 0, self._key)
        second = _wrap(self._broadcast._stream, 1, None)
        return _co_operator(
            first, second, "Broadcast Process" if not keyed else "Keyed Broadcast Process", func, output_type,
            keyed=keyed, first_spec=_key_spec(env) if keyed else None,
            second_spec=PartitionerSpec(kind=PartitionerKind.BROADCAST), broadcast_descriptors=self._broadcast.descriptors,
        )  # fmt: skip
