"""Judging a restored Kafka transaction from the coordinator's state, and the retry loop around ``EndTxn``.

The states here are values (``TransactionDescription``); the real broker's
answers that lead to them are tested in ``tests/kafka/test_kafka_restore.py``.
The loop runs on an injected clock, so its backoff and deadline take no time.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from connectors.kafka.commit_verification import (
    CANCEL_POLL_S,
    CommitRetryPolicy,
    CommitVerdict,
    KafkaCommittable,
    KafkaTransactionLostError,
    KafkaTransactionUnknownError,
    commit_by_id,
    judge,
)
from connectors.kafka.transaction_admin import KafkaProtocolError, TransactionDescription
from flinklike_spark.errors import CancelTaskError

pytestmark = pytest.mark.timeout(30)

COMMITTABLE = KafkaCommittable(
    transactional_id="p-0-1", producer_id=7, producer_epoch=3, checkpoint_id=12, marker_group="p-0"
)
PRODUCER_FENCED, CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS, NOT_FOUND = 90, 51, 14, 105


def described(state: str, *, producer_id: int = 7, epoch: int = 3) -> TransactionDescription:
    return TransactionDescription(
        transactional_id="p-0-1", state=state, producer_id=producer_id, producer_epoch=epoch, timeout_ms=60_000
    )


@pytest.mark.parametrize(
    ("state", "verdict"),
    [
        ("CompleteCommit", CommitVerdict.COMMITTED),
        ("Ongoing", CommitVerdict.RETRY),
        ("PrepareCommit", CommitVerdict.RETRY),
        ("PrepareAbort", CommitVerdict.LOST),
        ("CompleteAbort", CommitVerdict.LOST),
        ("Empty", CommitVerdict.NOT_THIS_TRANSACTION),
    ],
)
def test_the_state_at_the_transactions_own_producer_id_and_epoch_decides(state, verdict):
    assert judge(COMMITTABLE, described(state)) is verdict


@pytest.mark.parametrize("state", ["CompleteCommit", "Ongoing", "CompleteAbort"])
def test_an_epoch_mismatch_is_not_a_commit_of_this_transaction(state):
    """Kafka keeps the producer id when an id is initialised again: a later epoch is a later transaction."""
    assert judge(COMMITTABLE, described(state, epoch=5)) is CommitVerdict.NOT_THIS_TRANSACTION
    assert judge(COMMITTABLE, described(state, producer_id=8)) is CommitVerdict.NOT_THIS_TRANSACTION


class ScriptedCoordinator:
    """Answers ``end`` and ``describe`` from scripts (an exception code, or None for success / a description)."""

    def __init__(self, ends: list[int | None], descriptions: list[TransactionDescription | int] = ()) -> None:
        self.ends, self.descriptions = list(ends), list(descriptions)
        self.end_calls = 0
        self.clock: FakeClock | None = None  # when set, ``end_times`` records when each EndTxn was sent
        self.end_times: list[float] = []

    def gaps(self) -> list[float]:
        """The waits between EndTxn attempts (each the backoff, slept in slices that look for a cancel)."""
        return [round(b - a, 6) for a, b in zip(self.end_times, self.end_times[1:], strict=False)]

    def end(self, transactional_id, producer_id, producer_epoch, *, commit, attempts=20):
        assert commit and (producer_id, producer_epoch) == (7, 3)
        self.end_calls += 1
        if self.clock is not None:
            self.end_times.append(self.clock.now)
        code = self.ends.pop(0) if len(self.ends) > 1 else self.ends[0]
        if code is not None:
            raise KafkaProtocolError("EndTxn", code, transactional_id)

    def describe(self, transactional_id):
        answer = self.descriptions.pop(0) if len(self.descriptions) > 1 else self.descriptions[0]
        if isinstance(answer, int):
            raise KafkaProtocolError("DescribeTransactions", answer, transactional_id)
        return answer


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def run(coordinator, *, marker=None, deadline=timedelta(minutes=15)):
    clock = coordinator.clock = FakeClock()
    commit_by_id(
        coordinator,
        COMMITTABLE,
        policy=CommitRetryPolicy(deadline=deadline),
        marker=lambda group: marker,
        unknown=lambda detail: KafkaTransactionUnknownError(detail),
        clock=clock,
        sleep=clock.sleep,
    )
    return clock


def test_ongoing_is_retried_with_backoff_until_the_commit_goes_through():
    coordinator = ScriptedCoordinator(
        ends=[CONCURRENT_TRANSACTIONS, PRODUCER_FENCED, COORDINATOR_LOAD_IN_PROGRESS, None],
        descriptions=[described("Ongoing")],
    )
    clock = run(coordinator)
    assert coordinator.end_calls == 4
    assert coordinator.gaps() == [0.1, 0.2, 0.4]
    assert clock.now == pytest.approx(0.7)


def test_retriable_answers_are_retried_for_the_transaction_timeout_then_are_loss():
    coordinator = ScriptedCoordinator(ends=[COORDINATOR_LOAD_IN_PROGRESS])
    clock = coordinator.clock = FakeClock()
    with pytest.raises(KafkaTransactionLostError, match="could not be committed within 0:15:00"):
        commit_by_id(
            coordinator,
            COMMITTABLE,
            policy=CommitRetryPolicy(deadline=timedelta(minutes=15)),
            marker=lambda group: None,
            unknown=KafkaTransactionUnknownError,
            clock=clock,
            sleep=clock.sleep,
        )
    assert 15 * 60 <= clock.now < 15 * 60 + 6
    assert max(coordinator.gaps()) == 5.0, "the backoff is capped"
    assert coordinator.end_calls > 150


def test_complete_abort_at_the_transactions_epoch_is_loss_at_once():
    coordinator = ScriptedCoordinator(ends=[PRODUCER_FENCED], descriptions=[described("CompleteAbort")])
    with pytest.raises(KafkaTransactionLostError, match="CompleteAbort"):
        run(coordinator)
    assert coordinator.end_calls == 1


def test_a_later_transaction_on_the_id_defers_to_the_committed_checkpoint_marker():
    later_commit = described("CompleteCommit", epoch=5)
    committed = ScriptedCoordinator(ends=[PRODUCER_FENCED], descriptions=[later_commit])
    run(committed, marker=12)  # the marker reached the checkpoint that pre-committed it: committed before
    aborted = ScriptedCoordinator(ends=[PRODUCER_FENCED], descriptions=[later_commit])
    with pytest.raises(KafkaTransactionLostError, match="below 12"):
        run(aborted, marker=11)  # aborted (its id taken over), then a later transaction committed: loss
    with pytest.raises(KafkaTransactionLostError, match="at checkpoint None"):
        run(ScriptedCoordinator(ends=[PRODUCER_FENCED], descriptions=[later_commit]), marker=None)


def test_an_id_the_cluster_does_not_know_is_unknown_at_once():
    coordinator = ScriptedCoordinator(ends=[49], descriptions=[NOT_FOUND])
    with pytest.raises(KafkaTransactionUnknownError, match="TRANSACTIONAL_ID_NOT_FOUND"):
        run(coordinator)


def test_the_retry_policy_refuses_non_positive_durations():
    from flinklike_spark.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="deadline"):
        CommitRetryPolicy(deadline=timedelta(0))


def test_a_cancel_ends_the_retries_at_once_and_leaves_the_transaction_open():
    """A cancelled task must not wait out the transaction timeout (seen: a job whose broker was gone,
    cancelled while a commit retried, did not end within 60 s)."""
    coordinator = ScriptedCoordinator(ends=[COORDINATOR_LOAD_IN_PROGRESS])
    clock = FakeClock()
    with pytest.raises(CancelTaskError, match="p-0-1"):
        commit_by_id(
            coordinator,
            COMMITTABLE,
            policy=CommitRetryPolicy(deadline=timedelta(hours=1)),
            marker=lambda group: None,
            unknown=KafkaTransactionUnknownError,
            cancelled=lambda: clock.now >= 7.0,
            clock=clock,
            sleep=clock.sleep,
        )
    assert 7.0 <= clock.now <= 7.0 + CANCEL_POLL_S  # seen within one poll of the cancel, not after an hour
    assert coordinator.end_calls > 1  # it was retrying (only commits are ever sent: the fake asserts it)
