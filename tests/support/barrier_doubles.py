"""Doubles of the barrier handler's collaborators (CheckpointableInput, CheckpointController).

Shared by the example tests (tests/unit/io/test_barrier_handler.py) and
the property tests (test_barrier_handler_properties.py). :class:`FakeController`
records what the handler asks of it and checks the controller side of the
protocol; given the real ``ChannelStateWriter`` it also drives it as the
subtask's checkpoint coordinator does. :class:`GateDouble` is the channel
layout every input double shares; the tests' gates add their channel model.
"""

from __future__ import annotations

from collections.abc import Callable

from flinklike_spark._runtime.io.channel_state import ChannelStateWriter, InputChannelInfo
from flinklike_spark._runtime.network.events import CheckpointBarrier
from flinklike_spark.errors import CheckpointDeclinedError, CheckpointDeclineReason

__all__ = ["FakeController", "GateDouble"]


class GateDouble:
    """The channels of input gate ``gate_index``: what a CheckpointableInput reports of its layout."""

    def __init__(self, gate_index: int, num_channels: int) -> None:
        self.gate_index = gate_index
        self._infos = [InputChannelInfo(gate_index, i) for i in range(num_channels)]

    @property
    def channel_infos(self) -> list[InputChannelInfo]:
        return list(self._infos)

    @property
    def num_channels(self) -> int:
        return len(self._infos)


class FakeController:
    """A CheckpointController that records the handler's calls and checks their protocol.

    Attributes:
        inits: ids whose input channel state was initialized (unaligned barriers only, once each).
        triggers: the barriers whose snapshot was triggered, in order.
        aborts: ``(checkpoint id, decline reason)`` per abort (once per id).
        fail_init_of / fail_trigger_of: ids for which ``init_inputs_checkpoint`` /
            ``trigger_global_checkpoint`` raise CheckpointDeclinedError; ``failed`` holds those raised.
        on_trigger: called with each triggered barrier, before a planned failure is raised.
        handler: the handler under test (needed with a ``writer``, to finish the input side).

    Args:
        writer: the real ChannelStateWriter to start, finish and abort as the subtask
            coordinator does; None for a controller that only records.
        log: receives one line per call (the property tests' trace).
    """

    def __init__(self, writer: ChannelStateWriter | None = None, *, log: Callable[[str], None] | None = None) -> None:
        self.writer = writer
        self.log = log or (lambda line: None)
        self.handler = None
        self.inits: list[int] = []
        self.triggers: list[CheckpointBarrier] = []
        self.aborts: list[tuple[int, CheckpointDeclineReason]] = []
        self.fail_init_of: set[int] = set()
        self.fail_trigger_of: set[int] = set()
        self.failed: set[int] = set()
        self.on_trigger: Callable[[CheckpointBarrier], None] = lambda barrier: None

    def init_inputs_checkpoint(self, barrier):
        n = barrier.checkpoint_id
        self.log(f"  init_inputs_checkpoint {n}")
        assert barrier.is_unaligned, f"channel state initialized for aligned barrier {n}"
        assert n not in self.inits, f"channel state of checkpoint {n} initialized twice"
        self.inits.append(n)
        if n in self.fail_init_of:
            self.failed.add(n)
            raise CheckpointDeclinedError("channel state init failed", checkpoint_id=n)
        if self.writer is not None:
            writer = self.writer
            writer.start(n)

            def done(f):
                if not f.cancelled() and f.exception() is None:
                    writer.finish_input(n)

            self.handler.all_barriers_received_future(n).add_done_callback(done)

    def trigger_global_checkpoint(self, barrier):
        self.triggers.append(barrier)
        self.on_trigger(barrier)
        if barrier.checkpoint_id in self.fail_trigger_of:
            self.failed.add(barrier.checkpoint_id)
            raise CheckpointDeclinedError("snapshot failed", checkpoint_id=barrier.checkpoint_id)
        if self.writer is not None and barrier.is_unaligned:
            self.writer.finish_output(barrier.checkpoint_id)  # no output data in these tests

    def abort_checkpoint_on_barrier(self, checkpoint_id, cause):
        self.log(f"  abort {checkpoint_id} ({cause.reason.name})")
        assert isinstance(cause, CheckpointDeclinedError)
        assert checkpoint_id not in self.aborted_ids, f"checkpoint {checkpoint_id} aborted twice"
        self.aborts.append((checkpoint_id, cause.reason))
        if self.writer is not None:
            self.writer.abort(checkpoint_id, cause)

    @property
    def aborted_ids(self) -> list[int]:
        return [n for n, _ in self.aborts]
