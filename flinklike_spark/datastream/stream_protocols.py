"""What the stream extensions (connected, windowed and async streams) use of a stream.

:mod:`~flinklike_spark.datastream.data_stream` builds those extensions
(``connect``, ``window``, ...) and they hand back streams it defines; typing
their arguments by these protocols instead of by ``DataStream`` keeps the
imports one way: ``data_stream`` imports the extensions, never the reverse.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import pyarrow as pa

from flinklike_spark._runtime.graph.job_graph import PartitionerSpec
from flinklike_spark._runtime.graph.translation import Transformation
from flinklike_spark.common.watermark_strategy import WatermarkStrategy

__all__ = ["EnvironmentLike", "KeyedStreamLike", "StreamLike"]


class EnvironmentLike(Protocol):
    """A StreamExecutionEnvironment as its streams see it (the environment creates them, so they do not import it)."""

    @property
    def config(self) -> Any: ...

    def add_transformation(self, **fields: Any) -> Transformation:
        """Add an operator to the job being built and return its transformation."""

    def execute_async(self, job_name: str | None = None) -> Any: ...


class StreamLike(Protocol):
    """A DataStream as its extensions see it."""

    @property
    def inputs(self) -> list[tuple[Transformation, PartitionerSpec | None]]: ...

    def get_execution_environment(self) -> Any: ...

    def get_transformation(self) -> Transformation: ...

    def get_output_schema(self) -> pa.Schema | None: ...

    def get_watermark_strategy(self) -> WatermarkStrategy | None: ...

    def transform(self, kind: str, name: str, function: Any, output_type: Any = None, **extra: Any) -> StreamLike:
        """A new stream: this one through an operator of ``kind``."""

    def map(self, func: Any, output_type: pa.Schema | None = None) -> StreamLike: ...

    def with_inputs(self, inputs: list[tuple[Transformation, PartitionerSpec | None]]) -> StreamLike:
        """A plain (non-keyed) stream of the same environment reading ``inputs``."""


class KeyedStreamLike(StreamLike, Protocol):
    """A KeyedStream as its extensions see it."""

    @property
    def key(self) -> str | Callable[[Any], Any]: ...
