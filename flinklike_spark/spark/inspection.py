"""Looking inside a job's checkpoints with Spark SQL (``spark.read.format("delta")``).

The checkpoint tables (docs/architecture.md, "Checkpointing") are plain Delta tables; these
helpers return DataFrames over them for the questions users ask: the
checkpoint history, the keyed state per key at a checkpoint, the in-flight
data per channel, and the state table as of an older checkpoint. Only retained
checkpoints have files; older ones were vacuumed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from checkpointing.layout import CHANNEL_STATE, CHECKPOINTS, OPERATOR_STATE
from checkpointing.schemas import CheckpointKind
from flinklike_spark.errors import CheckpointNotFoundError
from flinklike_spark.spark.job_record_table import JobRecord, read_record
from flinklike_spark.spark.state_views import resolved_operator_state

__all__ = ["channel_state", "checkpoint_history", "job_record", "keyed_state", "operator_state_as_of"]


def _table(spark: SparkSession, directory: str | os.PathLike[str], table: str):
    return spark.read.format("delta").load(f"{os.fspath(directory).rstrip('/')}/{table}")


def checkpoint_history(spark: SparkSession, directory: str | os.PathLike[str]) -> DataFrame:
    """One row per completed checkpoint or savepoint, oldest first (Flink's checkpoint history)."""
    return (
        _table(spark, directory, CHECKPOINTS)
        .select("job_id", "checkpoint_id", "kind", "mode", "trigger_time", "completion_time", "duration_ms",
                "max_alignment_ms", "state_bytes", "channel_state_bytes", "operator_state_version")
        .orderBy("completion_time", "checkpoint_id")
    )  # fmt: skip


def _latest(spark: SparkSession, directory, job_id: str | None, checkpoint_id: int | None):
    """The checkpoints row asked for (latest by default)."""
    history = checkpoint_history(spark, directory)
    if job_id is not None:
        history = history.where(F.col("job_id") == job_id)
    if checkpoint_id is not None:
        history = history.where(F.col("checkpoint_id") == checkpoint_id)
    rows = history.orderBy(F.col("completion_time").desc(), F.col("checkpoint_id").desc()).limit(1).collect()
    if not rows:
        raise _not_found(spark, directory, job_id, checkpoint_id)
    return rows[0]


def _not_found(
    spark: SparkSession, directory, job_id: str | None, checkpoint_id: int | None
) -> CheckpointNotFoundError:
    """The checkpoint asked for is not there: name it and list the checkpoints and savepoints that are."""
    wanted = " ".join(
        ["no completed checkpoint"]
        + ([str(checkpoint_id)] if checkpoint_id is not None else [])
        + ([f"of job {job_id}"] if job_id is not None else [])
    )
    stored = checkpoint_history(spark, directory).select("job_id", "checkpoint_id", "kind").collect()
    by_job: dict[str, list[str]] = {}
    for row in stored:
        label = str(row.checkpoint_id) if row.kind == CheckpointKind.CHECKPOINT else f"{row.checkpoint_id} ({row.kind})"
        by_job.setdefault(row.job_id, []).append(label)
    if not by_job:
        there = "it holds no completed checkpoint or savepoint"
    else:
        there = "completed checkpoints and savepoints there: " + "; ".join(
            f"{', '.join(ids)} of job {job}" for job, ids in sorted(by_job.items())
        )
    return CheckpointNotFoundError(f"{wanted} in {os.fspath(directory)!r}; {there}", url=os.fspath(directory))


def keyed_state(
    spark: SparkSession,
    directory: str | os.PathLike[str],
    operator_uid: str,
    state_name: str | None = None,
    *,
    checkpoint_id: int | None = None,
    job_id: str | None = None,
) -> DataFrame:
    """State per key of ``operator_uid`` at a checkpoint (the latest one by default).

    An incremental checkpoint's state is resolved from its chain (one SQL query,
    :mod:`flinklike_spark.spark.state_views`): the full state at that checkpoint.

    Columns: ``state_name``, ``key`` (``key_repr``), ``value`` (``value_repr``),
    ``key_group``, ``subtask``, plus ``job_id``/``checkpoint_id``.
    """
    cp = _latest(spark, directory, job_id, checkpoint_id)
    # Resolved: an incremental checkpoint's rows are changes on top of older ones.
    df = resolved_operator_state(spark, directory, job_id=cp.job_id, checkpoint_ids=[cp.checkpoint_id]).where(
        (F.col("operator_uid") == operator_uid) & (F.col("key_group") >= 0)
    )
    if state_name is not None:
        df = df.where(F.col("state_name") == state_name)
    return df.select(
        "job_id",
        "checkpoint_id",
        "state_name",
        F.col("key_repr").alias("key"),
        F.col("value_repr").alias("value"),
        "key_group",
        "subtask",
    ).orderBy("state_name", "key")


def channel_state(
    spark: SparkSession,
    directory: str | os.PathLike[str],
    *,
    checkpoint_id: int | None = None,
    job_id: str | None = None,
) -> DataFrame:
    """In-flight data per channel persisted by an (unaligned) checkpoint (the latest by default).

    One row per (operator_uid, subtask, direction, gate, channel): ``buffers`` and ``rows``.
    """
    cp = _latest(spark, directory, job_id, checkpoint_id)
    return (
        _table(spark, directory, CHANNEL_STATE)
        .where((F.col("job_id") == cp.job_id) & (F.col("checkpoint_id") == cp.checkpoint_id))
        .groupBy("job_id", "checkpoint_id", "operator_uid", "subtask", "direction", "gate", "channel")
        .agg(F.count("*").alias("buffers"), F.sum("rows").alias("rows"))
        .orderBy("operator_uid", "subtask", "direction", "gate", "channel")
    )


def operator_state_as_of(
    spark: SparkSession,
    directory: str | os.PathLike[str],
    checkpoint_id: int,
    *,
    job_id: str | None = None,
    resolve: bool = True,
) -> DataFrame:
    """The ``operator_state`` table as it was when ``checkpoint_id`` committed.

    Rows of checkpoints completed after it are absent; the checkpoint's own
    rows are readable while it is retained. With ``resolve`` (the default) the
    rows are the full state of each retained checkpoint up to ``checkpoint_id``,
    incremental chains resolved (``checkpoint_id`` the checkpoint a row belongs
    to, ``stored_in`` the one whose files hold it); ``resolve=False`` gives the
    stored rows of the job's retained checkpoints up to it, changes of
    incremental checkpoints included.

    Read from the table's latest version, not by Delta time travel to the
    version the checkpoint committed: a retained checkpoint's partitions never
    change after its commit, so the rows are the same, while the table's log
    keeps only its recent versions (:mod:`checkpointing.maintenance`).
    """
    cp = _latest(spark, directory, job_id, checkpoint_id)
    if cp.operator_state_version is None:
        raise CheckpointNotFoundError(
            f"checkpoint {checkpoint_id} of job {cp.job_id} wrote no operator state", url=os.fspath(directory)
        )
    if not resolve:
        return _table(spark, directory, OPERATOR_STATE).where(
            (F.col("job_id") == cp.job_id) & (F.col("checkpoint_id") <= cp.checkpoint_id)
        )
    retained = [
        r.checkpoint_id
        for r in checkpoint_history(spark, directory)
        .where((F.col("job_id") == cp.job_id) & (F.col("checkpoint_id") <= cp.checkpoint_id))
        .select("checkpoint_id").collect()
    ]  # fmt: skip
    return resolved_operator_state(spark, directory, job_id=cp.job_id, checkpoint_ids=retained)


def job_record(directory: str | os.PathLike[str], storage: Mapping[str, str] | None = None) -> JobRecord | None:
    """The record of the engine job behind a ``readStream`` or ``writeStream`` query (pid, job id, state, error).

    Args:
        storage: the job's storage keys (``s3.*``, ``fs.azure.account.*``) when
            ``directory`` is on an object store: the record is the Delta table ``<directory>/job``.
    """
    return read_record(os.fspath(directory), storage)
