"""The interfaces that sources and sinks implement (FLIP-27 style, batch-at-a-time).

Call order for a source, per parallel subtask, on the task thread:

1. ``Source.create_splits(parallelism)`` runs once per job in the JobMaster;
   ``Source.assign_splits`` hands them to subtasks (default: split ``i`` to
   subtask ``i % parallelism``). After a restore, every subtask sees all
   restored splits and takes its share with the same ``assign_splits``.
2. ``Source.create_reader(context)`` runs in the TaskExecutor.
3. ``reader.add_splits(splits)``: the subtask's splits (restored ones, with
   their saved positions, after a restore).
4. ``reader.open()``, then ``reader.poll_next(max_rows)`` repeatedly until it
   returns ``ReadResult(end_of_input=True)``. Between polls the task may call
   ``snapshot_state(checkpoint_id)`` (a checkpoint barrier is emitted right
   after it, so the state must describe exactly the rows already returned).
5. ``reader.close()`` exactly once, also after a failure.

A sink writer sees ``open()``, then ``write(batch)`` for every buffer, then
``finish()`` once if its input ended, then ``close()`` exactly once.

Exactly-once sinks implement :class:`TwoPhaseCommittingSink` (Flink's Sink V2
``TwoPhaseCommittingSink``): at every checkpoint barrier the writer's
``prepare_commit(checkpoint_id)`` makes what it wrote durable but invisible and
returns *committables*; the runtime stores them in the checkpoint and, when
the checkpoint completes, hands them to a :class:`Committer`, which makes
them visible. After a restart the committables of the restored checkpoint are
committed again, so ``Committer.commit`` must be idempotent. At the end of a
bounded job with periodic checkpoints, the writer's ``finish()`` is followed by
the final checkpoint's ``prepare_commit(checkpoint_id)``, committed in that
checkpoint's notification before the task ends (FLIP-147); without periodic
checkpoints the last committables (``prepare_commit(END_OF_INPUT)``) are
committed by the JobMaster once every task has finished.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Collection
from enum import Enum
from typing import Any, Protocol, Self, runtime_checkable

import pyarrow as pa

__all__ = [
    "END_OF_INPUT",
    "Boundedness",
    "ClientResultChannel",
    "Committer",
    "CommitterContext",
    "PrecommittingSinkWriter",
    "ReadResult",
    "Sink",
    "SinkWriter",
    "SinkWriterContext",
    "Source",
    "SourceReader",
    "SourceReaderContext",
    "SourceSplit",
    "SubmissionChecked",
    "TwoPhaseCommittingSink",
]

END_OF_INPUT = 2**63 - 1
"""The checkpoint id of the committables prepared when a bounded input ended (Flink's ``Long.MAX_VALUE``)."""


class Boundedness(Enum):
    BOUNDED = "bounded"
    CONTINUOUS_UNBOUNDED = "continuous_unbounded"


@dataclasses.dataclass(frozen=True, kw_only=True)
class SourceSplit:
    """A unit of source work. Connectors subclass it and add their position fields."""

    split_id: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReadResult:
    """What one ``poll_next`` produced.

    Attributes:
        batch: rows read, or None if nothing is available right now.
        end_of_input: every split of this reader is exhausted; no more polls follow.
        wait_seconds: with ``batch=None`` and not at the end, how long the task
            may sleep before polling again (used for rate limits).
        split_id: every row of ``batch`` comes from this split. A reader that
            sets it (and implements ``SourceReader.current_split_ids``) gets
            per-split watermarks, combined in the source operator (Flink's
            per-split ``ReaderOutput``), and per-split idleness.
        timestamps: the rows' own event timestamps (epoch ms, int64; e.g.
            Kafka's record timestamps): the default event time when the
            watermark strategy has no timestamp assigner, and the
            ``record_timestamp`` a ``TimestampAssigner`` is given.
    """

    batch: pa.RecordBatch | None = None
    end_of_input: bool = False
    wait_seconds: float = 0.0
    split_id: str | None = None
    timestamps: pa.Array | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class SourceReaderContext:
    subtask_index: int
    parallelism: int
    attempt_number: int = 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class SinkWriterContext:
    """What a sink writer knows about its subtask.

    ``transactional_id_prefix`` (Flink's KafkaSink ``transactionalIdPrefix``)
    is ``flinklike/<lineage id>/<sink uid>``: the lineage id is the id of the
    first job of a chain of restores, so the prefix stays the same when a job
    resumes from a checkpoint or savepoint. A two-phase-committing sink names
    its transactions ``<prefix>/<subtask>`` and uses the checkpoint id as their
    version, which lets it recognize output it committed before a restart.
    """

    subtask_index: int
    parallelism: int
    attempt_number: int = 0
    task_name: str = ""
    job_id: str = ""
    operator_uid: str = ""
    transactional_id_prefix: str = ""
    #: where results for the job's client go (``execute_and_collect``); None outside a TaskExecutor
    result_channel: ClientResultChannel | None = None
    #: True once the task is being cancelled: a writer that waits long (a flush to an unreachable
    #: broker) polls it and gives up, so that no wait outlives a cancel
    cancelled: Callable[[], bool] = dataclasses.field(default=lambda: False)


class ClientResultChannel(Protocol):
    """Hands batches to the job's client over the engine's authenticated RPC (see
    :mod:`flinklike_spark._runtime.collect_results`).

    ``deliver`` blocks until the client process holds the batch; a ``batch_id``
    delivered before is ignored (so a re-commit is idempotent). It returns False
    when nobody collects ``collect_id`` any more, and raises the RPC's errors.
    """

    def deliver(self, collect_id: str, batch_id: str, payload: bytes) -> bool: ...


@dataclasses.dataclass(frozen=True, kw_only=True)
class CommitterContext:
    """What a committer may use (Flink's ``CommitterInitContext``)."""

    #: see :class:`SinkWriterContext`; in the JobMaster, the job's own results
    result_channel: ClientResultChannel | None = None
    #: True once the sink's task is being cancelled (never, in the JobMaster): a commit that
    #: waits long (retrying against an unreachable broker) polls it and raises
    #: :class:`~flinklike_spark.errors.CancelTaskError`, leaving the committable to the next
    #: restore; a cancel never waits for a commit
    cancelled: Callable[[], bool] = dataclasses.field(default=lambda: False)


class SourceReader(abc.ABC):
    """Reads the rows of the splits assigned to one subtask. Used by one thread only."""

    @abc.abstractmethod
    def add_splits(self, splits: list[SourceSplit]) -> None:
        """Assign splits (called before ``open``)."""

    def open(self) -> None:  # noqa: B027 - optional hook
        """Acquire resources; called once before the first poll."""

    @abc.abstractmethod
    def poll_next(self, max_rows: int) -> ReadResult:
        """Return at most ``max_rows`` rows; never block for long (a mailbox runs around it)."""

    @abc.abstractmethod
    def snapshot_state(self, checkpoint_id: int) -> list[SourceSplit]:
        """The splits with positions just after the last row returned by ``poll_next``."""

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:  # noqa: B027
        """Checkpoint ``checkpoint_id`` completed everywhere."""

    def current_split_ids(self) -> frozenset[str] | None:
        """The ids of the splits this reader is reading now (not finished), for per-split watermarks.

        None (the default) means the reader does not report splits: the source
        operator then derives one watermark from all its rows. A reader that
        returns a set must set ``ReadResult.split_id``; a split that is in the
        set but produced no rows holds the watermark back until it is idle
        (``with_idleness``), as in Flink; a split that left the set (finished)
        no longer counts.
        """
        return None

    def pending_records(self) -> int | None:
        """Rows available to this reader that it has not returned yet (its backlog), or None if unknown.

        Flink's ``pendingRecords`` source metric (FLIP-33): a Kafka reader's lag,
        a generator's rows that arrived but were not read. The autoscaler adds a
        backlog's growth to the input rate and plans to work it off within
        ``job.autoscaler.catch-up.duration``. Called by the TaskExecutor's metrics
        reporting, not the task thread: it must not block, and may read the
        reader's positions racily.
        """
        return None

    def pause_or_resume_splits(self, to_pause: Collection[str], to_resume: Collection[str]) -> None:
        """Stop reading the splits ``to_pause`` and read ``to_resume`` again (watermark alignment, FLIP-217).

        While a split is paused ``poll_next`` returns none of its rows; its
        position stays where it is. Called only for splits of
        ``current_split_ids``, by the task thread. A reader that does not
        implement it (the default raises ``NotImplementedError``, as Flink's
        ``UnsupportedOperationException``) is aligned as a whole: its subtask
        stops polling while its watermark is ahead.
        """
        raise NotImplementedError

    def close(self) -> None:  # noqa: B027
        """Release resources; called exactly once."""


class Source(abc.ABC):
    """A description of where rows come from; pickled and shipped to TaskExecutors."""

    @property
    def boundedness(self) -> Boundedness:
        return Boundedness.BOUNDED

    @abc.abstractmethod
    def output_schema(self) -> pa.Schema:
        """The Arrow schema of every batch the readers return."""

    @abc.abstractmethod
    def create_splits(self, parallelism: int) -> list[SourceSplit]:
        """All splits of this source, handed to subtasks by :meth:`assign_splits`."""

    def assign_splits(self, splits: list[SourceSplit], parallelism: int) -> list[list[SourceSplit]]:
        """``splits`` per subtask (``parallelism`` lists): for a new job and for every restore.

        Restored splits arrive sorted by ``split_id``. The default gives split
        ``i`` to subtask ``i % parallelism``; a source whose readers find more
        splits on their own (Kafka's partition discovery) overrides it with a
        deterministic owner per split, so that a restore at another
        parallelism gives every split to the subtask that would discover it.
        """
        per_subtask: list[list[SourceSplit]] = [[] for _ in range(parallelism)]
        for i, split in enumerate(splits):
            per_subtask[i % parallelism].append(split)
        return per_subtask

    @abc.abstractmethod
    def create_reader(self, context: SourceReaderContext) -> SourceReader:
        """A reader for one subtask."""


class SinkWriter(abc.ABC):
    """Writes the batches of one sink subtask. Used by one thread only."""

    def open(self) -> None:  # noqa: B027
        """Acquire resources; called once before the first write."""

    @abc.abstractmethod
    def write(self, batch: pa.RecordBatch) -> None:
        """Write one batch; may buffer."""

    def finish(self) -> None:  # noqa: B027
        """The input ended (bounded job): flush everything."""

    def accumulator(self) -> Any:
        """A picklable value reported to the client under the sink's name when the task ends, or None."""
        return None

    def close(self) -> None:  # noqa: B027
        """Release resources; called exactly once, also after a failure."""


class Sink(abc.ABC):
    """A description of where rows go; pickled and shipped to TaskExecutors."""

    #: The writer reads its batches' columns (a table, Parquet, JSON) rather than the records
    #: (``records_of``): a stream without a declared type, whose Rows and tuples travel pickled as in
    #: PyFlink, then reaches it as columns (a named Row's fields, a tuple's ``f0, f1, ...``).
    columnar_input: bool = False

    @abc.abstractmethod
    def create_writer(self, context: SinkWriterContext) -> SinkWriter:
        """A writer for one subtask."""


class PrecommittingSinkWriter(SinkWriter):
    """A writer of a :class:`TwoPhaseCommittingSink`.

    Call order: ``open()``, ``write`` ..., at each checkpoint barrier
    ``prepare_commit(checkpoint_id)``; at the end of a bounded input
    ``finish()``, then the final checkpoint's ``prepare_commit(checkpoint_id)``
    (with periodic checkpoints) or ``prepare_commit(END_OF_INPUT)`` (without);
    ``close()`` exactly once.
    """

    @abc.abstractmethod
    def prepare_commit(self, checkpoint_id: int) -> list[Any]:
        """Make every row written since the last call durable but invisible; return picklable committables.

        Rows written before this call must be covered by the returned
        committables and by nothing later. Return ``[]`` when nothing was written.
        """


class Committer(abc.ABC):
    """Makes prepared committables visible. Created in the sink's subtask and in the JobMaster."""

    @abc.abstractmethod
    def commit(self, committables: list[Any]) -> None:
        """Commit ``committables`` (oldest checkpoint first).

        Must be idempotent: after a failure the same committables (or a prefix
        of them already committed) are committed again and must not be
        duplicated. Raise to fail the task; the job then restarts from its
        latest checkpoint and commits them again.
        """

    def close(self) -> None:  # noqa: B027
        """Release resources; called exactly once."""


class TwoPhaseCommittingSink(Sink):
    """A sink with exactly-once output: pre-commit at checkpoint barriers, commit on completion."""

    @abc.abstractmethod
    def create_writer(self, context: SinkWriterContext) -> PrecommittingSinkWriter:
        """A writer for one subtask."""

    @abc.abstractmethod
    def create_committer(self) -> Committer:
        """A committer (one per sink subtask, and one in the JobMaster for the final commit)."""

    def create_committer_with(self, context: CommitterContext) -> Committer:
        """What the runtime calls: a committer that may use ``context`` (default: :meth:`create_committer`)."""
        return self.create_committer()

    def committed_checkpoint(self, transactional_id_prefix: str, max_subtasks: int) -> int | None:
        """The newest checkpoint id whose output writers under this prefix committed, or None.

        Called in the JobMaster before a restored job deploys any task: when it
        returns an id above the restored checkpoint's, restoring would write
        that output again, and the job refuses to start (see
        ``execution.state-recovery.accept-duplicate-sink-output``).
        ``END_OF_INPUT`` means the final output of a finished job was committed.

        Args:
            transactional_id_prefix: see :class:`SinkWriterContext`.
            max_subtasks: writers of subtasks ``0 .. max_subtasks - 1`` may have
                committed (the sink's max parallelism).

        The default returns None: the sink cannot tell, and no check is made.
        """
        return None

    def fence_older_writers(self, transactional_id_prefix: str) -> TwoPhaseCommittingSink:
        """Take over ``transactional_id_prefix`` from any older job of the restore lineage; return the sink to run.

        Called in the JobMaster of a job that resumes a checkpoint, before
        :meth:`committed_checkpoint` is asked and before any task is deployed.
        Two live jobs of one lineage share transactional ids and must never
        both commit: after this call, commits of an older job under the prefix
        must fail (:class:`~flinklike_spark.errors.SinkFencedError`), as
        Flink's transactional sinks fence an older producer. The default does
        nothing (a sink without transactional ids needs no fence).
        """
        return self


@runtime_checkable
class SubmissionChecked(Protocol):
    """A source or sink that checks its external system when the job is submitted (before any task runs).

    The client calls :meth:`checked_for_submission` once per job submission and
    ships the connector it returns. What cannot work there (an unreachable
    cluster, a setting the external system refuses) fails the submission with
    a clear error, instead of failing every task attempt under the restart
    strategy.
    """

    def checked_for_submission(self) -> Self:
        """Raise if the connector cannot work; return the connector to run (``self`` or a settled copy)."""
        ...
