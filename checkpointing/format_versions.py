"""Which snapshot formats this code restores, and the migrations that carry older ones forward.

Every ``checkpoints`` row records ``format_version`` (:data:`FORMAT_VERSION` of
the code that wrote it) and, in its properties, :data:`WRITER_VERSION_PROPERTY`
(the flinklike-spark release). A restore, and the State Processor API's reader,
go through :func:`check_restorable`:

* the current version restores as written;
* an older version restores through :data:`MIGRATIONS`, one step per version,
  applied to the state rows as they are read (:func:`upgrade_state_rows`);
* a newer version, or an older one with a missing step, is refused with an
  :class:`~flinklike_spark.errors.UnsupportedSnapshotFormatError` naming both
  versions and the way out.

A change of the format (a column, the meaning of a value, how a state value is
pickled) therefore takes four steps, and
``tests/integration/test_savepoint_compatibility.py`` fails until all are done:

1. raise :data:`FORMAT_VERSION` in :mod:`checkpointing.schemas`;
2. add ``MIGRATIONS[<old version>]``, turning the old rows into the new ones;
3. record the new tables' fingerprint in ``tests/resources/savepoints/formats.json``;
4. write the new version's savepoints:
   ``python -m tests.support.savepoint_fixtures write tests/resources/savepoints``.

The savepoints of every earlier version stay in ``tests/resources/savepoints``
and must keep restoring, as Flink keeps a savepoint of each release in its
migration tests.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Mapping
from importlib import metadata
from typing import Final

import pyarrow as pa

from flinklike_spark.errors import UnsupportedSnapshotFormatError

from .schemas import CHANNEL_STATE_SCHEMA, CHECKPOINTS_SCHEMA, FORMAT_VERSION, OPERATOR_STATE_SCHEMA

__all__ = [
    "MIGRATIONS",
    "WRITER_VERSION_PROPERTY",
    "Migration",
    "check_restorable",
    "schema_fingerprint",
    "upgrade_state_rows",
    "writer_version",
]

#: ``properties`` key of a ``checkpoints`` row: the flinklike-spark release that wrote it.
WRITER_VERSION_PROPERTY: Final = "flinklike_spark_version"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Migration:
    """One step from format ``from_version`` to ``from_version + 1``.

    Args:
        from_version: the format this step reads.
        description: what changed, for the log line of a migrated restore.
        upgrade_rows: turns ``operator_state`` rows of ``from_version`` into rows
            of the next version (same schema as :data:`OPERATOR_STATE_SCHEMA`).
    """

    from_version: int
    description: str
    upgrade_rows: Callable[[pa.Table], pa.Table]


#: Format version -> the step that carries it to the next. Empty while only version 1 exists.
MIGRATIONS: Final[Mapping[int, Migration]] = {}


def writer_version() -> str:
    """This installation's flinklike-spark release (``unknown`` when it runs from an uninstalled tree)."""
    try:
        return metadata.version("flinklike-spark")
    except metadata.PackageNotFoundError:
        return "unknown"


def check_restorable(version: int, properties: Mapping[str, str], where: str) -> None:
    """Refuse a checkpoint whose format this code cannot restore.

    Args:
        version: the checkpoint's ``format_version``.
        properties: its row's properties (they name the release that wrote it).
        where: the checkpoint's path, for the message.

    Raises:
        UnsupportedSnapshotFormatError: the format is newer than :data:`FORMAT_VERSION`,
            or older with no migration step for some version on the way.
    """
    written_by = properties.get(WRITER_VERSION_PROPERTY, "a release before 0.1.0")
    if version > FORMAT_VERSION:
        raise UnsupportedSnapshotFormatError(
            f"{where} was written in snapshot format version {version} (by flinklike-spark {written_by}); this "
            f"flinklike-spark {writer_version()} restores format versions up to {FORMAT_VERSION}. Restore it with "
            f"flinklike-spark {written_by} or newer",
            url=where,
        )
    missing = [v for v in range(version, FORMAT_VERSION) if v not in MIGRATIONS]
    if missing:
        raise UnsupportedSnapshotFormatError(
            f"{where} was written in snapshot format version {version} (by flinklike-spark {written_by}); this "
            f"flinklike-spark {writer_version()} writes version {FORMAT_VERSION} and has no migration from version "
            f"{missing[0]}. Restore it with the release that wrote it, take a savepoint there, and upgrade "
            "one release at a time",
            url=where,
        )


def upgrade_state_rows(format_version: int, rows: pa.Table) -> pa.Table:
    """``operator_state`` rows of ``format_version`` as the current format reads them (every step applied)."""
    for version in range(format_version, FORMAT_VERSION):
        rows = MIGRATIONS[version].upgrade_rows(rows)
    return rows


def schema_fingerprint() -> str:
    """A digest of the three tables' schemas: it changes with any column, type or nullability."""
    digest = hashlib.sha256()
    for name, schema in (
        ("checkpoints", CHECKPOINTS_SCHEMA),
        ("operator_state", OPERATOR_STATE_SCHEMA),
        ("channel_state", CHANNEL_STATE_SCHEMA),
    ):
        digest.update(name.encode())
        for field in schema:
            digest.update(f"{field.name}:{field.type}:{field.nullable};".encode())
    return digest.hexdigest()[:16]
