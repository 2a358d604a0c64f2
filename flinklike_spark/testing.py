"""Helpers for testing your own jobs: a bounded source with failure injection, and collecting output.

::

    from flinklike_spark.testing import ABORT, TestingSource, collect

    source = TestingSource([{"k": 1}, {"k": 2}, ABORT(), {"k": 3}], batch_size=1)
    env.from_source(source).key_by("k")...

``TestingSource`` reads its items in order on one subtask (checkpointed
position, like ``from_collection``); the other subtasks have nothing to read
and finish at once, which does not stop checkpoints (checkpoints after tasks
finished, FLIP-147). An :func:`ABORT` marker fails the source task
with :class:`InjectedFailure` when the source reaches it -- **once**: the
marker remembers that it fired in a file, so the restarted task (under
checkpointing the default restart strategy restarts it from the latest
checkpoint) or a job resumed from a checkpoint or savepoint reads past it,
with the same source object. With ``restart-strategy.type: none`` the
failure ends the job. This
is Flink's ``FailingMapper`` / bytewax's ``TestingSource.ABORT`` for testing
exactly-once recovery: everything before the last completed checkpoint must
not be seen twice, nothing after it lost.

``FailingMapper(fail_after=n)`` passes records through and fails its subtask
once, after ``n`` records (Flink's ``FailingMapper`` of ``UnalignedCheckpointITCase``):
put it anywhere in a job to inject a failure between operators::

    stream.map(FailingMapper(fail_after=500)).key_by("k")...

``collect(stream)`` runs the job and returns the stream's rows (a list).

The markers remember that they fired in a file of the client's temporary
directory, which the local cluster's TaskExecutors share.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import uuid
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from flinklike_spark.connector_api import ReadResult, SourceReaderContext
from flinklike_spark.datastream.collection_source import CollectionReader, CollectionSource
from flinklike_spark.datastream.functions import MapFunction
from flinklike_spark.errors import FlinklikeError

__all__ = ["ABORT", "Abort", "FailingMapper", "InjectedFailure", "TestingSource", "collect"]


class InjectedFailure(FlinklikeError, RuntimeError):
    """The failure an :func:`ABORT` marker injects."""


@dataclasses.dataclass(frozen=True)
class Abort:
    """A failure-injection marker among a TestingSource's items (see :func:`ABORT`)."""

    marker_file: str
    after_checkpoints: int = 0

    def fire_once(self) -> bool:
        """True the first time (the marker file is created atomically), False ever after."""
        try:
            fd = os.open(self.marker_file, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return False
        os.close(fd)
        return True


def ABORT(*, after_checkpoints: int = 0) -> Abort:  # noqa: N802 - a marker, named as in bytewax
    """A marker that fails the job the first time the source reaches it.

    Args:
        after_checkpoints: hold the source at the marker until this many checkpoints
            completed in this run (so a resume has a checkpoint to start from).
    """
    if not isinstance(after_checkpoints, int) or after_checkpoints < 0:
        raise ValueError(f"after_checkpoints must be an int >= 0, got {after_checkpoints!r}")
    directory = os.path.join(tempfile.gettempdir(), "flinklike-testing")
    os.makedirs(directory, exist_ok=True)
    return Abort(os.path.join(directory, f"abort-{uuid.uuid4().hex}"), after_checkpoints)


class FailingMapper(MapFunction):
    """Passes every record through; fails once, after ``fail_after`` records of subtask ``subtask``.

    The failure (:class:`InjectedFailure`) fires only once per mapper object,
    whichever attempt or resumed job reaches it: the restarted task passes
    records through, so a test sees exactly one failure and recovery.
    ``fail_after`` counts records of the failing attempt since it started.

    Args:
        fail_after: records to pass before failing (>= 0).
        subtask: the subtask that fails (others never do).
    """

    def __init__(self, fail_after: int, *, subtask: int = 0) -> None:
        if isinstance(fail_after, bool) or not isinstance(fail_after, int) or fail_after < 0:
            raise ValueError(f"fail_after must be an int >= 0, got {fail_after!r}")
        if isinstance(subtask, bool) or not isinstance(subtask, int) or subtask < 0:
            raise ValueError(f"subtask must be an int >= 0, got {subtask!r}")
        self.fail_after = fail_after
        self.subtask = subtask
        self._marker = ABORT()
        self._armed = False
        self._seen = 0

    def open(self, runtime_context: Any) -> None:
        self._armed = runtime_context.get_index_of_this_subtask() == self.subtask
        self._seen = 0

    def map(self, value: Any) -> Any:
        if self._armed:
            self._seen += 1
            if self._seen > self.fail_after:
                self._armed = False
                if self._marker.fire_once():
                    raise InjectedFailure(f"FailingMapper: injected failure after {self.fail_after} records")
        return value


class TestingSource(CollectionSource):
    """Rows (dicts) and :func:`ABORT` markers, read in order by one subtask.

    Args:
        items: rows and markers.
        schema: the rows' Arrow schema (None: inferred from the rows).
        batch_size: rows per poll (a batch never spans a marker); 1 makes
            event time and the failure point fully deterministic.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, items: Iterable[Any], *, schema: pa.Schema | None = None, batch_size: int | None = 1) -> None:
        self.items = list(items)
        super().__init__([item for item in self.items if not isinstance(item, Abort)], schema=schema,
                         batch_size=batch_size)  # fmt: skip
        # positions count rows only; a marker sits before the row at its position
        self.markers: dict[int, list[Abort]] = {}
        position = 0
        for item in self.items:
            if isinstance(item, Abort):
                self.markers.setdefault(position, []).append(item)
            else:
                position += 1

    def __repr__(self) -> str:
        return f"TestingSource({len(self.rows)} rows, {sum(map(len, self.markers.values()))} markers)"

    def create_reader(self, context: SourceReaderContext) -> TestingReader:
        return TestingReader(self)


class TestingReader(CollectionReader):
    __test__ = False

    def __init__(self, source: TestingSource) -> None:
        super().__init__(source)
        self._completed_checkpoints = 0

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self._completed_checkpoints += 1

    def poll_next(self, max_rows: int) -> ReadResult:
        source: TestingSource = self._source  # type: ignore[assignment]
        for marker in source.markers.get(self._next, ()):
            if not self._splits or os.path.exists(marker.marker_file):
                continue
            if self._completed_checkpoints < marker.after_checkpoints:
                return ReadResult(wait_seconds=0.01)  # hold here until enough checkpoints completed
            if marker.fire_once():
                raise InjectedFailure(f"ABORT marker before row {self._next} of {source!r}")
        following = [p for p in source.markers if p > self._next]
        if following:
            max_rows = min(max_rows, min(following) - self._next)
        return super().poll_next(max_rows)


def collect(stream: Any, job_name: str | None = None) -> list[dict]:
    """Run the stream's job (and everything defined since the last execute) and return its rows."""
    return list(stream.execute_and_collect(job_name))
