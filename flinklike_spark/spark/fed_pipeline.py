"""Build the engine job behind ``df.writeStream.format("flinklike").option("pipeline", ...)``.

The pipeline function is ``function(env, stream)``: ``stream`` is the
DataStream of the query's rows (a :class:`~flinklike_spark.spark.bridge_tables.SparkInputSource`
over the job's ``input`` table, schema from the DataFrame, uid
:data:`INPUT_SOURCE_UID`, source parallelism ``parallelism.default``). The
function builds the rest of the job, including its own sinks, and returns
either None or a DataStream whose rows go to Spark (the ``output`` table that
``spark.readStream.format("flinklike")`` on the same directory reads).

This module does not import pyspark: the runner process builds the job with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from flinklike_spark._runtime.operators.operator_spec import OperatorKind
from flinklike_spark.config import Configuration
from flinklike_spark.datastream import DataStream, StreamExecutionEnvironment
from flinklike_spark.errors import ConfigurationError
from flinklike_spark.spark.bridge_tables import INPUT_TABLE, SparkInputSource
from flinklike_spark.spark.pipeline_functions import check_call, resolve_pipeline

__all__ = ["INPUT_SOURCE_UID", "build_fed_pipeline"]

#: The uid of the job's Spark input source (its split positions are restored by this uid).
INPUT_SOURCE_UID = "flinklike-spark-input"


def build_fed_pipeline(
    pipeline: str, config: Configuration, input_schema: pa.Schema, args: Mapping[str, Any] | None = None
) -> tuple[StreamExecutionEnvironment, DataStream | None]:
    """Call ``function(env, stream, **args)`` on a new environment; return it and the stream for Spark (or None).

    Raises:
        ConfigurationError: the spec cannot be resolved (see
            :func:`~flinklike_spark.spark.pipeline_functions.resolve_pipeline`), the function
            returns something other than None or a DataStream, or it builds no sink
            and returns no stream (the job would compute nothing anyone sees).
    """

    function = resolve_pipeline(pipeline)
    directory = config.checkpointing.directory
    env = StreamExecutionEnvironment.get_execution_environment(config)
    stream = env.from_source(
        SparkInputSource(
            f"{str(directory).rstrip('/')}/{INPUT_TABLE}",
            input_schema,
            num_retained_checkpoints=config.checkpointing.num_retained,
        ),
        name="Source: Spark",
    ).uid(INPUT_SOURCE_UID)
    args = dict(args or {})
    how = (
        "a writeStream pipeline is called as function(env, stream) (stream: the DataStream of the query's rows), "
        "with option pipeline.args as keyword arguments"
    )
    check_call(pipeline, function, how, env, stream, **args)
    result = function(env, stream, **args)
    if result is not None and not isinstance(result, DataStream):
        raise ConfigurationError(
            f"option pipeline={pipeline!r} returned {type(result).__name__}; a writeStream pipeline "
            f"function(env, stream) returns None (its own sinks take the rows) or the DataStream whose rows "
            f"a readStream.format('flinklike') on the same directory reads"
        )
    if result is None and not any(t.kind is OperatorKind.SINK for t in env.transformations):
        raise ConfigurationError(
            f"option pipeline={pipeline!r} built no sink and returned no stream: add a sink "
            f"(e.g. stream.sink_to(DeltaSink(...))) or return the DataStream whose rows Spark reads"
        )
    return env, result
