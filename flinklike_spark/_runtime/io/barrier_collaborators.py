"""The barrier handler's collaborators: what it asks of the task's inputs and of the task.

:class:`~flinklike_spark._runtime.io.barrier_handler.SingleCheckpointBarrierHandler`
drives these; the input gates implement :class:`CheckpointableInput`, the
subtask checkpoint coordinator :class:`CheckpointController`, and the task's
timer service gives a :data:`RegisterAlignmentTimer`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Protocol, runtime_checkable

from flinklike_spark._runtime.io.channel_state import InputChannelInfo
from flinklike_spark._runtime.network.events import CheckpointBarrier
from flinklike_spark.errors import CheckpointDeclinedError

__all__ = ["Cancellable", "CheckpointController", "CheckpointableInput", "RegisterAlignmentTimer"]


@runtime_checkable
class CheckpointableInput(Protocol):
    """One input gate as seen by the barrier handler (Flink's ``CheckpointableInput``).

    ``channel_infos[i]`` must have ``gate_index`` equal to this input's
    position in the handler's ``inputs`` sequence.
    """

    @property
    def channel_infos(self) -> Sequence[InputChannelInfo]:
        """Every channel of this gate, in channel-index order."""
        ...

    @property
    def num_channels(self) -> int:
        """``len(channel_infos)``."""
        ...

    def block_consumption(self, channel_info: InputChannelInfo) -> None:
        """Stop delivering buffers of ``channel_info`` (priority events still pass) until resumed."""
        ...

    def resume_consumption(self, channel_info: InputChannelInfo) -> None:
        """Deliver buffers of ``channel_info`` again."""
        ...

    def checkpoint_started(self, barrier: CheckpointBarrier) -> None:
        """Start recording in-flight input of unaligned checkpoint ``barrier.checkpoint_id``.

        For every channel the gate writes, into the ChannelStateWriter, the
        buffers that precede that channel's barrier *n* and have not been
        consumed by the task: those already queued now, and those arriving
        later until the channel's barrier (or end of partition) arrives.
        Recorded buffers are still delivered to the task afterwards.
        """
        ...

    def checkpoint_stopped(self, checkpoint_id: int) -> None:
        """Stop any recording for ``checkpoint_id`` (completed or aborted)."""
        ...

    def convert_to_priority_event(self, channel_info: InputChannelInfo, sequence_number: int) -> None:
        """Move the announced barrier at ``sequence_number`` of the channel ahead of its queued data.

        A no-op if that element was already consumed.
        """
        ...


@runtime_checkable
class CheckpointController(Protocol):
    """The task side of a checkpoint (Flink's ``SubtaskCheckpointCoordinator`` + ``CheckpointableTask``)."""

    def init_inputs_checkpoint(self, barrier: CheckpointBarrier) -> None:
        """Prepare channel state for an unaligned ``barrier`` (start the ChannelStateWriter).

        Called right before ``checkpoint_started`` on the inputs. May raise
        :class:`CheckpointDeclinedError` to abort the checkpoint.
        """
        ...

    def trigger_global_checkpoint(self, barrier: CheckpointBarrier) -> None:
        """Snapshot the operators now and forward ``barrier`` downstream.

        ``barrier.is_unaligned`` says how the snapshot is taken. Called at most
        once per checkpoint id. May raise :class:`CheckpointDeclinedError`.
        """
        ...

    def abort_checkpoint_on_barrier(self, checkpoint_id: int, cause: CheckpointDeclinedError) -> None:
        """Decline ``checkpoint_id`` (possibly one never seen before) and clean up its state."""
        ...


@runtime_checkable
class Cancellable(Protocol):
    """Handle of a registered timer."""

    def cancel(self) -> None:
        """Cancel the timer; a no-op if it already fired."""
        ...


RegisterAlignmentTimer = Callable[[timedelta, Callable[[], None]], Cancellable]
"""``register(delay, callback)``: run ``callback`` on the task thread after ``delay``."""
