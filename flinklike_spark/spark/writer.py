"""``df.writeStream.format("flinklike")``: Spark micro-batches become input of an engine job.

Executors (``write``) stage one Parquet file per Spark task in the job's
``input`` table directory; the driver-side ``commit(messages, batch_id)``
adds all of a micro-batch's files in one Delta transaction carrying app
transaction ``(f"spark/{queryId}", batch_id)``. A micro-batch that Spark
replays after a restart finds its app transaction already recorded and adds
nothing, so the job (whose :class:`~flinklike_spark.spark.bridge_tables.SparkInputSource`
tails the table) sees every micro-batch exactly once.

With option ``pipeline`` the query also runs the job: the pipeline is built
once here (a bad one fails the query at its start), each commit registers the
query run's job in the job's record after the input is committed (the driver's
:class:`~flinklike_spark.spark.writer_jobs.WriterJobOwner` runs it), and fails when
that job failed (:mod:`flinklike_spark.spark.writer_jobs`). Each Spark task's file carries its
partition id in its name, so the job reads each Spark partition's rows in one
split, in commit order.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import uuid
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from checkpointing.app_transactions import DataFile
from flinklike_spark.errors import ConfigurationError
from flinklike_spark.spark.bridge_tables import INPUT_TABLE, BridgeTable, last_commit_info, stage_batches
from flinklike_spark.spark.fed_pipeline import build_fed_pipeline
from flinklike_spark.spark.job_runner import JobSpec
from flinklike_spark.spark.options import WriteOptions

__all__ = ["FlinklikeStreamWriter", "StagedInput", "input_app_id"]

_log = logging.getLogger(__name__)
#: Commit info key recording the writing query's checkpointLocation.
_LOCATION_KEY = "flinklike.spark.checkpointLocation"
#: Task property naming the job group: a streaming query runs its micro-batches in the group of its runId.
_JOB_GROUP_PROPERTY = "spark.jobGroup.id"
_RUN_ID_IN_DESCRIPTION = re.compile(r"^runId = ([0-9a-f-]{36})$", re.MULTILINE)
#: How long a commit waits for the driver's owner to take a new run, and for its job to start.
_CLAIM_TIMEOUT_SECONDS = 60.0
_START_TIMEOUT_SECONDS = 600.0


def _run_id(context) -> str | None:
    """The id of the query run a write task belongs to (its job group; else its job description's ``runId``)."""
    group = context.getLocalProperty(_JOB_GROUP_PROPERTY)
    try:
        return str(uuid.UUID(group))
    except (TypeError, ValueError):
        match = _RUN_ID_IN_DESCRIPTION.search(context.getLocalProperty("spark.job.description") or "")
        return match.group(1) if match else None


def input_app_id(query_id: str) -> str:
    """The app id under which micro-batches of query ``query_id`` are committed to a job's input."""
    return f"spark/{query_id}"


@dataclasses.dataclass(frozen=True)
class StagedInput(WriterCommitMessage):
    """The file one Spark task staged (None when the task had no rows), and the task's query run."""

    file: DataFile | None
    run_id: str | None = None


class FlinklikeStreamWriter(DataSourceStreamArrowWriter):
    """Writes micro-batches into a job's ``input`` table, each exactly once."""

    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        self._options = options
        self._schema = to_arrow_schema(schema, timezone="UTC")
        self._path = f"{options.directory.rstrip('/')}/{INPUT_TABLE}"
        if options.pipeline is not None:
            # a bad pipeline fails start
            build_fed_pipeline(options.pipeline, options.config, self._schema, options.pipeline_args)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedInput:
        from pyspark import TaskContext

        context = TaskContext.get()
        partition = context.partitionId() if context is not None else None
        run_id = _run_id(context) if context is not None else None
        table = BridgeTable(self._path, storage=self._options.storage)
        staged = stage_batches(table, iterator, self._schema, what=f"Spark rows for {table.uri!r}", partition=partition)
        return StagedInput(staged, run_id)

    def commit(self, messages: list[StagedInput | None], batchId: int) -> None:
        self._commit_input(messages, batchId)
        if self._options.pipeline is not None:
            self._check_job(messages)

    def _check_job(self, messages: list[StagedInput | None]) -> None:
        """After the input is committed: make sure the driver runs this query run's job; raise if it failed."""
        from flinklike_spark.spark.writer_jobs import request_job, wait_for_job

        run_id = next((m.run_id for m in messages if m is not None and m.run_id), None)
        if run_id is None:
            return  # a micro-batch without tasks: the next one names the run
        options = self._options
        spec = JobSpec(pipeline=options.pipeline, config=dict(options.flink_options), schema=None,
                       directory=options.directory, input_schema=self._schema, run_id=run_id,
                       pipeline_args=options.pipeline_args)  # fmt: skip
        table = spec.record_table()
        request_job(table, spec, claim_timeout=_CLAIM_TIMEOUT_SECONDS)
        wait_for_job(table, run_id, claim_timeout=_CLAIM_TIMEOUT_SECONDS, start_timeout=_START_TIMEOUT_SECONDS)

    def _commit_input(self, messages: list[StagedInput | None], batchId: int) -> None:
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
