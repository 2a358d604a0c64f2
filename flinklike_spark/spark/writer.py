"""``df.writeStream.format("flinklike")``: Spark micro-batches become input of an engine job.

Executors (``write``) stage one Parquet file per Spark task in the job's
``input`` table directory; the driver-side ``commit(messages, batch_id)``
adds all of a micro-batch's files in one Delta transaction carrying app
transaction ``(f"spark/{queryId}", batch_id)``. A micro-batch that Spark
replays after a restart finds its app transaction already recorded and adds
nothing, so the job (whose :class:`~connectors.spark_bridge.SparkInputSource`
tails the table) sees every micro-batch exactly once.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from checkpointing.app_transactions import DataFile
from connectors.spark_bridge import INPUT_TABLE, BridgeTable, last_commit_info, stage_batches
from flinklike_spark.errors import ConfigurationError
from flinklike_spark.spark.options import WriteOptions

__all__ = ["FlinklikeStreamWriter", "StagedInput", "input_app_id"]

_log = logging.getLogger(__name__)
#: Commit info key recording the writing query's checkpointLocation.
_LOCATION_KEY = "flinklike.spark.checkpointLocation"


def input_app_id(query_id: str) -> str:
    """The app id under which micro-batches of query ``query_id`` are committed to a job's input."""
    return f"spark/{query_id}"


@dataclasses.dataclass(frozen=True)
class StagedInput(WriterCommitMessage):
    """The file one Spark task staged (None when the task had no rows)."""

    file: DataFile | None


class FlinklikeStreamWriter(DataSourceStreamArrowWriter):
    """Writes micro-batches into a job's ``input`` table, each exactly once."""

    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        self._options = options
        self._schema = to_arrow_schema(schema, timezone="UTC")
        self._path = f"{options.directory.rstrip('/')}/{INPUT_TABLE}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedInput:
        table = BridgeTable(self._path, storage=self._options.storage)
        return StagedInput(stage_batches(table, iterator, self._schema, what=f"Spark rows for {table.uri!r}"))

    def commit(self, messages: list[StagedInput | None], batchId: int) -> None:
        files = [m.file for m in messages if m is not None and m.file is not None]
        if not files:
            return  # an empty micro-batch: nothing to add (a replay of it adds nothing either)
        app_id = input_app_id(self._options.query_id)
        location = self._options.checkpoint_location
        table = BridgeTable(self._path, storage=self._options.storage)
        metadata = {_LOCATION_KEY: location} if location else None
        if not table.commit_once(self._schema, files, app_id, batchId, metadata=metadata):
            self.abort(messages, batchId)  # the replay's own files are never committed
            self._check_replay(table, app_id, batchId)

    def _check_replay(self, table: BridgeTable, app_id: str, batch_id: int) -> None:
        """A batch id already committed is a replay only if the same query (checkpointLocation) committed it.

        Raises:
            ConfigurationError: another checkpointLocation committed under this queryId (a
                query that started over counts its batch ids from 0 again: its rows
                would all be dropped as replays).
        """
        info = last_commit_info(table.open(), app_id)
        committed_by = None if info is None else info.get(_LOCATION_KEY)
        ours = self._options.checkpoint_location
        if ours is not None and committed_by is not None and committed_by != ours:
            raise ConfigurationError(
                f'df.writeStream.format("flinklike"): micro-batch {batch_id} of queryId '
                f"{self._options.query_id!r} was already committed to {table.uri!r} by the query with "
                f"checkpointLocation {committed_by!r}; this query uses checkpointLocation {ours!r}, so its batch "
                f"ids started again at 0 and its rows would be taken for replays and dropped. Give this query "
                f'its own queryId (.option("queryId", "...")): each query feeding a job, and each new '
                f"checkpointLocation of a query, needs its own"
            )
        if ours is None or committed_by is None:
            _log.warning(
                "micro-batch %d of %s was committed before; ignored as a replay (the checkpointLocation of the "
                "committing query is unknown, so a query that started over under the same queryId cannot be "
                "told from a replay)", batch_id, app_id,
            )  # fmt: skip
        else:
            _log.info("micro-batch %d of %s was committed before; ignored the replay", batch_id, app_id)

    def abort(self, messages: list[StagedInput | None], batchId: int) -> None:
        table = BridgeTable(self._path, storage=self._options.storage)
        for message in messages:
            if message is not None and message.file is not None:
                try:
                    table.fs.rm_file(f"{table.root}/{message.file.path}")
                except OSError:
                    pass
