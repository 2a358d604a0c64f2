"""Spark in, engine, Spark out: :func:`transform` runs a streaming DataFrame through an engine pipeline.

It composes the two halves of the bridge on one job directory:

1. a feeding query ``df.writeStream.format("flinklike").option("pipeline", ...)``
   whose micro-batches become the job's input, and which runs the job
   (:mod:`flinklike_spark.spark.writer_jobs`);
2. the returned DataFrame, ``spark.readStream.format("flinklike")`` on the same
   directory without a pipeline: it reads the rows of the stream the pipeline
   returned, committed per checkpoint in the ``output`` table.

Exactly once end to end: micro-batches reach the job once (app transactions),
the job's output is committed per checkpoint, and the reading query's offsets
are checkpoint ids.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.streaming import StreamingQuery

from flinklike_spark.errors import ConfigurationError
from flinklike_spark.spark.fed_pipeline import build_fed_pipeline
from flinklike_spark.spark.options import WriteOptions

__all__ = ["FEED_CHECKPOINT", "transform"]

#: Where the feeding query keeps its Spark checkpoint unless told otherwise.
FEED_CHECKPOINT = "_spark_feed"


def transform(
    df: DataFrame,
    pipeline: str,
    directory: str | os.PathLike[str],
    *,
    query_id: str = "transform",
    checkpoint_location: str | None = None,
    trigger: Mapping[str, Any] | None = None,
    max_checkpoints_per_trigger: int | None = None,
    **options: Any,
) -> DataFrame:
    """Start a query feeding ``df`` to the engine pipeline; return the streaming DataFrame of its result.

    Args:
        df: a streaming DataFrame (any Spark source).
        pipeline: ``module:function``; ``function(env, stream)`` gets the DataStream of
            ``df``'s rows and returns the DataStream whose rows come back to Spark
            (with a declared schema: ``output_type=`` on its last operator).
        directory: the job's directory (``execution.checkpointing.dir``).
        query_id: the feeding query's ``queryId`` (keep it across restarts of the same
            ``checkpoint_location``, change it with a new one).
        checkpoint_location: the feeding query's Spark checkpoint (default
            ``<directory>/_spark_feed``); restarting from it resumes the job.
        trigger: the feeding query's trigger, as keyword arguments of
            ``DataStreamWriter.trigger`` (e.g. ``{"processingTime": "1 second"}``).
        max_checkpoints_per_trigger: the reader's admission control.
        options: Flink configuration keys of the job (``**{"parallelism.default": "2"}``).

    Returns:
        The streaming DataFrame of the pipeline's rows. The feeding query runs
        until stopped (``spark.streams.active``; its name is ``flinklike-feed:<query_id>``);
        stop it to stop the job.

    Raises:
        ConfigurationError: a bad option, or a pipeline that does not return a stream
            with a declared schema (checked here, before anything starts).
    """
    directory = os.fspath(directory)
    location = checkpoint_location or f"{directory.rstrip('/')}/{FEED_CHECKPOINT}"
    flink = {str(k): str(v) for k, v in options.items()}
    parsed = WriteOptions.parse(
        {**flink, "path": directory, "pipeline": pipeline, "queryId": query_id, "checkpointLocation": location}
    )
    _, stream = build_fed_pipeline(pipeline, parsed.config, to_arrow_schema(df.schema, timezone="UTC"))
    schema = None if stream is None else stream.get_output_schema()
    if schema is None:
        raise ConfigurationError(
            f"transform(): pipeline {pipeline!r} must return the DataStream whose rows come back to Spark, with a "
            f"declared schema (output_type= on its last operator); it returned "
            f"{'None' if stream is None else 'a stream without a declared schema'}"
        )
    writer = (
        df.writeStream.format("flinklike")
        .queryName(f"flinklike-feed:{query_id}")
        .options(**flink)
        .option("pipeline", pipeline)
        .option("queryId", query_id)
        .option("checkpointLocation", location)
    )
    if trigger:
        writer = writer.trigger(**dict(trigger))
    feed: StreamingQuery = writer.start(directory)
    reader = df.sparkSession.readStream.format("flinklike").schema(from_arrow_schema(schema))
    if max_checkpoints_per_trigger is not None:
        reader = reader.option("maxCheckpointsPerTrigger", str(max_checkpoints_per_trigger))
    for key, value in flink.items():
        if key.startswith("s3.") or key.startswith("fs."):
            reader = reader.option(key, value)  # the reader needs the storage settings of the output table
    try:
        return reader.load(directory)
    except Exception:
        feed.stop()
        raise
