"""The full keyed state of any retained checkpoint in one Spark SQL query, incremental or not.

With incremental checkpoints (``execution.checkpointing.incremental``) the
``operator_state`` rows of a checkpoint may be changes on top of older
checkpoints; its ``checkpoints`` row records each subtask's chain
(``properties['state_chains']``, see :mod:`checkpointing.chains`).
:data:`RESOLVE_SQL` resolves every chain with SQL alone: for each checkpoint,
the rows of its own partition (subtasks without a chain, and everything of
the last link), plus the keyed rows of every older link of its chains; per
(operator, state, key) the newest link wins and ``delete`` rows are dropped.
The result reads like the rows of full snapshots: ``checkpoint_id`` is the
checkpoint whose state the row belongs to, ``stored_in`` the one whose files
hold it.

    from flinklike_spark.spark import register_state_view
    register_state_view(spark, "/checkpoints")            # view flinklike_state
    spark.sql("SELECT key_repr, value_repr FROM flinklike_state "
              "WHERE checkpoint_id = 42 AND operator_uid = 'count'")
"""

from __future__ import annotations

import os
from collections.abc import Collection
from typing import Final

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from checkpointing.layout import CHECKPOINTS, OPERATOR_STATE
from checkpointing.schemas import CHANGE_DELETE, STATE_CHAINS_PROPERTY

__all__ = ["RESOLVE_SQL", "register_state_view", "resolved_operator_state"]

#: Resolves the state of every checkpoint in ``{checkpoints}`` from the rows in ``{state}``
#: (DataFrames of the ``checkpoints`` and ``operator_state`` tables, or of subsets, given as
#: ``spark.sql(RESOLVE_SQL, checkpoints=..., state=...)``; the state needs a ``change`` column).
RESOLVE_SQL: Final = f"""
WITH cps AS (
  SELECT job_id, checkpoint_id,
         from_json(properties['{STATE_CHAINS_PROPERTY}'],
                   'array<struct<uid:string,subtask:int,chain:array<bigint>>>') AS chains
  FROM {{checkpoints}}
),
links AS (
  SELECT cps.job_id, cps.checkpoint_id AS resolved_id, link.uid, link.subtask, p.pos, p.src
  FROM cps LATERAL VIEW explode(chains) c AS link LATERAL VIEW posexplode(link.chain) p AS pos, src
),
parts AS (
  SELECT s.*, s.checkpoint_id AS resolved_id, 0 AS pos
  FROM {{state}} s
  LEFT SEMI JOIN cps ON s.job_id = cps.job_id AND s.checkpoint_id = cps.checkpoint_id
  LEFT ANTI JOIN links l ON l.job_id = s.job_id AND l.resolved_id = s.checkpoint_id
                         AND l.uid = s.operator_uid AND l.subtask = s.subtask
  UNION ALL
  SELECT s.*, l.resolved_id, l.pos
  FROM {{state}} s
  JOIN links l ON s.job_id = l.job_id AND s.checkpoint_id = l.src
              AND s.operator_uid = l.uid AND s.subtask = l.subtask
  WHERE l.src = l.resolved_id OR (s.key_group >= 0 AND s.state_kind <> 'timer')
),
ranked AS (
  SELECT *,
         CASE WHEN key_group >= 0 AND state_kind <> 'timer'
              THEN row_number() OVER (PARTITION BY job_id, resolved_id, operator_uid, state_name, key
                                      ORDER BY pos DESC)
              ELSE 1 END AS newest
  FROM parts
)
SELECT job_id, resolved_id AS checkpoint_id, operator_uid, subtask, key_group, state_name, state_kind,
       key, value, key_repr, value_repr, checkpoint_id AS stored_in
FROM ranked
WHERE newest = 1 AND (change IS NULL OR change <> '{CHANGE_DELETE}')
"""


def _load(spark: SparkSession, directory: str | os.PathLike[str], table: str, version: int | None = None) -> DataFrame:
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(f"{os.fspath(directory).rstrip('/')}/{table}")


def resolved_operator_state(
    spark: SparkSession,
    directory: str | os.PathLike[str],
    *,
    job_id: str | None = None,
    checkpoint_ids: Collection[int] | None = None,
    version: int | None = None,
) -> DataFrame:
    """The resolved ``operator_state`` of completed checkpoints (all retained ones by default).

    Args:
        job_id / checkpoint_ids: which checkpoints to resolve. With ``checkpoint_ids``
            only the partitions their chains name are read.
        version: read ``operator_state`` as of this Delta version (time travel).

    Columns: those of ``operator_state`` except ``change``, plus ``stored_in``.
    """
    checkpoints = _load(spark, directory, CHECKPOINTS)
    if job_id is not None:
        checkpoints = checkpoints.where(F.col("job_id") == job_id)
    if checkpoint_ids is not None:
        checkpoints = checkpoints.where(F.col("checkpoint_id").isin([int(c) for c in checkpoint_ids]))
    state = _load(spark, directory, OPERATOR_STATE, version)
    if "change" not in state.columns:  # written before incremental checkpoints existed
        state = state.withColumn("change", F.lit(None).cast("string"))
    if job_id is not None:
        state = state.where(F.col("job_id") == job_id)
    if checkpoint_ids is not None:
        # Partition pruning the joins cannot give: only the partitions the chains name.
        from checkpointing.chains import decode_chains

        needed = {int(c) for c in checkpoint_ids}
        for row in checkpoints.select("properties").collect():
            for chain in decode_chains(dict(row.properties or {})).values():
                needed.update(chain)
        state = state.where(F.col("checkpoint_id").isin(sorted(needed)))
    return spark.sql(RESOLVE_SQL, checkpoints=checkpoints, state=state)


def register_state_view(
    spark: SparkSession, directory: str | os.PathLike[str], name: str = "flinklike_state"
) -> DataFrame:
    """Register the temporary view ``name``: the resolved state of every retained checkpoint.

    One SQL query on it gives the full state of any checkpoint, incremental or not.
    """
    df = resolved_operator_state(spark, directory)
    df.createOrReplaceTempView(name)
    return df
