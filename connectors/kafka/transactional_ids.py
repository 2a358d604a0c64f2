"""The exactly-once KafkaSink's transactional ids, and the marker that records which checkpoint it committed.

**Ids.** A subtask writes each transaction under ``<base>-<subtask>-<slot>``,
``slot`` being the lowest one whose previous transaction is not awaiting its
commit in this process (a bounded pool, as Flink's FLIP-511 pools ids). With
checkpoints that complete before the next barrier (the usual case, one
concurrent checkpoint) a subtask alternates between slots 0 and 1. The number
of ids a lineage leaves in ``__transaction_state`` is therefore at most::

    subtasks ever used (up to the max parallelism) x (1 + pre-committed transactions awaiting their commit)

that is ``2 x parallelism`` in steady state, however many checkpoints run.
Every transaction starts with its own ``InitProducerId``: under Kafka's
transaction protocol the producer epoch changes only there, so it is what
makes ``(producer id, epoch)`` name one transaction of a reused id (a reused
producer would carry the same epoch into its next transaction, and a restored
pre-commit could not be told from a later transaction on the same id).

``base`` is the restore lineage's prefix ``flinklike/<lineage id>/<sink uid>``,
or, when the program sets ``set_transactional_id_prefix(p)``, ``p-<8 hex digits
of that prefix>``: a user's prefix stays the prefix (Kafka's prefixed ACLs keep
working), and a new lineage (a fresh run, or a restore that accepted duplicate
output) writes under new ids and never reuses an id that may hold a committed
or pending transaction of an older lineage.

**The committed-checkpoint marker.** Every transaction also commits, through
``TxnOffsetCommit``, an offset of the consumer group ``<base>-<subtask>``: the
offset is the id of the checkpoint that pre-committed the transaction (on
partition 0 of a topic the transaction wrote to). Kafka stores it atomically
with the transaction's records, in ``__consumer_offsets``, across restarts:
the group's highest offset is the newest checkpoint whose output the subtask
committed, and a restored pre-commit of checkpoint ``c`` is committed if and
only if the offset reached ``c`` (a subtask commits its checkpoints in order).
No group member ever joins these groups; they expire with
``offsets.retention.minutes`` after the last commit, as the ids expire with
``transactional.id.expiration.ms``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import time

from flinklike_spark.errors import SinkCommitError

__all__ = [
    "TransactionalIds",
    "committed_checkpoints",
]

_READ_TIMEOUT_S = 15.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class TransactionalIds:
    """The ids and marker groups of one sink in one restore lineage.

    Args:
        base: what every id and marker group of the lineage starts with.
        family: a regular expression matching ``base`` and the bases of the
            sink's other lineages (all of a user's prefix), whose open
            transactions a new writer takes over as lingering.
    """

    base: str
    family: str

    @classmethod
    def of(cls, user_prefix: str | None, lineage_prefix: str) -> TransactionalIds:
        """The ids of a sink with ``set_transactional_id_prefix(user_prefix)`` (or None) in a lineage."""
        if user_prefix is None:
            return cls(base=lineage_prefix, family=re.escape(lineage_prefix))
        tag = hashlib.sha256(lineage_prefix.encode()).hexdigest()[:8]
        return cls(base=f"{user_prefix}-{tag}", family=re.escape(user_prefix) + "-[0-9a-f]{8}")

    def transactional_id(self, subtask: int, slot: int) -> str:
        return f"{self.base}-{subtask}-{slot}"

    def marker_group(self, subtask: int) -> str:
        """The consumer group whose offset is the newest checkpoint ``subtask`` committed."""
        return f"{self.base}-{subtask}"

    def owner(self, transactional_id: str) -> int | None:
        """The subtask of an id of this sink's family (any lineage), or None for another sink's id."""
        match = re.fullmatch(f"({self.family})-(\\d+)-(\\d+)", transactional_id)
        return int(match.group(2)) if match else None


def committed_checkpoints(
    bootstrap_servers: str, properties: dict[str, str], groups: list[str]
) -> dict[str, int | None]:
    """The highest marker offset of each group (the newest checkpoint it committed), None for a group without one.

    Read with :meth:`TransactionAdmin.committed_offsets` (``OffsetFetch``), not
    librdkafka's admin client, which crashes the process on a coordinator that is
    still loading (see :mod:`.transaction_admin`). An answer with an error is never
    read as "no marker" (that would let an older checkpoint restore and write its
    output again): retriable errors are retried for up to ``_READ_TIMEOUT_S``.

    Raises:
        SinkCommitError: a group's offsets could not be read (naming the group, the cluster and the error).
    """
    from connectors.kafka.transaction_admin import RETRIABLE_CODES, KafkaProtocolError, TransactionAdmin

    deadline = time.monotonic() + _READ_TIMEOUT_S
    admin = TransactionAdmin(bootstrap_servers, properties, timeout=_READ_TIMEOUT_S)
    try:
        committed: dict[str, int | None] = {}
        for group in groups:
            while True:
                try:
                    offsets = admin.committed_offsets(group)
                    break
                except (KafkaProtocolError, OSError) as e:
                    retriable = isinstance(e, OSError) or e.error_code in RETRIABLE_CODES
                    if not retriable or time.monotonic() >= deadline:
                        raise SinkCommitError(
                            f"KafkaSink: cannot read the committed-checkpoint marker (consumer group {group!r}) at "
                            f"{bootstrap_servers!r}: {e}"
                        ) from e
                    time.sleep(0.2)
            committed[group] = max((o for o in offsets.values() if o >= 0), default=None)
        return committed
    finally:
        admin.close()
