"""``spark.readStream.format("flinklike")``: a Python data source reading an engine job's output.

Where each piece runs (pyspark 4.2; docs/architecture.md, "Spark bridge"):

* ``FlinklikeDataSource.__init__``/``schema`` run in a short-lived Python
  worker at ``load()``: options are validated and the pipeline is imported and
  built there, so a bad option or pipeline fails ``load()``.
* the stream reader's ``initialOffset``/``latestOffset``/``partitions``/
  ``commit``/``stop`` run in one long-lived Python worker per query: it owns the
  engine job's runner process (:class:`~flinklike_spark.spark.job_runner.EngineJob`).
* ``read`` runs on executors on an unpickled reader: it only reads the Parquet
  files its :class:`OutputFiles` partition names.

Offsets are ``{"checkpoint": n}``: every checkpoint id ``<= n`` whose output
is committed in the job's ``output`` table has been handed to Spark. A micro-batch
``(start, end]`` reads the partitions ``start < checkpoint_id <= end``, which
are immutable once committed, so a replayed micro-batch reads the same rows.
``commit(end)`` removes the partitions ``<= end`` (retention), so a restarted
query re-reads exactly what it had not committed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError, DeltaError
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxFiles, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from flinklike_spark.errors import ConfigurationError
from flinklike_spark.spark.bridge_tables import (
    CHECKPOINT_COLUMN,
    OUTPUT_TABLE,
    BridgeTable,
    conform_batch,
    output_offset,
)
from flinklike_spark.spark.job_record_table import RunnerState
from flinklike_spark.spark.job_runner import EngineJob, JobSpec, build_pipeline
from flinklike_spark.spark.options import ReadOptions, WriteOptions

__all__ = ["FlinklikeDataSource", "FlinklikeStreamReader", "OutputFiles"]

_log = logging.getLogger(__name__)
_RETENTION_ATTEMPTS = 5
_PARTITION_BYTES = 128 * 1024 * 1024  # Spark's spark.sql.files.maxPartitionBytes default
#: A query with nothing to process asks ``latestOffset`` again every ``spark.sql.streaming.pollingDelay``
#: (10 ms): the same question within this many seconds gets the same answer without a look at the job
#: and its output table. Output only appears per completed checkpoint (``execution.checkpointing.interval``,
#: 1 s by default here), so at most this much latency is added; each look cost 4 ms of CPU (an idle query
#: kept its source worker 40% busy, measured).
_POLL_INTERVAL_SECONDS = 0.1


class OutputFiles(InputPartition):
    """Committed output files of consecutive checkpoints from ``checkpoint_id`` on, in order (one Spark task)."""

    def __init__(self, checkpoint_id: int, uris: list[str]) -> None:
        super().__init__(checkpoint_id)
        self.checkpoint_id = checkpoint_id
        self.uris = uris


class FlinklikeDataSource(DataSource):
    """The ``flinklike`` format: read a job's output (``readStream``) or feed its input (``writeStream``)."""

    @classmethod
    def name(cls) -> str:
        return "flinklike"

    def schema(self) -> StructType:
        """The read schema when Spark was given none: the pipeline is built here, so a bad one fails ``load()``.

        (Not in ``__init__``: Spark creates the data source for writers too, whose
        pipelines take ``(env, stream)``; they are checked in :meth:`streamWriter`.)
        """
        read = ReadOptions.parse(self.options)
        if read.pipeline is None:
            raise ConfigurationError(
                "spark.readStream.format(\"flinklike\"): option 'pipeline' is required: 'module:function' "
                "building the job on a StreamExecutionEnvironment and returning the DataStream whose rows go to "
                'Spark; or, to read the stream that the pipeline of a df.writeStream.format("flinklike") query '
                "on the same directory returns, give its schema with .schema(...)"
            )
        _, stream = build_pipeline(read.pipeline, read.config, read.pipeline_args)
        declared = stream.get_output_schema()
        if declared is None:
            raise ConfigurationError(
                f"pipeline {read.pipeline!r} returns a stream without a declared schema: pass "
                f"output_type= to its last operator, or give the schema to Spark with .schema(...)"
            )
        return from_arrow_schema(declared)

    def streamReader(self, schema: StructType) -> FlinklikeStreamReader:
        return FlinklikeStreamReader(ReadOptions.parse(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool):
        from flinklike_spark.spark.writer import FlinklikeStreamWriter

        return FlinklikeStreamWriter(WriteOptions.parse(self.options), schema)


class FlinklikeStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are completed checkpoint ids; see the module docstring for where each method runs."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self._options = options
        self._arrow_schema = to_arrow_schema(schema, timezone="UTC")
        self._output = BridgeTable(f"{options.directory.rstrip('/')}/{OUTPUT_TABLE}", storage=options.config.storage)
        self._job: EngineJob | None = None  # created lazily: read() on executors never starts a job
        self._target: int | None = None  # Trigger.AvailableNow: read no further
        self._table: DeltaTable | None = None  # the output table, brought up to date (source worker only)
        self._table_read_at = 0.0
        self._answered: tuple[tuple[int, int | None], dict, float] | None = None  # latestOffset: question, answer, when

    def __getstate__(self) -> dict:
        return self.__dict__ | {"_table": None, "_answered": None}  # read() on executors opens no table

    # -- source worker ---------------------------------------------------------------------------

    def _engine(self) -> EngineJob | None:
        """The job this query runs (None: it reads a job that a writeStream query runs)."""
        if self._options.pipeline is None:
            return None
        if self._job is None:
            self._job = EngineJob(
                JobSpec(
                    pipeline=self._options.pipeline,
                    config=dict(self._options.flink_options),
                    schema=self._arrow_schema,
                    directory=self._options.directory,
                    pipeline_args=self._options.pipeline_args,
                )
            )
        self._job.ensure_running()
        return self._job

    def initialOffset(self) -> dict:
        self._engine()
        return {"checkpoint": -1}

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self._options.max_checkpoints_per_trigger
        # One "file" per checkpoint: Spark's built-in limits are all it passes to Python sources.
        return ReadAllAvailable() if limit is None else ReadMaxFiles(limit)

    def _output_table(self, max_age: float = 0.0) -> DeltaTable | None:
        """The ``output`` table (None: not created yet) at its latest version, or at one read at most
        ``max_age`` seconds ago; one handle, updated in place."""
        now = time.monotonic()
        if self._table is not None:
            if now - self._table_read_at <= max_age:
                return self._table
            try:
                self._table.update_incremental()
                self._table_read_at = now
                return self._table
            except (DeltaError, OSError):  # e.g. the directory was removed: load it as new
                self._table = None
        self._table, self._table_read_at = self._output.open(), now
        return self._table

    def _committed_after(self, start: int) -> list[int]:
        """Checkpoint ids ``> start`` whose output is committed, ascending."""
        table = self._output_table()
        if table is None:
            return []
        newest = output_offset(table)
        if newest <= start:
            return []
        actions = pa.table(table.get_add_actions(flatten=True))
        ids = set(actions[f"partition.{CHECKPOINT_COLUMN}"].to_pylist()) if actions.num_rows else set()
        return sorted(i for i in ids if start < i <= newest)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = start["checkpoint"]
        question = (begin, limit.max_files if isinstance(limit, ReadMaxFiles) else None)
        now = time.monotonic()
        if self._target is None and self._answered is not None:
            asked, answer, when = self._answered
            if asked == question and now - when < _POLL_INTERVAL_SECONDS:
                return answer
        answer = self._latest_offset(begin, limit)
        self._answered = (question, answer, now)
        return answer

    def _latest_offset(self, begin: int, limit: ReadLimit) -> dict:
        engine = self._engine()
        ids = self._committed_after(begin)
        if self._target is not None:
            ids = [i for i in ids if i <= self._target]
            if not ids and self._target > begin and engine is not None:
                ids = self._wait_for_bounded_job(begin, engine)
        if isinstance(limit, ReadMaxFiles):
            ids = ids[: limit.max_files]
        return {"checkpoint": ids[-1] if ids else begin}

    def prepareForTriggerAvailableNow(self) -> None:
        """Read what is committed now; a bounded job is read to its end (waiting for it)."""
        engine = self._engine()
        record = engine.wait_started() if engine is not None else None
        self._target = (2**62) if record is not None and record.bounded else output_offset(self._output_table())

    def _wait_for_bounded_job(self, begin: int, engine: EngineJob) -> list[int]:
        """AvailableNow on a bounded job: block until more output is committed or the job ended."""
        while True:
            engine.ensure_running()
            ids = self._committed_after(begin)
            if ids:
                return ids
            record = engine.record
            if record is not None and record.state is RunnerState.FINISHED:
                return []
            time.sleep(0.1)

    def reportLatestOffset(self) -> dict | None:
        return {"checkpoint": output_offset(self._output_table(max_age=_POLL_INTERVAL_SECONDS))}  # progress only

    def partitions(self, start: dict, end: dict) -> list[OutputFiles]:
        low, high = start["checkpoint"], end["checkpoint"]
        if high <= low:
            return []
        table = self._output_table()
        actions = pa.table(table.get_add_actions(flatten=True))
        files = sorted(
            (checkpoint_id, path, size)
            for path, size, checkpoint_id in zip(
                actions["path"].to_pylist(),
                actions["size_bytes"].to_pylist(),
                actions[f"partition.{CHECKPOINT_COLUMN}"].to_pylist(),
            )
            if low < checkpoint_id <= high
        )
        # Consecutive checkpoints share a Spark task up to a size bound: a task per checkpoint
        # costs a Python worker round trip each, and one task keeps each key's rows in order.
        partitions: list[OutputFiles] = []
        size = _PARTITION_BYTES
        for checkpoint_id, path, file_size in files:
            if size + file_size > _PARTITION_BYTES:
                partitions.append(OutputFiles(checkpoint_id, []))
                size = 0
            partitions[-1].uris.append(f"{self._output.uri}/{path}")
            size += file_size
        return partitions

    def commit(self, end: dict) -> None:
        """Spark is done with everything ``<= end``: drop it from the output table (retention)."""
        high = end["checkpoint"]
        for attempt in range(_RETENTION_ATTEMPTS):
            table = self._output_table()
            if table is None:
                return
            uris = table.file_uris(file_pruning_predicate=[(CHECKPOINT_COLUMN, "<=", high)])
            if not uris:
                return
            try:
                table.delete(f"{CHECKPOINT_COLUMN} <= {high}")
            except CommitFailedError:
                time.sleep(0.05 * (attempt + 1))
                continue
            except DeltaError as exc:  # retention is best effort: the rows are consumed either way
                _log.warning("cannot drop consumed output <= %d from %s: %s", high, self._output.uri, exc)
                return
            for uri in uris:  # not VACUUM: it would also delete the sink's staged, uncommitted files
                try:
                    self._output.fs.rm_file(uri)
                except OSError:
                    pass
            return

    def stop(self) -> None:
        if self._job is not None:
            self._job.stop()

    # -- executors -------------------------------------------------------------------------------

    def read(self, partition: OutputFiles) -> Iterator[pa.RecordBatch]:
        fs = self._output.fs
        what = f"output of checkpoints from {partition.checkpoint_id} on in {self._output.uri}"
        for uri in partition.uris:
            with fs.open(uri, "rb") as stream:
                for batch in pq.ParquetFile(stream).iter_batches():
                    yield conform_batch(batch, self._arrow_schema, what=what)
