"""retry_lost_races: which errors of a commit attempt are races with another writer, retried on a fresh load."""

from __future__ import annotations

import pytest
from deltalake.exceptions import CommitFailedError

from checkpointing.app_transactions import retry_lost_races

pytestmark = pytest.mark.timeout(30)


def _attempts(*errors: BaseException):
    calls = []

    def attempt() -> str:
        calls.append(len(calls))
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]
        return "committed"

    return attempt, calls


def test_a_conflict_and_a_log_file_deleted_by_another_writers_cleanup_are_retried():
    vanished = FileNotFoundError("Object at location /t/_delta_log/00000000000000000217.json not found")
    attempt, calls = _attempts(CommitFailedError("conflict"), vanished)
    assert retry_lost_races(attempt, attempts=3, table_uri="/t") == "committed"
    assert len(calls) == 3


def test_a_missing_data_file_and_the_last_attempts_error_propagate():
    staged = FileNotFoundError("staged file part-0.parquet of app/0 is missing")
    attempt, calls = _attempts(staged)
    with pytest.raises(FileNotFoundError, match="staged file"):
        retry_lost_races(attempt, attempts=3, table_uri="/t")
    assert len(calls) == 1
    vanished = FileNotFoundError("Object at location /t/_delta_log/00000000000000000001.json not found")
    attempt, calls = _attempts(vanished, vanished)
    with pytest.raises(FileNotFoundError, match="_delta_log"):
        retry_lost_races(attempt, attempts=2, table_uri="/t")
    assert len(calls) == 2
