"""The sink operator: writes to a ``SinkWriter`` and, for a two-phase committing sink, commits after checkpoints."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from checkpointing.schemas import StateKind
from checkpointing.state_snapshots import OperatorStateSnapshot
from flinklike_spark._runtime.operators.rows import RowsConverter
from flinklike_spark._runtime.operators.stream_operator import (
    OperatorSnapshot,
    RestoredState,
    StreamOperator,
)
from flinklike_spark._runtime.record_timestamps import (
    strip_timestamps,
)
from flinklike_spark.common.types import RecordKind, declared_kind, records_of
from flinklike_spark.connector_api import (
    END_OF_INPUT,
    Committer,
    CommitterContext,
    Sink,
    SinkWriterContext,
    TwoPhaseCommittingSink,
)

if TYPE_CHECKING:  # pragma: no cover
    from flinklike_spark._runtime.operators.operator_spec import OperatorSpec


#: Operator state name of the committables not yet committed, per checkpoint.
_COMMITTABLES = "pending_committables"


def transactional_id_prefix(lineage_id: str, sink_uid: str) -> str:
    """The transactional id prefix of a sink's writers; see :class:`SinkWriterContext`."""
    return f"flinklike/{lineage_id}/{sink_uid}"


class SinkOperator(StreamOperator):
    """Writes its input to a :class:`~flinklike_spark.connector_api.SinkWriter`.

    With a :class:`~flinklike_spark.connector_api.TwoPhaseCommittingSink` it
    is also the sink's committer (Flink's ``SinkWriterOperator`` and
    ``CommitterOperator`` chained): ``snapshot_state`` pre-commits and keeps
    the committables, per checkpoint id, as operator state
    ``pending_committables`` until ``notify_checkpoint_complete`` commits every
    pending checkpoint up to the completed one. On restore, pending
    committables of old subtask ``s`` go to new subtask ``s % parallelism``,
    which commits them before it opens its writer. At the end of a bounded
    input, with a final checkpoint (FLIP-147, ``context.final_checkpoint``),
    ``finish`` only flushes the writer: the final checkpoint's snapshot
    prepares the last rows under its id and its notification commits them
    before the task ends (Flink 2's ``SinkWriterOperator``, which emits its
    last committables in the final checkpoint). Without one (no periodic
    checkpoints) ``finish`` prepares them under ``END_OF_INPUT`` and they are
    handed to the JobMaster (:meth:`final_committables`), which commits them
    when the job finished.
    The writer's ``transactional_id_prefix`` comes from the restore lineage,
    not the job id, so it is the same after a resume (see
    :func:`transactional_id_prefix`).
    """

    vectorized = True

    def __init__(self, spec: OperatorSpec) -> None:
        super().__init__(spec)
        self.sink: Sink = spec.function
        self.two_phase = isinstance(self.sink, TwoPhaseCommittingSink)
        self.writer = None
        self._committer: Committer | None = None
        self._pending: dict[int, list[Any]] = {}  # checkpoint id -> committables, oldest first
        # A columnar sink gets an undeclared stream's pickled Rows and tuples as columns.
        self._columns = (
            RowsConverter(None, stream_name=spec.input_name or spec.name, pickle_undeclared=False)
            if self.sink.columnar_input else None
        )  # fmt: skip

    def initialize_state(self, restored: RestoredState | None) -> None:
        if restored is None or not self.two_phase:
            return
        ctx = self.context
        for entry in restored.operator:
            if entry.state_name == _COMMITTABLES and entry.subtask % ctx.parallelism == ctx.subtask_index:
                self._pending.setdefault(entry.key, []).extend(entry.value)

    def open(self) -> None:
        ctx = self.context
        if self.two_phase:
            # Restored committables first: their checkpoints completed before the restart, and a
            # transactional writer's open() may abort every transaction of its prefix still open.
            self._committer = self.sink.create_committer_with(
                CommitterContext(result_channel=ctx.result_channel, cancelled=ctx.cancelled)
            )
            if self._pending:
                self._commit_up_to(max(self._pending))
        self.writer = self.sink.create_writer(
            SinkWriterContext(
                subtask_index=ctx.subtask_index,
                parallelism=ctx.parallelism,
                attempt_number=ctx.attempt_number,
                task_name=ctx.task_name,
                job_id=ctx.job_id,
                operator_uid=self.uid,
                transactional_id_prefix=transactional_id_prefix(ctx.lineage_id or ctx.job_id, self.uid),
                result_channel=ctx.result_channel,
                cancelled=ctx.cancelled,
            )
        )
        self.writer.open()

    def process_batch(self, batch: pa.RecordBatch) -> None:
        batch = strip_timestamps(batch)
        if self._columns is not None and declared_kind(batch.schema) == RecordKind.PICKLED and batch.num_rows:
            batch = self._columns.to_batch(records_of(batch))
        self.writer.write(batch)

    def process_watermark(self, timestamp: int) -> None:
        pass

    def snapshot_state(self, checkpoint_id: int) -> OperatorSnapshot | None:
        if not self.two_phase:
            return None
        committables = self.writer.prepare_commit(checkpoint_id)
        if committables:
            self._pending[checkpoint_id] = list(committables)
        entries = [(cid, list(c)) for cid, c in sorted(self._pending.items())]
        return OperatorSnapshot(
            operator=[OperatorStateSnapshot(name=_COMMITTABLES, kind=StateKind.SINK_COMMITTABLES, entries=entries)]
        )

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        if self.two_phase:
            self._commit_up_to(checkpoint_id)

    def _commit_up_to(self, checkpoint_id: int) -> None:
        due = sorted(cid for cid in self._pending if cid <= checkpoint_id)
        if not due:
            return
        self._committer.commit([c for cid in due for c in self._pending[cid]])
        for cid in due:
            del self._pending[cid]

    def finish(self) -> None:
        self.writer.finish()
        if self.two_phase and not self.context.final_checkpoint:
            committables = self.writer.prepare_commit(END_OF_INPUT)
            if committables:
                self._pending[END_OF_INPUT] = list(committables)

    def final_committables(self) -> list[Any]:
        """Committables not committed yet when the input ended (oldest first); [] if none."""
        return [c for _, committables in sorted(self._pending.items()) for c in committables]

    def close(self) -> None:
        try:
            if self.writer is not None:
                self.writer.close()
        finally:
            if self._committer is not None:
                self._committer.close()

    def accumulator(self) -> Any:
        return self.writer.accumulator() if self.writer is not None else None
