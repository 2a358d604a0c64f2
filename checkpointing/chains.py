"""Incremental keyed state: checkpoint chains, which checkpoints they keep alive, and resolution.

With ``execution.checkpointing.incremental`` a subtask's keyed state in
checkpoint *n* may be *changes* (``operator_state`` rows with ``change`` =
``"put"`` / ``"delete"``) on top of older checkpoints. The ``checkpoints`` row
of *n* records, per such subtask, its *chain* (property
:data:`~checkpointing.schemas.STATE_CHAINS_PROPERTY`): the ids of the
checkpoints whose rows make up that state, the base (a full snapshot) first and
*n* last. Resolving a chain (:func:`resolve_chain_rows`):

* from every checkpoint of the chain but the last, the subtask's *keyed backend
  rows* (``key_group >= 0`` and not timers): the base's entries, then each
  checkpoint's changes;
* from the last, every row of the subtask (its timers and operator state are
  always written in full);
* per (state name, key), the row of the latest checkpoint wins; ``"delete"``
  rows are dropped.

The files of a checkpoint's partition are shared by every later checkpoint
whose chain names it. :func:`live_checkpoint_ids` is the reference count
Flink's ``SharedStateRegistry`` keeps: a partition stays while a retained
checkpoint (or savepoint) is, or names it in a chain. Savepoints are always
self-contained.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

import pyarrow as pa
import pyarrow.compute as pc

from .schemas import CHANGE_DELETE, STATE_CHAINS_PROPERTY

__all__ = [
    "Chains",
    "decode_chains",
    "encode_chains",
    "live_checkpoint_ids",
    "resolve_chain_rows",
]

#: (operator uid, subtask) -> chain of checkpoint ids, base first, the checkpoint itself last.
Chains = dict[tuple[str, int], tuple[int, ...]]

_TIMER_KIND = "timer"


def encode_chains(chains: Mapping[tuple[str, int], Iterable[int]]) -> str:
    """The ``state_chains`` property value for ``chains`` (JSON, sorted, readable by Spark's ``from_json``)."""
    return json.dumps(
        [{"uid": uid, "subtask": subtask, "chain": [int(c) for c in chain]} for (uid, subtask), chain in sorted(chains.items())],
        separators=(",", ":"),
    )


def decode_chains(properties: Mapping[str, str]) -> Chains:
    """The chains a ``checkpoints`` row's ``properties`` record; empty for a self-contained checkpoint.

    Raises:
        ValueError: the property is not the JSON :func:`encode_chains` writes.
    """
    text = properties.get(STATE_CHAINS_PROPERTY)
    if not text:
        return {}
    try:
        return {(str(e["uid"]), int(e["subtask"])): tuple(int(c) for c in e["chain"]) for e in json.loads(text)}
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"invalid {STATE_CHAINS_PROPERTY} property {text[:200]!r}: {exc}") from exc


def live_checkpoint_ids(rows: Iterable[tuple[int, Mapping[str, str]]]) -> set[int]:
    """Ids whose state partitions the given (retained) checkpoints need: their own and their chains'."""
    live: set[int] = set()
    for checkpoint_id, properties in rows:
        live.add(int(checkpoint_id))
        for chain in decode_chains(properties).values():
            live.update(chain)
    return live


def resolve_chain_rows(parts: list[tuple[int, pa.Table]]) -> pa.Table:
    """The full state of one subtask from its chain's rows.

    Args:
        parts: ``(position in the chain, rows of that checkpoint for the subtask)``,
            positions increasing; the last part is the checkpoint being resolved.
            All tables share one schema with ``state_name``, ``state_kind``,
            ``key_group``, ``key`` and ``change`` columns.

    Returns:
        The rows of the resolved state (``change`` kept; ``"delete"`` rows removed).
    """
    if not parts:
        raise ValueError("resolve_chain_rows needs at least the resolved checkpoint's rows")
    last_position = parts[-1][0]
    tables = []
    for position, table in parts:
        if position != last_position:
            keep = pc.and_(pc.greater_equal(table["key_group"], 0), pc.not_equal(table["state_kind"], _TIMER_KIND))
            table = table.filter(keep)
        tables.append(table.append_column("_position", pa.array([position] * table.num_rows, pa.int32())))
    rows = pa.concat_tables(tables)
    if rows.num_rows == 0:
        return rows.drop_columns(["_position"])
    # Non-keyed and timer rows (only ever in the last part) are kept as they are; keyed backend
    # rows are deduplicated: newest position wins per (state name, key).
    is_entry = pc.and_(pc.greater_equal(rows["key_group"], 0), pc.not_equal(rows["state_kind"], _TIMER_KIND))
    others = rows.filter(pc.invert(is_entry))
    entries = rows.filter(is_entry)
    entries = entries.append_column("_row", pa.array(range(entries.num_rows), pa.int64()))
    latest = entries.group_by(["state_name", "key"], use_threads=False).aggregate([("_position", "max")])
    entries = entries.join(
        latest, keys=["state_name", "key", "_position"], right_keys=["state_name", "key", "_position_max"],
        join_type="inner", use_threads=False,
    )
    entries = entries.sort_by("_row").drop_columns(["_row"])
    change = entries["change"]
    entries = entries.filter(pc.fill_null(pc.not_equal(change, CHANGE_DELETE), True))
    out = pa.concat_tables([entries.select(others.column_names).cast(others.schema), others])
    return out.drop_columns(["_position"])
