"""Committing a restored pre-committed Kafka transaction by id, and judging what Kafka says of it.

A restored committable names a transaction by ``(transactional id, producer
id, epoch)``. ``EndTxn`` with those commits it (or answers success if it was
committed before). When ``EndTxn`` refuses, ``DescribeTransactions`` tells the
id's current state, and :func:`judge` decides:

========================================  =========================================================
what the coordinator holds for the id     verdict
========================================  =========================================================
same producer id and epoch, CompleteCommit  committed
same producer id and epoch, Ongoing or      retry: it can still be committed (Flink retries too)
PrepareCommit
same producer id and epoch, PrepareAbort    lost: Kafka aborted it (its timeout elapsed)
or CompleteAbort
another epoch or producer id                not this transaction: the id was initialised again
                                            since (Kafka keeps the producer id and bumps the epoch),
                                            so its state is a later transaction's; the
                                            committed-checkpoint marker decides
========================================  =========================================================

"Not this transaction" is settled by the marker of :mod:`.transactional_ids`:
the transaction committed if and only if its subtask's marker reached the
checkpoint that pre-committed it. Retriable errors (the coordinator loading,
moving, busy; the connection lost) and the retry states are retried with
backoff for as long as the transaction can still be committed: until
``transaction.timeout.ms`` after the first attempt, after which the
coordinator has aborted it. An id the cluster does not know at all raises
:class:`KafkaTransactionUnknownError` at once (another cluster's savepoint).
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Protocol

from connectors.kafka.transaction_admin import RETRIABLE_CODES, KafkaProtocolError, TransactionDescription
from flinklike_spark.errors import CancelTaskError, ConfigurationError, SinkCommitError, mark_non_recoverable

__all__ = [
    "CommitRetryPolicy",
    "CommitVerdict",
    "KafkaCommittable",
    "KafkaTransactionLostError",
    "KafkaTransactionUnknownError",
    "commit_by_id",
    "judge",
]

_log = logging.getLogger(__name__)

_TRANSACTIONAL_ID_NOT_FOUND = 105


@mark_non_recoverable
class KafkaTransactionLostError(SinkCommitError):
    """Kafka aborted a pre-committed transaction before the sink could commit it: its records are lost.

    Non-recoverable: committing again cannot bring the records back. The usual
    cause is ``transaction.timeout.ms`` elapsing between the pre-commit and the
    commit (a slow checkpoint plus a long restart).
    """


@mark_non_recoverable
class KafkaTransactionUnknownError(SinkCommitError):
    """A restored pre-committed transaction is unknown to the Kafka cluster the sink writes to.

    The checkpoint or savepoint was taken against another cluster, or this one
    lost its transaction state (a broker recreated with an empty data
    directory), or the transactional id expired (``transactional.id.expiration.ms``).
    Non-recoverable: no retry makes this cluster know the transaction. The
    message names the transaction, the cluster and the ways out.
    """


@dataclasses.dataclass(frozen=True, kw_only=True)
class KafkaCommittable:
    """A pre-committed Kafka transaction: what ``EndTxn`` needs to commit it from any process.

    ``checkpoint_id`` (the checkpoint that pre-committed it) and
    ``marker_group`` (its subtask's committed-checkpoint marker) settle whether
    it committed when the id's state in Kafka belongs to a later transaction;
    committables of older checkpoints lack them (None).
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    checkpoint_id: int | None = None
    marker_group: str | None = None


class CommitVerdict(enum.Enum):
    COMMITTED = "committed"
    RETRY = "can still be committed"
    LOST = "aborted by Kafka"
    NOT_THIS_TRANSACTION = "the id holds a later transaction"


def judge(committable: KafkaCommittable, described: TransactionDescription) -> CommitVerdict:
    """What Kafka's state of the id says of the committable's transaction (see the module's table)."""
    if (described.producer_id, described.producer_epoch) != (committable.producer_id, committable.producer_epoch):
        return CommitVerdict.NOT_THIS_TRANSACTION
    if described.state == "CompleteCommit":
        return CommitVerdict.COMMITTED
    if described.state in ("Ongoing", "PrepareCommit"):
        return CommitVerdict.RETRY
    if described.state in ("PrepareAbort", "CompleteAbort"):
        return CommitVerdict.LOST
    return CommitVerdict.NOT_THIS_TRANSACTION  # Empty or Dead at the same epoch: nothing of ours is open there


class TransactionRequests(Protocol):
    """The part of :class:`~.transaction_admin.TransactionAdmin` that committing by id uses."""

    def end(self, transactional_id: str, producer_id: int, producer_epoch: int, *, commit: bool,
            attempts: int = ...) -> None: ...  # fmt: skip

    def describe(self, transactional_id: str) -> TransactionDescription: ...


@dataclasses.dataclass(frozen=True, kw_only=True)
class CommitRetryPolicy:
    """How long and how often a restored transaction's commit is retried.

    Args:
        deadline: retry for this long after the first attempt (the transaction
            timeout: after it the coordinator has aborted the transaction).
        initial_backoff: the first wait; it doubles up to ``max_backoff``.
        log_every: a warning about a commit still retried at most this often.
    """

    deadline: timedelta
    initial_backoff: timedelta = timedelta(milliseconds=100)
    max_backoff: timedelta = timedelta(seconds=5)
    log_every: timedelta = timedelta(seconds=30)

    def __post_init__(self) -> None:
        for name in ("deadline", "initial_backoff", "max_backoff", "log_every"):
            value = getattr(self, name)
            if not isinstance(value, timedelta) or value <= timedelta(0):
                raise ConfigurationError(f"CommitRetryPolicy.{name} must be a positive timedelta, got {value!r}")


def commit_by_id(
    admin: TransactionRequests,
    committable: KafkaCommittable,
    *,
    policy: CommitRetryPolicy,
    marker: Callable[[str], int | None],
    unknown: Callable[[str], KafkaTransactionUnknownError],
    lost_hint: str = "",
    cancelled: Callable[[], bool] = lambda: False,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Commit ``committable``'s transaction, or make sure it was committed before.

    Args:
        admin: sends ``EndTxn`` and ``DescribeTransactions``.
        marker: the newest checkpoint a marker group committed (None: none).
        unknown: the error for an id the cluster does not know, given the detail.
        lost_hint: appended to the message of a lost transaction (the likely cause).
        cancelled: the task's cancel flag, looked at while waiting between attempts.

    Raises:
        CancelTaskError: the task was cancelled while the commit was retried; the
            transaction stays open for the next restore to commit.
        KafkaTransactionLostError: Kafka aborted the transaction, or it could
            not be committed before ``policy.deadline``.
        KafkaTransactionUnknownError: the cluster does not know the id.
        SinkCommitError: a request failed for another reason (the job restarts).
    """
    tid = committable.transactional_id
    start = last_log = clock()
    backoff = policy.initial_backoff.total_seconds()
    attempt = 0
    while True:
        attempt += 1
        try:
            admin.end(tid, committable.producer_id, committable.producer_epoch, commit=True, attempts=1)
            if attempt > 1:
                _log.info("KafkaSink: committed transaction %r after %d attempts", tid, attempt)
            return
        except KafkaProtocolError as e:
            if e.error_code in RETRIABLE_CODES:
                verdict, why = CommitVerdict.RETRY, str(e)
            else:
                verdict, why = _describe(admin, e, committable, unknown)
        except OSError as e:  # the connection broke: the coordinator may be moving
            verdict, why = CommitVerdict.RETRY, f"{type(e).__name__}: {e}"
        if verdict is CommitVerdict.NOT_THIS_TRANSACTION:
            verdict, why = _by_marker(committable, marker, why)
        if verdict is CommitVerdict.COMMITTED:
            _log.info("KafkaSink: transaction %r was committed before (%s)", tid, why)
            return
        if verdict is CommitVerdict.LOST:
            raise KafkaTransactionLostError(f"KafkaSink: transaction {tid!r} cannot be committed: {why}{lost_hint}")
        elapsed = clock() - start
        if elapsed >= policy.deadline.total_seconds():
            raise KafkaTransactionLostError(
                f"KafkaSink: transaction {tid!r} could not be committed within {policy.deadline} (the transaction "
                f"timeout, after which Kafka aborts it; {attempt} attempts, the last: {why}){lost_hint}"
            )
        if clock() - last_log >= policy.log_every.total_seconds() or attempt == 1:
            last_log = clock()
            _log.warning(
                "KafkaSink: transaction %r not committed yet after %.0f s and %d attempts (%s); retrying for up to "
                "%s in all", tid, elapsed, attempt, why, policy.deadline,
            )  # fmt: skip
        _wait_unless_cancelled(backoff, cancelled, sleep, tid)
        backoff = min(backoff * 2, policy.max_backoff.total_seconds())


#: how often a wait between attempts looks for a cancel
CANCEL_POLL_S = 0.25


def _wait_unless_cancelled(
    seconds: float, cancelled: Callable[[], bool], sleep: Callable[[float], None], tid: str
) -> None:
    waited = 0.0
    while True:
        if cancelled():
            raise CancelTaskError(f"KafkaSink: cancelled while committing transaction {tid!r}; it stays open")
        if waited >= seconds:
            return
        step = min(CANCEL_POLL_S, seconds - waited)
        sleep(step)
        waited += step


def _describe(
    admin: TransactionRequests,
    refused: KafkaProtocolError,
    committable: KafkaCommittable,
    unknown: Callable[[str], KafkaTransactionUnknownError],
) -> tuple[CommitVerdict, str]:
    try:
        described = admin.describe(committable.transactional_id)
    except KafkaProtocolError as e:
        if e.error_code == _TRANSACTIONAL_ID_NOT_FOUND:
            raise unknown(f"{refused}; {e}") from refused
        if e.error_code in RETRIABLE_CODES:
            return CommitVerdict.RETRY, f"{refused}; {e}"
        raise
    except OSError as e:
        return CommitVerdict.RETRY, f"{refused}; {type(e).__name__}: {e}"
    verdict = judge(committable, described)
    return verdict, (
        f"{refused}; the id's state is {described.state} with producer id {described.producer_id}, epoch "
        f"{described.producer_epoch} (the transaction's: {committable.producer_id}, {committable.producer_epoch})"
    )


def _by_marker(
    committable: KafkaCommittable, marker: Callable[[str], int | None], why: str
) -> tuple[CommitVerdict, str]:
    if committable.marker_group is None or committable.checkpoint_id is None:
        return CommitVerdict.LOST, f"{why}; the committable carries no committed-checkpoint marker to settle it"
    committed = marker(committable.marker_group)
    if committed is not None and committed >= committable.checkpoint_id:
        return CommitVerdict.COMMITTED, (
            f"{why}; marker {committable.marker_group!r} is at checkpoint {committed} >= "
            f"{committable.checkpoint_id}, which pre-committed it"
        )
    return CommitVerdict.LOST, (
        f"{why}; marker {committable.marker_group!r} is at checkpoint {committed}, below "
        f"{committable.checkpoint_id}, which pre-committed it: Kafka aborted it"
    )
