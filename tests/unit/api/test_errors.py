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
