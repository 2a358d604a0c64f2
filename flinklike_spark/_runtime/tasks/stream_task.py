"""StreamTask: runs one subtask's operator chain in a mailbox loop.

The loop (on the task thread) repeats: run pending mails; fire due
processing-time timers and buffer-timeout flushes; if every output partition
has capacity, run the *default action* once (source: poll the reader; other
tasks: take one buffer or event from the input gates); otherwise, or when no
input is available, sleep until woken (data, capacity, mail) or until the next
timer/flush is due. A full output therefore suspends input processing, which
backpressures upstream through credit-based flow control.

The operator chain is opened tail-to-head and finished/closed head-to-tail.
End of input (a bounded source exhausted, or EndOfData or EndOfPartition on
every input channel) finishes the operators. Without a final checkpoint the
task then ends its output partitions and the loop. With one (FLIP-147, see
:class:`~flinklike_spark._runtime.deployment.CheckpointDeployment`) it sends
EndOfData downstream and keeps running: it takes part in checkpoints (barriers
from its inputs, or a trigger from the JobMaster once every input ended)
until one it took after finishing completed, and only then ends its
partitions. A task deployed FINISHED_ON_RESTORE (its vertex had finished in
the restored checkpoint) opens no operator: it waits for its inputs to end and
ends its outputs, emitting nothing else.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import timedelta

import pyarrow as pa

from flinklike_spark._runtime.network.events import (
    BufferOrEvent,
    CancelCheckpointMarker,
    CheckpointBarrier,
    EndOfData,
    EndOfPartition,
    EventAnnouncement,
    Watermark,
    WatermarkStatus,
)
from flinklike_spark._runtime.operators.source_operator import SourceOperator
from flinklike_spark._runtime.tasks.mailbox import Mailbox, MailTimer
from flinklike_spark._runtime.tasks.operator_chain import OperatorChain
from flinklike_spark._runtime.tasks.task_collaborators import (
    CheckpointsFactory,
    TaskCheckpoints,
    TaskInputGate,
    TaskRestore,
    UnprocessedInput,
)
from flinklike_spark._runtime.tasks.task_metrics import TaskMetrics
from flinklike_spark._runtime.tasks.watermark_valve import WatermarkValve

__all__ = ["StreamTask"]

_SLICE_SECONDS = 0.005  # longest a per-record head works on one buffer before the loop looks around

log = logging.getLogger(__name__)


class StreamTask:
    """Runs one subtask. ``run`` blocks on the calling (task) thread until the end.

    Constructed whole: everything the task runs with is an argument; the
    checkpoint coordinator, which needs the task's mailbox timers and its
    buffer in progress, is built here by ``checkpoints``.

    Args:
        chain: the operator chain (not yet opened).
        input_gates: network inputs (empty for a source task).
        buffer_timeout: how long a partially filled output buffer may wait.
        source_batch_rows: ``max_rows`` passed to the source reader per poll.
        restore: what the task starts from (None: a fresh start).
        checkpoints: builds the task's checkpoint coordinator (None: checkpointing disabled).
        clock: monotonic seconds (injectable).
    """

    def __init__(
        self,
        chain: OperatorChain,
        input_gates: Sequence[TaskInputGate],
        *,
        buffer_timeout: timedelta,
        source_batch_rows: int = 4096,
        restore: TaskRestore | None = None,
        checkpoints: CheckpointsFactory | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        restore = restore or TaskRestore()
        self.chain = chain
        self.gates = list(input_gates)
        self.mailbox = Mailbox()
        # A source operator's own count is what its network outputs count again: sinks are added, sources not.
        counters = [
            *chain.network_outputs,
            *(op for op in chain.operators if hasattr(op, "records_out") and not isinstance(op, SourceOperator)),
        ]
        registry = chain.operators[0].context.metric_registry if chain.operators else None
        self.metrics = TaskMetrics(
            count_out=lambda: sum(c.records_out for c in counters),
            user=registry,
            count_bytes_out=lambda: sum(getattr(o, "bytes_out", 0) for o in chain.network_outputs),
            input_watermark=(lambda: self._valve.current) if self.gates else None,
            pending_records=chain.head.pending_records if isinstance(chain.head, SourceOperator) else None,
        )
        self._buffer_timeout = buffer_timeout.total_seconds()
        self._source_batch_rows = source_batch_rows
        self._clock = clock
        self._cancelled = threading.Event()
        self._end_of_input = False
        self._next_source_poll = 0.0
        self._gate_cursor = 0
        self._channel_offsets: list[int] = []
        total = 0
        for gate in self.gates:
            self._channel_offsets.append(total)
            total += gate.num_channels
        self._valve = WatermarkValve(total)
        self._num_channels = total
        self._ended_channels: set[int] = set()  # channels that delivered EndOfData or EndOfPartition
        self._is_source = isinstance(chain.head, SourceOperator)
        for output in chain.network_outputs:
            output.partition.set_availability_listener(self.mailbox.wake)
        for gate in self.gates:
            gate.set_data_listener(self.mailbox.wake)
        self._restored_state = restore.state
        self._replay_input = list(restore.input)  # restored input channel state, processed before new input
        self._replay_output = list(restore.output)  # restored output channel state: (partition, batch)
        self._finished = False  # the output partitions ended
        self._data_finished = False  # the operators finished (end of input)
        self._finished_on_restore = restore.finished  # FLIP-147: the vertex had finished in the restored checkpoint
        self._deferred_trigger: CheckpointBarrier | None = None  # a JobMaster trigger before the input ended
        self._remainder: tuple[int, int, pa.RecordBatch, int] | None = None  # (gate, channel, batch, next row)
        self._seconds_per_row = 0.0  # moving average of the head's per-row cost
        #: the subtask's checkpoint coordinator (None: checkpointing is disabled)
        self.checkpoints: TaskCheckpoints | None = (
            None
            if checkpoints is None
            else checkpoints(register_timer=self.register_timer, unprocessed_input=self.unprocessed_input)
        )

    # -- control (any thread) ---------------------------------------------------------------

    def cancel(self) -> None:
        """Stop the task (any thread, idempotent): the loop ends and no wait outlives the cancel.

        The mailbox wake ends idle and backpressure waits; closing the input
        gates ends a wait for a partition, a connection or a request backoff
        in ``run``'s gate start (the task thread then sees ClosedChannelError).
        """
        if self._cancelled.is_set():
            return
        self._cancelled.set()
        self.mailbox.wake()
        for gate in self.gates:
            try:
                gate.close()
            except Exception:  # noqa: BLE001 - the task is going away; the task thread reports what matters
                log.debug("closing %r on cancel failed", gate, exc_info=True)

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    # -- task thread ------------------------------------------------------------------------

    def register_timer(self, delay: timedelta, callback: Callable[[], None]) -> MailTimer:
        """Run ``callback`` on the task thread (as a mail) after ``delay``."""
        return MailTimer(self.mailbox, delay.total_seconds(), callback)

    def run(self) -> None:
        """Open the chain, process until end of input or cancellation, finish. Raises on failure."""
        for gate in self.gates:
            gate.start()
        if self._finished_on_restore:
            self._end_of_input = self._end_of_input or not self.gates
        else:
            self.chain.open(self._restored_state)
            self._replay_channel_state()
        mailbox = self.mailbox
        outputs = self.chain.network_outputs
        clock = self._clock
        while not self._cancelled.is_set():
            mailbox.run_pending()
            now = clock()
            if not self._data_finished:
                self._fire_timers_and_flushes(now)
                if self._end_of_input and self._remainder is None:
                    self._end_data()
            if self._data_finished and not self._awaits_final_checkpoint():
                break
            mailbox.prepare_wait()
            if all(o.partition.is_available() for o in outputs):
                if self._default_action(now):
                    continue
                wait_start = clock()
                mailbox.wait(self._sleep_time(now))
                self.metrics.idle_seconds += clock() - wait_start
            else:
                wait_start = clock()
                mailbox.wait(self._sleep_time(now))
                self.metrics.backpressured_seconds += clock() - wait_start
        if self._data_finished and not self._cancelled.is_set():
            self.chain.end_outputs()
            self._finished = True

    def _end_data(self) -> None:
        """The input ended: finish the operators; with a final checkpoint, send EndOfData and wait for it."""
        if not self._finished_on_restore:
            self.chain.finish_operators()
        self._data_finished = True
        checkpoints = self.checkpoints
        if checkpoints is not None and checkpoints.final_checkpoint:
            self.chain.end_data()
            checkpoints.end_of_data()
            deferred, self._deferred_trigger = self._deferred_trigger, None
            if deferred is not None:
                checkpoints.trigger_source_checkpoint(deferred)
        elif self._finished_on_restore:
            self.chain.end_data()

    def _awaits_final_checkpoint(self) -> bool:
        checkpoints = self.checkpoints
        return checkpoints is not None and checkpoints.final_checkpoint and not checkpoints.final_checkpoint_completed

    def _replay_channel_state(self) -> None:
        """Restored in-flight data goes first: the producer's overtaken output, then unprocessed input."""
        outputs = self.chain.network_outputs
        for partition_index, batch in self._replay_output:
            outputs[partition_index].emit_batch(batch)
        for batch in self._replay_input:
            self.metrics.records_in += batch.num_rows
            self.chain.head.process_batch(batch)
        self._replay_input, self._replay_output = [], []

    def _sleep_time(self, now: float) -> float:
        deadlines = [now + 0.5]
        if self._data_finished:  # finished operators fire no timers; nothing is left to flush
            return 0.5
        for output in self.chain.network_outputs:
            deadline = output.flush_deadline(self._buffer_timeout)
            if deadline is not None:
                deadlines.append(deadline)
        next_timer = self._next_processing_timer_ms()
        if next_timer is not None:
            deadlines.append(now + max(0.0, next_timer / 1000 - time.time()))
        if self._is_source and self._next_source_poll > now:
            deadlines.append(self._next_source_poll)
        return max(0.0, min(deadlines) - now)

    def _next_processing_timer_ms(self) -> int | None:
        timers = [t for t in (op.next_processing_timer() for op in self.chain.operators) if t is not None]
        return min(timers) if timers else None

    def _fire_timers_and_flushes(self, now: float) -> None:
        next_timer = self._next_processing_timer_ms()
        if next_timer is not None:
            now_ms = int(time.time() * 1000)
            if next_timer <= now_ms:
                for operator in self.chain.operators:
                    operator.on_processing_time(now_ms)
        for output in self.chain.network_outputs:
            deadline = output.flush_deadline(self._buffer_timeout)
            if deadline is not None and deadline <= now:
                output.flush()

    def _default_action(self, now: float) -> bool:
        """Process one unit of input; return False if none was available."""
        if self._is_source:
            return False if self._end_of_input else self._poll_source(now)
        return self._process_input()

    def _poll_source(self, now: float) -> bool:
        if now < self._next_source_poll:
            return False
        result = self.chain.head.poll(self._source_batch_rows)
        if result.batch is not None and result.batch.num_rows:
            self.metrics.records_in += result.batch.num_rows
            return True
        if result.end_of_input:
            self._end_of_input = True
            return True
        self._next_source_poll = now + max(result.wait_seconds, 0.001)
        return False

    def _process_input(self) -> bool:
        if self._remainder is not None:
            # Mid-buffer: only priority events (unaligned barriers) may cut in.
            for index, gate in enumerate(self.gates):
                polled = gate.poll_priority()
                if polled is not None:
                    self._process_event(index, polled[0], polled[1])
                    return True
            self._process_slice()
            return True
        gates = self.gates
        n = len(gates)
        for step in range(n):
            index = (self._gate_cursor + step) % n
            polled = gates[index].poll_next()
            if polled is None:
                continue
            self._gate_cursor = (index + 1) % n
            channel, item = polled
            if item.buffer is not None:
                self.metrics.count_input(item.buffer)
                checkpoints = self.checkpoints
                if checkpoints is not None and checkpoints.recording:
                    checkpoints.on_buffer(index, channel, item.buffer)
                self._remainder = (index, channel, item.buffer, 0)
                self._process_slice()
            else:
                self._process_event(index, channel, item)
            return True
        return False

    def _process_slice(self) -> None:
        """Process the current buffer, in slices of about ``_SLICE_SECONDS`` for per-record heads.

        A slow per-record operator would otherwise hold an unaligned barrier
        back for a whole buffer; between slices the loop runs mails and takes
        priority events (Flink checks between records).
        """
        gate, channel, batch, offset = self._remainder
        head = self.chain.head
        rows = batch.num_rows - offset
        if not head.vectorized and self._seconds_per_row > 0:
            rows = min(rows, max(1, int(_SLICE_SECONDS / self._seconds_per_row)))
        piece = batch if offset == 0 and rows == batch.num_rows else batch.slice(offset, rows)
        offset += rows
        self._remainder = (gate, channel, batch, offset) if offset < batch.num_rows else None
        started = self._clock()
        head.process_batch(piece)
        per_row = (self._clock() - started) / max(rows, 1)
        self._seconds_per_row = per_row if self._seconds_per_row == 0 else 0.8 * self._seconds_per_row + 0.2 * per_row

    def unprocessed_input(self) -> UnprocessedInput | None:
        """``(gate, channel, rows not yet processed)`` of the buffer in progress, if any."""
        if self._remainder is None:
            return None
        gate, channel, batch, offset = self._remainder
        return gate, channel, batch.slice(offset)

    def _process_event(self, gate_index: int, channel_index: int, element: BufferOrEvent) -> None:
        event = element.event
        channel = self._channel_offsets[gate_index] + channel_index
        checkpoints = self.checkpoints
        if isinstance(event, Watermark):
            advanced = self._valve.input_watermark(channel, event.timestamp_ms)
            if advanced is not None:
                self.chain.head.process_watermark(advanced)
        elif isinstance(event, WatermarkStatus):
            advanced, status = self._valve.input_status(channel, event.idle)
            if advanced is not None:
                self.chain.head.process_watermark(advanced)
            if status is not None:
                self.chain.head.process_watermark_status(status)
        elif isinstance(event, EndOfData):
            self._channel_data_ended(channel)
        elif isinstance(event, EndOfPartition):
            if checkpoints is not None:
                checkpoints.on_end_of_partition(gate_index, channel_index)
            advanced, status = self._valve.channel_finished(channel)
            if not self._data_finished:
                if advanced is not None:
                    self.chain.head.process_watermark(advanced)
                if status is not None:
                    self.chain.head.process_watermark_status(status)
            self._channel_data_ended(channel)
        elif checkpoints is None:
            log.debug("task ignores event %r (checkpointing is disabled)", event)
        elif isinstance(event, CheckpointBarrier):
            checkpoints.on_barrier(gate_index, channel_index, element)
        elif isinstance(event, EventAnnouncement):
            checkpoints.on_announcement(gate_index, channel_index, event)
        elif isinstance(event, CancelCheckpointMarker):
            checkpoints.on_cancel_marker(gate_index, channel_index, event)
        else:
            log.warning("task ignores unknown event %r", event)

    def _channel_data_ended(self, channel: int) -> None:
        self._ended_channels.add(channel)
        if len(self._ended_channels) == self._num_channels:
            self._end_of_input = True

    # -- checkpoint mails (task thread) -----------------------------------------------------------

    def trigger_checkpoint(self, barrier: CheckpointBarrier) -> None:
        """Mail from the JobMaster: take checkpoint ``barrier``.

        Sent to source tasks, and (FLIP-147) to tasks whose upstream tasks all
        finished: no barrier comes through their inputs, so the JobMaster
        starts the checkpoint there. Such a task takes it once its operators
        finished (all its input processed; in-flight data an unaligned barrier
        of an earlier checkpoint overtook may still be queued), deferring the
        trigger until then.
        """
        checkpoints = self.checkpoints
        if checkpoints is None:
            return
        final = checkpoints.final_checkpoint
        if self._finished or (self._end_of_input and not final):
            checkpoints.decline_finished(barrier.checkpoint_id)
        elif self._is_source or self._data_finished:
            checkpoints.trigger_source_checkpoint(barrier)
        elif final and (self._deferred_trigger is None or barrier.checkpoint_id > self._deferred_trigger.checkpoint_id):
            self._deferred_trigger = barrier
        else:
            checkpoints.decline_finished(barrier.checkpoint_id)
