"""DeltaSink: exactly-once appends to a Delta table, committed at checkpoints.

Each sink subtask streams its rows into Parquet files inside the table
directory. The files are invisible to readers until committed: at every
checkpoint barrier the writer closes its open file and returns a
:class:`DeltaCommittable` (pre-commit); when the checkpoint completes the
committer adds the files to the table in one Delta transaction that carries the
app transaction ``(app_id, checkpoint_id)`` (Delta's ``txn`` action, what Spark's
``foreachBatch`` idempotent writes use). A committable whose app transaction
version is already in the table is skipped, so committing the same
committables again after a restart never writes a row twice.

``app_id`` is ``<transactional id prefix>/<subtask>``, the prefix being
``flinklike/<lineage id>/<sink uid>``: the lineage id is the id of the first
job of a chain of resumes, so a resumed job commits under the same app ids,
its checkpoint ids continue the restored one's, and the table's app
transaction versions say which checkpoints the sink already committed
(:meth:`DeltaSink.committed_checkpoint`). Restored committables keep the app
id they were written under (a rescaled job commits old subtask ``s``'s
committables in new subtask ``s % parallelism``).
Files of checkpoints that never complete stay uncommitted in the directory
until ``VACUUM`` removes them. The table is created on the first commit with
the stream's schema (or appended to, if it exists with a schema the rows can
be cast to) and with Delta Lake's default ``delta.checkpointInterval`` of 10
(:data:`CREATED_TABLE_CONFIGURATION`).

Example::

    stream.sink_to(DeltaSink("/data/counts")).uid("counts-sink")
    # later, with Spark: spark.read.format("delta").load("/data/counts")
    # or in Python:     read_delta_table("/data/counts")
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
import threading
import time
import uuid
import weakref
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError, TableNotFoundError
from deltalake.transaction import AddAction

from checkpointing.app_transactions import check_fence, claim_fence, commit_files, is_committed, retry_lost_races
from checkpointing.layout import delta_uri, resolve_storage, scan_table
from flinklike_spark.connector_api import (
    Committer,
    PrecommittingSinkWriter,
    SinkWriterContext,
    TwoPhaseCommittingSink,
)
from flinklike_spark.errors import ConfigurationError, SchemaMismatchError, SinkCommitError, SinkFencedError
from flinklike_spark.storage import StorageAccess, StorageBound, StorageConfig, StorageLocation

__all__ = ["DeltaCommittable", "DeltaCommitter", "DeltaSink", "DeltaSinkWriter", "StagedFile", "read_delta_table"]

_log = logging.getLogger(__name__)

_DEFAULT_TARGET_FILE_BYTES = 128 * 1024 * 1024
# Table creation and commits that lose a race: every subtask's commit after a checkpoint
# carries the lineage fence's app transaction, so they race each other too.
_ATTEMPTS = 20

#: Table properties of a table the sink creates. A Delta checkpoint every 10 commits is Delta Lake's (Spark's)
#: default; deltalake writes one every 100 when the property is absent, and a reader then loads up to 99 commit
#: files, each on its own thread of deltalake's I/O pool, a pool that never shrinks while commits keep coming.
CREATED_TABLE_CONFIGURATION: Final[Mapping[str, str]] = MappingProxyType({"delta.checkpointInterval": "10"})


@dataclasses.dataclass(frozen=True, kw_only=True)
class StagedFile:
    """A Parquet file written into the table directory but not yet in any table version.

    Attributes:
        path: relative to the table root, as committed in the Delta ``add`` action.
        size: bytes.
        num_records: rows in the file.
        modification_time: epoch milliseconds.
    """

    path: str
    size: int
    num_records: int
    modification_time: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeltaCommittable:
    """The files one sink subtask wrote before checkpoint ``version``'s barrier."""

    app_id: str
    version: int
    files: tuple[StagedFile, ...]
    schema: pa.Schema


