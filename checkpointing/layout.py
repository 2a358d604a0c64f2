"""Where checkpoint tables and files live under a base URL, and how to reach them.

Layout under ``base_url`` (any fsspec URL; delta-rs must support the scheme too:
local paths, ``file://``, ``s3://``, ``gs://``, ``az://``/``abfss://``)::

    <base_url>/checkpoints/                 Delta table, one row per completed checkpoint
    <base_url>/operator_state/              Delta table, partitioned by job_id, checkpoint_id
        job_id=<job>/checkpoint_id=<n>/op-<subtask>-<uuid>.parquet
    <base_url>/channel_state/               Delta table, partitioned by job_id, checkpoint_id
        job_id=<job>/checkpoint_id=<n>/ch-<subtask>-<uuid>.parquet
    <base_url>/scaling_decisions/           Delta table, the autoscaler's decisions (not checkpoint state)

Job ids become directory names, so they are restricted to ``[A-Za-z0-9_.-]``
(not starting with a dot); operator uids only appear inside files.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import threading
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Final, Literal

import fsspec
import pyarrow as pa
import pyarrow.dataset as pds
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from flinklike_spark.errors import CheckpointStorageError, IncompatibleCheckpointError
from flinklike_spark.storage import StorageConfig, StorageOptions, redact

from .native_fs import arrow_filesystem
from .schemas import (
    CHANNEL_STATE_SCHEMA,
    CHECKPOINTS_SCHEMA,
    OPERATOR_STATE_SCHEMA,
    OPTIONAL_COLUMNS,
    SCALING_DECISIONS_SCHEMA,
    STATE_PARTITION_COLUMNS,
)

__all__ = [
    "CHANNEL_STATE",
    "CHECKPOINTS",
    "CHECKPOINT_INTERVAL",
    "LOG_RETENTION",
    "OPERATOR_STATE",
    "SCALING_DECISIONS",
    "STATE_TABLES",
    "TABLE_PROPERTIES",
    "TOMBSTONE_RETENTION",
    "CheckpointLayout",
    "TableName",
    "as_layout",
    "check_checkpoint_id",
    "check_job_id",
    "delta_dataset",
    "delta_uri",
    "resolve_storage",
    "scan_table",
]

TableName = Literal["checkpoints", "operator_state", "channel_state", "scaling_decisions"]
CHECKPOINTS: Final = "checkpoints"
OPERATOR_STATE: Final = "operator_state"
CHANNEL_STATE: Final = "channel_state"
SCALING_DECISIONS: Final = "scaling_decisions"
#: Tables written by tasks and committed per checkpoint, in commit order.
STATE_TABLES: Final = (OPERATOR_STATE, CHANNEL_STATE)

_SCHEMAS: Final = {
    CHECKPOINTS: (CHECKPOINTS_SCHEMA, None),
    OPERATOR_STATE: (OPERATOR_STATE_SCHEMA, list(STATE_PARTITION_COLUMNS)),
    CHANNEL_STATE: (CHANNEL_STATE_SCHEMA, list(STATE_PARTITION_COLUMNS)),
    SCALING_DECISIONS: (SCALING_DECISIONS_SCHEMA, None),
}

#: A Delta checkpoint of the log every 10 commits (Delta Spark's default; delta-rs's is 100): opening a
#: table replays the JSON commits since the log's last checkpoint, so at delta-rs's default an open cost
#: up to 20 ms of CPU (measured; 3-5 ms at 10), several opens per completed checkpoint.
CHECKPOINT_INTERVAL: Final = 10
#: How far back a checkpoint table's log reaches (``delta.logRetentionDuration``; Delta's default is 30
#: days): restore reads only the latest version, and a short log keeps every open and commit cheap
#: however old the job is (:mod:`checkpointing.maintenance`).
LOG_RETENTION: Final = timedelta(seconds=10)
#: How long a removed file stays a tombstone in the log's checkpoints (``delta.deletedFileRetentionDuration``;
#: Delta's default is a week). Retention deletes the files it removes at once, so tombstones protect no
#: reader here; they only let a vacuum find what an interrupted retention left: three maintenance runs
#: (:data:`checkpointing.maintenance.MAINTENANCE_INTERVAL`) see each one while the job runs.
TOMBSTONE_RETENTION: Final = timedelta(seconds=15)
#: Properties of every checkpoint table (set on creation, and by a committer on tables created with
#: others). Commits do not clean the log themselves (delta-rs lists the whole log after each one to find
#: expired files); :func:`checkpointing.maintenance.clean_logs` does, on a time cadence.
TABLE_PROPERTIES: Final = {
    "delta.checkpointInterval": str(CHECKPOINT_INTERVAL),
    "delta.logRetentionDuration": f"interval {int(LOG_RETENTION.total_seconds())} seconds",
    "delta.deletedFileRetentionDuration": f"interval {int(TOMBSTONE_RETENTION.total_seconds())} seconds",
    "delta.enableExpiredLogCleanup": "false",
}

#: Loads of a table tried when its log changed under the load (:func:`_open_delta_table`).
_OPEN_ATTEMPTS: Final = 3

_log = logging.getLogger(__name__)

_JOB_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*")


def check_job_id(job_id: str) -> None:
    """Raise ValueError unless ``job_id`` is usable as a partition directory name."""
    if not isinstance(job_id, str) or not _JOB_ID.fullmatch(job_id):
        raise ValueError(f"invalid job_id {job_id!r}: use letters, digits, '_', '-', '.' (not leading '.')")


def check_checkpoint_id(checkpoint_id: int) -> None:
    """Raise ValueError unless ``checkpoint_id`` is a non-negative int."""
    if isinstance(checkpoint_id, bool) or not isinstance(checkpoint_id, int) or checkpoint_id < 0:
        raise ValueError(f"invalid checkpoint_id {checkpoint_id!r}: expected an int >= 0")


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointLayout:
    """A checkpoint storage location: base URL plus the options to reach it.

    Attributes:
        base_url: any fsspec URL or local path (``execution.checkpointing.dir``).
        delta_storage_options: passed to deltalake (``storage_options``), e.g.
            ``{"AWS_REGION": ...}``.
        fsspec_options: passed to ``fsspec.core.url_to_fs`` for the Parquet files.
        storage: the job's object-store settings (``s3.*``, ``fs.azure.account.*``);
            the options derived from them for ``base_url`` lie under the two above.

    Instances are picklable (they travel to TaskExecutors) and cheap: the
    filesystem is resolved on each call to :meth:`filesystem`. Their ``repr``
    shows no secret. An instance keeps, per thread, the tables
    :meth:`open_table` loaded (see there); a copy or an unpickled instance
    starts without them.
    """

    base_url: str
    delta_storage_options: Mapping[str, str] | None = None
    fsspec_options: Mapping[str, Any] | None = None
    storage: StorageConfig | None = None
    _tables: threading.local = dataclasses.field(default_factory=threading.local, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.base_url, (str, os.PathLike)) or not str(self.base_url):
            raise ValueError(f"base_url must be a non-empty URL or path, got {self.base_url!r}")
        object.__setattr__(self, "base_url", os.fspath(self.base_url))

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_tables"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        object.__setattr__(self, "_tables", threading.local())

    def __repr__(self) -> str:
        return (
            f"CheckpointLayout(base_url={self.base_url!r}, "
            f"delta_storage_options={redact(self.delta_storage_options or {})!r}, "
            f"fsspec_options={redact(self.fsspec_options or {})!r}, storage={self.storage!r})"
        )

    def options(self) -> StorageOptions:
        """The fsspec and deltalake options for this location (explicit ones over the job's storage config)."""
        return (self.storage or StorageConfig()).options(
            self.base_url, delta=self.delta_storage_options, fsspec=self.fsspec_options
        )

    def filesystem(self) -> tuple[fsspec.AbstractFileSystem, str]:
        """Return ``(fs, root)``: the fsspec filesystem and the base path within it."""
        try:
            return resolve_storage(self.base_url, self.options().fsspec)
        except (ValueError, ImportError, OSError) as exc:
            raise CheckpointStorageError(
                f"cannot resolve checkpoint storage {self.base_url!r}: {exc}", url=self.base_url
            ) from exc

    def open_input_file(self, path: str) -> pa.NativeFile:
        """Open the file ``path`` (a path in :meth:`filesystem`) for Arrow to read, safely before exit.

        Arrow reading a Python file object calls back into Python from its I/O
        threads, and one still doing so when the interpreter finalizes aborts the
        process (see :func:`scan_table`). The file is therefore opened through
        Arrow's native filesystem for this location; where the storage options
        are not translatable (:mod:`checkpointing.native_fs`), its bytes are read
        through fsspec on the calling thread and handed to Arrow in memory.

        Raises:
            OSError: the file cannot be opened or read (FileNotFoundError when it is missing).
        """
        fs, root = self.filesystem()
        native = arrow_filesystem(delta_uri(fs, root), self.options().delta)
        if native is None or not path.startswith(f"{root}/"):
            return pa.BufferReader(fs.cat_file(path))
        return native.open_input_file(path.removeprefix(f"{root}/"))

    def table_path(self, table: TableName) -> str:
        """Path of ``table``'s directory inside :meth:`filesystem`'s filesystem."""
        return f"{self.filesystem()[1]}/{table}"

    def table_uri(self, table: TableName) -> str:
        """URI of ``table`` as deltalake expects it (absolute path for local storage)."""
        fs, root = self.filesystem()
        return delta_uri(fs, f"{root}/{table}")

    def file_path(self, table: TableName, relative: str) -> str:
        """Filesystem path of a data file given its Delta ``add.path`` (relative to the table)."""
        return f"{self.table_path(table)}/{relative}"

    def exists(self) -> bool:
        """True when the base directory exists.

        Raises:
            CheckpointStorageError: the storage cannot be reached.
        """
        fs, root = self.filesystem()
        try:
            return bool(fs.exists(root))
        except OSError as exc:
            raise CheckpointStorageError(
                f"cannot check whether {self.base_url!r} exists: {type(exc).__name__}: {exc}", url=self.base_url
            ) from exc

    def open_table(self, table: TableName, *, create: bool = False) -> DeltaTable | None:
        """Load ``table`` at its latest version.

        The layout keeps, per thread, the table it returned last and brings that
        same object up to date (``update_incremental``: reads only the commits
        since) instead of loading the table again: a load replays the log from its
        last Delta checkpoint (3-5 ms of CPU, measured), and a JobMaster opens its
        tables about ten times per completed checkpoint. So a caller must not keep
        a returned table across another ``open_table`` of the same table on the
        same thread and expect its version to stay put.

        Args:
            create: create the (empty) table first if it does not exist.

        Returns:
            The table, or None when it does not exist and ``create`` is False.

        Raises:
            CheckpointStorageError: the table cannot be created or loaded.
            IncompatibleCheckpointError: an existing table lacks columns of this format.
        """
        cached: DeltaTable | None = getattr(self._tables, table, None)
        if cached is not None:
            try:
                cached.update_incremental()
                return cached
            except (DeltaError, OSError):  # e.g. the table was removed: load it as new
                setattr(self._tables, table, None)
        dt = self._load_table(table, create=create)
        setattr(self._tables, table, dt)
        return dt

    def _load_table(self, table: TableName, *, create: bool) -> DeltaTable | None:
        uri = self.table_uri(table)
        options = dict(self.options().delta) or None
        schema, partition_by = _SCHEMAS[table]
        try:
            try:  # an open is half the CPU of create(mode="ignore") on a table that exists (the usual case)
                dt = _open_delta_table(uri, options)
            except TableNotFoundError:
                if not create:
                    return None
                if not _is_local(self.filesystem()[0]) or not os.path.isdir(uri):
                    self._make_dirs(table)
                dt = DeltaTable.create(
                    uri, schema, mode="ignore", partition_by=partition_by, storage_options=options,
                    configuration=TABLE_PROPERTIES,
                )  # fmt: skip
        except (DeltaError, OSError, ValueError) as exc:
            raise CheckpointStorageError(
                f"cannot {'create' if create else 'open'} checkpoint table {uri!r}: {type(exc).__name__}: {exc}",
                url=uri,
            ) from exc
        if create:
            try:
                dt = self._set_table_properties(dt)
            except (DeltaError, OSError) as exc:
                raise CheckpointStorageError(
                    f"cannot set the properties {TABLE_PROPERTIES} of checkpoint table {uri!r}: "
                    f"{type(exc).__name__}: {exc}",
                    url=uri,
                ) from exc
        present = set(pa.schema(dt.schema()).names)
        missing = [n for n in schema.names if n not in present and n not in OPTIONAL_COLUMNS]
        if create and any(n not in present for n in schema.names):
            dt = self._add_optional_columns(
                dt, [f for f in schema if f.name not in present and f.name in OPTIONAL_COLUMNS]
            )
        if missing:
            raise IncompatibleCheckpointError(
                f"checkpoint table {uri!r} lacks columns {missing} of format this library writes",
                url=uri,
            )
        return dt

    def _set_table_properties(self, dt: DeltaTable) -> DeltaTable:
        """Give a table created with other :data:`TABLE_PROPERTIES` (an older version's, or another
        writer's) this version's: one commit, once per table."""
        for attempt in range(1, _OPEN_ATTEMPTS + 1):
            current = dt.metadata().configuration
            wanted = {k: v for k, v in TABLE_PROPERTIES.items() if current.get(k) != v}
            if not wanted:
                return dt
            try:
                dt.alter.set_table_properties(wanted)
                dt.update_incremental()
                return dt
            except CommitFailedError:  # a concurrent commit (another coordinator's, say): on its version again
                if attempt == _OPEN_ATTEMPTS:
                    raise
                dt = _open_delta_table(dt.table_uri, dict(self.options().delta) or None)
        return dt

    def _add_optional_columns(self, dt: DeltaTable, fields: list[pa.Field]) -> DeltaTable:
        """Evolve a table written by an older version: add its missing optional (nullable) columns."""
        if not fields:
            return dt
        from deltalake.schema import Field, PrimitiveType

        types = {pa.string(): "string", pa.int64(): "long", pa.int32(): "integer"}
        try:
            dt.alter.add_columns([Field(f.name, PrimitiveType(types[f.type]), nullable=True) for f in fields])
            dt.update_incremental()
        except (DeltaError, OSError) as exc:
            raise CheckpointStorageError(
                f"cannot add columns {[f.name for f in fields]} to checkpoint table {dt.table_uri!r}: "
                f"{type(exc).__name__}: {exc}",
                url=dt.table_uri,
            ) from exc
        return dt

    def _make_dirs(self, table: TableName) -> None:
        fs, _ = self.filesystem()
        path = self.table_path(table)
        try:
            fs.makedirs(path, exist_ok=True)
        except OSError as exc:
            raise CheckpointStorageError(
                f"cannot create checkpoint directory {path!r} under {self.base_url!r}: {type(exc).__name__}: {exc}",
                url=self.base_url,
            ) from exc


def _open_delta_table(uri: str, options: dict[str, str] | None) -> DeltaTable:
    """``DeltaTable(uri)``, loaded again if a log file it listed was deleted before it read it.

    The checkpoint tables' logs are cleaned while readers in other processes open
    them (:mod:`checkpointing.maintenance`): an open that listed a Delta checkpoint
    or commit which the cleanup deleted just then fails; the next listing no
    longer names it.
    """
    for attempt in range(1, _OPEN_ATTEMPTS + 1):
        try:
            return DeltaTable(uri, storage_options=options)
        except TableNotFoundError:
            raise
        except (DeltaError, OSError) as exc:
            if attempt == _OPEN_ATTEMPTS:
                raise
            _log.debug("opening %s failed (%s); its log may have been cleaned meanwhile, opening again", uri, exc)
    raise AssertionError("unreachable")


def scan_table(dt: DeltaTable, *, columns: list[str] | None = None, filter: pds.Expression | None = None) -> pa.Table:
    """Read a Delta table's current version with pyarrow; safe to do just before the interpreter exits.

    delta-rs's default dataset reads through a Python filesystem handler, so
    Arrow's I/O threads call into Python; one still doing so when the
    interpreter finalizes is killed inside C++ and aborts the process
    ("terminate called without an active exception", delta-io/delta-rs#2184,
    apache/arrow#34314: measured here about 1 exit in 150 after a scan). A
    table is therefore read through Arrow's native filesystem (local, S3,
    Azure: :mod:`checkpointing.native_fs`), and every scan is single-threaded
    (these tables are small).
    """
    return delta_dataset(dt).to_table(columns=columns, filter=filter, use_threads=False)


def delta_dataset(dt: DeltaTable) -> pds.Dataset:
    """``dt.to_pyarrow_dataset()`` over Arrow's native filesystem for the table (see :func:`scan_table`).

    Falls back to delta-rs's Python handler only for a scheme or storage
    options :func:`~checkpointing.native_fs.arrow_filesystem` does not translate.
    """
    # deltalake keeps the options a table was opened with only in this private attribute
    options = getattr(dt, "_storage_options", None)
    filesystem = arrow_filesystem(dt.table_uri, options)
    if filesystem is None:
        return dt.to_pyarrow_dataset()
    return dt.to_pyarrow_dataset(filesystem=filesystem)


def resolve_storage(url: str, fsspec_options: Mapping[str, Any] | None = None) -> tuple[fsspec.AbstractFileSystem, str]:
    """``(fs, root)`` for a URL or path: local roots absolute, no trailing slash.

    Raises what ``fsspec.core.url_to_fs`` raises (ValueError, ImportError, OSError).
    """
    fs, root = fsspec.core.url_to_fs(url, **dict(fsspec_options or {}))
    if _is_local(fs):
        root = os.path.abspath(root)
    return fs, root.rstrip("/")


def delta_uri(fs: fsspec.AbstractFileSystem, path: str) -> str:
    """The URI deltalake expects for ``path`` on ``fs`` (a plain absolute path for local storage)."""
    return path if _is_local(fs) else fs.unstrip_protocol(path)


def _is_local(fs: fsspec.AbstractFileSystem) -> bool:
    protocol = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    return "file" in protocol or "local" in protocol


def as_layout(
    base: str | os.PathLike[str] | CheckpointLayout, storage: StorageConfig | None = None
) -> CheckpointLayout:
    """Accept a base URL / path or a layout; return a layout (a URL gets ``storage``'s settings)."""
    if isinstance(base, CheckpointLayout):
        return base
    return CheckpointLayout(base_url=os.fspath(base), storage=storage)
