"""The source operator: head of a source chain, polling its reader for batches and watermarks.

With ``with_watermark_alignment`` it also reports its watermark to the
JobMaster (:mod:`flinklike_spark._runtime.watermark_alignment`) and, before each
poll, pauses the splits whose watermark is beyond the group's bound (FLIP-217)
or, when the bound is below the subtask's own watermark, does not poll at all
(FLIP-182).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from checkpointing.schemas import StateKind
from checkpointing.state_snapshots import OperatorStateSnapshot
from flinklike_spark._runtime.operators.idleness import IdlenessTracker
from flinklike_spark._runtime.operators.split_watermarks import SplitWatermarks
from flinklike_spark._runtime.operators.stream_operator import (
    OperatorSnapshot,
    RestoredState,
    StreamOperator,
)
from flinklike_spark._runtime.record_timestamps import with_timestamps
from flinklike_spark._runtime.watermark_alignment import AlignmentReporter
from flinklike_spark.common.watermark_strategy import MAX_WATERMARK, MIN_WATERMARK, WatermarkStrategy
from flinklike_spark.connector_api import (
    ReadResult,
    Source,
    SourceReaderContext,
)

if TYPE_CHECKING:  # pragma: no cover
    from flinklike_spark._runtime.operators.operator_spec import OperatorSpec


#: Operator state name of the reader's splits.
_SOURCE_SPLITS = "source_splits"
#: How long a subtask held back by watermark alignment waits before it looks at the group's bound again.
_ALIGNMENT_WAIT_S = 0.02

_log = logging.getLogger(__name__)


class SourceOperator(StreamOperator):
    """Head of a source chain: polls the reader and emits batches and watermarks."""

    vectorized = True

    def __init__(self, spec: OperatorSpec) -> None:
        super().__init__(spec)
        self.source: Source = spec.function
        self.reader = None
        self.splits = list(spec.splits)
        strategy = spec.timestamp_strategy or WatermarkStrategy.no_watermarks()
        self._strategy = strategy
        self._watermarks = strategy.create_generator()
        self._split_watermarks: SplitWatermarks | None = None  # readers that report their splits
        self._idle_without_splits = False
        self._last_watermark = MIN_WATERMARK
        self.records_out = 0
        self._idle_timeout = strategy.idle_timeout
        self._idleness: IdlenessTracker | None = None  # with_idleness, created in open()
        self._aligner: AlignmentReporter | None = None  # with_watermark_alignment, created in open()
        self._paused_splits: frozenset[str] = frozenset()
        self._splits_pause = True  # False once the reader said it cannot pause splits

    def open(self) -> None:
        ctx = self.context
        self.reader = self.source.create_reader(
            SourceReaderContext(
                subtask_index=ctx.subtask_index, parallelism=ctx.parallelism, attempt_number=ctx.attempt_number
            )
        )
        self.reader.add_splits(self.splits)
        self.reader.open()
        if self.reader.current_split_ids() is not None:
            self._split_watermarks = SplitWatermarks(self._strategy)
        if self._idle_timeout is not None:
            self._idleness = IdlenessTracker(
                self._idle_timeout, self.output.emit_watermark_status, now_ms=self.context.clock_ms()
            )
        self._open_alignment()

    def pending_records(self) -> int | None:
        """The reader's backlog (Flink's ``pendingRecords``), None before ``open`` or if it does not know."""
        return None if self.reader is None else self.reader.pending_records()

    def _open_alignment(self) -> None:
        alignment, ctx = self._strategy.alignment, self.context
        if alignment is None or ctx.batch_execution or not self._strategy.emit_watermarks:
            return
        if ctx.report_watermark is None:
            _log.warning(
                "%s: with_watermark_alignment(%r) is ignored: this task runs without a JobMaster to align with",
                ctx.task_name, alignment.watermark_group,
            )  # fmt: skip
            return
        self._aligner = AlignmentReporter(
            alignment, ctx.report_watermark, job_id=ctx.job_id, reporter=f"{ctx.vertex_id}/{ctx.subtask_index}",
            attempt=ctx.attempt_number, initial_watermark=self._last_watermark,
        )  # fmt: skip
        self._aligner.start()

    def initialize_state(self, restored: RestoredState | None) -> None:
        """Take this subtask's share of the restored splits (all of them, sorted by id, by ``Source.assign_splits``)."""
        if restored is None:
            return
        splits = sorted(
            (e.value for e in restored.operator if e.state_name == _SOURCE_SPLITS), key=lambda split: split.split_id
        )
        ctx = self.context
        self.splits = list(self.source.assign_splits(splits, ctx.parallelism)[ctx.subtask_index])

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        # readers hear of completed checkpoints (Flink's SourceReader.notifyCheckpointComplete)
        if self.reader is not None:
            self.reader.notify_checkpoint_complete(checkpoint_id)

    def snapshot_state(self, checkpoint_id: int) -> OperatorSnapshot:
        splits = self.reader.snapshot_state(checkpoint_id)
        entries = [(s.split_id, s) for s in splits]
        return OperatorSnapshot(
            operator=[OperatorStateSnapshot(name=_SOURCE_SPLITS, kind=StateKind.SOURCE_SPLIT, entries=entries)]
        )

    def poll(self, max_rows: int) -> ReadResult:
        """Read once; emit what was read (and a watermark if it advanced)."""
        if self._aligner is not None and self._held_back_by_alignment():
            return ReadResult(wait_seconds=_ALIGNMENT_WAIT_S)
        result = self.reader.poll_next(max_rows)
        batch = result.batch
        has_records = batch is not None and batch.num_rows > 0
        if self._idleness is not None and has_records:
            self._idleness.on_records(self.context.clock_ms())  # active before the records
        self._emit(result, has_records)
        if self._idleness is not None and not has_records:
            self._idleness.check(self.context.clock_ms())  # idle after the watermark (ignored downstream if later)
        return result

    def _held_back_by_alignment(self) -> bool:
        """Report the watermark, pause the splits beyond the group's bound; True if the whole subtask is beyond it."""
        aligner = self._aligner
        idle = self._idle_without_splits or (self._idleness is not None and self._idleness.idle)
        aligner.set_watermark(MAX_WATERMARK if idle else self._last_watermark)
        bound = aligner.max_allowed
        if self._split_watermarks is not None and self._splits_pause:
            ahead = frozenset(s for s, w in self._split_watermarks.watermarks().items() if w > bound)
            if ahead != self._paused_splits:
                try:
                    self.reader.pause_or_resume_splits(ahead - self._paused_splits, self._paused_splits - ahead)
                    self._paused_splits = ahead
                except NotImplementedError:
                    self._splits_pause = False
                    _log.info(
                        "%s: %s cannot pause splits; watermark alignment pauses the subtask as a whole",
                        self.context.task_name, type(self.reader).__name__,
                    )  # fmt: skip
        return self._last_watermark > bound

    def _emit(self, result: ReadResult, has_records: bool) -> None:
        batch = result.batch
        if self._split_watermarks is not None:
            self._emit_per_split(result)
            return
        if has_records:
            self.records_out += batch.num_rows
            if not self._watermarks.enabled:
                self.output.emit_batch(batch)
            else:
                self.output.emit_batch(with_timestamps(batch, self._watermarks.assign(batch)))
                watermark = self._watermarks.current_watermark()
                if watermark > self._last_watermark and not self.context.batch_execution:
                    self._last_watermark = watermark
                    self.output.emit_watermark(watermark)

    def _emit_per_split(self, result: ReadResult) -> None:
        """Emit a batch of one split with its timestamps; then the minimum over the active splits' watermarks."""
        splits = self._split_watermarks
        now_ms = self.context.clock_ms()
        batch = result.batch
        if batch is not None and batch.num_rows:
            self.records_out += batch.num_rows
            if result.split_id is None:
                raise TypeError(
                    f"{type(self.reader).__name__} reports its splits (current_split_ids) but returned a batch "
                    "without ReadResult.split_id"
                )
            timestamps = splits.assign(result.split_id, batch, result.timestamps, now_ms)
            self.output.emit_batch(with_timestamps(batch, timestamps))
        # after the batch: the batch that finished a split was its last, and the split no longer counts
        split_ids = self.reader.current_split_ids()
        splits.update_splits(split_ids, now_ms)
        if self._idleness is None and bool(split_ids) == self._idle_without_splits:
            # A subtask without splits (more subtasks than Kafka partitions) is idle, as in Flink,
            # so that it does not hold back the event time of the others.
            self._idle_without_splits = not split_ids
            self.output.emit_watermark_status(self._idle_without_splits)
        if self._strategy.emit_watermarks and not self.context.batch_execution:
            watermark = splits.combined(now_ms)
            if watermark is not None and watermark > self._last_watermark:
                self._last_watermark = watermark
                self.output.emit_watermark(watermark)

    def finish(self) -> None:
        # Flink: a bounded source ends with MAX_WATERMARK, firing all event-time timers downstream.
        if self._idleness is not None:
            self._idleness.end()
        if self._idle_without_splits:
            self._idle_without_splits = False
            self.output.emit_watermark_status(False)
        self.output.emit_watermark(MAX_WATERMARK)

    def close(self) -> None:
        if self._aligner is not None:
            self._aligner.close()
        if self.reader is not None:
            self.reader.close()
