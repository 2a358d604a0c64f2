"""The engine side of the Spark bridge: the job's ``output`` and ``input`` Delta tables.

A job that Spark reads (``spark.readStream.format("flinklike")``) or feeds
(``df.writeStream.format("flinklike")``) keeps two Delta tables beside its
checkpoint tables, under ``execution.checkpointing.dir``::

    <dir>/output/   the job's rows for Spark, partitioned by ``checkpoint_id``
    <dir>/input/    rows Spark wrote for the job, one table version per Spark micro-batch

:class:`SparkOutputSink` is a two-phase-commit sink: it stages Parquet files
and, when checkpoint ``n`` completes, commits them as partition
``checkpoint_id = n`` with app transaction ``(OUTPUT_APP_ID, n)``. The app
transaction's version is therefore the newest checkpoint whose output is
visible: that is the offset a Spark query reads up to, and a commit retried
after a restore is skipped. Partition values live in the Delta log, not in the
files, so a file's rows need not know their checkpoint when they are written.

:class:`SparkInputSource` tails the ``input`` table as splits: split ``i`` of
``n`` reads the files of the Spark partitions ``p % n == i`` (a task's file
names its partition), version by version in commit order, and its position
``(version, file, row)`` is checkpointed like any source offset, so a restored
job continues exactly after the last row it had read. Spark's stream writer
commits each micro-batch with app transaction ``(f"spark/{query}", batch_id)``,
so a micro-batch Spark replays after a restart adds no version. With
``num_retained_checkpoints`` the readers delete the files that every retained
checkpoint has read and record their removal (Delta FSCK).

Nothing here imports pyspark: the engine runs without it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import time
import uuid
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError, TableNotFoundError

from checkpointing.app_transactions import DataFile, commit_files, is_committed, retry_lost_races
from checkpointing.layout import delta_uri, resolve_storage
from flinklike_spark.config import parse_duration
from flinklike_spark.connector_api import (
    END_OF_INPUT,
    Boundedness,
    Committer,
    PrecommittingSinkWriter,
    ReadResult,
    SinkWriterContext,
    Source,
    SourceReader,
    SourceReaderContext,
    SourceSplit,
    TwoPhaseCommittingSink,
)
from flinklike_spark.errors import ConfigurationError, SchemaMismatchError, SinkCommitError
from flinklike_spark.storage import StorageBound, StorageConfig

__all__ = [
    "CHECKPOINT_COLUMN",
    "INPUT_TABLE",
    "OUTPUT_APP_ID",
    "OUTPUT_TABLE",
    "BridgeTable",
    "SparkInputReader",
    "SparkInputSource",
    "SparkInputSplit",
    "SparkOutputSink",
    "conform_batch",
    "last_commit_info",
    "output_offset",
    "spark_partition_of",
    "stage_batches",
]

_log = logging.getLogger(__name__)

OUTPUT_TABLE = "output"
INPUT_TABLE = "input"
CHECKPOINT_COLUMN = "checkpoint_id"
#: The output sink runs with parallelism 1, so one app id covers the whole output.
OUTPUT_APP_ID = "flinklike/spark-output"
_ATTEMPTS = 8  # commits that lose a race (the Spark reader's retention deletes concurrently)


class BridgeTable:
    """A Delta table of the bridge: its deltalake URI and the fsspec filesystem for its files.

    ``storage`` (the job's ``s3.*`` / ``fs.azure.account.*`` settings) gives the
    options for ``path``; explicit deltalake ``storage_options`` override them.
    """

    def __init__(
        self, path: str, storage_options: Mapping[str, str] | None = None, storage: StorageConfig | None = None
    ) -> None:
        self.path = path
        options = (storage or StorageConfig()).options(path, delta=storage_options)
        self.storage_options = dict(options.delta) or None
        self.fs, self.root = resolve_storage(path, options.fsspec)
        self.uri = delta_uri(self.fs, self.root)

    def open(self, version: int | None = None) -> DeltaTable | None:
        try:
            return DeltaTable(self.uri, version=version, storage_options=self.storage_options)
        except TableNotFoundError:
            return None

    def create(self, schema: pa.Schema, partition_by: list[str] | None = None) -> DeltaTable:
        """Open the table, creating it with ``schema`` if missing (safe when writers race)."""
        table = self.open()
        if table is None:
            self.fs.makedirs(self.root, exist_ok=True)
            try:
                DeltaTable.create(
                    self.uri, schema, mode="ignore", partition_by=partition_by, storage_options=self.storage_options
                )
            except DeltaError:
                pass  # another writer created it first
            table = DeltaTable(self.uri, storage_options=self.storage_options)
        return table

    def commit_once(
        self,
        schema: pa.Schema,
        files: list[DataFile],
        app_id: str,
        version: int,
        *,
        partition_by: list[str] | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> bool:
        """Commit ``files`` with app transaction ``(app_id, version)`` unless it is there; True if committed now.

        ``metadata`` goes into the commit's info (``DeltaTable.history()``) beside ``flinklike.app``.

        Retries commits that lose a race against another writer (each retry
        re-reads the table, so a concurrent commit of the same version is seen).

        Raises:
            SinkCommitError: the table cannot be written, or a staged file is missing.
        """

        def attempt() -> bool:
            table = self.create(schema, partition_by)
            if is_committed(table, app_id, version):
                return False
            for f in files:
                if not self.fs.exists(f"{self.root}/{f.path}"):
                    raise FileNotFoundError(f"staged file {f.path} of {app_id} version {version} is missing")
            commit_files(
                table,
                [f.add_action() for f in files],
                {app_id: version},
                partition_by=partition_by or (),
                custom_metadata={**(metadata or {}), "flinklike.app": f"{app_id}@{version}"},
            )
            return True

        try:
            return retry_lost_races(attempt, attempts=_ATTEMPTS, table_uri=self.uri)
        except (DeltaError, OSError) as exc:
            raise SinkCommitError(
                f"cannot commit {len(files)} files of {app_id} version {version} to Delta table "
                f"{self.uri!r}: {type(exc).__name__}: {exc}"
            ) from exc


def last_commit_info(table: DeltaTable, app_id: str) -> dict[str, Any] | None:
    """The commit info of the newest commit that recorded an app transaction of ``app_id``, or None."""
    prefix = f"{app_id}@"
    for info in table.history():  # newest first
        if str(info.get("flinklike.app", "")).startswith(prefix):
            return info
    return None


def conform_batch(batch: pa.RecordBatch, schema: pa.Schema, *, what: str) -> pa.RecordBatch:
    """``batch`` with exactly ``schema``'s columns (cast where needed).

    Raises:
        SchemaMismatchError: naming the missing, extra or uncastable fields and ``what`` the rows are.
    """
    if batch.schema.equals(schema):
        return batch
    if set(batch.schema.names) != set(schema.names):
        missing = [n for n in schema.names if n not in batch.schema.names]
        extra = [n for n in batch.schema.names if n not in schema.names]
        raise SchemaMismatchError(
            f"{what}: rows have fields {batch.schema.names} but the declared schema has {schema.names} "
            f"(missing {missing}, unexpected {extra}); change the rows or the declared schema "
            f"(output_type= of the stream, or .schema(...) on the Spark reader)"
        )
    batch = batch.select(schema.names)
    try:
        return batch.cast(schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise SchemaMismatchError(
            f"{what}: rows [{batch.schema.to_string(show_schema_metadata=False)}] do not fit the declared "
            f"schema [{schema.to_string(show_schema_metadata=False)}]: {exc}"
        ) from exc


def stage_batches(
    table: BridgeTable, batches, schema: pa.Schema | None, *, what: str, partition: int | None = None
) -> DataFile | None:
    """Write ``batches`` into one new Parquet file in ``table``'s directory (not yet committed).

    Args:
        schema: conform every batch to it; None takes the first batch's schema.
        partition: the Spark partition the rows come from; it is part of the file name
            (``part-<partition>-<uuid>...``, as Spark names its files), and
            :class:`SparkInputSource` reads each partition's files in one split.

    Returns:
        The staged file, or None when there were no rows.
    """
    relative = (
        f"part-{uuid.uuid4().hex}-c000.zstd.parquet"
        if partition is None
        else f"part-{partition:05d}-{uuid.uuid4().hex}-c000.zstd.parquet"
    )
    full = f"{table.root}/{relative}"
    writer = stream = None
    rows = 0
    try:
        for batch in batches:
            if isinstance(batch, pa.Table):
                batch = batch.combine_chunks().to_batches()[0] if batch.num_rows else None
            if batch is None or batch.num_rows == 0:
                continue
            schema = schema or batch.schema
            batch = conform_batch(batch, schema, what=what)
            if writer is None:
                table.fs.makedirs(table.root, exist_ok=True)
                stream = table.fs.open(full, "wb")
                writer = pq.ParquetWriter(stream, schema, compression="zstd")
            writer.write_batch(batch)
            rows += batch.num_rows
    finally:
        if writer is not None:
            writer.close()
            stream.close()
    if writer is None:
        return None
    return DataFile(path=relative, size=table.fs.size(full), num_records=rows)


def output_offset(table: DeltaTable | None) -> int:
    """The newest checkpoint id whose output is committed in the ``output`` table (-1: none)."""
    if table is None:
        return -1
    version = table.transaction_version(OUTPUT_APP_ID)
    return -1 if version is None else version


# -- engine -> Spark ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class _OutputCommittable:
    checkpoint_id: int
    file: DataFile


class SparkOutputSink(StorageBound, TwoPhaseCommittingSink):
    """Commits a stream's rows per completed checkpoint into the bridge's ``output`` table.

    Args:
        path: the ``output`` table (``<execution.checkpointing.dir>/output``).
        schema: the declared schema of the rows (what Spark reads); rows are cast to it.

    Must run with parallelism 1 (the runner sets it): one writer keeps one app
    transaction whose version is the Spark offset. Rows written before the
    barrier of checkpoint ``n`` become partition ``checkpoint_id = n`` when
    ``n`` completes; a bounded job's last rows get the next id after the
    newest committed one.
    """

    columnar_input = True  # the output table's columns

    def __init__(self, path: str, schema: pa.Schema, *, storage_options: Mapping[str, str] | None = None) -> None:
        if CHECKPOINT_COLUMN in schema.names:
            raise ConfigurationError(
                f"the stream read by Spark has a field {CHECKPOINT_COLUMN!r}, which the bridge's output table "
                f"uses as its partition column; rename the field"
            )
        self.path = path
        self.schema = schema
        self.storage_options = dict(storage_options) if storage_options else None
        self.storage: StorageConfig | None = None  # the job's settings, bound when the job is submitted

    def __repr__(self) -> str:
        return f"SparkOutputSink({self.path!r})"

    def storage_urls(self) -> tuple[str, ...]:
        return (self.path,)

    def table_schema(self) -> pa.Schema:
        return self.schema.append(pa.field(CHECKPOINT_COLUMN, pa.int64()))

    def create_writer(self, context: SinkWriterContext) -> _OutputWriter:
        if context.parallelism != 1:
            raise ConfigurationError(f"SparkOutputSink must run with parallelism 1, got {context.parallelism}")
        return _OutputWriter(self)

    def create_committer(self) -> _OutputCommitter:
        return _OutputCommitter(self)


class _OutputWriter(PrecommittingSinkWriter):
    """Buffers rows between barriers and stages them as one Parquet file per checkpoint."""

    def __init__(self, sink: SparkOutputSink) -> None:
        self._sink = sink
        self._table = BridgeTable(sink.path, sink.storage_options, sink.storage)
        self._pending: list[pa.RecordBatch] = []

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows:
            self._pending.append(conform_batch(batch, self._sink.schema, what="the stream read by Spark"))

    def prepare_commit(self, checkpoint_id: int) -> list[_OutputCommittable]:
        batches, self._pending = self._pending, []
        staged = stage_batches(self._table, batches, self._sink.schema, what="the stream read by Spark")
        return [] if staged is None else [_OutputCommittable(checkpoint_id=checkpoint_id, file=staged)]


class _OutputCommitter(Committer):
    def __init__(self, sink: SparkOutputSink) -> None:
        self._sink = sink
        self._table = BridgeTable(sink.path, sink.storage_options, sink.storage)

    def commit(self, committables: list[_OutputCommittable]) -> None:
        for committable in committables:
            checkpoint_id = committable.checkpoint_id
            if checkpoint_id == END_OF_INPUT:
                # The end of a bounded job: Spark offsets must stay small ordered ints.
                checkpoint_id = output_offset(self._table.open()) + 1
            file = dataclasses.replace(committable.file, partition_values={CHECKPOINT_COLUMN: str(checkpoint_id)})
            if self._table.commit_once(
                self._sink.table_schema(), [file], OUTPUT_APP_ID, checkpoint_id, partition_by=[CHECKPOINT_COLUMN]
            ):
                _log.info("committed %d rows of checkpoint %d for Spark", file.num_records, checkpoint_id)


# -- Spark -> engine ------------------------------------------------------------------------------

_PARTITION_IN_NAME = re.compile(r"(?:^|/)part-(\d{5})-[0-9a-f]{32}-")


def spark_partition_of(uri: str) -> int:
    """The Spark partition whose rows a file of the ``input`` table holds (0 when its name has none).

    ``writeStream.format("flinklike")`` names each task's file ``part-<partition>-<uuid>...``;
    ``feed_job`` writes one file per micro-batch without a partition (all of them are partition 0).
    """
    match = _PARTITION_IN_NAME.search(uri)
    return int(match.group(1)) if match else 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class SparkInputSplit(SourceSplit):
    """The files of some Spark partitions in the ``input`` table, read up to a position.

    The split reads the files of the Spark partitions ``p`` with ``p % count == index``,
    table version by table version (a version's files sorted by name).

    Attributes:
        version: the table version being read (its added files of this split).
        file_index: the next file of this split in that version.
        row: rows of that file already returned.
        index, count: which Spark partitions the split reads.
    """

    version: int = 0
    file_index: int = 0
    row: int = 0
    index: int = 0
    count: int = 1

    def owns(self, uri: str) -> bool:
        return spark_partition_of(uri) % self.count == self.index

    def position(self) -> tuple[int, int]:
        """(version, file_index): files of this split strictly before it are fully read."""
        return self.version, self.file_index


class SparkInputSource(StorageBound, Source):
    """Tails the bridge's ``input`` table, which ``df.writeStream.format("flinklike")`` appends to.

    Args:
        path: the ``input`` table (``<execution.checkpointing.dir>/input``); it may not exist yet.
        schema: the rows' schema (what the Spark query writes); files are cast to it.
        poll_interval: how often to look for a new table version when idle.
        num_retained_checkpoints: remove files that the last this many completed
            checkpoints have all read (the job's ``execution.checkpointing.num-retained``);
            None keeps every file. Savepoints are not counted: a savepoint older than the
            retained checkpoints cannot be restored once its input is removed.

    Unbounded. One split per source subtask at the job's first start
    (``create_splits(parallelism)``); split ``i`` of ``n`` reads the files of the
    Spark partitions ``p % n == i``, in commit order. So each Spark partition's
    rows are read in order by one subtask; rows of different partitions, and of
    different micro-batches in different partitions, interleave. A restored job
    keeps its splits (a changed parallelism redistributes them).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        schema: pa.Schema,
        *,
        poll_interval: timedelta | str = timedelta(milliseconds=200),
        storage_options: Mapping[str, str] | None = None,
        num_retained_checkpoints: int | None = None,
    ) -> None:
        if not isinstance(schema, pa.Schema):
            raise ConfigurationError(f"SparkInputSource needs a pyarrow.Schema, got {schema!r}")
        if num_retained_checkpoints is not None and num_retained_checkpoints < 1:
            raise ConfigurationError(
                f"SparkInputSource: num_retained_checkpoints must be None or >= 1, got {num_retained_checkpoints!r}"
            )
        self.path = os.fspath(path)
        self.schema = schema
        self.poll_interval = parse_duration(poll_interval, key="poll_interval")
        self.storage_options = dict(storage_options) if storage_options else None
        self.storage: StorageConfig | None = None  # the job's settings, bound when the job is submitted
        self.num_retained_checkpoints = num_retained_checkpoints

    def __repr__(self) -> str:
        return f"SparkInputSource({self.path!r})"

    def storage_urls(self) -> tuple[str, ...]:
        return (self.path,)

    @property
    def boundedness(self) -> Boundedness:
        return Boundedness.CONTINUOUS_UNBOUNDED

    def output_schema(self) -> pa.Schema:
        return self.schema

    def create_splits(self, parallelism: int) -> list[SparkInputSplit]:
        count = max(1, parallelism)
        return [
            SparkInputSplit(split_id=f"spark-input-{i:05d}-of-{count:05d}", index=i, count=count) for i in range(count)
        ]

    def create_reader(self, context: SourceReaderContext) -> SparkInputReader:
        return SparkInputReader(self)


class _VersionFiles:
    """Files each table version added (set difference with the previous version), cached per reader.

    An idle reader asks for the next version every poll interval: the latest
    version is read through one handle brought up to date (``update_incremental``
    reads only new commits; loading the table replays its log), and each version's
    file set is kept for the next version's difference.
    """

    def __init__(self, table: BridgeTable) -> None:
        self._table = table
        self._cache: dict[int, list[str]] = {}
        self._file_sets: dict[int, set[str]] = {}
        self._latest: DeltaTable | None = None

    def _latest_table(self) -> DeltaTable | None:
        if self._latest is not None:
            try:
                self._latest.update_incremental()
                return self._latest
            except (DeltaError, OSError):  # e.g. the table was removed: load it as new
                self._latest = None
        self._latest = self._table.open()
        return self._latest

    def _files_of(self, version: int, latest: DeltaTable) -> set[str]:
        if version not in self._file_sets:
            table = latest if latest.version() == version else self._table.open(version)
            self._file_sets[version] = set(table.file_uris())
        return self._file_sets[version]

    def added(self, version: int) -> list[str] | None:
        """Files ``version`` added, sorted; None if the table has no such version yet."""
        if version in self._cache:
            return self._cache[version]
        latest = self._latest_table()
        if latest is None or latest.version() < version:
            return None
        now = self._files_of(version, latest)
        before = set() if version == 0 else self._files_of(version - 1, latest)
        files = sorted(now - before)
        self._cache[version] = files
        for old in [v for v in self._cache if v < version - 64]:
            del self._cache[old]
        for old in [v for v in self._file_sets if v < version]:
            del self._file_sets[old]
        return files


@dataclasses.dataclass
class _Cursor:
    split: SparkInputSplit
    files: list[str] | None = None  # this split's files of split.version
    current: pa.Table | None = None  # the file being read
    next_poll: float = 0.0
    start: tuple[int, int] = (0, 0)  # the position this reader started the split at
    read: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)  # file -> (version, index)


class SparkInputReader(SourceReader):
    """Reads its splits round-robin, each in commit order; removes input every retained checkpoint has read."""

    def __init__(self, source: SparkInputSource) -> None:
        self._source = source
        self._table = BridgeTable(source.path, source.storage_options, source.storage)
        self._versions = _VersionFiles(self._table)
        self._cursors: list[_Cursor] = []
        self._turn = 0
        self._snapshots: dict[int, dict[str, tuple[int, int]]] = {}  # checkpoint id -> split id -> position
        self._completed: list[dict[str, tuple[int, int]]] = []  # positions of checkpoints completed by this reader

    def add_splits(self, splits: list[SourceSplit]) -> None:
        for split in splits:
            if not isinstance(split, SparkInputSplit):
                raise ConfigurationError(f"SparkInputSource cannot read split {split!r}")
            self._cursors.append(_Cursor(split=split, start=split.position()))

    def poll_next(self, max_rows: int) -> ReadResult:
        for _ in range(len(self._cursors)):
            cursor = self._cursors[self._turn % len(self._cursors)]
            self._turn += 1
            result = self._poll(cursor, max_rows)
            if result is not None:
                return result
        return ReadResult(wait_seconds=self._source.poll_interval.total_seconds())

    def _poll(self, cursor: _Cursor, max_rows: int) -> ReadResult | None:
        if cursor.current is None and not self._open_next_file(cursor):
            return None
        split = cursor.split
        batch = cursor.current.slice(split.row, max_rows)
        row = split.row + batch.num_rows
        if row >= cursor.current.num_rows:
            cursor.current = None
            cursor.split = dataclasses.replace(split, file_index=split.file_index + 1, row=0)
        else:
            cursor.split = dataclasses.replace(split, row=row)
        if batch.num_rows == 0:
            return ReadResult()
        rows = batch.combine_chunks().to_batches()[0]
        return ReadResult(batch=conform_batch(rows, self._source.schema, what=f"Spark input table {self._table.uri!r}"))

    def _open_next_file(self, cursor: _Cursor) -> bool:
        """Load the split's next file into ``cursor.current``; False when nothing new is committed."""
        while True:
            split = cursor.split
            if cursor.files is None:
                now = time.monotonic()
                if now < cursor.next_poll:
                    return False
                cursor.next_poll = now + self._source.poll_interval.total_seconds()
                added = self._versions.added(split.version)
                if added is None:
                    return False
                cursor.files = [uri for uri in added if split.owns(uri)]
                for index, uri in enumerate(cursor.files):
                    cursor.read[uri] = (split.version, index)
            if split.file_index < len(cursor.files):
                with self._table.fs.open(cursor.files[split.file_index], "rb") as stream:
                    cursor.current = pq.read_table(stream)
                return True
            # This version is done: move to the next one.
            cursor.split = dataclasses.replace(split, version=split.version + 1, file_index=0, row=0)
            cursor.files = None
            cursor.next_poll = 0.0

    def snapshot_state(self, checkpoint_id: int) -> list[SparkInputSplit]:
        splits = [cursor.split for cursor in self._cursors]
        if self._source.num_retained_checkpoints is not None:
            self._snapshots[checkpoint_id] = {s.split_id: s.position() for s in splits}
        return splits

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        retained = self._source.num_retained_checkpoints
        positions = self._snapshots.pop(checkpoint_id, None)
        for older in [c for c in self._snapshots if c < checkpoint_id]:
            del self._snapshots[older]  # subsumed: a later checkpoint completed
        if retained is None or positions is None:
            return
        self._completed = ([*self._completed, positions])[-retained:]
        # Until `retained` checkpoints completed here, older retained ones (from before a restore)
        # may sit at positions this reader never saw: remove nothing yet.
        if len(self._completed) == retained:
            self._remove_consumed(self._completed[0])

    def _remove_consumed(self, bound: Mapping[str, tuple[int, int]]) -> None:
        """Delete this reader's files read before ``bound`` (per split), then record their removal in the log."""
        doomed: list[str] = []
        for cursor in self._cursors:
            position = bound.get(cursor.split.split_id)
            if position is None:
                continue
            if cursor.start > (0, 0):  # files before the start position were read by the restored checkpoint
                doomed.extend(self._before_start(cursor))
                cursor.start = (0, 0)
            done = [uri for uri, at in cursor.read.items() if at < position]
            doomed.extend(done)
            for uri in done:
                del cursor.read[uri]
        if not doomed:
            return
        for uri in doomed:
            try:
                self._table.fs.rm_file(uri)
            except FileNotFoundError:
                pass
            except OSError as exc:  # retention is best effort: the rows are consumed either way
                _log.warning("cannot remove consumed Spark input %s: %s", uri, exc)
        try:  # FSCK: one remove action per file that is gone (ours, and other subtasks' if they raced)
            retry_lost_races(lambda: self._table.open().repair(), attempts=_ATTEMPTS, table_uri=self._table.uri)
        except DeltaError as exc:
            _log.warning("cannot record the removal of consumed Spark input in %s: %s", self._table.uri, exc)

    def _before_start(self, cursor: _Cursor) -> list[str]:
        """This split's files that versions before its start position added, and the start version's earlier ones."""
        version, index = cursor.start
        files: list[str] = []
        if version > 0:
            before = self._table.open(version - 1)
            live = set(self._table.open().file_uris())
            files = [uri for uri in before.file_uris() if uri in live and cursor.split.owns(uri)]
        added = self._versions.added(version) or []
        files.extend([uri for uri in added if cursor.split.owns(uri)][:index])
        return files

    def close(self) -> None:
        for cursor in self._cursors:
            cursor.current = None