class _Table:
    """Where the table lives: the deltalake URI and the fsspec filesystem for staged files."""

    def __init__(
        self, path: str, storage_options: Mapping[str, str] | None, storage: StorageConfig | None = None
    ) -> None:
        options = (storage or StorageConfig()).options(path, delta=storage_options)
        self.storage_options = dict(options.delta) or None
        self.fs, self.root = resolve_storage(path, options.fsspec)
        self.uri = delta_uri(self.fs, self.root)

    def open(self) -> DeltaTable | None:
        """The table, or None if there is none yet.

        Raises:
            ConfigurationError: the path is a regular file (deltalake would say
                "Path does not exist").
        """
        try:
            return DeltaTable(self.uri, storage_options=self.storage_options)
        except TableNotFoundError:
            self._check_not_a_file()
            return None
        except DeltaError:
            self._check_not_a_file()
            raise

    def _check_not_a_file(self) -> None:
        if self.fs.isfile(self.root):
            raise ConfigurationError(
                f"DeltaSink path {self.root!r} is a regular file, not a directory: a Delta table is a directory "
                f"(holding _delta_log/); remove the file or choose another path"
            )

    def open_or_create(self, schema: pa.Schema) -> DeltaTable:
        """Open the table, creating it with ``schema`` if missing (safe when subtasks race)."""
        table = self.open()
        if table is None:
            self.fs.makedirs(self.root, exist_ok=True)
            try:
                DeltaTable.create(
                    self.uri, schema, mode="ignore", configuration=dict(CREATED_TABLE_CONFIGURATION),
                    storage_options=self.storage_options,
                )  # fmt: skip
            except DeltaError:
                pass  # another subtask created it first; the reload below sees its version 0
            # Reload: the object ``create`` returns to the loser of a race describes its own,
            # never-committed metadata, and committing on it fails ("Metadata changed").
            table = DeltaTable(self.uri, storage_options=self.storage_options)
        return table


