"""The exception hierarchy: errors cross processes (pickle) unchanged."""

from __future__ import annotations

import pickle

import pytest

from flinklike_spark.errors import FlinklikeError, RemoteTaskError

pytestmark = pytest.mark.timeout(30)


def test_remote_task_error_survives_repeated_pickling_unchanged():
    """A task failure crosses TaskExecutor -> JobMaster -> client: its traceback must appear once."""
    error = RemoteTaskError(
        "ValueError: bad row", task_name="map (1/2)#0", exception_type="ValueError",
        remote_traceback="Traceback (most recent call last):\n  ...\nValueError: bad row\n",
    )  # fmt: skip
    travelled = pickle.loads(pickle.dumps(pickle.loads(pickle.dumps(error))))
    assert str(travelled) == str(error)
    assert str(travelled).count("Remote traceback (task map (1/2)#0)") == 1
    assert (travelled.task_name, travelled.exception_type, travelled.remote_traceback) == (
        error.task_name, error.exception_type, error.remote_traceback,
    )  # fmt: skip
    assert isinstance(travelled, FlinklikeError)


def test_an_import_error_is_not_recoverable_and_names_the_fix():
    from flinklike_spark.errors import import_error_hint, is_non_recoverable

    try:
        raise ImportError("Install s3fs to access S3")
    except ImportError as exc:
        assert is_non_recoverable(exc)
        assert 'pip install "flinklike-spark[s3]"' in import_error_hint(exc)
    missing = ModuleNotFoundError("No module named 'my_jobs'", name="my_jobs")
    assert is_non_recoverable(missing) and "module 'my_jobs' cannot be imported" in import_error_hint(missing)
    assert not is_non_recoverable(ValueError("a bug a restart may pass"))


def test_job_cancelled_error_keeps_who_cancelled_and_the_last_checkpoint_across_pickling():
    from flinklike_spark.errors import JobCancelledError

    error = JobCancelledError(
        "job 'j' (abc) was cancelled by stop-with-savepoint", job_id="abc", cancelled_by="stop-with-savepoint",
        last_checkpoint="/tmp/ck/abc/chk-4",
    )  # fmt: skip
    travelled = pickle.loads(pickle.dumps(error))
    assert (str(travelled), travelled.job_id, travelled.cancelled_by, travelled.last_checkpoint) == (
        str(error), "abc", "stop-with-savepoint", "/tmp/ck/abc/chk-4",
    )  # fmt: skip
