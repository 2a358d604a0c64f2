"""``foreachBatch`` helpers: idempotent Delta writes, and micro-batches as input of a running job.

Spark replays a micro-batch after a failure with the same ``batch_id``; both
helpers make the replay a no-op with a Delta app transaction keyed by
``(app id, batch_id)``:

* :func:`idempotent_delta_writer` uses delta-spark's ``txnAppId``/``txnVersion``
  writer options (Delta skips a write whose version it already recorded);
* :func:`feed_job` collects the micro-batch to the driver as Arrow
  (``toArrow``; ``mapInArrow`` would write on the executors but needs pandas,
  which the project does not depend on), stages it as one Parquet file and
  commits it to the job's ``input`` table like ``writeStream.format("flinklike")``
  does. For micro-batches too large for the driver, use ``writeStream.format("flinklike")``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import to_arrow_schema

from checkpointing.app_transactions import is_committed
from flinklike_spark.config import Configuration
from flinklike_spark.spark.bridge_tables import INPUT_TABLE, BridgeTable, stage_batches
from flinklike_spark.spark.writer import input_app_id

__all__ = ["feed_job", "idempotent_delta_writer"]


def idempotent_delta_writer(
    path: str | os.PathLike[str], app_id: str, *, options: Mapping[str, str] | None = None
) -> Callable[[DataFrame, int], None]:
    """A ``foreachBatch`` function appending each micro-batch to the Delta table at ``path`` once.

    Args:
        app_id: unique per writing query (Delta's ``txnAppId``); keep it across restarts
            of the query, change it when the query starts over with a new checkpointLocation.
        options: more Delta writer options.

    Example::

        query = df.writeStream.foreachBatch(idempotent_delta_writer("/data/out", "fraud-alerts")).start()
    """
    path = os.fspath(path)
    extra = dict(options or {})

    def write(batch: DataFrame, batch_id: int) -> None:
        (
            batch.write.format("delta")
            .mode("append")
            .option("txnAppId", app_id)
            .option("txnVersion", batch_id)
            .options(**extra)
            .save(path)
        )

    return write


def feed_job(
    directory: str | os.PathLike[str], query_id: str = "default", *, storage: Mapping[str, str] | None = None
) -> Callable[[DataFrame, int], None]:
    """A ``foreachBatch`` function that appends each micro-batch to the input of the job in ``directory``.

    ``storage``: the storage keys of the job's configuration (``s3.*``,
    ``fs.azure.account.*``) when ``directory`` is on an object store.

    The job reads it with :class:`flinklike_spark.spark.bridge_tables.SparkInputSource`
    (``<directory>/input``). The driver writes and commits the micro-batch with
    app transaction ``("spark/<query_id>", batch_id)``, so a replayed
    micro-batch is ignored.
    """
    path = f"{os.fspath(directory).rstrip('/')}/{INPUT_TABLE}"
    app_id = input_app_id(query_id)
    settings = Configuration(dict(storage or {})).storage

    def feed(batch: DataFrame, batch_id: int) -> None:
        table = BridgeTable(path, storage=settings)
        existing = table.open()
        if existing is not None and is_committed(existing, app_id, batch_id):
            return  # a replay: Spark re-runs the batch, the job already has it
        schema = to_arrow_schema(batch.schema, timezone="UTC")
        staged = stage_batches(table, batch.toArrow().to_batches(), schema, what=f"micro-batch {batch_id} for {path!r}")
        if staged is not None and not table.commit_once(schema, [staged], app_id, batch_id):
            table.fs.rm_file(f"{table.root}/{staged.path}")

    return feed