class DeltaSink(StorageBound, TwoPhaseCommittingSink):
    """Appends a stream to the Delta table at ``path``, exactly once with checkpointing enabled.

    Args:
        path: local path or URL of the table (created on the first commit).
        storage_options: deltalake ``storage_options`` (``AWS_ENDPOINT_URL``...); they
            override what the job's configuration (``s3.*``, ``fs.azure.account.*``)
            gives for ``path``, and their endpoint and credentials reach fsspec too.
        target_file_size: roll to a new Parquet file after this many bytes of
            Arrow data (files are also closed at every checkpoint).

    Rows become visible when the checkpoint after them completes (Flink's
    exactly-once sinks behave the same) and, for bounded jobs, when the job
    finished. Without checkpointing, an unbounded job never commits.
    """

    columnar_input = True  # a table's columns

    #: This job's epoch in its restore lineage (set by :meth:`fence_older_writers`; 0: unfenced).
    fence_epoch: int = 0

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        storage_options: Mapping[str, str] | None = None,
        target_file_size: int = _DEFAULT_TARGET_FILE_BYTES,
    ) -> None:
        path = os.fspath(path) if isinstance(path, os.PathLike) else path
        if not isinstance(path, str) or not path:
            raise ConfigurationError(f"DeltaSink path must be a non-empty path or URL, got {path!r}")
        if not isinstance(target_file_size, int) or target_file_size <= 0:
            raise ConfigurationError(f"target_file_size must be a positive int of bytes, got {target_file_size!r}")
        self.path = path
        self.storage_options = dict(storage_options) if storage_options else None
        self.target_file_size = target_file_size
        self.storage: StorageConfig | None = None  # the job's settings, bound when the job is submitted

    def __repr__(self) -> str:
        return f"DeltaSink({self.path!r})"

    def storage_urls(self) -> tuple[str, ...]:
        return (self.path,)

    def storage_locations(self) -> tuple[StorageLocation, ...]:
        options = (self.storage or StorageConfig()).options(self.path, delta=self.storage_options)
        return (StorageLocation(url=self.path, what="DeltaSink table", access=StorageAccess.WRITE, options=options,
                                delta=True),)  # fmt: skip

    def _table(self) -> _Table:
        return _Table(self.path, self.storage_options, self.storage)

    def create_writer(self, context: SinkWriterContext) -> DeltaSinkWriter:
        prefix = context.transactional_id_prefix or f"flinklike/{context.job_id}/{context.operator_uid}"
        app_id = f"{prefix}/{context.subtask_index}"
        return DeltaSinkWriter(self._table(), app_id, self.target_file_size)

    def committed_checkpoint(self, transactional_id_prefix: str, max_subtasks: int) -> int | None:
        """The highest app transaction version of ``<prefix>/<subtask>`` in the table, or None."""
        table = self._table()
        try:
            dt = table.open()
            if dt is None:
                return None
            versions = [dt.transaction_version(f"{transactional_id_prefix}/{s}") for s in range(max_subtasks)]
        except (DeltaError, OSError) as exc:
            raise SinkCommitError(
                f"cannot read the committed app transactions of Delta table {table.uri!r}: {type(exc).__name__}: {exc}"
            ) from exc
        return max((v for v in versions if v is not None), default=None)

    def fence_older_writers(self, transactional_id_prefix: str) -> DeltaSink:
        """Claim a new epoch for ``transactional_id_prefix`` in the table; older jobs' commits then fail.

        A table that does not exist yet holds no output to protect; the job then
        runs unfenced (epoch 0) until it creates the table.
        """
        table = self._table()
        try:
            if table.open() is None:
                return self

            def claim() -> int:
                return claim_fence(table.open(), transactional_id_prefix)

            epoch = retry_lost_races(claim, attempts=_ATTEMPTS, table_uri=table.uri)
        except (DeltaError, OSError) as exc:
            raise SinkCommitError(
                f"cannot claim transactional ids {transactional_id_prefix}/<subtask> in Delta table {table.uri!r}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        _log.info("job owns %s in %s with epoch %d", transactional_id_prefix, table.uri, epoch)
        bound = copy.copy(self)
        bound.fence_epoch = epoch
        return bound

    def create_committer(self) -> DeltaCommitter:
        return DeltaCommitter(self._table(), fence_epoch=self.fence_epoch)


class DeltaSinkWriter(PrecommittingSinkWriter):
    """Streams one subtask's rows into staged Parquet files; see :class:`DeltaSink`."""

    def __init__(self, table: _Table, app_id: str, target_file_size: int) -> None:
        self._table = table
        self._app_id = app_id
        self._target = target_file_size
        self._schema: pa.Schema | None = None
        self._writer: pq.ParquetWriter | None = None
        self._file: tuple[str, Any] | None = None  # (relative path, open stream)
        self._file_bytes = 0
        self._file_rows = 0
        self._staged: list[StagedFile] = []

    def open(self) -> None:
        existing = self._table.open()
        if existing is not None:
            self._schema = pa.schema(existing.schema())

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        if self._schema is None:
            self._schema = batch.schema
        batch = self._conform(batch)
        if self._writer is None:
            self._start_file()
        self._writer.write_batch(batch)
        self._file_rows += batch.num_rows
        self._file_bytes += batch.nbytes
        if self._file_bytes >= self._target:
            self._close_file()

    def _conform(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        if batch.schema.equals(self._schema):
            return batch
        if batch.schema.names != self._schema.names:
            raise SchemaMismatchError(
                f"rows for Delta table {self._table.uri!r} have columns {batch.schema.names}; "
                f"the table has {self._schema.names}"
            )
        try:
            return batch.cast(self._schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise SchemaMismatchError(
                f"rows with schema [{batch.schema.to_string(show_schema_metadata=False)}] cannot be written to "
                f"Delta table {self._table.uri!r} with schema [{self._schema.to_string(show_schema_metadata=False)}]: "
                f"{exc}"
            ) from exc

    def _start_file(self) -> None:
        relative = f"part-{uuid.uuid4().hex}-c000.zstd.parquet"
        self._table.fs.makedirs(self._table.root, exist_ok=True)
        stream = self._table.fs.open(f"{self._table.root}/{relative}", "wb")
        self._file = (relative, stream)
        self._writer = pq.ParquetWriter(stream, self._schema, compression="zstd")
        self._file_bytes = self._file_rows = 0

    def _close_file(self) -> None:
        relative, stream = self._file
        self._writer.close()
        stream.close()
        self._writer = self._file = None
        size = self._table.fs.size(f"{self._table.root}/{relative}")
        self._staged.append(
            StagedFile(path=relative, size=size, num_records=self._file_rows, modification_time=int(time.time() * 1000))
        )

    def prepare_commit(self, checkpoint_id: int) -> list[DeltaCommittable]:
        if self._writer is not None:
            self._close_file()
        if not self._staged:
            return []
        committable = DeltaCommittable(
            app_id=self._app_id, version=checkpoint_id, files=tuple(self._staged), schema=self._schema
        )
        self._staged = []
        return [committable]

    def close(self) -> None:
        """Close an open file; it stays uncommitted (a failed or cancelled attempt)."""
        if self._writer is not None:
            relative, stream = self._file
            try:
                self._writer.close()
            finally:
                stream.close()
                self._writer = self._file = None
            _log.debug("left uncommitted file %s in %s", relative, self._table.uri)


class DeltaCommitter(Committer):
    """Adds committed files to the table; skips committables whose app transaction is already there.

    Every commit carries the lineage fence's app transaction, so two commits
    to one table never both land at once: Delta rejects the later one and it
    is retried on the newer version. The sink subtasks of one process
    therefore commit through one :class:`_GroupCommit` per table and epoch:
    the first subtask to get there commits what every subtask of the process
    handed in meanwhile, in one Delta transaction, instead of each losing
    races to the others (parallelism ``p`` in one TaskExecutor would take up
    to ``p * (p + 1) / 2`` attempts per checkpoint). Subtasks in other
    processes still race and retry.
    """

    def __init__(self, table: _Table, *, fence_epoch: int = 0) -> None:
        self._group = _GroupCommit.of(table, fence_epoch)

    def commit(self, committables: list[DeltaCommittable]) -> None:
        if committables:
            self._group.commit(committables)


@dataclasses.dataclass
class _Handed:
    """Committables a subtask handed to a :class:`_GroupCommit`, and what became of them."""

    committables: tuple[DeltaCommittable, ...]
    done: bool = False
    error: BaseException | None = None


class _GroupCommit:
    """The commits of one table and fence epoch in this process, batched; see :class:`DeltaCommitter`.

    :meth:`commit` returns once ``committables`` are in the table, committed by
    this thread or by another one whose batch took them; if that batch failed,
    it raises the batch's error.
    """

    _groups: weakref.WeakValueDictionary[tuple[Any, ...], _GroupCommit] = weakref.WeakValueDictionary()
    _groups_lock = threading.Lock()

    @classmethod
    def of(cls, table: _Table, fence_epoch: int) -> _GroupCommit:
        key = (table.uri, tuple(sorted((table.storage_options or {}).items())), fence_epoch)
        with cls._groups_lock:
            group = cls._groups.get(key)
            if group is None:
                group = cls._groups[key] = cls(table, fence_epoch)
            return group

    def __init__(self, table: _Table, fence_epoch: int) -> None:
        self._table = table
        self._fence_epoch = fence_epoch
        self._loaded: DeltaTable | None = None  # kept between commits, brought up to date incrementally
        self._commit_lock = threading.Lock()  # held by the thread committing a batch
        self._queue_lock = threading.Lock()
        self._queue: list[_Handed] = []

    def commit(self, committables: Sequence[DeltaCommittable]) -> None:
        handed = _Handed(tuple(committables))
        with self._queue_lock:
            self._queue.append(handed)
        with self._commit_lock:
            if not handed.done:
                with self._queue_lock:
                    batch, self._queue = self._queue, []
                try:
                    self._commit_batch([c for h in batch for c in h.committables])
                except BaseException as exc:
                    for h in batch:
                        h.done, h.error = True, exc
                else:
                    for h in batch:
                        h.done = True
        if handed.error is not None:
            raise handed.error

    def _commit_batch(self, committables: list[DeltaCommittable]) -> None:
        try:
            retry_lost_races(lambda: self._commit(committables), attempts=_ATTEMPTS, table_uri=self._table.uri)
        except SinkFencedError:
            raise
        except (DeltaError, OSError) as exc:
            raise SinkCommitError(
                f"cannot commit {sum(len(c.files) for c in committables)} files to Delta table "
                f"{self._table.uri!r}: {type(exc).__name__}: {exc}"
            ) from exc

    def _latest(self, schema: pa.Schema) -> DeltaTable:
        """The table at its latest version: loaded once, then only the commits since are read."""
        if self._loaded is None:
            self._loaded = self._table.open_or_create(schema)
        else:
            self._loaded.update_incremental()
        return self._loaded

    def _commit(self, committables: Sequence[DeltaCommittable]) -> None:
        """One attempt: load the latest version, skip what it already has, add the rest."""
        try:
            self._commit_on(self._latest(committables[0].schema), committables)
        except BaseException:
            self._loaded = None  # the next attempt loads the table afresh
            raise

    def _commit_on(self, table: DeltaTable, committables: Sequence[DeltaCommittable]) -> None:
        due, versions = [], {}
        for committable in committables:
            if is_committed(table, committable.app_id, committable.version):
                continue  # committed before a failure or by an earlier attempt
            due.append(committable)
            versions[committable.app_id] = max(versions.get(committable.app_id, -1), committable.version)
        if not due:
            return
        for prefix in sorted({c.app_id.rpartition("/")[0] for c in due}):
            versions.update(check_fence(table, prefix, self._fence_epoch, what=f"DeltaSink {self._table.uri!r}"))
        for committable in due:
            for staged in committable.files:
                if not self._table.fs.exists(f"{self._table.root}/{staged.path}"):
                    raise FileNotFoundError(f"staged file {staged.path} of {committable.app_id} is missing")
        actions = [
            AddAction(
                path=staged.path,
                size=staged.size,
                partition_values={},
                modification_time=staged.modification_time,
                data_change=True,
                stats=f'{{"numRecords":{staged.num_records}}}',
            )
            for committable in due
            for staged in committable.files
        ]
        commit_files(table, actions, versions, custom_metadata={"flinklike.sink": ",".join(sorted(versions))})
        _log.info(
            "committed %d files (%d rows) to %s for %s",
            len(actions),
            sum(s.num_records for c in due for s in c.files),
            self._table.uri,
            sorted(versions.items()),
        )


def read_delta_table(
    path: str | os.PathLike[str],
    *,
    columns: list[str] | None = None,
    storage_options: Mapping[str, str] | None = None,
    storage: StorageConfig | None = None,
) -> pa.Table:
    """The current version of the Delta table at ``path`` (a DeltaSink's output, say), as a pyarrow Table.

    Unlike ``DeltaTable(path).to_pyarrow_table()``, it is safe to call just
    before the program exits (see :func:`checkpointing.layout.scan_table`).
    ``storage_options`` / ``storage`` are those of :class:`DeltaSink`.

    Raises:
        deltalake.exceptions.TableNotFoundError: there is no Delta table at ``path``.
    """
    path = os.fspath(path)
    options = (storage or StorageConfig()).options(path, delta=storage_options)
    fs, root = resolve_storage(path, options.fsspec)
    table = DeltaTable(delta_uri(fs, root), storage_options=dict(options.delta) or None)
    return scan_table(table, columns=columns)
